"""The model-step job on a CPU: known answers for the formulas, the configuration checks, the rows of
a tiny model's step, and the readers' speed-up arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from qbench.results import read_results
from qbench.scenario import ScenarioError, from_dict, load
from qbench.step import floor
from qbench.model.config import PRESETS, ConfigError, from_hf_config
from qbench.step.measure import measure_step_scheme, step_error
from qbench.step.row import StepRow
from qbench.step.view import breakeven, linear_speedup, speedups, step_table

ROOT = Path(__file__).resolve().parents[2]


def _scenario(schemes, *, m=(1,), context=(8,), model=None, **extra):
    data = {"name": "step-test", "seed": 3, "device": "cpu", "m": list(m),
            "model": model or {"name": "tiny", "context": list(context)},
            "timing": {"warmup": 1, "min_reps": 3, "max_reps": 5, "budget_s": 0.05}, "schemes": schemes, **extra}
    return from_dict(data, "<test>")


# -- formulas --------------------------------------------------------------------------------
def test_step_bytes_by_hand():
    c = PRESETS["llama3-8b"]
    # 32 blocks of 7 linear layers in bf16: 2 bytes x (2x4096x4096 + 2x4096x1024 + 3x4096x14336) each
    block = 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    out = floor.step_bytes(c, m=16, context=4096, blocks=32, block_weight_bytes=block, lm_head_bytes=2 * 4096 * 128256,
                           act_itemsize=2, kv_itemsize=2)
    assert out["weights"] == 32 * 436207616 == 13958643712
    assert out["kv_read"] == 32 * 16 * 4097 * (2 * 8 * 128) * 2
    assert out["kv_write"] == 32 * 16 * 2 * 8 * 128 * 2
    assert out["embedding"] == 16 * 4096 * 2 and out["norms"] == 65 * 4096 * 2
    assert out["total"] == sum(v for k, v in out.items() if k != "total")
    assert floor.floor_us(4_000_000, 4000.0) == pytest.approx(1.0)  # 4 MB at 4000 GB/s: 1 µs
    assert floor.floor_us(1, None) is None


def test_extrapolate_is_linear_in_blocks():
    assert floor.extrapolate(10.0, 18.0, 2, 4, 32) == pytest.approx(18.0 + 28 * 4.0)
    with pytest.raises(ValueError):
        floor.extrapolate(1.0, 2.0, 4, 4, 8)


def test_step_error_known_answers():
    ref = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])
    same = step_error(ref.clone(), ref, "logits")
    assert same["rel_fro"] == 0 and same["kl_div"] == 0 and same["top1_agree"] == 1.0
    swapped = ref.clone()
    swapped[0] = torch.tensor([0.0, 2.0, 1.0])  # row 0's argmax moves: half the batch agrees
    out = step_error(swapped, ref, "logits")
    assert out["top1_agree"] == 0.5
    assert out["rel_fro"] == pytest.approx(2 ** 0.5 / (14 ** 0.5))
    assert out["kl_div"] > 0
    bad = step_error(torch.tensor([[float("nan"), 0.0, 0.0], [0.0, 0.0, 0.0]]), ref, "logits")
    assert bad["nonfinite"] == 1 and bad["rel_fro"] is None


# -- configurations --------------------------------------------------------------------------
def test_presets_match_the_layer_presets():
    from qbench.readers.model import PRESETS as LAYER
    assert set(LAYER) == {"llama3-8b", "llama3.1-8b", "llama3.1-70b"}
    for name in LAYER:
        shapes = PRESETS[name].linear_shapes()
        layer = LAYER[name]
        assert {(s.k, s.n) for s in layer.block} == {v for k, v in shapes.items() if k != "lm_head"}
        assert (layer.lm_head.k, layer.lm_head.n) == shapes["lm_head"]
        assert layer.blocks == PRESETS[name].blocks


@pytest.mark.parametrize("data, key", [
    ({"model_type": "gpt2"}, "model_type"),
    ({"model_type": "llama", "hidden_act": "gelu"}, "hidden_act"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3,
      "intermediate_size": 8, "vocab_size": 9, "num_hidden_layers": 1}, "num_key_value_heads"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 9,
      "num_hidden_layers": 1, "rope_scaling": {"rope_type": "yarn"}}, "rope_scaling.rope_type"),
    ({"model_type": "llama", "num_attention_heads": 4}, "hidden_size"),
])
def test_not_llama_family_is_refused(data, key):
    with pytest.raises(ConfigError) as exc:
        from_hf_config(data, "c.json")
    assert exc.value.key == key


@pytest.mark.parametrize("model, m, key, value", [
    ({"name": "llama4-400b", "context": [8]}, [1], "model.name", "llama4-400b"),
    ({"name": "llama3-8b", "context": [8192]}, [1], "model.context", "8192"),
    ({"name": "tiny", "context": [0]}, [1], "model.context", "0"),
    ({"name": "tiny", "context": [-5]}, [1], "model.context", "-5"),
    ({"name": "tiny", "context": [8]}, [0], "m", "0"),
    ({"name": "tiny", "context": [8], "blocks": 3}, [1], "model.blocks", "3"),
    ({"name": "tiny", "config": "x.json", "context": [8]}, [1], "model", "x.json"),
])
def test_bad_step_scenarios_name_key_and_value(model, m, key, value):
    with pytest.raises(ScenarioError) as exc:
        _scenario([{"name": "fp32"}], m=m, model=model)
    assert exc.value.key.startswith(key), str(exc.value)
    assert value in str(exc.value)
    assert "\n" not in str(exc.value)


def test_config_json_that_is_not_llama(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64}))
    toml = tmp_path / "s.toml"
    toml.write_text('name = "s"\nm = [1]\n[model]\nconfig = "config.json"\ncontext = [4]\n[[schemes]]\nname = "fp32"\n')
    with pytest.raises(ScenarioError) as exc:
        load(toml)
    assert str(exc.value).startswith(f"{toml}: model.config.model_type: not a Llama-family model")
    assert "'gpt2'" in str(exc.value)


@pytest.mark.parametrize("config, biased", [
    ({"model_type": "qwen2"}, ("q_proj", "k_proj", "v_proj")),
    ({"model_type": "llama", "attention_bias": True, "mlp_bias": True},
     ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
])
def test_a_biased_model_steps_with_its_biases_counted(tmp_path, config, biased):
    """Seeded weights of a biased config: zero biases (transformers' initial values) in every biased
    linear, their bytes in the step's weight bytes (the ledger's bias parts): N · 4 bytes each in fp32."""
    base = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "vocab_size": 100, "num_hidden_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps({**base, **config}))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({**base, "model_type": "llama"}))
    rows = {}
    for name, folder in (("biased", tmp_path), ("plain", plain)):
        sc = _scenario([{"name": "fp32"}], model={"config": str(folder / "config.json"), "context": [4]})
        assert from_hf_config(json.loads((folder / "config.json").read_text()), "t").biased == \
            (biased if name == "biased" else ())
        rows[name] = measure_step_scheme(sc, 0, torch.device("cpu"), None)[0]
    assert rows["biased"]["status"] == "ok", rows["biased"]["reason"]
    n = {"q_proj": 64, "k_proj": 32, "v_proj": 32, "o_proj": 64, "gate_proj": 128, "up_proj": 128, "down_proj": 64}
    extra = sum(4 * n[r] for r in biased)
    assert rows["biased"]["bytes"]["weights"] - rows["plain"]["bytes"]["weights"] == extra


def test_a_qwen2_checkpoint_steps_with_its_own_biases(tmp_path):
    """The step job on a Qwen2 checkpoint (q/k/v biases of std 0.5): fp32 linears are the FP32
    reference step (logits rel_fro ~0): a step that dropped the biases would be far off."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    model = transformers.Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    model.save_pretrained(tmp_path / "ck", safe_serialization=True)
    sc = _scenario([{"name": "fp32"}, {"name": "bf16"}], model={"checkpoint": str(tmp_path / "ck"), "context": [6]})
    fp32 = measure_step_scheme(sc, 0, torch.device("cpu"), None)[0]
    bf16 = measure_step_scheme(sc, 1, torch.device("cpu"), None)[0]
    assert fp32["status"] == "ok" and bf16["status"] == "ok", (fp32["reason"], bf16["reason"])
    assert fp32["error"]["rel_fro"] < 1e-5 < bf16["error"]["rel_fro"] < 0.05


def test_step_without_context_is_refused():
    with pytest.raises(ScenarioError) as exc:
        _scenario([{"name": "fp32"}], model={"name": "tiny"})
    assert exc.value.key == "model.context" and "missing" in str(exc.value)


def test_quantize_lm_head_without_an_lm_head_is_refused():
    """lm_head = false ends the step at the final norm: quantize_lm_head = true would be ignored silently."""
    with pytest.raises(ScenarioError) as exc:
        _scenario([{"name": "fp32"}], model={"name": "tiny", "context": [8], "lm_head": False,
                                             "quantize_lm_head": True})
    assert exc.value.key == "model.quantize_lm_head"
    assert str(exc.value).endswith("model.quantize_lm_head: the step has no LM head to quantize (model.lm_head = "
                                   "false ends it at the final norm), got true")


def test_layer_table_beside_model_is_refused():
    with pytest.raises(ScenarioError) as exc:
        _scenario([{"name": "fp32"}], layer={"in_features": 64})
    assert exc.value.key == "layer"


def test_model_that_cannot_fit_one_block():
    from qbench import memory

    s = _scenario([{"name": "bf16"}], model={"name": "llama3.1-70b", "context": [4096]})
    with pytest.raises(ScenarioError) as exc:
        memory.check_fits(s, "cpu", free=8 << 30)
    assert exc.value.key == "model" and "not even one block" in str(exc.value)
    memory.check_fits(s, "cpu", free=1 << 40)  # a terabyte: fits


def test_a_model_too_big_for_the_cpu_is_refused_up_front():
    """The newcomer's Llama-3.1-8B step on a 24 GiB CPU machine: accepted, then 13 GB and no progress
    for minutes. On a CPU every block is built, so the whole model is estimated and refused."""
    from qbench import memory
    from qbench.step.spec import estimate_cpu_step_bytes

    s = _scenario([{"name": "bf16"}], m=(1, 16), model={"name": "llama3.1-8b", "context": [128, 4096, 32768]})
    est = estimate_cpu_step_bytes(s)
    params, kv = 218_103_808, 2 * 8 * 128
    assert est["weights"] == 32 * params * 2 + 4 * params  # bf16 blocks + one FP32 block while built
    assert est["kv_cache"] == 32 * 16 * 32769 * kv * 2 + 32 * 32769 * kv * 4
    with pytest.raises(ScenarioError) as exc:
        memory.check_fits(s, "cpu", free=24 << 30)
    assert exc.value.key == "model" and "on the CPU builds all 32 blocks: about 95.0 GiB" in str(exc.value)
    memory.check_fits(s, "cuda", free=24 << 30)  # on CUDA the worker builds the blocks that fit
    small = _scenario([{"name": "bf16"}], m=(1,), model={"name": "llama3.1-8b", "context": [128], "blocks": 2})
    memory.check_fits(small, "cpu", free=24 << 30)  # two blocks fit


# -- the step on a CPU -----------------------------------------------------------------------
def test_a_row_out_of_device_memory_says_how_many_blocks_were_built_and_how_to_build_fewer(monkeypatch):
    """An out-of-memory row names the blocks the estimate built and the [model] blocks key that builds fewer; any
    other error's reason is left as it was."""
    from qbench.step import measure

    def oom(self, row, prompt_cache, ceilings):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.96 GiB.")

    monkeypatch.setattr(measure._Built, "measure", oom)
    s = _scenario([{"name": "fp32"}], m=(1,), context=(8,))
    (row,) = measure_step_scheme(s, 0, torch.device("cpu"), None)
    blocks = row["blocks"]
    assert row["status"] == "failed" and row["reason"].startswith("run: OutOfMemoryError: CUDA out of memory.")
    assert row["reason"].endswith(f"({blocks} of {blocks} blocks were built, by the estimate of what fits unless "
                                  f"[model] blocks set it; [model] blocks = {max(1, blocks - 2)} builds fewer and "
                                  "extrapolates)")

    def other(self, row, prompt_cache, ceilings):
        raise RuntimeError("boom")

    monkeypatch.setattr(measure._Built, "measure", other)
    (row,) = measure_step_scheme(s, 0, torch.device("cpu"), None)
    assert row["reason"] == "run: RuntimeError: boom"
    # one block built: no fewer can be built, so the hint names what else can be changed
    monkeypatch.setattr(measure._Built, "measure", oom)
    one = _scenario([{"name": "fp32"}], m=(1,), context=(8,), model={"name": "tiny", "context": [8], "blocks": 1})
    (row,) = measure_step_scheme(one, 0, torch.device("cpu"), None)
    assert row["reason"].endswith(f"(1 of {blocks} blocks were built, by the estimate of what fits unless [model] "
                                  "blocks set it; no fewer can be built: a smaller M or context, or a device with "
                                  "more memory)")


def test_tiny_step_rows_on_cpu():
    s = _scenario([{"name": "fp32"}], m=(1, 2), context=(8,))
    rows = [StepRow.model_validate(r) for r in measure_step_scheme(s, 0, torch.device("cpu"), None)]
    assert [(r.m, r.context, r.status) for r in rows] == [(1, 8, "ok"), (2, 8, "ok")]
    for r in rows:
        assert r.step_us("step_cpu") > 0
        assert r.tokens_per_s["step_cpu"] == pytest.approx(r.m / r.step_us("step_cpu") * 1e6)
        assert r.linear["sum_us"] > 0 and set(r.linear["by_role"]) >= {"q_proj", "down_proj", "lm_head"}
        assert r.remainder_us["step_cpu"] == pytest.approx(r.step_us("step_cpu") - r.linear["sum_us"])
        # fp32 weights, strict fp32 math on the same cache: the step IS the reference
        assert r.error["rel_fro"] == 0.0 and r.error["top1_agree"] == 1.0
        assert r.blocks_built == 2 == r.blocks and r.extrapolated is None
        assert r.bytes["kv_read"] == 2 * r.m * 9 * (2 * 2 * 64) * 4
        assert "synthetic" in r.weight_source


def test_attention_faster_than_its_floor_is_flagged_above_ceiling():
    """A bandwidth far below the device's (1 GB/s): the tiny cache reads 'faster than its floor', and the row says
    so instead of printing an attention floor % over 100 bare; the step's own floor trips below-floor the same way."""
    s = _scenario([{"name": "fp32"}], context=(8,))
    row = StepRow.model_validate(measure_step_scheme(s, 0, torch.device("cpu"), {"measured": {"memory_gbps": 1e-3}})[0])
    assert row.attention["floor_fraction"] > 1
    assert {"above-ceiling", "below-floor"} <= set(row.flag_names)
    assert "attention floor % overstates" in next(f.text for f in row.flags if f.name == "above-ceiling")
    fast = StepRow.model_validate(measure_step_scheme(s, 0, torch.device("cpu"), {"measured": {"memory_gbps": 1e9}})[0])
    assert fast.attention["floor_fraction"] < 1 and "above-ceiling" not in fast.flag_names


def test_attention_timed_alone_longer_than_the_step_is_flagged_and_leaves_no_split(monkeypatch):
    """On a busy CPU the attention timed alone took 32 ms against an 875 µs step (a newcomer's run beside pytest),
    and the row held a negative 'rest': the row says one reading is wrong and writes no three-way split."""
    from qbench.step import measure

    timed = measure._Built._attention_time

    def slow(self, row, model):
        timed(self, row, model)
        row["attention"]["us"] = 1e9  # 1,000 s: longer than any step

    monkeypatch.setattr(measure._Built, "_attention_time", slow)
    row = StepRow.model_validate(measure_step_scheme(_scenario([{"name": "fp32"}]), 0, torch.device("cpu"), None)[0])
    assert "attention-above-step" in row.flag_names and row.other_us == {}
    assert "exceeds the step_cpu step" in next(f.text for f in row.flags if f.name == "attention-above-step")
    from qbench.step.view import model_records

    assert model_records([row])[0]["other_us"] is None  # qbench model shows no negative rest either
    def instant(self, row, model):
        timed(self, row, model)
        row["attention"]["us"] = 0.0  # shorter than any step: the split is written

    monkeypatch.setattr(measure._Built, "_attention_time", instant)
    row = StepRow.model_validate(measure_step_scheme(_scenario([{"name": "fp32"}]), 0, torch.device("cpu"), None)[0])
    assert "attention-above-step" not in row.flag_names and set(row.other_us) == {"step_cpu"}


def test_parts_that_add_up_to_more_than_the_step_leave_the_rest_out(monkeypatch):
    """The attention alone under the step but Σ linear + attention over it (an H100 row held other µs = -49 of a
    5,551 µs step, unflagged): the row flags split-above-step and writes no negative rest; a committed row written
    before the flag shows no rest in qbench model either."""
    from qbench.step import measure
    from qbench.step.view import model_records

    derive = measure._Built._derive

    def near_step(self, row, ceilings):
        row["attention"]["us"] = 0.99 * row["latency_us"]["step_cpu"]["median"]  # under the step, not with Σ linear
        derive(self, row, ceilings)

    monkeypatch.setattr(measure._Built, "_derive", near_step)
    row = StepRow.model_validate(measure_step_scheme(_scenario([{"name": "fp32"}]), 0, torch.device("cpu"), None)[0])
    assert "split-above-step" in row.flag_names and "attention-above-step" not in row.flag_names
    assert row.other_us == {} and row.other_share == {}
    text = next(f.text for f in row.flags if f.name == "split-above-step")
    assert "each timed alone, add up to more than the step_cpu step" in text and text.endswith("left out")
    old = read_results(ROOT / "results" / "h100" / "step_llama31_8b_bf16_tuned.json").rows
    first = next(r for r in old if r.m == 1 and r.context == 128 and r.scheme == "bf16+compiled")
    assert min(first.other_us.values()) < 0  # the file's own negative rest
    assert next(rec for rec in model_records(old) if rec["scheme"] == "bf16+compiled" and rec["m"] == 1
                and rec["context"] == 128)["other_us"] is None


def test_each_phase_is_logged_before_it_starts(caplog):
    """A worker that hangs is reported with its last log line: each phase is logged before it runs."""
    s = _scenario([{"name": "fp32"}], m=(1,), context=(8,))
    with caplog.at_level("INFO", logger="qbench.step"):
        measure_step_scheme(s, 0, torch.device("cpu"), None)
    lines = [r.getMessage() for r in caplog.records if r.name == "qbench.step"]
    assert lines[:5] == ["fp32: building tiny", "fp32: prefill of 8 positions",
                         "fp32 M=1 context=8: error against the FP32 step", "fp32 M=1 context=8: step_cpu",
                         "fp32 M=1 context=8: attention alone (sdpa)"]
    assert lines[5:] == [f"fp32 M=1: Σ linear, {role} (K={k}, N={n})"
                         for role, (k, n) in PRESETS["tiny"].linear_shapes().items()]


def test_worker_sends_phase_lines_to_its_log(capsys):
    import logging

    from qbench import worker

    logger = logging.getLogger("qbench")
    before, level = list(logger.handlers), logger.level
    try:
        worker.log_phases()
        worker.log_phases()  # idempotent: one handler
        added = [h for h in logger.handlers if h not in before]
        assert len(added) == 1
        logging.getLogger("qbench.step").info("int4 M=1 context=128: step_graph")
        assert capsys.readouterr().err.rstrip().endswith(" [qbench] int4 M=1 context=128: step_graph")
    finally:
        logger.handlers[:] = before
        logger.setLevel(level)


def test_scheme_that_cannot_take_a_shape_is_skipped(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 96, "num_attention_heads": 2, "num_key_value_heads": 1,
           "intermediate_size": 192, "vocab_size": 64, "num_hidden_layers": 1, "max_position_embeddings": 64}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    s = _scenario([{"name": "int8-weight-only"}, {"name": "int4-intx"}],
                  model={"config": str(tmp_path / "c.json"), "context": [4]})
    rows = measure_step_scheme(s, 1, torch.device("cpu"), None)  # group size 128 > K = 96
    assert rows[0]["status"] == "skipped"
    assert "q_proj" in rows[0]["reason"] and "K=96" in rows[0]["reason"]


def test_run_writes_a_step_result_file(tmp_path):
    from qbench import runner

    s = _scenario([{"name": "fp32"}], context=(4,))
    outcome = runner.run(s, device="cpu", out=str(tmp_path / "r.json"))
    doc = read_results(tmp_path / "r.json")
    rows = doc.rows
    assert doc.job == "step" and all(isinstance(r, StepRow) for r in rows)
    assert outcome.exit_code == 0 and len(rows) == 1 and rows[0].job == "step" and rows[0].status == "ok"


def test_a_timed_out_step_worker_is_reported_with_its_phase(tmp_path):
    """The input that trips it: a timing budget far beyond the scheme timeout. The worker is killed while
    timing; the failed rows' reason ends with the last phase it logged, not with a library's warning."""
    from qbench import runner

    s = _scenario([{"name": "fp32"}], context=(8,),
                  timing={"warmup": 1, "min_reps": 100000, "max_reps": 200000, "budget_s": 600, "scheme_timeout_s": 20})
    runner.run(s, device="cpu", out=str(tmp_path / "r.json"))
    rows = read_results(tmp_path / "r.json").rows
    assert rows and all(r.status == "failed" for r in rows)
    reason = rows[0].reason
    assert "worker timed out after 20 s; last output: " in reason
    assert "fp32 M=1" in reason.split("last output: ", 1)[1], reason
    # its log is kept beside the result (the worker's own folder is removed), and the reason names it
    kept = tmp_path / "r.json.worker-logs" / "0-fp32.log"
    assert reason.endswith(f"; log: {kept}") and "[qbench] fp32 M=1" in kept.read_text()


# -- readers' arithmetic ---------------------------------------------------------------------
def _row(scheme, context, graph, linear, mode="eager"):
    return StepRow(scheme=scheme, base_scheme=scheme, library="torch", mode=mode, model="m", title="M", m=1,
                   context=context, device="cuda:0", weight_dtype="x", activation_dtype="bfloat16", lm_head="float",
                   blocks=2, latency_us={"step_graph": {"median": graph, "p10": graph, "p90": graph}},
                   linear={"sum_us": linear})


def test_speedups_and_breakeven():
    rows = [_row("bf16", 128, 100.0, 80.0), _row("int4", 128, 50.0, 20.0),
            _row("bf16", 4096, 200.0, 80.0), _row("int4", 4096, 190.0, 20.0),
            _row("bf16", 32768, 1000.0, 80.0), _row("int4", 32768, 1010.0, 20.0)]
    sp = speedups(rows)
    assert sp[rows[1].key]["step_graph"] == pytest.approx(2.0)
    assert linear_speedup(rows)[rows[1].key] == pytest.approx(4.0)
    assert breakeven(rows) == {("int4", 1): 32768}
    # faster only beyond noise: at 4,096 int4's p10-p90 (150-195 µs) overlaps bf16's (190-210 µs), so a 1.05× median
    # ratio is not "faster" and int4 stops beating bf16 there (a newcomer read "faster at every context" over 1.01×)
    noisy = [StepRow.model_validate({**r.model_dump(), "latency_us": {"step_graph": {
                 "median": r.step_us("step_graph"), "p10": lo, "p90": hi}}})
             for r, lo, hi in zip(rows, (100, 50, 190, 150, 1000, 1010), (100, 50, 210, 195, 1000, 1010))]
    assert breakeven(noisy) == {("int4", 1): 4096}
    text = step_table(rows, fmt="github")
    assert "2.00×" in text and "4.00×" in text


def test_committed_h200_step_files_hold_their_claims():
    """Every ok row of the committed H200 step files: each step >= its HBM floor, Σ linear <= step."""
    for name in ("step_llama31_8b.json", "step_llama31_70b.json"):
        ok = [r for r in read_results(ROOT / "results" / "h200" / name).rows if r.status == "ok"]
        assert ok
        for r in ok:
            for method, stats in r.latency_us.items():
                if stats:
                    assert stats.median >= r.hbm_floor_us, (name, r.key, method)
                    assert r.linear["sum_us"] <= stats.median * 1.02 or "linear-above-step" in r.flag_names, \
                        (name, r.key, method)


def test_transformers_5_rope_parameters_are_read():
    """transformers 5 writes RoPE under rope_parameters, without a top-level rope_theta."""
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
            "vocab_size": 100, "num_hidden_layers": 1}
    c = from_hf_config({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}}, "c.json")
    assert c.rope_theta == 100000.0 and c.rope_scaling is None
    scaled = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    c = from_hf_config({**base, "rope_parameters": scaled}, "c.json")
    assert c.rope_theta == 500000.0 and c.rope_scaling["rope_type"] == "llama3" and c.rope_scaling["factor"] == 8.0


def test_blocks_that_fit_llama31_8b_at_m16_and_32768_by_hand(monkeypatch):
    """Llama-3.1-8B, bf16 cache, M = 16 at 32,768 positions on a GPU with 78 GiB free once the caching allocator
    handed back what it held unused: the bytes of the estimate by hand (the FP32 reference's cache copy for 3
    sequences, not 16; with all 16 copied, 24 blocks; without the bf16 embedding and LM head, 27: on an H100
    every such row ran out of memory, results/h100/env/2026-12-06b)."""
    from types import SimpleNamespace

    from qbench.memory import PROCESS_OVERHEAD
    from qbench.step import measure

    c = PRESETS["llama3.1-8b"]
    free = 78 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 << 30))
    emptied = []  # the caching allocator's unused memory is handed back before the free memory is read
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    fake = SimpleNamespace(config=c, kv=torch.bfloat16, act=torch.bfloat16, scenario=SimpleNamespace(m=[1, 16]),
                           spec=SimpleNamespace(context=[128, 32768]), device=torch.device("cuda"))
    per_block = 2 * c.block_linear_params()  # bf16 weights
    pos, kv = 32769, 2 * 8 * 128
    cache, prompt = 16 * pos * kv * 2, pos * kv * 2
    reference = 4 * c.block_linear_params() + 2 * 3 * pos * kv * 4 + 16 * c.vocab * 8
    embed_head = 2 * c.vocab * c.hidden * (4 + 2)  # FP32 (the reference's) and bf16 (the step's)
    spare = free - embed_head - reference - measure.HEADROOM - 2 * PROCESS_OVERHEAD
    want = spare // (per_block + cache + prompt) + 1
    assert measure._Built._blocks_that_fit(fake, per_block) == want == 26 and emptied
