"""A search's pick as a user pastes it (qbench.search.snippet): the scenario entry reads back as the
same recipe; each torchao scheme's config written as code rebuilds the config qbench applies; the
torchao call, run on the trained checkpoint loaded by transformers, quantizes each linear exactly as
qbench's own build of its scheme does (bit for bit) and leaves the float ones alone; a scheme with
no torchao config is one line."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from qbench import schemes
from qbench.model.recipe import Choice
from qbench.scenario import from_dict
from qbench.search import snippet

ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"
PICK = {"name": "int4-intx", "group_size": 64, "label": "r1 front 3",
        "recipe": {"lm_head": "int8-weight-only", "1.q": "bf16", "1.k": "bf16", "1.v": "bf16",
                   "-1.down": {"name": "int4-intx", "group_size": 32}, "0.o": "int8-weight-only"}}


def test_toml_entry_reads_back_as_the_same_recipe():
    text = snippet.toml_entry(PICK)
    assert text.startswith('[[schemes]]\nname = "int4-intx"\ngroup_size = 64\nlabel = "r1 front 3"\n[schemes.recipe]\n')
    assert '"-1.down" = { name = "int4-intx", group_size = 32 }\n' in text
    data = tomllib.loads('name = "p"\ndevice = "cpu"\nm = [1]\n[model]\nname = "tiny"\ncontext = [8]\n'
                         'quantize_lm_head = true\n' + text)
    (entry,) = from_dict(data, "<snippet>").schemes
    assert entry.label == "r1 front 3" and entry.options.group_size == 64
    plan = snippet.plan_of_entry(PICK, 4)
    assert entry.recipe == plan.recipe
    assert plan.choice(3, "down_proj").label == "int4-intx[group_size=32]" and plan.choice(1, "q_proj").name == "bf16"


TORCHAO = [s.name for s in schemes.all_schemes() if s.library == "torchao" and not s.needs_calibration
           and s.name != "int4-hqq"]
CALIBRATED = [s.name for s in schemes.all_schemes() if s.library == "torchao" and s.name not in TORCHAO]


@pytest.mark.parametrize("name", CALIBRATED)
def test_a_calibrated_scheme_has_no_torchao_config_and_says_so(name):
    # qbench chooses their int4 values (calibration, or HQQ's optimizer) on tinygemm's grid: no one config a user's
    # quantize_ call applies gives the same weights, so the pick is its scenario entry
    with pytest.raises(snippet.SnippetError, match="are chosen by qbench"):
        snippet.config_code(Choice(name, schemes.get(name).options_model()), set())


@pytest.mark.parametrize("name", TORCHAO)
def test_each_torchao_config_written_as_code_is_the_config_qbench_applies(name):
    pytest.importorskip("torchao")
    import importlib

    spec = schemes.get(name)
    factory = getattr(importlib.import_module(spec.build.module), spec.build.attr).config_factory
    variants = [spec.options_model()]
    if "group_size" in spec.options_model.model_fields:  # a size other than the default that the scheme takes
        variants.append(spec.options_model(group_size=256 if name in ("int4-plain", "int4-preshuffled") else 32))
    for options in variants:
        imports: set = set()
        code = snippet.config_code(Choice(name, options), imports)
        scope: dict = {}
        for module, cls in imports:
            if cls:
                exec(f"from {module} import {cls}", scope)
            else:
                exec(f"import {module}", scope)
        assert eval(code, scope) == factory(options), code


def test_a_scheme_without_a_torchao_config_is_one_line():
    entry = {"name": "int8-weight-only", "label": "x", "recipe": {"down": "int4-intx"}}
    bnb = {"name": "nf4-bnb", "label": "y"}
    assert "Int8WeightOnlyConfig()" in snippet.torchao_call(entry, 4, False)
    with pytest.raises(snippet.SnippetError, match=r"^nf4-bnb is a bitsandbytes scheme: torchao's quantize_ has no "
                                                   r"config for it"):
        snippet.torchao_call(bnb, 4, False)


def test_a_float_base_names_only_the_quantized_linears():
    call = snippet.torchao_call({"name": "bf16", "label": "x", "recipe": {"2.down": "int8-weight-only"}}, 4, False)
    assert '"model.layers.2.mlp.down_proj": int8_weight_only,' in call and "re:" not in call and "lm_head" not in call


def test_the_torchao_call_quantizes_each_linear_as_qbench_builds_it():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(TRAINED, dtype=torch.bfloat16).eval()
    fp32 = transformers.AutoModelForCausalLM.from_pretrained(TRAINED, dtype=torch.float32).eval()
    call = snippet.torchao_call(PICK, 4, True)
    exec(call, {"model": model})
    plan = snippet.plan_of_entry(PICK, 4)
    modules = dict(model.named_modules())
    ref = dict(fp32.named_modules())
    checked = 0
    for b in range(4):
        for role in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"):
            if role == "lm_head" and b:
                continue
            name = snippet.module_name(b, role)
            choice = plan.choice(b, role)
            got = modules[name].weight
            if choice.name == "bf16":
                assert type(got) is torch.nn.Parameter and got.dtype == torch.bfloat16, name
                continue
            want = schemes.get(choice.name).build(ref[name].weight.detach(), None, choice.options).weight
            assert type(got) is type(want), (name, type(got), type(want))
            assert torch.equal(got.dequantize(), want.dequantize()), name
            checked += 1
    assert checked == 4 * 7 - 3 + 1  # every linear but block 1's q, k, v (bf16), and the head


def test_pick_lines_hold_the_entry_and_the_call():
    rows = [SimpleNamespace(pick=False, recipe=None, scheme="bf16"),
            SimpleNamespace(pick=True, recipe=PICK, scheme="r1 front 3")]
    units = [f"block {b} {u}" for b in range(4) for u in ("attn_in", "o", "mlp_in", "down")] + ["lm_head"]
    doc = SimpleNamespace(rows=rows, model_extra={"search": {"units": units}})
    lines = snippet.pick_lines(doc)
    assert lines[0].startswith("the pick (r1 front 3) as a scenario entry")
    assert "[schemes.recipe]" in lines and '    "lm_head": int8_weight_only,' in lines
    assert snippet.pick_lines(SimpleNamespace(rows=rows[:1], model_extra={})) == []


def test_a_float_answer_is_no_quantization_call():
    """recommend on search_tiny (pick bf16) printed an empty `quantize_(model, FqnToConfig({}), filter_fn=None)` to
    paste: a float scheme everywhere has nothing to quantize. It now says to keep the model in that float dtype."""
    from qbench.results import read_results

    assert snippet.float_dtype({"name": "bf16", "label": "bf16"}, 4, True) == "bf16"
    assert snippet.float_dtype({"name": "bf16", "recipe": {"0.down": "int8-weight-only"}}, 4, True) is None
    assert snippet.float_dtype({"name": "int8-weight-only"}, 4, False) is None
    lines = snippet.pick_lines(read_results(ROOT / "results" / "cpu" / "search_tiny.json"))
    assert lines[-1] == "no quantization call: keep the model in bf16 (every linear stays the model's own layer)"
    assert not any("quantize_" in line for line in lines)
