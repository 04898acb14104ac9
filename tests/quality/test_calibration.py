"""Calibration in the quality job (:mod:`qbench.quality.calibrate`): each refusal with an input that
trips it (one line, exit 2, nothing written); the statistics each linear gets; on the trained
checkpoint a calibrated int4 loses less than round-to-nearest, and the row records its span."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qbench import cli
from qbench.scenario import load
from tests.quality.conftest import TEXT, run_scheme, write_scenario

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"
HAMLET = ROOT / "data" / "text" / "hamlet.txt"


@pytest.fixture(scope="module")
def ck(tmp_path_factory) -> Path:
    from tests.quality.conftest import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("cal") / "ck")


def _refused(path: Path, tmp_path: Path, capsys) -> str:
    """``qbench run`` of ``path``: exit 2, one line on stderr (returned), nothing written."""
    out = tmp_path / "out.json"
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists() and not list(tmp_path.glob("out*"))
    return err


def test_a_calibrated_scheme_without_calibration_is_refused(tmp_path, ck, capsys):
    err = _refused(write_scenario(tmp_path, ck, ["bf16", "int4-gptq"]), tmp_path, capsys)
    assert "quality.calibration:" in err and "int4-gptq" in err and "got none" in err


def test_hqq_needs_no_calibration(tmp_path, ck):
    load(write_scenario(tmp_path, ck, ["int4-hqq"]))  # no refusal


def test_a_missing_calibration_text_is_refused(tmp_path, ck, capsys):
    path = write_scenario(tmp_path, ck, ["int4-awq"], extra='calibration = { text = "nowhere.txt", chunks = 2 }')
    err = _refused(path, tmp_path, capsys)
    assert "quality.calibration.text:" in err and "nowhere.txt" in err


def test_a_calibration_text_too_short_for_its_chunks_is_refused(tmp_path, ck, capsys):
    (tmp_path / "short.txt").write_text("x" * 300, encoding="utf-8")  # 300 byte-tokens: 4 chunks of 64, not 5
    path = write_scenario(tmp_path, ck, ["int4-gptq"], extra='calibration = { text = "short.txt", chunks = 5 }')
    err = _refused(path, tmp_path, capsys)
    assert "quality.calibration.text:" in err and "holds 300 tokens" in err and "= 320" in err


def test_a_calibration_span_overlapping_the_evaluated_one_is_refused(tmp_path, ck, capsys):
    """The evaluated span is chunks 0..3 of 64 tokens; chunks 3..4 overlap it by one chunk. A copy of
    the same bytes under another name is the same text (compared by sha256)."""
    path = write_scenario(tmp_path, ck, ["int4-gptq"], extra='calibration = { chunks = 2, first_chunk = 3 }')
    err = _refused(path, tmp_path, capsys)
    assert "quality.calibration.first_chunk:" in err and "[192, 320)" in err and "[0, 256)" in err
    assert "first_chunk >= 4" in err and "got 3" in err
    shutil.copy(tmp_path / "text.txt", tmp_path / "copy.txt")
    path = write_scenario(tmp_path, ck, ["int4-gptq"], extra='calibration = { text = "copy.txt", chunks = 1 }')
    assert "quality.calibration.first_chunk:" in _refused(path, tmp_path, capsys)


def test_a_calibration_chunk_beyond_the_models_positions_is_refused(tmp_path, ck, capsys):
    """As quality.chunk is: the test checkpoint has max_position_embeddings = 512, so calibration
    chunks of 1024 tokens would collect statistics at positions it was never trained on. The
    trained tiny checkpoint (1024 positions) with the break trial's chunk = 4096 likewise."""
    path = write_scenario(tmp_path, ck, ["int4-gptq"], text_file=HAMLET,
                          extra="calibration = { chunks = 2, first_chunk = 2, chunk = 1024 }")
    err = _refused(path, tmp_path, capsys)
    assert err == f"qbench: {path}: quality.calibration.chunk: longer than ck's max_position_embeddings = 512, got 1024"
    path = write_scenario(tmp_path, TRAINED, ["int4-awq"], chunk=256, chunks=8, text_file=HAMLET,
                          extra="calibration = { chunks = 2, first_chunk = 2, chunk = 4096 }")
    err = _refused(path, tmp_path, capsys)
    assert err.endswith("quality.calibration.chunk: longer than tiny-shakespeare-llama's max_position_embeddings = "
                        "1024, got 4096")
    load(write_scenario(tmp_path, ck, ["int4-gptq"], text_file=HAMLET,
                        extra="calibration = { chunks = 2, first_chunk = 2, chunk = 512 }"))  # at the limit: accepted


def test_every_whole_chunk_evaluated_leaves_no_span_of_that_text(tmp_path, ck, capsys):
    lines = write_scenario(tmp_path, ck, ["int4-gptq"]).read_text().replace("chunks = 4\n", "")
    path = tmp_path / "all.toml"
    path.write_text(lines.replace("[[schemes]]", "calibration = { chunks = 1, first_chunk = 20 }\n[[schemes]]", 1))
    assert "end of text" in _refused(path, tmp_path, capsys)


def test_calibration_text_holding_the_evaluated_tokens_is_refused(tmp_path, ck, capsys):
    """The digests differ but the tokens are the scored ones: a copy of the evaluated text with one
    byte more, and a calibration file of which the evaluated file is the first 20 KB (the break
    trial's two bypasses). Byte tokens: evaluated chunks 0..3 are bytes [0, 256) of Hamlet."""
    part = tmp_path / "part.txt"
    part.write_bytes(HAMLET.read_bytes()[:20000])
    (tmp_path / "plus.txt").write_bytes(part.read_bytes() + b"x")
    path = write_scenario(tmp_path, ck, ["int4-gptq"], text_file=part, extra='calibration = { text = "plus.txt", '
                                                                             'chunks = 2 }')
    err = _refused(path, tmp_path, capsys)
    assert err.startswith(f"qbench: {path}: quality.calibration.text: calibration chunk 0 of plus.txt (tokens [0, 64)) "
                          "repeats 64 of its 64 tokens from evaluated chunk 0 of part.txt (runs of 64 tokens; 2 of 2 "
                          "calibration chunks do)"), err
    assert err.endswith("got 'plus.txt'")
    path = write_scenario(tmp_path, ck, ["int4-awq"], text_file=part,
                          extra=f'calibration = {{ text = "{HAMLET}", chunks = 4, first_chunk = 2 }}')
    err = _refused(path, tmp_path, capsys)
    assert "calibration chunk 2 of hamlet.txt (tokens [128, 192)) repeats 64 of its 64 tokens from evaluated " \
           "chunk 2 of part.txt" in err and "2 of 4 calibration chunks do" in err


def test_a_held_out_span_of_a_repeating_text_is_refused(tmp_path, ck, capsys):
    """TEXT repeats one sentence: chunks 4..5 are disjoint from the evaluated 0..3 by index, yet they
    hold the same runs of tokens. A held-out span of a text that does not repeat itself is accepted."""
    path = write_scenario(tmp_path, ck, ["int4-gptq"], extra="calibration = { chunks = 2, first_chunk = 4 }")
    err = _refused(path, tmp_path, capsys)
    assert "quality.calibration.first_chunk: calibration chunk 4 of text.txt (tokens [256, 320)) repeats 64 of its " \
           "64 tokens from evaluated chunk" in err and "got 4" in err
    load(write_scenario(tmp_path, ck, ["int4-gptq"], text_file=HAMLET,
                        extra="calibration = { chunks = 2, first_chunk = 4 }"))  # no refusal


def test_shared_run_counts_the_tokens_of_shared_runs():
    """Known answers: a run of 4 tokens at 10..13 of a 16-token chunk is shared (4 of its tokens,
    first evaluated chunk 1 of 8-token chunks); a 3-token run is not; overlapping runs count each token once."""
    from qbench.quality.calibrate import shared_run

    evaluated = list(range(100, 124))  # chunks of 8: 100..107, 108..115, 116..123
    cal = [0] * 10 + [109, 110, 111, 112] + [0, 0] + [1] * 16
    assert shared_run(cal, 16, evaluated, 8, window=4) == (0, 4, 1, 1)
    assert shared_run(cal, 16, evaluated, 8, window=5) is None
    cal = [0] * 16 + [1, 2] + list(range(100, 110)) + [3] * 4
    assert shared_run(cal, 16, evaluated, 8, window=4) == (1, 10, 0, 1)


def test_collect_shares_one_record_per_input_and_counts_every_token(ck):
    """q, k and v read the same normed tensor (one record), gate and up likewise; o and down their own;
    every position of every chunk is counted; the first block's q input is rms_norm(embedding) by hand."""
    from qbench.model.checkpoint import TensorMap, open_named
    from qbench.model.llama import Weights
    from qbench.quality.calibrate import collect

    ckpt = open_named(str(ck), str(ck / "x.toml"))
    weights = Weights(ckpt.config, 0, torch.device("cpu"), state_dict=TensorMap(ckpt, "cpu"))
    ids = list(TEXT.encode())[:3 * 64]
    stats, seconds = collect(weights, ids, 64, torch.float32, 256, head=False)
    assert seconds > 0 and len({id(stats[(0, r)]) for r in ("q_proj", "k_proj", "v_proj")}) == 1
    assert stats[(0, "gate_proj")] is stats[(0, "up_proj")] and stats[(0, "o_proj")] is not stats[(0, "q_proj")]
    assert all(s.tokens == 3 * 64 for s in stats.values()) and (-1, "lm_head") not in stats
    tokens = torch.tensor(ids).view(3, 64)
    tokens[:, 0] = 256
    e = weights.get("model.embed_tokens.weight")[tokens.flatten()].double()
    h = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + ckpt.config.rms_eps) \
        * weights.get("model.layers.0.input_layernorm.weight").double()
    assert torch.allclose(stats[(0, "q_proj")].xtx.double(), h.T @ h, rtol=1e-4, atol=1e-3)
    with_head, _ = collect(weights, ids, 64, torch.float32, 256, head=True)
    assert with_head[(-1, "lm_head")].tokens == 3 * 64


def _trained(tmp_path: Path, names: list[str]) -> Path:
    return write_scenario(tmp_path, TRAINED, names, chunk=256, chunks=8, text_file=HAMLET,
                          extra="calibration = { chunks = 16, first_chunk = 8 }")


def test_gptq_loses_less_than_round_to_nearest_on_the_trained_checkpoint(tmp_path):
    """A direction, not a tuned number: on the committed trained checkpoint, calibrated on chunks
    8..23 of Hamlet and scored on chunks 0..7, GPTQ's mean KL divergence is below round-to-nearest's
    (int4-weight-only, same grid and group size). Its row records the span; RTN's none."""
    path = _trained(tmp_path, ["int4-weight-only", "int4-gptq"])
    rtn, gptq = run_scheme(path, 0, tmp_path), run_scheme(path, 1, tmp_path)
    assert rtn["status"] == gptq["status"] == "ok"
    assert gptq["stats"]["kld"]["mean"] < rtn["stats"]["kld"]["mean"]
    c = gptq["calibration"]
    assert c["span"] == [2048, 6144] and c["tokens"] == 4096 and c["chunk"] == 256 and c["first_chunk"] == 8
    assert c["text_sha256"] == gptq["text_sha256"] and c["collect_s"] > 0 and c["solve_s"] > 0
    assert gptq["calibration_s"] == pytest.approx(c["collect_s"] + c["solve_s"])
    assert "calibration" not in rtn and "calibration_s" not in rtn
    assert gptq["emulated"] and "emulated" in [f["name"] for f in gptq["flags"]]


def _few_tokens(tmp_path: Path, options: str = "") -> Path:
    """GPTQ on the trained checkpoint (K = 128 for q, k, v, gate and up and o; 384 for down) calibrated
    on one chunk of 16 tokens, 2 chunks of 128 evaluated: the break trial's thin calibration."""
    path = write_scenario(tmp_path, TRAINED, ["int4-gptq"], chunk=128, chunks=2, text_file=HAMLET,
                          extra="calibration = { chunks = 1, first_chunk = 200, chunk = 16 }")
    path.write_text(path.read_text() + options)
    return path


def test_gptq_failing_on_too_few_calibration_tokens_names_the_linear_the_count_and_the_fix(tmp_path):
    """damp = 1e-9 on 16 calibration tokens: H has no Cholesky factor. The failed row's reason names
    the first linear built (block 0 q_proj), the tokens against K and the fixes, where it said only
    torch's '_LinAlgError: linalg.cholesky: ... the leading minor of order 16 is not positive-definite'."""
    row = run_scheme(_few_tokens(tmp_path, "damp = 1e-9\n"), 0, tmp_path)
    assert row["status"] == "failed", row
    assert row["reason"].startswith("build: NotPositiveDefinite: block 0 q_proj: GPTQ: H = 2XᵀX/n of 16 calibration "
                                    "tokens for K = 128 inputs (rank ≤ 16)"), row["reason"]
    assert "more quality.calibration chunks (chunks × chunk ≥ K = 128) or a larger damp" in row["reason"]


def test_fewer_calibration_tokens_than_k_flag_the_row(tmp_path):
    """At the default damp the same 16 tokens give an ok row, flagged few-calibration-tokens: every
    calibrated linear (4 blocks × 7, K = 128 or 384) saw fewer tokens than its K; with 16 chunks of 256
    (4,096 tokens) no flag."""
    row = run_scheme(_few_tokens(tmp_path), 0, tmp_path)
    assert row["status"] == "ok", row
    (flag,) = [f for f in row["flags"] if f["name"] == "few-calibration-tokens"]
    assert flag["text"] == ("16 calibration tokens, fewer than the inputs of 28 of 28 calibrated linears (K up to "
                            "384): their XᵀX has rank ≤ 16, so the values were chosen on the directions those "
                            "tokens span; quality.calibration chunks × chunk ≥ 384 gives full rank")
    full = run_scheme(_trained(tmp_path, ["int4-awq"]), 0, tmp_path)
    assert full["status"] == "ok" and "few-calibration-tokens" not in [f["name"] for f in full.get("flags", [])]


def test_diagnostics_sum_up_each_linears_notes():
    """Known answers: AWQ's α over three linears (min, mean, max) and its error over RTN's; GPTQ's dead
    channels summed and the linears holding any; no notes, nothing."""
    from qbench.quality.calibrate import diagnostics

    awq = [{"alpha": 0.0, "loss_vs_rtn": 1.0}, {"alpha": 0.25, "loss_vs_rtn": 0.5}, {"alpha": 0.5, "loss_vs_rtn": 0.6}]
    assert diagnostics(awq) == {"linears": 3, "alpha_min": 0.0, "alpha_mean": 0.25, "alpha_max": 0.5,
                                "loss_vs_rtn_mean": pytest.approx(0.7), "loss_vs_rtn_max": 1.0}
    gptq = [{"dead_channels": 0}, {"dead_channels": 3}, {"dead_channels": 2}, {}]
    assert diagnostics(gptq) == {"linears": 3, "dead_channels": 5, "linears_with_dead_channels": 2}
    assert diagnostics([{}, {}]) == {} and diagnostics([]) == {}


@pytest.mark.parametrize("name", ["int4-awq", "int4-gptq"])
def test_a_calibrated_row_records_its_diagnostics(tmp_path, ck, name):
    """The row's calibration record holds its scheme's diagnostics, keyed by its label: the test
    checkpoint's 14 linears (2 blocks × 7); AWQ's α on its grid of 20 and an error at most RTN's; no
    input channel of these dense activations is dead."""
    path = write_scenario(tmp_path, ck, [name], extra=f'calibration = {{ text = "{HAMLET}", chunks = 2 }}')
    row = run_scheme(path, 0, tmp_path)
    assert row["status"] == "ok", row.get("reason")
    (label, d), = row["calibration"]["diagnostics"].items()
    assert label == name and d["linears"] == 14
    if name == "int4-awq":
        assert 0 <= d["alpha_min"] <= d["alpha_mean"] <= d["alpha_max"] <= 0.95
        assert round(d["alpha_max"] * 20, 9).is_integer() and 0 < d["loss_vs_rtn_mean"] <= d["loss_vs_rtn_max"] <= 1
    else:
        assert d == {"linears": 14, "dead_channels": 0, "linears_with_dead_channels": 0}
