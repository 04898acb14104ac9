"""Unit sensitivity (``[quality] sensitivity = "unit"``) and the held-out span (``first_chunk``) of
the quality job, on the committed trained checkpoint on a CPU.

Known answers: a unit's KL divergence equals a brute-force whole forward of the reference model with
that unit's scheme modules in place (the job reuses the reference's hidden state entering the
unit's block); 4 units a block plus the LM head; bf16's unit damages are tiny beside int4's; the sum
of int4's unit damages is the whole-model row's order; a span's reference log-perplexity is the mean
of the spans it splits into. Refusals: one line naming the file, the key and the value, exit 2,
nothing written."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from qbench import cli
from qbench.model.recipe import UNITS

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"
HAMLET = ROOT / "data" / "text" / "hamlet.txt"
BLOCKS = 4  # the trained checkpoint's


def _scenario(folder: Path, schemes: list[str], extra: str = "", chunk: int = 256, chunks: int = 6) -> Path:
    from tests.quality.conftest import write_scenario

    return write_scenario(folder, TRAINED, schemes, chunk=chunk, chunks=chunks, extra=extra, text_file=HAMLET)


@pytest.fixture(scope="module")
def unit_rows(tmp_path_factory) -> tuple[Path, Path, dict]:
    from tests.quality.conftest import run_scheme

    tmp = tmp_path_factory.mktemp("units")
    path = _scenario(tmp, ["int4-intx", "bf16"], 'sensitivity = "unit"\nlm_head = true', chunks=4)
    return path, tmp, {name: run_scheme(path, i, tmp) for i, name in enumerate(["int4-intx", "bf16"])}


# -- unit sensitivity -------------------------------------------------------------------------------
def test_units_are_four_a_block_plus_the_head_ranked(unit_rows):
    _, _, rows = unit_rows
    row = rows["int4-intx"]
    assert row["status"] == "ok" and row["sensitivity_by"] == "unit"
    parts = row["sensitivity"]
    assert len(parts) == 4 * BLOCKS + 1
    assert [p["kld"] for p in parts] == sorted((p["kld"] for p in parts), reverse=True)
    want = {f"block {b} {u}": (b, u, list(roles)) for b in range(BLOCKS) for u, roles in UNITS.items()}
    want["lm_head"] = (None, "lm_head", ["lm_head"])
    assert {p["part"]: (p.get("block"), p["unit"], p["roles"]) for p in parts} == want
    assert all(p["kld_unc"] >= 0 and 0 <= p["same_top"] <= 1 for p in parts)


def test_without_the_head_the_units_are_four_a_block(tmp_path):
    from tests.quality.conftest import run_scheme

    row = run_scheme(_scenario(tmp_path, ["int8-weight-only"], 'sensitivity = "unit"', chunk=128, chunks=2), 0, tmp_path)
    assert len(row["sensitivity"]) == 4 * BLOCKS and "lm_head" not in {p["part"] for p in row["sensitivity"]}


def test_bf16_units_are_tiny_and_int4_units_add_up_to_the_row_order(unit_rows):
    _, _, rows = unit_rows
    int4, bf16 = rows["int4-intx"], rows["bf16"]
    whole = int4["stats"]["kld"]["mean"]
    assert max(p["kld"] for p in bf16["sensitivity"]) < 0.05 * whole  # bf16 rounding alone: noise beside int4
    total = sum(p["kld"] for p in int4["sensitivity"])
    assert 0.5 * whole < total < 2 * whole, (total, whole)  # damages of parts roughly add (measured: 0.9x)
    assert all(p["kld"] < whole for p in int4["sensitivity"])  # one unit alone, not the whole model


@pytest.mark.parametrize("part", ["block 0 attn_in", "block 2 mlp_in", "block 3 down", "lm_head"])
def test_a_unit_equals_a_brute_force_whole_forward(unit_rows, part):
    """The reference model built with the unit's int4 modules (Cast to bfloat16) in place, run whole
    over every chunk: the same KL divergence as the job's reuse of the stored block input."""
    from qbench import schemes
    from qbench.model.checkpoint import TensorMap
    from qbench.model.llama import Weights, build_model, float_builder
    from qbench.quality import measure as qm
    from qbench.quality import stats as qstats
    from qbench.scenario import load

    path, shared, rows = unit_rows
    got = {p["part"]: p for p in rows["int4-intx"]["sensitivity"]}[part]
    scenario = load(path)
    cpu = torch.device("cpu")
    ckpt, config, ids = qm._inputs(scenario)
    tokens = qm.chunk_tokens(scenario, ids, cpu, ckpt)
    ref = qm._Reference(scenario, config, ckpt, cpu, str(shared), tokens)
    assert ref.path.exists()  # the run's own reference file
    scheme = schemes.get("int4-intx")
    opts = scenario.schemes[0].options
    floats = float_builder(ref.dtype)
    block, roles = got.get("block"), got["roles"]  # the head has no block (None, left out of the JSON)

    def build(w, b, i, r):
        if i == block and r in roles:
            return qm.Cast(scheme.build(w, b, opts), scheme.activation_dtype)
        return floats(w, b, i, r)

    def head(w, b, i, r):
        return qm.Cast(scheme.build(w, b, opts), scheme.activation_dtype) if part == "lm_head" else floats(w, b, i, r)

    weights = Weights(config, scenario.seed, cpu, state_dict=TensorMap(ckpt, "cpu"))
    model = build_model(weights, build, ref.dtype, head=head)
    kld, unc = qstats.mean_and_uncertainty(qm._per_token(model, tokens, ref, cpu)["kld"])
    assert got["kld"] == pytest.approx(kld, rel=1e-3, abs=1e-9) and got["kld_unc"] == pytest.approx(unc, rel=1e-2)


# -- the held-out span ------------------------------------------------------------------------------
def test_span_is_recorded_and_splits_the_text(tmp_path):
    """Chunks 0..3 of the text, and chunks 0..1 and 2..3 as two spans: the reference's mean NLL of
    the whole is the mean of the halves' (equal scored tokens each), and each row records its span."""
    from tests.quality.conftest import run_scheme

    rows = {}
    for first, chunks in ((0, 4), (0, 2), (2, 2)):
        folder = tmp_path / f"{first}-{chunks}"
        folder.mkdir()
        extra = f"first_chunk = {first}" if first else ""
        rows[(first, chunks)] = run_scheme(_scenario(folder, ["bf16"], extra, chunk=128, chunks=chunks), 0, folder)
    assert rows[(2, 2)]["span"] == {"first_chunk": 2, "chunks": 2, "tokens": 256}
    assert rows[(0, 4)]["span"] == {"first_chunk": 0, "chunks": 4, "tokens": 512} and rows[(0, 4)]["chunks"] == 4
    ln = {k: math.log(r["stats"]["ref_ppl"]) for k, r in rows.items()}
    assert ln[(0, 4)] == pytest.approx((ln[(0, 2)] + ln[(2, 2)]) / 2, rel=1e-9)
    assert ln[(0, 2)] != ln[(2, 2)]  # two spans: other tokens


def test_the_reference_file_depends_on_the_span(tmp_path):
    from qbench.quality import measure as qm
    from qbench.scenario import load

    cpu = torch.device("cpu")
    paths = []
    for first in (0, 1):
        scenario = load(_scenario(tmp_path, ["bf16"], f"first_chunk = {first}", chunk=128, chunks=2))
        ckpt, config, ids = qm._inputs(scenario)
        tokens = qm.chunk_tokens(scenario, ids, cpu, ckpt)
        assert tokens.shape == (2, 128) and tokens[0, 1:].tolist() == ids[first * 128 + 1:(first + 1) * 128]
        paths.append(qm._Reference(scenario, config, ckpt, cpu, str(tmp_path), tokens).path)
    assert paths[0] != paths[1]


def test_first_chunk_zero_is_left_out_of_the_recorded_scenario(tmp_path):
    """A file written before first_chunk existed compares equal under --resume at the default."""
    from qbench.scenario import load

    assert "first_chunk" not in load(_scenario(tmp_path, ["bf16"])).to_dict()["quality"]
    assert load(_scenario(tmp_path, ["bf16"], "first_chunk = 3")).to_dict()["quality"]["first_chunk"] == 3


@pytest.mark.parametrize("extra, chunks, key, words", [
    ("first_chunk = 168", 4, "quality.first_chunk", ["169 whole chunks", "chunks 168..171", "got 168"]),
    ("first_chunk = 169", None, "quality.first_chunk", ["169 whole chunks", "at least chunk 169", "got 169"]),
    ("first_chunk = -1", 4, "quality.first_chunk", ["-1"]),
])
def test_a_span_beyond_the_text_is_one_line_exit_2_nothing_written(tmp_path, capsys, extra, chunks, key, words):
    """Hamlet is 173,942 bytes: 169 whole chunks of 1024 byte tokens."""
    path = _scenario(tmp_path, ["bf16"], extra, chunk=1024, chunks=chunks or 1)
    if chunks is None:
        path.write_text(path.read_text().replace("chunks = 1\n", ""))
    out = tmp_path / "out" / "x.json"
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{path}: {key}" in line, line
    assert all(w in line for w in words), line
    if "-1" not in extra:
        assert str(HAMLET) in line
    assert not (tmp_path / "out").exists()


def test_resume_refuses_another_span(tmp_path, monkeypatch, capsys):
    from qbench import runner
    from qbench.quality.measure import blank_rows
    from qbench.results import read_results

    def rows(self, index):  # workers that measure nothing: the resume check is what is tested
        entry = self.scenario.schemes[index]
        (row,) = blank_rows(self.scenario, entry, entry.scheme, self.dev)
        return [{**row, "status": "skipped", "reason": "not measured (test)"}]

    monkeypatch.setattr(runner._Workers, "rows", rows)
    out = tmp_path / "q.json"
    assert cli.main(["run", str(_scenario(tmp_path, ["bf16"], "first_chunk = 2", chunk=128, chunks=2)),
                     "--out", str(out), "--quiet"]) == 1
    kept = read_results(out).to_json()["rows"]
    assert kept[0]["span"] == {"first_chunk": 2, "chunks": 2, "tokens": 256}
    capsys.readouterr()
    path = _scenario(tmp_path, ["bf16", "fp32"], "first_chunk = 4", chunk=128, chunks=2)
    assert cli.main(["run", str(path), "--out", str(out), "--resume", "--quiet"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert line == (f"qbench: cannot resume: {out} was measured with another scenario (quality.first_chunk: 2 there, "
                    "4 now); choose another --out")
    assert read_results(out).to_json()["rows"] == kept
