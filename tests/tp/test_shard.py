"""qbench.tp.shard: slices by hand, the verdicts read from each scheme's declared rule, and the
rules' claims about which shards equal the slice of the unsharded quantized weight."""

import dataclasses

import pytest
import torch

from qbench import schemes
from qbench.schemes import shard_rule
from qbench.schemes.shard_rule import ShardRule, Sharding
from qbench.tp import shard


def test_shard_range_by_hand():
    assert shard.shard_range(4096, 4, 0) == (0, 1024)
    assert shard.shard_range(4096, 4, 3) == (3072, 4096)
    assert shard.shard_range(8, 1, 0) == (0, 8)
    for bad in [(10, 4, 0), (8, 2, 2), (8, 0, 0), (8, 2, -1)]:
        with pytest.raises(ValueError):
            shard.shard_range(*bad)


def test_shard_weight_and_activations_by_hand():
    w = torch.arange(24, dtype=torch.float32).view(4, 6)  # N=4, K=6
    b = torch.tensor([10.0, 11.0, 12.0, 13.0])
    wc, bc = shard.shard_weight(w, b, "column", 2, 1)
    assert wc.tolist() == [[12, 13, 14, 15, 16, 17], [18, 19, 20, 21, 22, 23]] and bc.tolist() == [12.0, 13.0]
    wr, br = shard.shard_weight(w, b, "row", 3, 1)
    assert wr.tolist() == [[2, 3], [8, 9], [14, 15], [20, 21]] and br is None and wr.is_contiguous()
    x = torch.arange(12, dtype=torch.float32).view(2, 6)
    assert shard.shard_activations(x, "row", 3, 2).tolist() == [[4, 5], [10, 11]]
    assert shard.shard_activations(x, "column", 3, 2) is x
    assert shard.shard_shape(4096, 4096, "column", 8) == (4096, 512)
    assert shard.shard_shape(4096, 4096, "row", 8) == (512, 4096)
    with pytest.raises(ValueError, match="diagonal"):
        shard.shard_weight(w, b, "diagonal", 2, 0)


def _undeclared(name: str = "nope"):
    """A registered scheme's record with another name and no shard rule."""
    return dataclasses.replace(schemes.get("int8-weight-only"), name=name, shard=None)


def test_plan_verdicts():
    int4 = schemes.get("int4-weight-only").options_model()
    assert shard.plan(schemes.get("int4-weight-only"), int4, "row", 4, 4096, 4096).reason is None
    reason = shard.plan(schemes.get("int4-weight-only"), int4, "row", 8, 4096, 4096).reason
    assert "512" in reason and "1024" in reason
    assert shard.plan(schemes.get("int4-weight-only"), int4, "column", 8, 4096, 4096).reason is None
    assert "8" in shard.plan(schemes.get("int4-weight-only"), int4, "column", 2, 4096, 12).reason  # N/p = 6
    unknown = shard.plan(_undeclared(), int4, "row", 2, 64, 64)
    assert unknown.reason == "scheme 'nope' declares no shard rule (give its Scheme(...) a shard=Sharding(column=..., row=...))"
    fp8 = schemes.get("fp8-dynamic").options_model
    assert shard.plan(schemes.get("fp8-dynamic"), fp8(), "column", 2, 64, 64).same_as_slice
    assert not shard.plan(schemes.get("fp8-dynamic"), fp8(granularity="per-tensor"), "column", 2, 64, 64).same_as_slice
    assert not shard.plan(schemes.get("int8-weight-only"), int4, "row", 2, 64, 64).same_as_slice
    assert shard.plan(schemes.get("int4-intx"), schemes.get("int4-intx").options_model(), "row", 2, 256, 64).same_as_slice


def _dequantized(module) -> torch.Tensor:
    weight = module.weight
    if hasattr(weight, "dequantize") and type(weight) is not torch.nn.Parameter:
        return weight.dequantize().float()
    return weight.detach().float()


_CPU = [n for n in schemes.names()
        if schemes.get(n).unavailable_reason(torch.device("cpu"), schemes.get(n).options_model()) is None
        and schemes.get(n).library != "bitsandbytes"]


@pytest.mark.parametrize("split", ["column", "row"])
@pytest.mark.parametrize("name", _CPU)
def test_same_as_slice_holds(name, split):
    """Where the declared rule says a shard equals the slice, the shard's dequantized weight is the slice of
    the unsharded one, exactly; where it says not, they differ (per-row scales over K/p)."""
    scheme = schemes.get(name)
    options = scheme.options_model()
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(64, 256, generator=gen) / 16
    w[:, 200] *= 40  # one large input feature: per-row scales over K change when it leaves a row shard
    whole = _dequantized(scheme.build(w, None, options))
    p, rank = 2, 1
    part = _dequantized(scheme.build(shard.shard_weight(w, None, split, p, rank)[0], None, options))
    lo, hi = shard.shard_range(64 if split == "column" else 256, p, rank)
    sliced = whole[lo:hi] if split == "column" else whole[:, lo:hi]
    verdict = shard.plan(scheme, options, split, p, 256, 64)
    if verdict.same_as_slice:
        assert torch.equal(part, sliced)
    else:
        assert not torch.equal(part, sliced)


# ---- every ShardPlan field and message by hand (mutation testing, docs/testing.md) -------------

def test_messages_and_integer_shapes():
    with pytest.raises(ValueError, match=r"^shard_range: need 0 <= rank < tp_size, got rank=2, tp_size=2$"):
        shard.shard_range(8, 2, 2)
    with pytest.raises(ValueError, match=r"^shard_range: length 10 does not divide by tp_size 4$"):
        shard.shard_range(10, 4, 0)
    assert shard.shard_shape(64, 12, "column", 8) == (64, 1) and type(shard.shard_shape(64, 12, "column", 8)[1]) is int
    assert shard.shard_shape(12, 64, "row", 8) == (1, 64) and type(shard.shard_shape(12, 64, "row", 8)[0]) is int


def test_plan_every_branch_field_by_field(monkeypatch):
    int8 = schemes.get("int8-weight-only").options_model()
    note = schemes.get("int8-weight-only").shard.row.note
    assert shard.plan(schemes.get("int8-weight-only"), int8, "row", 1, 256, 64) == shard.ShardPlan(256, 64, True, note, None)
    assert shard.plan(schemes.get("int8-weight-only"), int8, "row", 2, 256, 64) == shard.ShardPlan(128, 64, False, note, None)
    col = schemes.get("int8-weight-only").shard.column.note
    assert shard.plan(schemes.get("int8-weight-only"), int8, "column", 4, 256, 64) == shard.ShardPlan(256, 16, True, col, None)
    assert shard.plan(_undeclared(), int8, "row", 2, 256, 64) == shard.ShardPlan(
        128, 64, False, "", "scheme 'nope' declares no shard rule (give its Scheme(...) a shard=Sharding(column=..., "
                            "row=...))")
    int4 = schemes.get("int4-weight-only").options_model()
    int4_note = schemes.get("int4-weight-only").shard.column.note
    assert shard.plan(schemes.get("int4-weight-only"), int4, "column", 2, 4096, 12) == shard.ShardPlan(
        4096, 6, False, int4_note, "column shard N = 6 is not a multiple of 8 (the tinygemm N tile (torchao pads N "
                                   "to a multiple of 8)) for int4-weight-only")
    packed = ShardRule(False, "packed tiles")
    tiles = dataclasses.replace(_undeclared("packed"), shard=Sharding(packed, packed))
    assert shard.plan(tiles, int8, "column", 2, 256, 64) == shard.ShardPlan(
        256, 32, False, "packed tiles", "packed cannot be split along N: packed tiles")
    assert shard.plan(tiles, int8, "row", 2, 256, 64).reason == "packed cannot be split along K: packed tiles"


def test_rule_helpers():
    import types

    assert shard_rule._always(True)(None) is True and shard_rule._always(False)(None) is False
    assert shard_rule.fp8_dynamic_column(types.SimpleNamespace()) is True  # options without granularity: per-row
    assert shard_rule.fp8_dynamic_column(types.SimpleNamespace(granularity="per-tensor")) is False
    assert shard_rule.no_double_quant(types.SimpleNamespace(double_quant=False)) is True
    assert Sharding(rule := ShardRule(True, "c"), ShardRule(True, "r")).rule("column") is rule
    with pytest.raises(ValueError, match="^split must be 'column' or 'row', got 'diagonal'$"):
        Sharding(rule, rule).rule("diagonal")
    rule = ShardRule(True, "n")
    assert rule.multiple(None) == 1 and rule.same_as_slice(None) is True and rule.why_multiple == ""
