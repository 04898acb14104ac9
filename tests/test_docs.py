"""docs/: every generated block equals what its command prints from the committed results/, and
every chart a page shows exists (scripts/gen_docs.py). CPU only, in-process, no timing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_docs = _gen_docs()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_h200_table_is_generated():
    text = (ROOT / "docs" / "results-h200.md").read_text()
    for command in ("qbench report results/h200/decode.json --format github",
                    "qbench report results/h200/small_batch.json --format github",
                    "qbench report results/h200/prefill.json --format github",
                    "qbench recommend results/h200/decode.json --max-rel-err 0.01",
                    "qbench recommend results/h200/decode.json --max-rel-err 0.1"):
        assert f"<!-- BEGIN: {command} -->" in text
    assert "python -m qbench run scenarios/sweep.toml --out results/h200/sweep.json" in text


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_generated_blocks_are_up_to_date(path):
    text = path.read_text(encoding="utf-8")
    assert gen_docs.regenerate(text, str(path)) == text, (
        f"{path.name} is out of date: run python scripts/gen_docs.py (--check shows the diff)")


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_charts_exist(path):
    for command in gen_docs.image_commands(path.read_text(encoding="utf-8")):
        for png in gen_docs.image_outputs(command):
            assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} missing: run {command}"


def test_check_reports_a_stale_block(tmp_path, capsys):
    doc = (ROOT / "docs" / "results-h200.md").read_text(encoding="utf-8")
    stale = tmp_path / "stale.md"
    stale.write_text(doc.replace("int8-weight-only+compiled (9.07 µs", "int8-weight-only+compiled (99.9 µs", 1))
    assert gen_docs.main(["--check", str(stale)]) == 1
    assert "99.9 µs" in capsys.readouterr().out


def test_marker_without_its_command_above_is_an_error(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("```sh\nqbench report results/h200/seed.json\n```\n"
                   "<!-- BEGIN: qbench report results/h200/decode.json -->\n<!-- END -->\n")
    assert gen_docs.main(["--check", str(bad)]) == 2


def test_failing_command_is_an_error(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("```sh\nqbench report results/h200/missing.json\n```\n"
                   "<!-- BEGIN: qbench report results/h200/missing.json -->\n<!-- END -->\n")
    assert gen_docs.main(["--check", str(bad)]) == 2


# ---------------------------------------------------------------------------------------------
# Figures in prose (issue 12 item 6). Every number a sentence of the docs quotes from a committed
# result is recomputed here from that JSON: (page, the sentence fragment with {} where the figures
# go, a function returning those figures as the page prints them). The page's text, with its line
# breaks folded to single spaces, must contain the filled-in fragment, so a result re-run with other
# numbers, or a sentence edited to a number no file backs, fails here.

import json
import math
import statistics
from functools import lru_cache

from qbench.render.columns import fmt_us

RESULTS = ROOT / "results"


@lru_cache(maxsize=None)
def _json(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _row(name: str, scheme: str, m: int | None = None) -> dict:
    rows = [r for r in _json(name)["rows"] if r["scheme"] == scheme and (m is None or r["m"] == m)]
    assert len(rows) == 1, f"{name}: {len(rows)} rows of {scheme} M={m}"
    return rows[0]


def _us(name: str, scheme: str, method: str = "stream", m: int | None = None, stat: str = "median") -> float:
    return _row(name, scheme, m)["latency_us"][method][stat]


def _t(name: str, scheme: str, method: str = "stream", m: int | None = None) -> str:
    """A median as the tables print it (three significant digits)."""
    return fmt_us(_us(name, scheme, method, m))


def _kernel_us(name: str, scheme: str, m: int | None, *parts: str) -> float:
    """The summed µs of the row's kernels whose name contains any of ``parts``."""
    kernels = _row(name, scheme, m)["dispatch"]["kernels"]
    picked = [k["us"] for k in kernels if any(p in k["name"] for p in parts)]
    assert picked, f"{name} {scheme}: no kernel named {parts}"
    return sum(picked)


def _rel(name: str, scheme: str, m: int | None = None, digits: int = 2) -> str:
    return f"{_row(name, scheme, m)['error']['rel_fro']:.{digits}g}"


def _sweep(scheme: str) -> dict[int, float]:
    return {r["m"]: r["latency_us"]["stream"]["median"] for r in _json("h200/sweep.json")["rows"]
            if r["scheme"] == scheme}


@lru_cache(maxsize=None)
def _crossover() -> dict[str, dict]:
    from qbench.results import read_results
    from qbench.readers.report import crossover

    return {c["scheme"]: c for c in crossover(read_results(str(RESULTS / "h200/sweep.json")))}


@lru_cache(maxsize=None)
def _recommend(name: str, budget: float) -> dict[int, dict]:
    from qbench.readers.recommend import recommend
    from qbench.results import read_results

    return {e["m"]: e for e in recommend(read_results(str(RESULTS / name)), budget)["by_m"]}


def _summary(budget: float) -> dict[tuple[str, int], tuple[str, float]]:
    """Llama-3-8B shape -> (pick, bf16 time / pick time) per M, as ``recommend --summary`` prints."""
    out = {}
    for shape in ("q_o", "k_v", "gate_up", "down"):
        name = f"h200/llama3_8b_{shape}.json"
        for m, entry in _recommend(name, budget).items():
            pick = entry["pick"]
            out[shape, m] = (pick["scheme"], _us(name, "bf16", m=m) / pick["latency_us"])
    return out


def _ranges(values) -> str:
    return f"{fmt_us(min(values))}–{fmt_us(max(values))}"


def _up(percent: float) -> str:
    """A bound quoted as 'within X %': rounded up to one decimal, so it holds."""
    return f"{math.ceil(percent * 10) / 10:.1f}"


def _wall(name: str) -> str:
    return f"{_json(name)['wall_s']:.0f}"


def _stream_above_cold() -> list[tuple[str, str, int, str, float]]:
    """(file, scheme, M, bound, % above cold) of every row of the 2026-11-30 files whose stream
    median exceeds its cold median."""
    names = ["evidence/decode-2026-11-30", "small_batch", "prefill", "seed", "sweep",
             *(f"llama3_8b_{s}" for s in ("q_o", "k_v", "gate_up", "down"))]
    out = []
    for name in names:
        for r in _json(f"h200/{name}.json")["rows"]:
            stream = (r["latency_us"] or {}).get("stream")
            if stream and stream["median"] > r["latency_us"]["cold"]["median"]:
                out.append((name, r["scheme"], r["m"], r["roofline_bound"],
                            100 * (stream["median"] / r["latency_us"]["cold"]["median"] - 1)))
    return out


def _compute_bound_above_cold() -> tuple[str, str]:
    rows = [r for r in _stream_above_cold() if r[3] == "compute"]
    assert {r[2] for r in rows} <= {512, 1024}
    return str(len(rows)), f"{max(r[4] for r in rows):.0f}"


def _memory_bound_above_cold() -> tuple[str, ...]:
    rows = sorted((r for r in _stream_above_cold() if r[3] == "memory"), key=lambda r: r[4])
    assert [(r[0], r[1], r[2]) for r in rows] == [("llama3_8b_gate_up", "fp32", 16), ("llama3_8b_down", "fp32", 16)]
    return tuple(f"{r[4]:.1f}" for r in rows)


def _stream_cv_max() -> str:
    rows = _json("h200/evidence/repeatability-stream.json")["rows"]
    return _up(max(r['cv_pct'] for r in rows if r['method'] == 'stream' and r['cv_pct'] is not None))


def _cv(values) -> float:
    return 100 * statistics.stdev(values) / statistics.mean(values)


def _fp16_vs_bf16() -> tuple[str, ...]:
    fp16, bf16 = _sweep("fp16"), _sweep("bf16")
    wins = [m for m in fp16 if fp16[m] < bf16[m]]
    gaps = [abs(fp16[m] / bf16[m] - 1) * 100 for m in fp16]
    cross = _crossover()["fp16"]
    assert not cross["wins"]
    return (" and ".join(map(str, wins)), str(len(fp16) - len(wins)), f"{min(gaps):.1f}", f"{max(gaps):.0f}",
            ", ".join(map(str, cross["ties"][:-1])) + f" and {cross['ties'][-1]}", str(len(cross["losses"])))


def _copies(scheme: str) -> int:
    return _row(D, scheme)["latency_us"]["stream"]["copies"]


def _floor_pct(scheme: str) -> str:
    return f"{100 * _row(D, scheme)['hbm_floor_fraction']:.0f}"


def _crosscheck_stream() -> tuple[str, ...]:
    rows = _json("h200/evidence/crosscheck-stream.json")["stream_rows"]
    passing = [r for r in rows if r["pass"]]
    failing = [r for r in rows if not r["pass"]]
    assert len(failing) == 1 and failing[0]["scheme"] == "int8-weight-only+compiled" and failing[0]["m"] == 1
    return (str(len(passing)), str(len(rows)), _up(max(abs(r['ratio'] - 1) for r in passing) * 100),
            f"{failing[0]['ratio']:.2f}")


#: D: the 17-scheme decode run of 2026-11-30 that docs/methodology.md and docs/schemes.md analyse (kept
#: as their evidence); DC: the current decode file (26 schemes, 2026-12-01) that the README's headline reads.
D, S, P, SW = "h200/evidence/decode-2026-11-30.json", "h200/small_batch.json", "h200/prefill.json", "h200/sweep.json"
DC = "h200/decode.json"


def _pick_stability(name: str, scheme: str) -> tuple[str, ...]:
    """(runs ``scheme`` won, runs) of ``qbench recommend --max-rel-err 0.01`` at M = 1 over the runs
    the file holds (``qbench run --repeat``); "?" when another scheme is the pick."""
    from qbench.readers.common import group_results, open_results
    from qbench.readers.recommend import add_stability, recommend

    path = str(RESULTS / name)
    result = group_results([path], open_results([path]))[0]
    rec = recommend(result.doc, 0.01, "stream")
    add_stability(rec, [recommend(run, 0.01, "stream") for run in result.runs])
    pick = rec["by_m"][0]["pick"]
    return (str(pick["stability"]["picked"]), str(pick["stability"]["runs"])) if pick["scheme"] == scheme else ("?",)
MSLK = "fp8-dynamic[kernel_preference=mslk]"
FIGURES = [
    # README.md
    ("README.md", "the measured bandwidth ({} GB/s in this file)",
     lambda: (f"{_json(DC)['ceilings']['measured']['memory_gbps']:,.0f}",)),
    ("README.md", "no call can beat the HBM floor of {} µs; in a decode engine's graph it takes {} µs (`stream`)",
     lambda: (f"{_row(DC, 'bf16')['hbm_floor_us']:.1f}", _t(DC, "bf16"))),
    ("README.md", "(`cold`) pays {} µs, the same call in a graph on one weight (`warm`) reads its weight from L2 ({} µs",
     lambda: (_t(DC, "bf16", "cold"), _t(DC, "bf16", "warm"))),
    ("README.md", "(`eager`) reads {} µs, mostly Python and launch", lambda: (f"{_us(DC, 'bf16', 'eager'):.0f}",)),
    ("README.md", "(fp8-weight-only: {} µs)", lambda: (_t(DC, "fp8-weight-only"),)),
    ("README.md", "fp8-dynamic call runs {} µs on torch's kernels and {} µs on mslk's",
     lambda: (f"{_us(DC, 'fp8-dynamic'):.0f}", f"{_us(DC, MSLK):.0f}")),
    ("README.md", "tinygemm int4 up to M = {}, bitsandbytes nf4/fp4 and the compiled fp8/int8 weight-only schemes at M = {} alone",
     lambda: (str(_crossover()["int4-weight-only"]["wins"][-1]),
              "1" if all(_crossover()[s]["wins"] == [1] for s in ("nf4-bnb", "fp4-bnb", "fp8-weight-only+compiled",
                                                                    "int8-weight-only+compiled")) else "?")),
    ("README.md", "grows like a GEMV ({} µs at M = 512 against bf16's {})",
     lambda: (fmt_us(_sweep("int4-weight-only")[512]), fmt_us(_sweep("bf16")[512]))),
    ("README.md", "falls from {} µs at M = 1 to `weight_int8pack_mm` at {} µs from M = 2",
     lambda: (fmt_us(_sweep("int8-weight-only+compiled")[1]), fmt_us(_sweep("int8-weight-only+compiled")[2]))),
    ("README.md", "faster than bf16 at every M but {}, up to {}× ({} against {} µs at M = 1024), at rel_fro {}",
     lambda: (",".join(map(str, _crossover()[MSLK]["losses"] + _crossover()[MSLK]["ties"])),
              f"{_crossover()[MSLK]['best_speedup']:.2f}", fmt_us(_sweep(MSLK)[1024]), fmt_us(_sweep("bf16")[1024]),
              _rel(SW, MSLK, 1024))),
    ("README.md", "int8-weight-only+compiled, {}–{}× faster than bf16 ({} against {} µs on k_v/v_proj, {} against {} µs on down_proj)",
     lambda: (f"{min(v[1] for k, v in _summary(0.01).items() if k[1] == 1):.2f}",
              f"{max(v[1] for k, v in _summary(0.01).items() if k[1] == 1):.2f}",
              _t("h200/llama3_8b_k_v.json", "int8-weight-only+compiled", m=1), _t("h200/llama3_8b_k_v.json", "bf16", m=1),
              _t("h200/llama3_8b_down.json", "int8-weight-only+compiled", m=1), _t("h200/llama3_8b_down.json", "bf16", m=1))),
    ("README.md", "except fp16's {}× on gate_up at M = 512", lambda: (f"{_summary(0.01)['gate_up', 512][1]:.2f}",)),
    ("README.md", "int8-bnb {} µs `cpu` against {} µs `stream` on a {}-core machine",
     lambda: (f"{_us('cpu/decode.json', 'int8-bnb', 'cpu'):.0f}", f"{_us('cpu/decode.json', 'int8-bnb'):.0f}",
              str(_json("cpu/decode.json")["env"]["cpu_count"]))),
    # (README's "Speed of qbench itself" figures: tests/test_docs_speed.py::test_readme_speed_figures)
    # docs/methodology.md
    ("docs/methodology.md", "column of `results/h200/seed.json` shows {}, {} and {}",
     lambda: tuple(f"{r['arithmetic_intensity']:.1f}" for r in _json("h200/seed.json")["rows"])),
    ("docs/methodology.md", "{} stored bytes ({} bits per weight), bf16 X and Y: `Q_min` = {} + {} + {} bytes",
     lambda: (lambda r: (f"{r['stored_bytes']:,}", f"{r['bits_per_weight']:.2f}", f"{r['m'] * r['k'] * 2:,}",
                         f"{r['stored_bytes']:,}", f"{r['min_bytes'] - r['stored_bytes'] - r['m'] * r['k'] * 2:,}"))(
         _row(D, "int4-weight-only"))),
    ("docs/methodology.md", "(`prefill.json` measured {} TOPS int8",
     lambda: (f"{_json(P)['ceilings']['measured']['tflops']['int8']:.0f}",)),
    ("docs/methodology.md", "(`warm`: bf16 M = 1, {} µs in `decode-2026-11-30.json`) measures L2, and a host clock (`eager`: {} µs)",
     lambda: (_t(D, "bf16", "warm"), _t(D, "bf16", "eager"))),
    ("docs/methodology.md", "the number that matches the deployment (bf16 {} µs)", lambda: (_t(D, "bf16"),)),
    ("docs/methodology.md", "bf16 4096 × 4096 gets {} copies ({} MiB), int4 tinygemm {}, nf4 {}",
     lambda: (str(_copies("bf16")), f"{_copies('bf16') * _row(D, 'bf16')['stored_bytes'] / 2**20:.0f}",
              str(_copies("int4-weight-only")), str(_copies("nf4-bnb")))),
    ("docs/methodology.md", "bf16 M = 1 streams at {} % of the floor's rate ({} µs floor, {} µs), int4 tinygemm at {} %",
     lambda: (_floor_pct("bf16"), f"{_row(D, 'bf16')['hbm_floor_us']:.1f}", _t(D, "bf16"), _floor_pct("int4-weight-only"))),
    ("docs/methodology.md", "The 8192 × 8192 target of the issue (cold <= 1.15 × stream) holds: {} / {} = {}.",
     lambda: (lambda L: (fmt_us(L["cold_read_sleep"]), fmt_us(L["graph_stream"]), f"{L['cold_read_sleep'] / L['graph_stream']:.2f}"))(
         next(L for L in _json("h200/evidence/cold-experiment.json")["layers"] if (L["k"], L["n"]) == (8192, 8192)))),
    ("docs/methodology.md", "The new `decode-2026-11-30.json` reads bf16 cold {} µs against stream {} µs",
     lambda: (_t(D, "bf16", "cold"), _t(D, "bf16"))),
    ("docs/methodology.md", "int8-bnb M = 1 read {}, {}, {}, {} and {} µs in five runs",
     lambda: tuple(f"{v:.0f}" for r in _json("h200/evidence/repeatability.json")["rows"]
                   if r["scheme"] == "int8-bnb" and r["method"] == "cold" for v in r["medians_us"])),
    ("docs/methodology.md", "a plain loop with a longer sleep read {} µs (five repeats) and without a sleep {} µs",
     lambda: (f"{min(_json('h200/evidence/cold-experiment.json')['host_sync_bnb']['sleep']):.0f}–"
              f"{max(_json('h200/evidence/cold-experiment.json')['host_sync_bnb']['sleep']):.0f}",
              f"{min(_json('h200/evidence/cold-experiment.json')['host_sync_bnb']['nosleep_synced']):.0f}–"
              f"{max(_json('h200/evidence/cold-experiment.json')['host_sync_bnb']['nosleep_synced']):.0f}")),
    ("docs/methodology.md", "int8-bnb read {}, {} and {} µs cold and w8a8-dynamic {}, {} and {} µs, while every capturable "
                            "row repeated within {} % (CV",
     lambda: (*(f"{v:.0f}" for s in ("int8-bnb", "w8a8-dynamic") for r in _json("h200/evidence/repeatability-stream.json")["rows"]
                if r["scheme"] == s and r["method"] == "cold" for v in r["medians_us"]), _stream_cv_max())),
    ("docs/methodology.md", "torch path `stream` {} µs, mslk {} µs (bf16 {} µs)",
     lambda: (_t(D, "fp8-dynamic"), _t(D, MSLK), _t(D, "bf16"))),
    ("docs/methodology.md", "{} compute-bound rows (M = 512 or 1024 on the large shapes, mostly the float schemes) read up to {} %",
     _compute_bound_above_cold),
    ("docs/methodology.md", "two memory-bound fp32 rows at M = 16 (`llama3_8b_gate_up.json` {} %, `llama3_8b_down.json` {} %)",
     _memory_bound_above_cold),
    ("docs/methodology.md", "until at least `min_reps` ({}) are in", lambda: (str(_json(D)["scenario"]["timing"]["min_reps"]),)),
    ("docs/methodology.md", "`budget_s` ({} s in the H200 scenarios)", lambda: (f"{_json(D)['scenario']['timing']['budget_s']:g}",)),
    ("docs/methodology.md", "`max_reps` ({}) samples are in. Warm-up calls ({}) come first",
     lambda: (str(_json(D)["scenario"]["timing"]["max_reps"]), str(_json(D)["scenario"]["timing"]["warmup"]))),
    ("docs/methodology.md", "would read as wins at M = {} and losses at the other {} M values, by medians {}–{} % apart; "
                            "with it, M = {} are `same` and fp16 is slower at the other {}", _fp16_vs_bf16),
    ("docs/methodology.md", "int8-weight-only+compiled ({} µs, rel_fro {}) is picked over the tied fp8-weight-only+compiled (rel_fro {})",
     lambda: (lambda e: (fmt_us(e["pick"]["latency_us"]), f"{e['pick']['rel_fro']:.2g}", _rel(SW, "fp8-weight-only+compiled", 1))
              if e["pick"]["scheme"] == "int8-weight-only+compiled" and "fp8-weight-only+compiled" in e["pick"]["ties"]
              else ("?", "?", "?"))(_recommend(SW, 0.05)[1])),
    ("docs/methodology.md", "({} µs each at M = 16)",
     lambda: (fmt_us(_sweep("bf16")[16]),) if fmt_us(_sweep("bf16")[16]) == fmt_us(_sweep("fp16")[16]) else ("?",)),
    ("docs/methodology.md", "(`decode-2026-11-30.json` at 0.01: `{}` for bf16)",
     lambda: tuple(o["reason"] for o in _recommend(D, 0.01)[1]["others"] if o["scheme"] == "bf16")),
    ("docs/methodology.md", "int8-bnb's {} B and torchao int8's {} B",
     lambda: (f"{_row(D, 'int8-bnb')['stored_bytes']:,}", f"{_row(D, 'int8-weight-only')['stored_bytes']:,}")),
    ("docs/methodology.md", "int8-bnb ({} µs `cold`, rel_fro {})", lambda: (_t(D, "int8-bnb", "cold"), _rel(D, "int8-bnb"))),
    ("docs/methodology.md", "metadata than int8-weight-only+compiled ({} µs, {})",
     lambda: (_t(D, "int8-weight-only+compiled", "cold"), _rel(D, "int8-weight-only+compiled"))),
    ("docs/methodology.md", "(nf4-bnb's {} MiB in `sweep.json`)", lambda: (f"{_row(SW, 'nf4-bnb', 1)['stored_bytes'] / 2**20:.2f}",)),
    ("docs/methodology.md", "fp8-weight-only stores half of bf16's bytes and runs {} µs per call streamed against bf16's {} µs",
     lambda: (_t(D, "fp8-weight-only"), _t(D, "bf16"))),
]
FIGURES += [
    # docs/schemes.md
    ("docs/schemes.md", "stored bytes over the measured {} GB/s", lambda: (f"{_json(D)['ceilings']['measured']['memory_gbps']:.0f}",)),
    ("docs/schemes.md", "`gemv2T_kernel_val` at M = 1 ({} µs `stream`, {} µs kernel; the HBM floor for its 64 MiB is {} µs)",
     lambda: (_t(D, "fp32"), _t(D, "fp32", "kernel"), f"{_row(D, 'fp32')['hbm_floor_us']:.1f}")),
    ("docs/schemes.md", "FP32 peak ({} µs `stream`, {} µs cold, against a {} µs roofline; `prefill.json`)",
     lambda: (_t(P, "fp32"), _t(P, "fp32", "cold"), f"{_row(P, 'fp32')['roofline_us']:.0f}")),
    ("docs/schemes.md", "The reference for accuracy (rel_fro {} at M = 1)", lambda: (_rel(D, "fp32", digits=3),)),
    ("docs/schemes.md", "({} vs {} µs `stream`, {} vs {} µs cold; `decode-2026-11-30.json`) and agree to the bit (rel_fro {} for both)",
     lambda: (_t(D, "tf32"), _t(D, "fp32"), _t(D, "tf32", "cold"), _t(D, "fp32", "cold"), _rel(D, "tf32", digits=3))
     if _rel(D, "tf32", digits=6) == _rel(D, "fp32", digits=6) else ("?",) * 5),
    ("docs/schemes.md", "{} µs `stream` at M = 512 against fp32's {} µs", lambda: (_t(P, "tf32"), _t(P, "fp32"))),
    ("docs/schemes.md", "(rel_fro {} vs bf16's {}, `decode-2026-11-30.json`). It streams within {} % of bf16 ({} vs {} µs at M = 1)",
     lambda: (f"{_row(D, 'fp16')['error']['rel_fro']:.1e}", f"{_row(D, 'bf16')['error']['rel_fro']:.1e}",
              f"{math.ceil(100 * (_us(D, 'fp16') / _us(D, 'bf16') - 1))}", _t(D, "fp16"), _t(D, "bf16"))),
    ("docs/schemes.md", "calls fp16 slower at {} of {} M values, by at most {} %, and the same at the other {}",
     lambda: (str(len(_crossover()["fp16"]["losses"])), str(len(_sweep("fp16"))),
              f"{max(_sweep('fp16')[m] / _sweep('bf16')[m] - 1 for m in _crossover()['fp16']['losses']) * 100:.0f}",
              str(len(_crossover()["fp16"]["ties"])))),
    ("docs/schemes.md", "At M = 1 `stream` ({} µs) is {}× the HBM floor ({} µs; `hbm_floor_fraction` {}, `decode-2026-11-30.json`): the split-K GEMV alone ({} µs)",
     lambda: (_t(D, "bf16"), f"{_us(D, 'bf16') / _row(D, 'bf16')['hbm_floor_us']:.1f}", f"{_row(D, 'bf16')['hbm_floor_us']:.1f}",
              f"{_row(D, 'bf16')['hbm_floor_fraction']:.2f}", f"{_kernel_us(D, 'bf16', None, 'splitK_TNT'):.1f}")),
    ("docs/schemes.md", "and the reduce kernel adds {} µs. One isolated call (cold, {} µs)",
     lambda: (f"{_kernel_us(D, 'bf16', None, 'splitKreduce'):.1f}", _t(D, "bf16", "cold"))),
    ("docs/schemes.md", "the float32 → bf16 copy; {} µs together at M = 1)",
     lambda: (f"{_kernel_us(D, 'fp8-weight-only', None, 'elementwise_kernel'):.0f}",)),
    ("docs/schemes.md", "`triton_red_fused__to_copy_mm_mul_t_0` at M = 1 ({} µs)",
     lambda: (f"{_kernel_us(D, 'fp8-weight-only+compiled', None, 'triton_red'):.1f}",)),
    ("docs/schemes.md", "(`triton_poi_fused__to_copy_mul_t_0`, {} µs)",
     lambda: (f"{_kernel_us(S, 'fp8-weight-only+compiled', None, 'triton_poi'):.1f}",)),
    ("docs/schemes.md", "fused at M = 1 only ({} µs `stream`) and `dequantize+gemm` from M = 2 to 1024 ({} µs `stream`",
     lambda: (fmt_us(_sweep("fp8-weight-only+compiled")[1]),
              _ranges([v for m, v in _sweep("fp8-weight-only+compiled").items() if m > 1]))),
    ("docs/schemes.md", "{} µs `stream` at M = 1 against {} µs compiled and bf16's {} µs (cold {}, {} and {} µs; `decode-2026-11-30.json`)",
     lambda: (_t(D, "fp8-weight-only"), _t(D, "fp8-weight-only+compiled"), _t(D, "bf16"), _t(D, "fp8-weight-only", "cold"),
              _t(D, "fp8-weight-only+compiled", "cold"), _t(D, "bf16", "cold"))),
    ("docs/schemes.md", "128 × 128 tiles even at M = 1: {} µs) plus eight small aten kernels",
     lambda: (f"{_kernel_us(D, 'fp8-dynamic', None, 'qqtst'):.1f}",)),
    ("docs/schemes.md", "two copies; {} µs together at M = 1)",
     lambda: (f"{_us(D, 'fp8-dynamic', 'kernel') - _kernel_us(D, 'fp8-dynamic', None, 'qqtst'):.1f}",)),
    ("docs/schemes.md", "`_kernel_quantize_fp8_row` ({} µs at M = 1)", lambda: (f"{_kernel_us(D, MSLK, None, 'quantize_fp8_row'):.1f}",)),
    ("docs/schemes.md", "`cutlass_mslk::device_kernel<gemm::kernel::GemmUniversal>`, {} µs)", lambda: (f"{_kernel_us(D, MSLK, None, 'cutlass_mslk'):.1f}",)),
    ("docs/schemes.md", "`stream` {} µs at M = 1 against a {} µs kernel sum, {}× bf16's {} µs, and slower than bf16 at every M of the sweep ({} µs)",
     lambda: (_t(D, "fp8-dynamic"), _t(D, "fp8-dynamic", "kernel"), f"{_us(D, 'fp8-dynamic') / _us(D, 'bf16'):.1f}", _t(D, "bf16"),
              _ranges(_sweep("fp8-dynamic").values()) if len(_crossover()["fp8-dynamic"]["losses"]) == 11 else "?")),
    ("docs/schemes.md", "Eager {} µs (a {} µs launch overhead); cold {} µs",
     lambda: (_t(D, "fp8-dynamic", "eager"), f"{_row(D, 'fp8-dynamic')['launch_overhead_us']:.0f}", _t(D, "fp8-dynamic", "cold"))),
    ("docs/schemes.md", "(rel_fro {} vs {} at M = 1, {} and {} for both at M = 16 and 512)",
     lambda: (_rel(D, "fp8-dynamic", digits=3), _rel(D, MSLK, digits=3), _rel(S, MSLK, digits=3), _rel(P, MSLK, digits=3))
     if (_rel(S, MSLK, digits=3), _rel(P, MSLK, digits=3)) == (_rel(S, "fp8-dynamic", digits=3), _rel(P, "fp8-dynamic", digits=3))
     else ("?",) * 4),
    *[("docs/schemes.md", f"| {m} (`{Path(name).name}`) | {{}} | {{}} | {{}} | {{}} / {{}} | {{}} / {{}} |",
       lambda name=name: (_t(name, "fp8-dynamic"), _t(name, MSLK), _t(name, "bf16"), _t(name, "fp8-dynamic", "kernel"),
                          _t(name, MSLK, "kernel"), _t(name, "fp8-dynamic", "cold"), _t(name, MSLK, "cold")))
      for m, name in ((1, D), (16, S), (512, P))],
    ("docs/schemes.md", "mslk beats bf16 at every M of the sweep but M = {} ({} µs; {} vs {} µs at M = 64)",
     lambda: (",".join(map(str, _crossover()[MSLK]["losses"])), _ranges(_sweep(MSLK).values()), fmt_us(_sweep(MSLK)[64]),
              fmt_us(_sweep("bf16")[64]))),
    ("docs/schemes.md", "(fp8-weight-only+compiled {} µs, int8-weight-only+compiled {} µs)",
     lambda: (_t(D, "fp8-weight-only+compiled"), _t(D, "int8-weight-only+compiled"))),
    ("docs/schemes.md", "{} µs at M = 1 (a {} µs launch overhead), {} µs at M = 16 and 512",
     lambda: (_t(D, MSLK, "eager"), f"{_row(D, MSLK)['launch_overhead_us']:.0f}", _t(S, MSLK, "eager"))
     if _t(S, MSLK, "eager") == _t(P, MSLK, "eager") else ("?",) * 3),
    ("docs/schemes.md", "a {} µs int8 → bf16 copy of the weight", lambda: (f"{_kernel_us(D, 'int8-weight-only', None, 'direct_copy'):.0f}",)),
    ("docs/schemes.md", "`triton_red_fused__to_copy_mm_mul_t_view_0` ({} µs)",
     lambda: (f"{_kernel_us(D, 'int8-weight-only+compiled', None, 'triton_red'):.1f}",)),
    ("docs/schemes.md", "`weight_int8pack_mm_kernel`, {} µs at M = 16 and {} µs at M = 512",
     lambda: (f"{_kernel_us(S, 'int8-weight-only+compiled', None, 'weight_int8pack'):.0f}",
              f"{_kernel_us(P, 'int8-weight-only+compiled', None, 'weight_int8pack'):,.0f}")),
    ("docs/schemes.md", "the fused Triton kernel at M = 1 only ({} µs `stream`): from M = 2 ({} µs) to M = 1024 ({} ms)",
     lambda: (f"{_sweep('int8-weight-only+compiled')[1]:.1f}", fmt_us(_sweep("int8-weight-only+compiled")[2]),
              f"{_sweep('int8-weight-only+compiled')[1024] / 1000:.1f}")),
    ("docs/schemes.md", "0.01 error budget ({} µs `stream`, `decode-2026-11-30.json`) and the worst row of the prefill file at M = 512 ({} ms `stream`, {}× bf16's {} µs)",
     lambda: (_t(D, "int8-weight-only+compiled"), f"{_us(P, 'int8-weight-only+compiled') / 1000:.1f}",
              f"{_us(P, 'int8-weight-only+compiled') / _us(P, 'bf16'):.0f}", _t(P, "bf16"))),
    ("docs/schemes.md", "Eager at M = 512 is {} µs", lambda: (_t(P, "int8-weight-only"),)),
    ("docs/schemes.md", "(`gemvx::kernel`, {} µs) behind a {} µs float copy of the weight. At M = 16 cuBLAS's `gemmSN_NN_kernel` ({} µs). "
                        "At M = 512 the CUTLASS int8 tensor-core GEMM `cutlass_80_wmma_tensorop_i161616gemm_s8...` ({} µs)",
     lambda: (f"{_kernel_us(D, 'w8a8-dynamic', None, 'gemvx'):.1f}", f"{max(k['us'] for k in _row(D, 'w8a8-dynamic')['dispatch']['kernels']):.0f}",
              f"{_kernel_us(S, 'w8a8-dynamic', None, 'gemmSN_NN'):.1f}", f"{_kernel_us(P, 'w8a8-dynamic', None, 'i161616gemm'):.0f}")),
    ("docs/schemes.md", "({} `Memcpy DtoH` per call at M = 1, {} at M = 16 and 512)",
     lambda: tuple(f"{sum(k['count'] for k in _row(n, 'w8a8-dynamic')['dispatch']['kernels'] if 'Memcpy DtoH' in k['name']):g}"
                   for n in (D, S))),
    ("docs/schemes.md", "the cold time is {} ms at every M, set by the host syncs",
     lambda: (f"{min(r['latency_us']['cold']['median'] for r in _json(SW)['rows'] if r['scheme'] == 'w8a8-dynamic') / 1000:.1f}–"
              f"{max(r['latency_us']['cold']['median'] for r in _json(SW)['rows'] if r['scheme'] == 'w8a8-dynamic') / 1000:.1f}",)),
    ("docs/schemes.md", "{} µs at M = 1, {} µs at M = 16, {} µs at M = 512, against eager {}, {} and {} µs and a kernel sum of {}, {} and {} µs",
     lambda: tuple(_t(n, "w8a8-dynamic", meth) for meth in ("cold", "eager", "kernel") for n in (D, S, P))),
    ("docs/schemes.md", "(the int8 GEMM, {} µs at M = 1)", lambda: (f"{_kernel_us(D, 'int8-bnb', None, 'i16832gemm'):.1f}",)),
    ("docs/schemes.md", "{} µs at M = 1 (p10–p90 {}–{} µs) against a {} µs kernel sum and a {} µs eager time (`decode-2026-11-30.json`); the sweep reads {} µs cold. rel_fro {}",
     lambda: (_t(D, "int8-bnb", "cold"), f"{_us(D, 'int8-bnb', 'cold', stat='p10'):.0f}", f"{_us(D, 'int8-bnb', 'cold', stat='p90'):.0f}",
              _t(D, "int8-bnb", "kernel"), _t(D, "int8-bnb", "eager"),
              _ranges([r["latency_us"]["cold"]["median"] for r in _json(SW)["rows"] if r["scheme"] == "int8-bnb"]), _rel(D, "int8-bnb"))),
    ("docs/schemes.md", "4.25 bits per weight (the metadata is {} % of the bytes)",
     lambda: (f"{100 * _row(D, 'int4-weight-only')['metadata_bytes'] / _row(D, 'int4-weight-only')['stored_bytes']:.1f}",)),
    ("docs/schemes.md", "eager adds a {} µs device-to-device copy", lambda: (f"{_kernel_us(D, 'int4-weight-only', None, 'DtoD'):.1f}",)),
    ("docs/schemes.md", "{} µs `stream` at M = 1, {} at 64, {} at 1024 in the sweep (bf16: {}, {}, {}), so it beats bf16 only up to M = {} "
                        "(compiled: up to M = {}, the same at M = {})",
     lambda: (*(fmt_us(_sweep(s)[m]) for s in ("int4-weight-only", "bf16") for m in (1, 64, 1024)),
              str(_crossover()["int4-weight-only"]["wins"][-1]), str(_crossover()["int4-weight-only+compiled"]["wins"][-1]),
              ",".join(map(str, _crossover()["int4-weight-only+compiled"]["ties"])))),
    ("docs/schemes.md", "({} µs `stream` eager, {} µs compiled: the two fastest rows of `decode-2026-11-30.json`; cold {} and {} µs)",
     lambda: (_t(D, "int4-weight-only"), _t(D, "int4-weight-only+compiled"), _t(D, "int4-weight-only", "cold"),
              _t(D, "int4-weight-only+compiled", "cold"))
     if {r["scheme"] for r in sorted(_json(D)["rows"], key=lambda r: r["latency_us"]["stream"]["median"]
                                     if r["latency_us"].get("stream") else 1e9)[:2]} == {"int4-weight-only", "int4-weight-only+compiled"}
     else ("?",) * 4),
    ("docs/schemes.md", "{} µs `stream` at M = 512 against bf16's {} µs; tinygemm is built for small M. Even at M = 1 it streams at {} % of the "
                        "HBM floor's rate ({} µs floor; {} % compiled). rel_fro {}",
     lambda: (_t(P, "int4-weight-only"), _t(P, "bf16"), _floor_pct("int4-weight-only"), f"{_row(D, 'int4-weight-only')['hbm_floor_us']:.1f}",
              _floor_pct("int4-weight-only+compiled"), _rel(D, "int4-weight-only", digits=3))),
    ("docs/schemes.md", "a multiply by the scales ({} µs together at M = 1)",
     lambda: (f"{_kernel_us(D, 'int4-intx', None, 'elementwise_kernel'):.0f}",)),
    ("docs/schemes.md", "runs {} µs `stream` at M = 1 (cold {} µs): useful as the portable reference of a 4-bit group-wise error (rel_fro {})",
     lambda: (_t(D, "int4-intx"), _t(D, "int4-intx", "cold"), _rel(D, "int4-intx", digits=3))),
    ("docs/schemes.md", "fused `gemm_4bit_simt` ({} µs)", lambda: (f"{_kernel_us(D, 'nf4-bnb', None, 'gemm_4bit_simt'):.1f}",)),
    ("docs/schemes.md", "({} µs kernel at M = 4; slower than bf16 from M = 2, {} vs {} µs `stream`)",
     lambda: (f"{_row(SW, 'nf4-bnb', 4)['latency_us']['kernel']['median']:.1f}", fmt_us(_sweep("nf4-bnb")[2]), fmt_us(_sweep("bf16")[2]))),
    ("docs/schemes.md", "({} µs `stream` against {}; cold {} µs), with the lowest 4-bit error (rel_fro {})",
     lambda: (_t(D, "nf4-bnb"), _t(D, "int4-weight-only"), _t(D, "nf4-bnb", "cold"), _rel(D, "nf4-bnb"))),
    ("docs/schemes.md", "At M = 512 it costs {}× bf16 ({} vs {} µs `stream`)",
     lambda: (f"{_us(P, 'nf4-bnb') / _us(P, 'bf16'):.0f}", _t(P, "nf4-bnb"), _t(P, "bf16"))),
    ("docs/schemes.md", "nf4-bnb's speed at M = 1 ({} µs `stream` for both); at M = 16 and 512 a few µs slower ({} vs {}, {} vs {} µs), "
                        "its dequantize kernel taking {} µs against {}. Larger error (rel_fro {} vs {})",
     lambda: (_t(D, "fp4-bnb") if _t(D, "fp4-bnb") == _t(D, "nf4-bnb") else "?", _t(S, "fp4-bnb"), _t(S, "nf4-bnb"), _t(P, "fp4-bnb"),
              _t(P, "nf4-bnb"), f"{_kernel_us(S, 'fp4-bnb', None, 'kDequantizeBlockwise<__nv_bfloat16'):.1f}",
              f"{_kernel_us(S, 'nf4-bnb', None, 'kDequantizeBlockwise<__nv_bfloat16'):.1f}", _rel(D, "fp4-bnb", digits=3), _rel(D, "nf4-bnb"))),
    # docs/experiments.md: the figures of the evidence files still in the tree (the others are quoted
    # from files in git history, checked by this test at commit 4090ed3)
    ("docs/experiments.md", "plain-torch graph of copies, {} of {} pairs within {} %; int8-weight-only+compiled M = 1 {}", _crosscheck_stream),
    ("docs/experiments.md", "stream` CV <= {} % on every capturable row; the host-syncing rows' cold scatters (CV {} %",
     lambda: (_stream_cv_max(),
              "–".join(f"{f(r['cv_pct'] for r in _json('h200/evidence/repeatability-stream.json')['rows'] if r['method'] == 'cold' and r['scheme'] in ('int8-bnb', 'w8a8-dynamic')):.0f}"
                       for f in (min, max)))),
    ("docs/experiments.md", "int4-weight-only at M = 1 cold read {} µs against do_bench's {} µs (ratio {}); every other pair within {} %",
     lambda: (lambda rows: (f"{rows[0]['ours_us']:.1f}", f"{rows[0]['triton_us']:.1f}", f"{rows[0]['ratio']:.2f}",
                            _up(max(abs(r['ratio'] - 1) for r in rows[1:]) * 100)))(
         sorted(_json("h200/evidence/crosscheck-first-run.json")["rows"], key=lambda r: abs(r["ratio"] - 1), reverse=True))),
    # docs/results-h200.md: the current decode file
    ("docs/results-h200.md", "`w8a8-dynamic+compiled` is skipped at M = 1 (`torch._int_mm` refuses M <= 16",
     lambda: () if [(r["scheme"], r["status"]) for r in _json(DC)["rows"] if r["status"] != "ok"]
     == [("w8a8-dynamic+compiled", "skipped")] and len({r["scheme"] for r in _json(DC)["rows"]}) == 26 else ("?",)),
    ("docs/results-h200.md", "(`repeats`), so `qbench recommend` reports how often its pick won ({} of {} runs for "
                             "int8-weight-only-gemlite at rel_fro ≤ 0.01",
     lambda: _pick_stability(DC, "int8-weight-only-gemlite")),
    # docs/testing.md
    ("docs/testing.md", "the old int8 metadata (8,192 B instead of {} B)", lambda: (f"{_row(D, 'int8-weight-only')['metadata_bytes']:,}",)),
]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("page,fragment,figures", FIGURES, ids=[f"{p}:{f[:48]}" for p, f, _ in FIGURES])
def test_figure_in_prose_matches_its_result_file(page, fragment, figures):
    values = figures()
    assert "?" not in values, f"{page}: the result files no longer support the claim around {fragment!r}"
    expected = _flat(fragment.format(*values))
    assert expected in _flat((ROOT / page).read_text(encoding="utf-8")), (
        f"{page} should say {expected!r} (recomputed from results/); fix the sentence or the check")


def test_methodology_tables_are_generated():
    text = (ROOT / "docs" / "methodology.md").read_text(encoding="utf-8")
    for command in ("python scripts/docs_tables.py ceilings results/h200/evidence/decode-2026-11-30.json",
                    "python scripts/docs_tables.py cold-experiment results/h200/evidence/cold-experiment.json"):
        assert f"<!-- BEGIN: {command} -->" in text


def test_figure_check_fails_on_a_stale_number():
    """The check reads the page, not the fragment: a figure edited away from its file fails it."""
    page, fragment, figures = FIGURES[1]
    text = _flat((ROOT / page).read_text(encoding="utf-8"))
    right = _flat(fragment.format(*figures()))
    assert right in text and right.replace("7.9 µs", "7.8 µs") not in text
