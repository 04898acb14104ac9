"""Malformed scenario files: each gives one clear line on stderr, exit status 2, and writes nothing.

Every file under tests/bad_scenarios/ holds one mistake, named by the comment on its line 1.

* Every file runs through the command line's entry point, ``qbench.cli.main(["run", FILE, "--out",
  <tmp>/x.json])``, in this process: exit status, stderr, nothing written, and nothing reached
  (the runner's ``write_results`` and worker start are replaced by a stub that fails the test).
* A sample covering each kind of check (TOML, UTF-8, unknown key, unknown scheme, type, M,
  group size, memory, output path, safetensors) also runs as ``python -m qbench run FILE --out
  <tmp>/x.json`` in a fresh process, a few at a time: that proves the interpreter-level path
  (imports, ``__main__``, exit status) prints one line and no traceback. Running all 33 files that
  way costs ~2 s of torch import each, ~60 CPU-seconds, more than this suite's budget.

The memory limit (RLIMIT_AS) on the child processes is a safety net, not part of what is tested:
``too_big_for_memory.toml`` must be refused by the memory estimate before anything is allocated;
should that check ever be missing, the run fails on its first allocation instead of pushing the
CI machine into swap.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BAD = sorted((ROOT / "tests" / "bad_scenarios").glob("*.toml"))
MEMORY_LIMIT = 8 << 30
TIMEOUT_S = 120
#: Files that also run as a real ``python -m qbench`` process: one per kind of check.
SUBPROCESS_SAMPLE = ("not_toml", "not_utf8", "unknown_top_key", "unknown_scheme", "wrong_type_in_features", "m_zero",
                     "k_not_multiple_of_group", "too_big_for_memory", "output_unwritable", "safetensors_missing_file")

#: The key path each file's error line must name ("" for file-level errors: not TOML, not UTF-8).
EXPECTED_KEY = {
    "device_unknown": "device",
    "duplicate_label": "schemes[1]",
    "duplicate_toml_key": "",
    "k_not_multiple_of_block": "layer.in_features",
    "k_not_multiple_of_group": "layer.in_features",
    "m_empty": "m",
    "m_under_layer": "layer.m",
    "m_negative": "m[0]",
    "m_not_integer": "m[1]",
    "m_zero": "m[1]",
    "max_reps_below_min_reps": "timing.max_reps",
    "name_missing": "name",
    "not_toml": "",
    "not_utf8": "",
    "outlier_without_magnitude": "inputs.outlier_magnitude",
    "output_is_directory": "output",
    "output_unwritable": "output",
    "recipe_activation_dtypes_differ": "schemes[0].recipe.down",
    "recipe_block_outside_model": "schemes[0].keep_blocks.blocks[1]",
    "recipe_block_twice": "schemes[0].keep_blocks.blocks[1]",
    "recipe_keep_blocks_unknown_key": "schemes[0].keep_blocks.block",
    "recipe_lm_head_float": "schemes[0].recipe.lm_head",
    "recipe_on_layer": "schemes[0].recipe",
    "recipe_on_tp": "schemes[0].keep_blocks",
    "recipe_tf32": "schemes[0].keep_blocks.scheme",
    "recipe_unknown_option": "schemes[0].recipe.down.group_size",
    "recipe_unknown_role": "schemes[0].recipe.downn",
    "recipe_unknown_scheme": "schemes[0].recipe.down",
    "safetensors_missing_file": "weight.path",
    "safetensors_not_safetensors": "weight.path",
    "scheme_mode_unknown": "schemes[0].mode",
    "schemes_empty": "schemes",
    "schemes_under_layer": "schemes",
    "schemes_not_a_list": "schemes",
    "source_key": "source",
    "timing_method_unknown": "timing.methods[1]",
    "timing_nan": "timing.budget_s",
    "too_big_for_memory": "layer",
    "unknown_layer_key": "layer.in_feature",
    "unknown_scheme": "schemes[1].name",
    "unknown_scheme_option": "schemes[0].group_size",
    "unknown_top_key": "warmup",
    "wrong_type_bias": "layer.bias",
    "wrong_type_in_features": "layer.in_features",
}
#: Words the line must hold besides the key: the bad value or what is allowed.
EXPECTED_WORDS = {
    "device_unknown": ["'gpu0'", "cuda:N"],
    "duplicate_toml_key": ["not valid TOML", "line 4"],
    "k_not_multiple_of_block": ["64", "96"],
    "k_not_multiple_of_group": ["128", "200"],
    "m_negative": ["-4"],
    "m_not_integer": ["2.5", "integer"],
    "m_zero": ["got 0"],
    "m_under_layer": ["top-level key", "above the first [table] header"],
    "schemes_under_layer": ["found 'layer.schemes'", "above the first [table] header"],
    "not_toml": ["not valid TOML"],
    "not_utf8": ["UTF-8"],
    "output_unwritable": ["/dev/null/results.json"],
    "recipe_activation_dtypes_differ": ["float16", "bfloat16", "'int8-bnb'"],
    "recipe_block_outside_model": ["2 blocks", "got 2"],
    "recipe_block_twice": ["block 1 a second time", "got -1"],
    "recipe_keep_blocks_unknown_key": ["allowed: blocks, scheme"],
    "recipe_lm_head_float": ["model.quantize_lm_head", "'int8-weight-only'"],
    "recipe_on_layer": ["layer scenario", "[model]"],
    "recipe_on_tp": ["tp scenario", "[model]"],
    "recipe_tf32": ["process-wide", "'tf32'"],
    "recipe_unknown_option": ["100"],
    "recipe_unknown_role": ["'downn'", "down"],
    "recipe_unknown_scheme": ["'int8_weight_only'", "did you mean"],
    "safetensors_missing_file": ["no_such_weights.safetensors"],
    "too_big_for_memory": ["free", "131072"],
    "unknown_scheme": ["'int4_intx'", "did you mean int4-intx"],
    "unknown_scheme_option": ["blocksize"],
    "unknown_top_key": ["allowed", "timing"],
    "wrong_type_bias": ["'yes'", "boolean"],
    "wrong_type_in_features": ["'256'", "integer"],
}


def _limit_memory() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    """``{file stem: (exit status, stdout, stderr, files left in its tmp folder)}`` for every file."""
    jobs = max(2, os.cpu_count() or 2)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    pending = [p for p in BAD if p.stem in SUBPROCESS_SAMPLE]
    running: dict[str, tuple[subprocess.Popen, Path, float]] = {}
    results: dict = {}
    while pending or running:
        while pending and len(running) < jobs:
            path = pending.pop(0)
            tmp = tmp_path_factory.mktemp(path.stem)
            cmd = [sys.executable, "-m", "qbench", "run", str(path.relative_to(ROOT)), "--out", str(tmp / "x.json")]
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, preexec_fn=_limit_memory)
            running[path.stem] = (proc, tmp, time.monotonic())
        for stem, (proc, tmp, started) in list(running.items()):
            if proc.poll() is None and time.monotonic() - started < TIMEOUT_S:
                continue
            if proc.poll() is None:
                proc.kill()
            out, err = proc.communicate()
            results[stem] = (proc.returncode, out, err, sorted(p.name for p in tmp.rglob("*")))
            del running[stem]
        time.sleep(0.02)
    return results


def test_enough_files_one_mistake_each():
    assert len(BAD) >= 20
    assert {p.stem for p in BAD} == set(EXPECTED_KEY), "every file needs its expected key here"
    for path in BAD:
        first = path.read_bytes().splitlines()[0].decode("ascii")
        assert first.startswith("# mistake: "), f"{path.name}: line 1 must say which mistake it holds"


def _check(path: Path, code: int, out: str, err: str, written: list) -> None:
    lines = err.splitlines()
    assert code == 2, f"exit status {code}; stderr: {err[-2000:]}"
    assert len(lines) == 1, f"want exactly one line on stderr, got {len(lines)}: {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out
    line = lines[0].removeprefix("qbench: ")
    rel = str(path.relative_to(ROOT))
    assert line.startswith(rel + ": "), line
    key = EXPECTED_KEY[path.stem]
    if key:
        assert line.startswith(f"{rel}: {key}: "), line
    for words in EXPECTED_WORDS.get(path.stem, []):
        assert words in line, line
    assert written == [], f"wrote {written}"


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_cli_main_one_line_exit_2_nothing_written(path, tmp_path, monkeypatch, capsys):
    from qbench import cli, lifecycle, runner

    def no_worker(*args, **kwargs):
        raise AssertionError(f"{path.name}: a result was written or a worker started for a malformed scenario")

    monkeypatch.setattr(lifecycle, "write_results", no_worker)  # the partial and the complete file
    for name in ("_Workers", "_run_worker"):  # whichever this runner has
        monkeypatch.setattr(runner, name, no_worker, raising=False)
    monkeypatch.chdir(ROOT)
    code = cli.main(["run", str(path.relative_to(ROOT)), "--out", str(tmp_path / "x.json")])
    captured = capsys.readouterr()
    _check(path, code, captured.out, captured.err, sorted(p.name for p in tmp_path.rglob("*")))


@pytest.mark.parametrize("stem", SUBPROCESS_SAMPLE)
def test_python_m_qbench_one_line_exit_2_nothing_written(outcomes, stem):
    path = ROOT / "tests" / "bad_scenarios" / f"{stem}.toml"
    _check(path, *outcomes[stem])


def test_debug_flag_shows_the_traceback(tmp_path):
    path = ROOT / "tests" / "bad_scenarios" / "m_zero.toml"
    proc = subprocess.run([sys.executable, "-m", "qbench", "--debug", "run", str(path), "--out", str(tmp_path / "x.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "ScenarioError" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_safetensors_weight_without_the_package_is_refused_at_load(tmp_path, monkeypatch):
    """Checked when the scenario is read, not after every worker failed (issue 13)."""
    import importlib.util

    from qbench import scenario

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "safetensors" else real(name, *a))
    path = tmp_path / "w.toml"
    path.write_text('name = "x"\nm = 1\n[weight]\nsource = "safetensors"\npath = "w.safetensors"\ntensor = "w"\n'
                    '[[schemes]]\nname = "bf16"\n')
    with pytest.raises(scenario.ScenarioError) as err:
        scenario.load(path)
    assert err.value.key == "weight.source" and "pip install safetensors" in str(err.value)
