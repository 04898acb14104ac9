"""The search's rounds on fake job files (the jobs themselves are tested in their packages and end
to end in test_search_tiny.py): predicted beside measured, the refit that brings a missed pick within
the budget, the noise-floor and no-feasible refusals."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from qbench.lifecycle import RunError
from qbench.search import pipeline, spec
from qbench.search.spec import SearchSpec
from tests.search.test_problem import BF16, INT8, UNITS, entry, quality_row, step_row

#: Unit damages alone: bf16 ~0, int8 0.001 / 0.002 / 0.003 / 0.004 (block 0 attn_in, o, mlp_in, down).
DAMAGE = {"bf16": [0.00005] * 4, "int8-weight-only": [0.001, 0.002, 0.003, 0.004]}
SHORT = {"attn_in": "q", "o": "o", "mlp_in": "gate", "down": "down"}


def scenario(max_kld: float, rounds: int = 3) -> NS:
    s = SearchSpec(max_kld=max_kld, m=1, context=128, text="t.txt", calibration={"chunks": 2},
                   evaluation={"first_chunk": 2, "chunks": 2}, rounds=rounds)
    return NS(search=s, schemes=[entry("bf16"), entry("int8-weight-only")], source="x.toml", name="x")


def labels(entries) -> list[dict]:
    return [e if isinstance(e, dict) else {"name": e.name, "label": e.label} for e in entries]


def truth(e: dict, ratio: float) -> float:
    """The 'measured' KLD of an entry: ``ratio`` x the sum of its units' damages (parts do not add up)."""
    names = [(e.get("recipe") or {}).get(f"0.{SHORT[u.split()[-1]]}", e["name"]) for u in UNITS]
    return ratio * sum(DAMAGE[n][i] for i, n in enumerate(names))


@pytest.fixture
def fake(monkeypatch):
    """Jobs answered from :data:`DAMAGE`: each recipe measured at ``ratio`` x its predicted KLD, ± ``unc``."""
    state = {"ratio": 1.5, "unc": 0.0, "floor": 0.00002, "runs": []}
    monkeypatch.setattr(spec, "evaluation_scenario", lambda sc, entries, suffix="evaluation": NS(schemes=labels(entries)))
    monkeypatch.setattr(spec, "step_scenario", lambda sc, entries, suffix="step": NS(schemes=labels(entries)))
    monkeypatch.setattr(spec, "damage_scenario", lambda sc: NS(schemes=labels(sc.schemes)))
    monkeypatch.setattr(pipeline.Search, "_blocks", lambda self: 1)

    def stats(kld):
        return NS(kld=NS(mean=kld, unc=state["unc"]), ppl_ratio=1.0, same_top=0.99)

    def job(self, sub, tag):
        state["runs"].append((tag, [e["label"] for e in sub.schemes]))
        if tag == "damage":
            rows = [quality_row(n, {u: (d, 0.0) for u, d in zip(UNITS, DAMAGE[n])}) for n in DAMAGE]
            return "damage.json", NS(job="quality", rows=rows)
        if tag.endswith("step"):
            rows = [step_row(e["label"], INT8 if e["name"] == "int8-weight-only" else BF16,
                             100.0 - 20.0 * (e["name"] == "int8-weight-only")) for e in sub.schemes]
            return f"{tag}.json", NS(job="step", rows=rows)
        rows = [NS(scheme=e["label"], base_scheme=e["name"], recipe=e.get("recipe"), status="ok", emulated=False,
                   stats=stats(state["floor"] if e["label"].startswith("bf16") else truth(e, state["ratio"])))
                for e in sub.schemes]
        return f"{tag}.json", NS(job="quality", rows=rows)

    monkeypatch.setattr(pipeline.Search, "_job", job)
    return state


def test_a_missed_pick_is_refit_and_the_next_round_is_proven(fake, tmp_path):
    # budget 0.005, by hand: round 1 picks int8 on attn_in and mlp_in (predicted 0.0041, saves 9.5 µs), measured
    # at 1.5x (0.00615) it misses; the refit scales every damage by 1.5 and round 2 picks int8 on mlp_in alone
    # (predicted 1.5 x 0.00315 = 0.004725, measured the same): accepted
    lines = []
    rows, summary, picked = pipeline.search(scenario(0.005), "cpu", tmp_path, lines.append)
    assert picked
    r1, r2 = summary["rounds"]
    assert not r1["accepted"] and r1["refit"] == pytest.approx(1.5)  # (measured + 0) / predicted
    assert r1["predicted_kld"] == pytest.approx(0.0041) and r2["predicted_kld"] == pytest.approx(0.004725)
    assert r2["accepted"] and r2["scale"] == pytest.approx(1.5)
    # the last front's size (its round line's) and its pure points: all-bf16 least damaged, all-int8 fastest
    assert summary["front"] == {"points": r2["front"], "pure": ["bf16", "int8-weight-only"]}
    assert r1["measured_kld"] == pytest.approx(1.5 * r1["predicted_kld"])
    pick = next(r for r in rows if r["pick"])
    assert pick["counts"] == {"bf16": 3, "int8-weight-only": 1} and pick["recipe"]["recipe"] == {
        "0.gate": "int8-weight-only", "0.up": "int8-weight-only"}
    assert pick["measured"]["kld"] + pick["measured"]["kld_unc"] <= 0.005
    # the pick's prediction is at the refit scale: it equals what was measured
    assert pick["predicted_kld"] == pytest.approx(pick["measured"]["kld"])
    verified = [r for r in rows if r["measured"] is not None and r["kind"] == "front"]
    assert len(verified) >= 3  # the pick and two others per round, every one kept
    for r in verified:
        assert r["recipe"]["label"] == r["measured"]["label"] and r["within_budget"] == (
            r["measured"]["kld"] <= 0.005)
    assert [t for t, _ in fake["runs"]] == ["evaluation", "damage", "step", "verify-r1-quality", "verify-r1-step",
                                            "verify-r2-quality", "verify-r2-step"]
    assert any("units measured" in line for line in lines)


def test_a_budget_below_the_noise_floor_is_one_line(fake, tmp_path):
    fake["floor"] = 0.01
    with pytest.raises(RunError) as info:
        pipeline.search(scenario(0.005), "cpu", tmp_path, lambda line: None)
    assert str(info.value) == ("x.toml: search.max_kld: below the noise floor: bf16 alone measures 0.01 ± 0 nats/token "
                               "against the reference on the evaluation span, and a recipe is proven within the "
                               "budget by its upper bound (mean + uncertainty): none can be under 0.005")
    assert [t for t, _ in fake["runs"]] == ["evaluation"]  # refused before the damages are measured


def test_a_budget_under_the_noise_floors_upper_bound_is_refused_before_the_damages(fake, tmp_path):
    # bf16 measures 0.004 ± 0.002: its mean is under 0.005, its upper bound (what proves a recipe) is not; the run
    # went on to measure every unit's damage and threw it all away in round 2 (a break trial, 2026-12-06)
    fake["floor"], fake["unc"] = 0.004, 0.002
    with pytest.raises(RunError) as info:
        pipeline.search(scenario(0.005), "cpu", tmp_path, lambda line: None)
    assert "below the noise floor: bf16 alone measures 0.004 ± 0.002 nats/token" in str(info.value)
    assert [t for t, _ in fake["runs"]] == ["evaluation"]


def test_a_refit_that_leaves_no_recipe_within_the_budget_keeps_what_was_verified(fake, tmp_path):
    # each recipe measures 30x its predicted KLD: round 1's pick misses, the refit scales every damage by 30 and no
    # recipe is predicted within 0.005 (all bf16: 30 x 0.0002 = 0.006): the rounds stop, round 1's rows and
    # measurements stay, and the fastest verified recipe within the budget (bf16, at the floor) is the answer
    fake["ratio"] = 30.0
    lines = []
    rows, summary, picked = pipeline.search(scenario(0.005), "cpu", tmp_path, lines.append)
    (r1,) = summary["rounds"]
    assert not r1["accepted"] and r1["refit"] == pytest.approx(30.0)
    stopped = summary["notes"]["rounds stopped"]
    assert stopped.startswith("round 2: after the refit (damages x30) no recipe of the candidates is predicted within "
                              "0.005") and stopped.endswith("keeps round 1's front and the recipes verified so far")
    assert any(stopped in line for line in lines)
    assert summary["front"]["points"] == r1["front"]  # the count the round line gives, pure points on it included
    assert summary["front"]["pure"] == ["bf16", "int8-weight-only"]  # on the front, kept as pure rows
    assert [r for r in rows if r["kind"] == "front" and r["measured"] is not None]  # round 1's verified recipes
    assert picked and summary["pick_by"] == "fastest verified recipe measured within the budget"


def test_a_budget_no_recipe_is_predicted_within_is_one_line(fake, tmp_path):
    with pytest.raises(RunError) as info:
        pipeline.search(scenario(0.0001), "cpu", tmp_path, lambda line: None)
    assert str(info.value).startswith("x.toml: search.max_kld: no recipe of the candidates is predicted within 0.0001 "
                                      "nats/token (the least damaged recipe is predicted at 0.0002)")


def test_without_a_proven_pick_the_fastest_verified_recipe_within_the_budget_is_the_answer(fake, tmp_path):
    fake["ratio"] = 3.0  # one round only: the solver's pick misses and no refit round follows
    rows, summary, picked = pipeline.search(scenario(0.005, rounds=1), "cpu", tmp_path, lambda line: None)
    assert not summary["rounds"][0]["accepted"]
    assert picked and summary["pick_by"] == "fastest verified recipe measured within the budget"
    pick = next(r for r in rows if r["pick"])
    within = [r for r in rows if r["within_budget"]]
    assert pick["measured"]["step_us"] == min(r["measured"]["step_us"] for r in within)


def test_a_speed_file_timed_on_another_device_leaves_the_proof_step_to_a_scenario_written_for_it(fake, monkeypatch,
                                                                                                 tmp_path):
    # the speed file (CUDA rows) read by a CPU search: no step job runs here; each verified recipe's step says why,
    # and the proof step scenario holds every verified recipe with the speed file's model, M, context and method

    rows = [step_row(label, INT8 if label == "int8-weight-only" else BF16, 100.0 - 20.0 * (label == "int8-weight-only"))
            .model_copy(update={"device": "cuda:0"}) for label in ("bf16", "int8-weight-only")]
    speed = NS(job="step", rows=rows, machine="cuda NVIDIA H100 80GB HBM3",
               scenario={"source": "scenarios/step_x.toml", "seed": 3, "timing": {"warmup": 3, "budget_s": None},
                         "model": {"config": "../data/x/config.json", "name": None, "context": [128]}})
    monkeypatch.setattr("qbench.results.read_results", lambda path: speed)
    (tmp_path / "speed.json").write_text("{}")
    sc = scenario(0.005)
    sc.search = sc.search.model_copy(update={"speed": str(tmp_path / "speed.json")})
    lines = []
    out, summary, picked = pipeline.search(sc, "cpu", tmp_path, lines.append)
    assert not any(t.endswith("step") for t, _ in fake["runs"])  # no step job on this device
    verified = [r for r in out if r["kind"] == "front" and r["measured"] is not None]
    assert verified and all(r["measured"]["step_us"] is None and "timed on cuda NVIDIA H100" in r["measured"]["step_reason"]
                            for r in verified)
    proof = summary["proof_step"]["scenario"]
    assert proof["m"] == [1] and proof["seed"] == 3 and proof["timing"] == {"warmup": 3}
    assert proof["model"] == {"config": "data/x/config.json", "context": [128], "methods": [summary["method"]],
                              "linear_sum": True}
    # the pure candidates first (their steps in the recipes' run: the answer compares them by p10-p90), then every
    # verified recipe
    labels = [e["label"] for e in proof["schemes"]]
    assert labels[:2] == ["bf16", "int8-weight-only"] and "recipe" not in proof["schemes"][0]
    assert sorted(labels[2:]) == sorted(r["measured"]["label"] for r in verified)
    (tmp_path / "res").mkdir()
    written = pipeline.write_proof_step(proof, tmp_path / "res" / "search.json")
    assert written.name == "search.proof-step.toml"
    import tomllib

    data = tomllib.loads(written.read_text())
    assert data["m"] == [1] and len(data["schemes"]) == len(proof["schemes"])
    assert (written.parent / data["model"]["config"]).resolve() == (tmp_path.cwd() / "data/x/config.json").resolve()
    assert data["schemes"][2]["recipe"] == proof["schemes"][2]["recipe"]


def test_thin_keeps_every_pure_verified_and_picked_row_and_spaces_the_rest():
    rows = [{"kind": "pure", "predicted_us": 50.0}] + \
        [{"kind": "front", "predicted_us": float(t), "measured": {"kld": 0} if t == 7 else None, "pick": t == 9}
         for t in range(100)]
    kept = pipeline.thin(rows, 5)
    assert rows[0] in kept and rows[8] in kept and rows[10] in kept  # pure, verified (t = 7), pick (t = 9)
    others = [r["predicted_us"] for r in kept if r["kind"] == "front" and not r["pick"] and r["measured"] is None]
    # the 98 others (t = 0..99 but 7 and 9) at indices round(j x 97 / 4) = 0, 24, 48, 73, 97: t = 0, 26, 50, 75, 99
    assert others == [0.0, 26.0, 50.0, 75.0, 99.0]
    assert [r for r in rows if r in kept] == kept and pipeline.thin(rows, 200) == rows
