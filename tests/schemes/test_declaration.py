"""A scheme is declared once (:mod:`qbench.schemes.catalog`): its options, multiples and shard rule
come from that one ``Scheme(...)``; the declarations and the registry import no torch; a scenario
entry carries its scheme; a scheme declared without a shard rule is a skipped tp job."""

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from qbench import schemes
from qbench.scenario import from_dict
from qbench.schemes import catalog, options as options_module
from qbench.schemes.scheme import PACKAGE_ROOT, Impl, Scheme
from qbench.schemes.shard_rule import ShardRule, Sharding

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = schemes.names()


@pytest.mark.parametrize("name", BUILTIN)
def test_every_scheme_has_its_options_multiples_and_shard_rule_from_its_declaration(name):
    """Adding a scheme without its options or without saying how it shards fails here, not on a
    multi-GPU host."""
    scheme = schemes.get(name)
    assert isinstance(scheme, Scheme) and scheme.__module__ == "qbench.schemes.scheme"
    assert issubclass(scheme.options_model, options_module.SchemeOptions)
    options = scheme.options_model()
    assert isinstance(scheme.shard, Sharding), f"declare shard=Sharding(column=..., row=...) for {name}"
    for split in ("column", "row"):
        rule = scheme.shard.rule(split)
        assert isinstance(rule, ShardRule) and rule.note
        assert isinstance(rule.multiple(options), int) and rule.multiple(options) >= 1
        assert isinstance(rule.same_as_slice(options), bool)
    assert scheme.k_multiple(options) >= 1 and scheme.n_multiple(options) >= 1
    for fn in (scheme.build, scheme.parts, scheme.emulate):  # named torch functions that exist
        assert isinstance(fn, Impl) and callable(getattr(__import__(fn.module, fromlist=[fn.attr]), fn.attr))


def test_the_declaration_is_the_only_table():
    """No second list keyed by scheme name: the options table and the tp rule table are gone."""
    from qbench.tp import shard

    assert not hasattr(options_module, "SPECS") and not hasattr(shard, "RULES")
    assert schemes._BUILTIN_MODULES == ("qbench.schemes.catalog",)
    assert (schemes.get("int4-weight-only").k_multiple(schemes.get("int4-weight-only").options_model(group_size=64))
            == 64)
    assert schemes.get("fp8-dynamic").n_multiple(None) == 16 and schemes.get("fp8-int4").k_multiple(None) == 128
    assert schemes.get("int8-weight-only-gemlite").shard.row.multiple(None) == catalog.GEMLITE_MIN_K == 32


def test_declarations_import_no_torch():
    code = ("import sys\nfrom qbench import schemes\nfrom qbench.scenario import from_dict\n"
            "assert len(schemes.all_schemes()) >= 20\n"
            "s = from_dict({'name': 't', 'm': [1], 'layer': {'in_features': 256, 'out_features': 128},"
            " 'schemes': [{'name': 'int4-weight-only', 'group_size': 64}, 'nf4-bnb']}, 't.toml')\n"
            "print(s.schemes[0].scheme.activation_name, s.schemes[1].scheme.shard.row.why_multiple,"
            " 'torch' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("QBENCH_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["bfloat16", "blocksize", "False"]


def test_activation_dtype_is_declared_by_name_and_read_as_a_torch_dtype():
    import torch

    assert schemes.get("int8-bnb").activation_dtype is torch.float16
    assert schemes.get("int8-bnb").activation_name == "float16"
    replaced = dataclasses.replace(schemes.get("fp32"), name="x")  # a dtype passed in stays a dtype
    assert replaced.activation_dtype is torch.float32 and replaced.activation_name == "float32"


def test_tf32_override_names_the_variable_precision_reads():
    from qbench.schemes import precision

    assert catalog.TF32_OVERRIDE == precision.ENV_OVERRIDE
    assert schemes.get("fp32").worker_env == {precision.ENV_OVERRIDE: "0"}


def test_worker_environ():
    fp32 = schemes.get("fp32")
    env = fp32.worker_environ({"PYTHONPATH": "/elsewhere", "KEEP": "1"})
    assert env == {"PYTHONPATH": f"{PACKAGE_ROOT}{os.pathsep}/elsewhere", "KEEP": "1", "NVIDIA_TF32_OVERRIDE": "0"}
    gone = dataclasses.replace(fp32, worker_env={"KEEP": None})
    assert gone.worker_environ({"KEEP": "1"}) == {"PYTHONPATH": PACKAGE_ROOT}
    assert Path(PACKAGE_ROOT, "qbench", "__init__.py").is_file()


def test_an_entry_carries_its_scheme_and_pickles_as_its_name():
    sc = from_dict({"name": "t", "m": [1], "layer": {"in_features": 256, "out_features": 128},
                    "schemes": ["bf16", {"name": "nf4-bnb", "blocksize": 128}]}, "t.toml")
    entry = sc.schemes[1]
    assert entry.scheme is schemes.get("nf4-bnb")
    back = pickle.loads(pickle.dumps(sc))
    assert back.schemes[1].scheme is entry.scheme and back.schemes[1].options.blocksize == 128
    assert pickle.loads(pickle.dumps(entry.scheme.build)) == Impl("qbench.schemes.bnb_schemes", "build_nf4")


def test_a_scheme_declared_without_a_shard_rule_is_a_skipped_tp_job(monkeypatch):
    import torch

    from qbench.tp.runner import skip_reason

    bare = dataclasses.replace(schemes.get("bf16"), name="no-shard-test", shard=None)
    monkeypatch.setitem(schemes._REGISTRY, bare.name, bare)
    sc = from_dict({"name": "t", "m": [1], "layer": {"in_features": 256, "out_features": 128},
                    "schemes": ["no-shard-test", "bf16"], "tp": {"tp_size": [2]}}, "t.toml")
    cpu = torch.device("cpu")
    assert skip_reason(sc, 0, 2, "column", cpu, 4) == (
        "scheme 'no-shard-test' declares no shard rule (give its Scheme(...) a shard=Sharding(column=..., row=...))")
    assert skip_reason(sc, 0, 1, "none", cpu, 4) is None  # the unsharded baseline still runs
    assert skip_reason(sc, 1, 2, "column", cpu, 4) is None


def test_a_scenario_unpickles_in_a_fresh_process(tmp_path):
    """A scenario's class is made per job kind at run time; a process that has read no scenario
    (a worker) still finds it by name when it unpickles one."""
    import subprocess
    import sys

    sc = from_dict({"name": "t", "m": [1], "layer": {"in_features": 256, "out_features": 128},
                    "schemes": ["bf16"]}, "t.toml")
    path = tmp_path / "sc.pickle"
    path.write_bytes(pickle.dumps(sc))
    code = f"import pickle; sc = pickle.load(open({str(path)!r}, 'rb')); print(type(sc).__name__, sc.layer.in_features)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE_ROOT, check=True)
    assert out.stdout.split() == ["LayerScenario", "256"]


@pytest.mark.parametrize("name", BUILTIN)
def test_inductor_tuning_is_declared_where_the_torchao_config_switches_it_on(name):
    """``inductor_tuning`` says which builds turn coordinate-descent tuning on (what a step file made before every
    compiled worker got torchao's settings is read by): a build through a torchao config whose
    ``set_inductor_config`` is on, and no other. Checked against the config each build hands ``quantize_``."""
    import importlib

    pytest.importorskip("torchao")
    scheme = schemes.get(name)
    build = (getattr(importlib.import_module(scheme.build.module), scheme.build.attr)
             if isinstance(scheme.build, Impl) else scheme.build)
    factory = getattr(build, "config_factory", None)
    config = factory(scheme.options_model()) if factory is not None else None
    assert scheme.inductor_tuning is bool(getattr(config, "set_inductor_config", False))
