"""The committed trained checkpoint (data/): qbench's reference perplexity equals transformers' over
the same chunks, the model is trained (far below a unigram model), and int8 loses less than int4."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.quality.conftest import hf_nll, run_scheme, write_scenario

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"
HAMLET = ROOT / "data" / "text" / "hamlet.txt"
#: bits per byte of an add-one unigram model of the training bytes on Hamlet (data/README.md)
UNIGRAM_BITS = 4.690


def _scenario(tmp_path: Path, schemes: list[str]) -> Path:
    return write_scenario(tmp_path, TRAINED, schemes, chunk=512, chunks=4, text_file=HAMLET)


def test_reference_perplexity_equals_transformers_and_is_trained(tmp_path):
    row = run_scheme(_scenario(tmp_path, ["fp32"]), 0, tmp_path)
    nll = hf_nll(TRAINED, list(HAMLET.read_bytes()), 512, 4, bos=256)
    assert row["stats"]["tokens"] == len(nll) == 4 * 255
    hf_ppl = math.exp(sum(nll) / len(nll))
    assert row["stats"]["ref_ppl"] == pytest.approx(hf_ppl, rel=1e-5)
    assert math.log2(row["stats"]["ref_ppl"]) < UNIGRAM_BITS - 1  # bits per byte far below the unigram's


def test_int8_loses_less_than_int4(tmp_path):
    scenario = _scenario(tmp_path, ["int8-weight-only", "int4-intx"])
    int8, int4 = run_scheme(scenario, 0, tmp_path), run_scheme(scenario, 1, tmp_path)
    assert 0 < int8["stats"]["kld"]["mean"] < int4["stats"]["kld"]["mean"]
    assert int8["stats"]["same_top"] > int4["stats"]["same_top"]
