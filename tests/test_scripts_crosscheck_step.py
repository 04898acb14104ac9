"""scripts/crosscheck_step.py on a CPU: the tiny preset, transformers against qbench's step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "crosscheck_step.py"

pytest.importorskip("transformers")


def _run(*argv):
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_tiny_bf16_steps_agree_and_the_file_names_the_blocks(tmp_path):
    out = tmp_path / "cc.json"
    r = _run("--model", "tiny", "--device", "cpu", "--schemes", "bf16", "--reps", "3", "--context", "16",
             "--blocks", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert (doc["model"], doc["blocks"], doc["compiled"]) == ("tiny", 1, False)
    rec = doc["records"][0]
    # the same bf16 weights and cache, the same kernels on a CPU: the two steps' logits are identical
    assert rec["logits_rel_diff"] == 0.0 and rec["top1_agree"] == 1.0
    assert rec["hf_eager_us"] > 0 and rec["qbench_eager_us"] > 0


def test_a_quantized_scheme_runs_the_same_layers_in_both_models(tmp_path):
    """int8 weight-only: transformers' blocks hold qbench's own int8 modules, swapped in after a float
    prefill (qbench's cache history): same layers, same cache, same kernels on a CPU: identical logits."""
    out = tmp_path / "cc.json"
    r = _run("--model", "tiny", "--device", "cpu", "--schemes", "int8-weight-only", "--reps", "3", "--context", "16",
             "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())["records"][0]
    assert rec["hf_linears"].startswith("qbench's int8-weight-only layer modules")
    assert rec["logits_rel_diff"] == 0.0 and rec["top1_agree"] == 1.0


def test_blocks_beyond_the_model_is_refused_in_one_line():
    r = _run("--model", "tiny", "--device", "cpu", "--blocks", "3")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith("--blocks: must be 1..2 for tiny, got 3")
