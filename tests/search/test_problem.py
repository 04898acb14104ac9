"""The search problem from a quality file's unit damages and a step file's per-linear times: the
numbers read (hand-summed), and every refusal one line naming the file, the key and the value."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from qbench.scenario import SchemeEntry
from qbench.schemes import get
from qbench.search.problem import ProblemError, build, model_units
from qbench.step.row import StepRow

CK = "a" * 64
ROLES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def entry(name: str) -> SchemeEntry:
    return SchemeEntry(name=name, options=get(name).options_model(), label=name)


def quality_row(label: str, damages: dict, whole: tuple = None, **kw) -> NS:
    """A quality row with unit sensitivity: ``damages`` part -> (kld, unc); ``whole``: the row's own (kld, unc), by
    default the units' sums (no rest)."""
    sens = [NS(part=p, kld=k, kld_unc=u, same_top=1.0, ppl_ratio=1.0) for p, (k, u) in damages.items()]
    whole = whole or (sum(k for k, _ in damages.values()), sum(u for _, u in damages.values()))
    base = dict(stats=NS(kld=NS(mean=whole[0], unc=whole[1])), flags=[], scheme=label, base_scheme=label, status="ok", reason=None, sensitivity_by="unit", sensitivity=sens,
                lm_head="float", checkpoint_id=CK, weights="checkpoint ck (float32)", emulated=False, chunks=8,
                chunk=512, text="hamlet.txt", reference=NS(dtype="float32"), recipe=None, options={}, kv_cache=None,
                calibration=None)
    return NS(**{**base, **kw})


def step_row(label: str, medians: dict, step: float, m: int = 1, context: int = 128, **kw) -> StepRow:
    """A step row whose linears' stream medians are ``medians`` (role -> µs) and whose step is ``step`` µs."""
    by_role = {r: {"k": 128, "n": 128, "count": 1, "stream": {"median": medians[r]}} for r in ROLES}
    return StepRow(scheme=label, base_scheme=label, library="torch", mode="eager", model="ck", title="ck", m=m,
                   context=context, device="cpu", weight_dtype="x", activation_dtype="bfloat16", lm_head="float",
                   weight_source="checkpoint ck (float32)", checkpoint_id=kw.pop("checkpoint_id", CK), blocks=1,
                   latency_us={"step_cpu": {"median": step, "p10": step, "p90": step, "mean": step, "cv": 0.0, "n": 10}},
                   linear={"method": "stream", "by_role": by_role, "sum_us": sum(medians.values())}, **kw)


UNITS = [u.name for u in model_units(1, False)]  # block 0 attn_in, o, mlp_in, down
BF16 = dict(zip(ROLES, (3.0, 2.0, 2.0, 3.0, 5.0, 5.0, 6.0)))  # Σ 26 µs
INT8 = dict(zip(ROLES, (1.5, 1.0, 1.0, 1.5, 2.0, 2.0, 3.0)))


def files(quality_rows=None, step_rows=None):
    q = quality_rows or [quality_row("bf16", {u: (0.0001, 0.00001) for u in UNITS}),
                         quality_row("int8-weight-only", {u: (0.001 * (i + 1), 0.0001) for i, u in enumerate(UNITS)})]
    s = step_rows or [step_row("bf16", BF16, 100.0), step_row("int8-weight-only", INT8, 80.0)]
    return ("q.json", NS(job="quality", rows=q), "s.json", NS(job="step", rows=s))


CANDIDATES = [entry("bf16"), entry("int8-weight-only")]


def test_times_damages_and_fixed_rest_are_read_and_summed():
    p = build(*files(), CANDIDATES, 1, 128)
    assert [u.name for u in p.units] == UNITS
    # attn_in = q + k + v stream medians; mlp_in = gate + up
    assert p.time_us == ((7.0, 3.5), (3.0, 1.5), (10.0, 4.0), (6.0, 3.0))
    assert p.fixed_us == 100.0 - 26.0  # the base's step less the sum of its units
    assert p.damage[2] == (0.0001, 0.003) and p.damage_unc[2] == (0.00001, 0.0001)
    assert p.method == "step_cpu"
    assert "sum of separate linears" in p.sources["cost"] and "step_cpu" in p.sources["fixed"]
    assert p.fixed_kld == 0.0  # the base's whole row is its units' sum here


def test_a_step_shorter_than_its_linears_timed_alone_gives_a_rest_of_0_and_says_so():
    """bf16's linears sum to 26 µs but its step measured 20 µs (a busy CPU: the search_tiny test once read a rest
    of -24,169 µs, and a front point's negative predicted time failed the row model): the rest is 0, the sources
    say why, every predicted time is positive."""
    from qbench.search.solve import front

    p = build(*files(step_rows=[step_row("bf16", BF16, 20.0), step_row("int8-weight-only", INT8, 80.0)]),
              CANDIDATES, 1, 128)
    assert p.fixed_us == 0.0
    assert "the sum (26.0 µs) exceeds the step (20.0 µs), so the rest is taken as 0" in p.sources["fixed"]
    assert min(q.time_us for q in front(p)) == pytest.approx(12.0)  # int8 everywhere: its linears alone (Σ 12 µs)


def test_the_rests_damage_is_the_base_rows_whole_kld_less_its_units():
    """bf16's four units at 0.0001 ± 0.00001 each (Σ 0.0004) and its whole row 0.001 ± 0.00005: 0.0006 of damage no
    unit carries, ± 0.00005 + 0.00004, added to every prediction; a whole row below its units' sum gives 0, not less."""
    from qbench.search.solve import predict

    units = {u: (0.0001, 0.00001) for u in UNITS}
    q = [quality_row("bf16", units, whole=(0.001, 0.00005)),
         quality_row("int8-weight-only", {u: (0.001 * (i + 1), 0.0001) for i, u in enumerate(UNITS)})]
    p = build(*files(quality_rows=q), CANDIDATES, 1, 128)
    assert p.fixed_kld == pytest.approx(0.0006) and p.fixed_kld_unc == pytest.approx(0.00009)
    assert predict(p, p.pure(0))[1] == pytest.approx(0.001)  # the pure base: its whole row
    assert predict(p, p.pure(1))[1] == pytest.approx(0.0006 + 0.010)
    assert "0.001 less the sum of its units' 0.0004: 0.0006 nats/token" in p.sources["fixed_kld"]
    q[0] = quality_row("bf16", units, whole=(0.0003, 0.00005))
    clamped = build(*files(quality_rows=q), CANDIDATES, 1, 128)
    assert clamped.fixed_kld == 0.0
    assert clamped.sources["fixed_kld"].endswith("; the whole row is below its units' sum (their damages overlap), "
                                                 "so the rest is taken as 0")


def test_a_calibrated_candidates_few_tokens_and_span_reach_the_problem():
    """int8 stands in for a calibrated candidate: its damage row flagged few-calibration-tokens and carrying a
    calibration record; the problem keeps the flag's text for the rows of recipes using it, and names the span."""
    cal = NS(first_chunk=6, chunks=2, chunk=256, text="hamlet.txt", tokens=512, text_sha256="f" * 64)
    few = NS(name="few-calibration-tokens", text="512 calibration tokens, fewer than the inputs of 1 of 4 linears")
    q = [quality_row("bf16", {u: (0.0001, 0.00001) for u in UNITS}),
         quality_row("int8-weight-only", {u: (0.001, 0.0001) for u in UNITS}, flags=[few], calibration=cal)]
    p = build(*files(quality_rows=q), CANDIDATES, 1, 128)
    assert p.few_tokens == {"int8-weight-only": few.text}
    assert p.sources["quantizer_calibration"] == ("int8-weight-only calibrated on chunks 6..7 of 256 tokens of "
                                                  "hamlet.txt (512 tokens, sha256 ffffffffffff), in the damage job "
                                                  "and in the proof")


def test_search_docs_rest_figures_are_the_committed_smollm2_units_file():
    """docs/search.md's '0.59x its whole row (0.000446 of 0.000757)' is bf16's row of the committed units file."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = json.loads((root / "results" / "cpu" / "quality_smollm2_units.json").read_text())
    bf16 = next(r for r in doc["rows"] if r["scheme"] == "bf16")
    whole, units = bf16["stats"]["kld"]["mean"], sum(p["kld"] for p in bf16["sensitivity"])
    said = f"{units / whole:.2f}x its whole row ({units:.3g} of {whole:.3g})"
    assert said in " ".join((root / "docs" / "search.md").read_text().split()), said


def test_a_candidate_with_no_cost_at_the_deployment_point_is_refused():
    steps = [step_row("bf16", BF16, 100.0), step_row("int8-weight-only", INT8, 80.0, m=16)]
    with pytest.raises(ProblemError) as info:
        build(*files(step_rows=steps), CANDIDATES, 1, 128)
    assert str(info.value) == ("s.json: rows: candidate 'int8-weight-only' has no cost: no step row at M=1, context=128 "
                               "(its rows: M=16/128), got 'int8-weight-only'")


def test_a_missing_unit_is_refused():
    rows = [quality_row("bf16", {u: (0.0001, 0.0) for u in UNITS}),
            quality_row("int8-weight-only", {u: (0.001, 0.0) for u in UNITS[:3]})]
    with pytest.raises(ProblemError) as info:
        build(*files(quality_rows=rows), CANDIDATES, 1, 128)
    assert str(info.value) == ("q.json: rows[1].sensitivity: candidate 'int8-weight-only' has no unit 'block 0 down' "
                               "(of 4), got 3 parts")


def test_a_candidate_the_model_cannot_take_is_refused_with_its_reason():
    rows = [quality_row("bf16", {u: (0.0001, 0.0) for u in UNITS}),
            quality_row("int8-weight-only", {}, status="skipped", reason="needs CUDA", sensitivity=None)]
    with pytest.raises(ProblemError) as info:
        build(*files(quality_rows=rows), CANDIDATES, 1, 128)
    assert str(info.value).startswith("q.json: rows[1].status: candidate 'int8-weight-only' was skipped (needs CUDA)")


def test_rows_without_unit_sensitivity_are_refused():
    rows = [quality_row("bf16", {u: (0.0, 0.0) for u in UNITS}, sensitivity_by="role"),
            quality_row("int8-weight-only", {u: (0.0, 0.0) for u in UNITS})]
    with pytest.raises(ProblemError) as info:
        build(*files(quality_rows=rows), CANDIDATES, 1, 128)
    assert str(info.value) == ("q.json: rows[0].sensitivity_by: a search needs each unit quantized alone ([quality] "
                               "sensitivity = \"unit\"), got 'role'")


def test_files_of_different_checkpoints_are_refused():
    steps = [step_row("bf16", BF16, 100.0, checkpoint_id="b" * 64),
             step_row("int8-weight-only", INT8, 80.0, checkpoint_id="b" * 64)]
    with pytest.raises(ProblemError) as info:
        build(*files(step_rows=steps), CANDIDATES, 1, 128)
    assert str(info.value).startswith("s.json: checkpoint_id: the step files' checkpoint (sha256 bbbbbbbbbbbb) is not "
                                      "the quality files' (sha256 aaaaaaaaaaaa)")
    assert "\n" not in str(info.value)


def test_a_linear_without_a_stream_time_is_refused():
    step = step_row("int8-weight-only", INT8, 80.0)
    step.linear["by_role"]["down_proj"] = {"k": 1, "n": 1, "count": 1, "stream": None, "reason": "error: boom"}
    with pytest.raises(ProblemError) as info:
        build(*files(step_rows=[step_row("bf16", BF16, 100.0), step]), CANDIDATES, 1, 128)
    assert str(info.value) == ("s.json: rows[1].linear.by_role.down_proj: candidate 'int8-weight-only' has no stream "
                               "time for down_proj (error: boom), got None")


def test_a_step_row_whose_lm_head_is_not_what_the_units_say_is_refused():
    """Units without the head need step rows with a float head (it is in the fixed rest, the same for every
    candidate); a head unit needs rows that quantized it, or every candidate's head cost is the float head's."""
    steps = [step_row("bf16", BF16, 100.0), step_row("int8-weight-only", INT8, 80.0)]
    steps[1] = steps[1].model_copy(update={"lm_head": "scheme"})
    with pytest.raises(ProblemError) as info:
        build(*files(step_rows=steps), CANDIDATES, 1, 128)
    assert str(info.value) == ("s.json: rows[1].lm_head: the search does not rank the LM head as a unit, so each "
                               "candidate's step must not quantize it ([model] quantize_lm_head = false), got 'scheme'")


def test_search_docs_tiny_prediction_figures_are_the_committed_search_tiny_file():
    """docs/search.md's bf16 prediction, measurement and units' sum are those of results/cpu/search_tiny.json."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = json.loads((root / "results" / "cpu" / "search_tiny.json").read_text())
    bf16 = next(r for r in doc["rows"] if r["scheme"] == "bf16" and r["kind"] == "pure")
    units = bf16["predicted_kld"] - doc["search"]["fixed_kld"]
    said = (f"bf16 is predicted at {bf16['predicted_kld']:.4g} nats/token and measures {bf16['measured']['kld']:.4g} "
            f"± {bf16['measured']['kld_unc']:.1g} on the held-out chunks, where its units' sum alone is {units:.4g}")
    assert said in " ".join((root / "docs" / "search.md").read_text().split()), said

