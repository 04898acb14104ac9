"""The figures in prose of docs/speed.md, recomputed from the committed files they cite."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEED = ROOT / "results" / "h200" / "evidence" / "speed"
TEXT = " ".join((ROOT / "docs" / "speed.md").read_text().split())


def _load(name: str) -> dict:
    return json.loads((SPEED / name).read_text())


def test_wall_times_and_scheme_count():
    old, new = _load("per-scheme-imports-1.json"), _load("preload-1.json")
    assert f"fell from {old['wall_s']:.0f} s to {new['wall_s']:.0f} s on the same machine" in TEXT
    assert old["env"]["gpu_uuid"] == new["env"]["gpu_uuid"]  # "same machine"
    assert old["workers"] == {"design": "one process per scheme", "preloaded": ["torch"], "ahead": 1}
    assert new["workers"] == {"design": "one process per scheme", "preloaded": ["qbench._preload"], "ahead": 6}
    schemes = {r["scheme"] for r in new["rows"]}
    assert len(schemes) == 26 and "decode scenario now has 26 schemes" in TEXT


def test_probe_facts():
    probe = {r["package"]: r for r in _load("probe-preload.json")["results"]}
    assert f"({probe['qbench._preload']['import_s']:.1f} s of imports on the H200 host after torch's own" in TEXT
    assert probe["qbench._preload"]["fork_safe"] and probe["-"]["fork_safe"]
    assert not probe["torchao"]["cuda_initialized_after_import"] and probe["torchao"]["forked_child_exit"] != 0
    assert probe["bitsandbytes"]["cuda_initialized_after_import"] and probe["gemlite"]["cuda_initialized_after_import"]
    assert "A child forked after `import torchao` fails its matmul" in TEXT


def test_the_one_row_that_moved_only_between_runners():
    """int4-weight-only: faster with the new runner (compare's p10-p90 rule), 'same' between the two
    old-runner runs; fp8-dynamic[kernel_preference=mslk] moved in both compares, so it is not named."""
    def med(doc, scheme):
        return {r["scheme"]: r for r in doc["rows"]}[scheme]["latency_us"]["stream"]

    old, new, first = _load("per-scheme-imports-1.json"), _load("preload-1.json"), _load("first-per-scheme-imports.json")
    a, b, f = (med(d, "int4-weight-only") for d in (old, new, first))
    assert b["p90"] < a["p10"]  # faster, no overlap
    assert not (a["p90"] < f["p10"] or f["p90"] < a["p10"])  # the two old runs overlap
    a, f = med(old, "fp8-dynamic[kernel_preference=mslk]"), med(first, "fp8-dynamic[kernel_preference=mslk]")
    assert f["p90"] < a["p10"]  # moved between the two old runs too
    assert "the runners and not between the two old-runner runs: int4-weight-only (tinygemm), faster with the new runner" in TEXT


def test_cpu_figures():
    cpu = ROOT / "results" / "cpu" / "evidence" / "speed"
    new = [json.loads((cpu / f"preload-{i}.json").read_text()) for i in (1, 2, 3)]
    old = json.loads((cpu / "per-scheme-imports-1.json").read_text())
    walls = sorted(round(d["wall_s"]) for d in new)
    assert f"Preloading takes decode from {old['wall_s']:.0f} s to {walls[0]}-{walls[-1]} s" in TEXT
    assert old["workers"]["ahead"] == 0 and old["workers"]["preloaded"] == ["torch"]
    assert all(d["workers"] == {"design": "one process per scheme", "preloaded": ["qbench._preload"], "ahead": 0}
               for d in new)
    assert old["env"]["source_digest"] == new[0]["env"]["source_digest"]  # the same qbench code
    ran = {r["scheme"] for r in new[0]["rows"] if r["status"] == "ok"}
    assert len(ran) == 13 and "Only 13 of the 26 schemes run on a CPU" in TEXT
    fp8 = next(r for r in new[0]["rows"] if r["scheme"] == "fp8-weight-only")
    ms = fp8["latency_us"]["cpu"]["median"] / 1000
    spent = fp8["worker_phases_s"]["after_go"]
    assert f"fp8-weight-only takes {ms:.0f} ms per call on this CPU" in TEXT
    assert f"cost {spent:.0f} s of the {new[0]['wall_s']:.0f} s" in TEXT


def test_cpu_block_timing_figures():
    import statistics

    cpu = ROOT / "results" / "cpu" / "evidence" / "speed"

    def medians(name):
        d = json.loads((cpu / name).read_text())
        return {r["scheme"]: r["latency_us"]["cpu"]["median"] for r in d["rows"] if r["status"] == "ok"}, d

    timer = [medians(f"preload-{i}.json")[0] for i in (1, 2, 3)]
    blocks, docs = zip(*(medians(f"block-timing-{i}.json") for i in (1, 2, 3)))
    walls = sorted(round(d["wall_s"]) for d in docs)
    assert f"decode takes {walls[0]}-{walls[-1]} s (`block-timing-*`), **under the issue's CPU target of 40 s**" in TEXT
    assert walls[-1] <= 40
    assert all(d["env"]["git"] == {"commit": docs[0]["env"]["git"]["commit"], "dirty": False} for d in docs)
    move = {}
    for s in timer[0]:
        a, b = statistics.median(t[s] for t in timer), statistics.median(t[s] for t in blocks)
        move[s] = (max(a / b, b / a), a, b)
    odd = "int8-weight-only+compiled"
    worst = max(v[0] for s, v in move.items() if s != odd)
    assert f"moves by at most {round((worst - 1) * 100)} % between the two timers" in TEXT
    _, a, b = move[odd]
    lo, hi = min(t[odd] for t in blocks), max(t[odd] for t in blocks)
    assert f"except {odd} ({a:.0f} to {b:.0f} µs), whose own three block-timing runs scatter from {lo:.0f} to {hi:.0f} µs" in TEXT


# ---- the second session of 2026-12-01: tuning cache, Inductor before the go, forkserver first ----

CALLS = SPEED / "2026-12-01"


def _runs(call: str, folder: str, design: str = "preload", n: int = 4) -> list[dict]:
    return [json.loads((CALLS / call / folder / f"{design}-{i}.json").read_text()) for i in range(1, n + 1)]


def _per_scheme(doc: dict) -> list[dict]:
    seen, out = set(), []
    for row in doc["rows"]:
        if row["scheme"] not in seen:
            seen.add(row["scheme"])
            out.append(row)
    return out


def _compiled_after_go(doc: dict) -> float:
    return sum(r["worker_phases_s"].get("after_go", 0.0) for r in _per_scheme(doc) if r["mode"] == "compiled")


def _span(values: list[float]) -> str:
    """``25.1 µs in 2 runs`` or ``27.9-28.4 µs in 7 runs``."""
    lo, hi = f"{min(values):.1f}", f"{max(values):.1f}"
    return f"{lo if lo == hi else lo + '-' + hi} µs in {len(values)} runs"


def speed_figures() -> dict:
    """The figures docs/speed.md prints for calls 6 and 8 (``python -c`` this to regenerate them)."""
    c6, c8 = _runs("call6", "new"), _runs("call8", "bench")
    old = json.loads((CALLS / "call6" / "old" / "per-scheme-imports-1.json").read_text())
    best = min(c8[1:], key=lambda d: d["wall_s"])
    rows = _per_scheme(best)
    every = c6 + [old] + c8

    def stream(doc, scheme):
        return next(r for r in doc["rows"] if r["scheme"] == scheme)["latency_us"]["stream"]["median"]

    fp8d = sorted(stream(d, "fp8-dynamic") for d in every)
    fp8c = [stream(d, "fp8-weight-only+compiled") for d in every]
    i4_new = [stream(d, "int4-weight-only") for d in c6 + c8]
    odd = [v for v in i4_new if v < 7.8]
    return {
        "c8w": ", ".join(f"{d['wall_s']:.1f}" for d in c8[1:-1]) + f" and {c8[-1]['wall_s']:.1f}",
        "c8c": f"{c8[0]['wall_s']:.1f}",
        "c6w": ", ".join(f"{d['wall_s']:.1f}" for d in c6[1:-1]) + f" and {c6[-1]['wall_s']:.1f}",
        "c6c": f"{c6[0]['wall_s']:.1f}", "c6o": f"{old['wall_s']:.1f}",
        "c8best": f"{best['wall_s']:.1f}",
        "c8ago": f"{sum(r['worker_phases_s']['after_go'] for r in rows):.1f}",
        "c8gap": f"{rows[0]['worker_wall_s'] - rows[0]['worker_phases_s']['after_go']:.1f}",
        "c8wait": f"{sum(r['worker_wall_s'] - r['worker_phases_s'].get('after_go', 0.0) for r in rows[1:]):.1f}",
        "c6comp": f"{_compiled_after_go(c6[-1]):.1f}", "c8comp": f"{_compiled_after_go(best):.1f}",
        "fp8d": _span([v for v in fp8d if v < 26.5]) + " and "
                + _span([v for v in fp8d if v >= 26.5]),
        "fp8c_lo": f"{min(fp8c):.1f}", "fp8c_hi": f"{max(fp8c):.1f}",
        "i4_old": f"{stream(old, 'int4-weight-only'):.2f}", "i4_new": f"{stream(c6[-1], 'int4-weight-only'):.2f}",
        "i4_odd": f"{odd[0]:.2f}" if len(odd) == 1 else "?",
    }


def test_second_session_figures():
    figures = speed_figures()
    assert all(any("{" + key + "}" in t for t in TEMPLATES) for key in figures)
    for template in TEMPLATES:
        assert " ".join(template.format(**figures).split()) in TEXT, template


def test_second_session_runs_are_what_the_text_says():
    c6, c8 = _runs("call6", "new"), _runs("call8", "bench")
    old = json.loads((CALLS / "call6" / "old" / "per-scheme-imports-1.json").read_text())
    assert len({d["env"]["gpu_uuid"] for d in c6 + [old]}) == 1  # call 6: one machine
    assert len({d["env"]["gpu_uuid"] for d in c8}) == 1
    assert old["workers"]["preloaded"] == ["torch"] and all(d["workers"]["ahead"] == 6 for d in c6 + c8)
    assert all(d["wall_s"] > 45 for d in c8)  # "still not met"
    assert round(c6[0]["wall_s"]) == 79 and round(c8[0]["wall_s"]) == 80  # "79-80 s"
    assert "went from 99 s (the first session's runner, one run) to 79-80 s" in TEXT
    assert round(json.loads((SPEED / "preload-1.json").read_text())["wall_s"]) == 99
    first = [r for r in c6[0]["rows"] if r.get("tuning_cache")]  # the first run tuned, later ones loaded
    assert first and first[0]["tuning_cache"]["loaded"] == 0
    assert all(r["tuning_cache"]["loaded"] > 0 for r in c8[3]["rows"] if r.get("tuning_cache"))
    hits = [r["compile"]["cache_counters"] for r in c8[3]["rows"] if r.get("compile")]
    assert hits and all(c.get("fxgraph_cache_hit") == 1 for c in hits)


TEMPLATES = ["""- **The issue's H200 target (at most 45 s) is still not met**: the three warm runs of call 8 took
  {c8w} s, the first run {c8c} s (call 6: {c6w} s and {c6c} s; the old runner, after those
  four, {c6o} s).""", """- What is left, in call 8's fastest run ({c8best} s): the workers' time after their go sums to
  {c8ago} s; the rest is the start (the first worker's go came {c8gap} s after the runner asked for
  it: the forkserver's imports) and the measuring worker waiting for the next one to finish
  preparing ({c8wait} s in all). The compiled schemes went from {c6comp} s after their go (call 6,
  run 4) to {c8comp} s.""", """fp8-dynamic's stream median reads {fp8d}, and
fp8-weight-only+compiled's spreads from {fp8c_lo} to {fp8c_hi} µs""", """reads {i4_old} µs with the old runner and {i4_new} µs with the new one in
call 6, and {i4_odd} µs in one of the new runner's eight runs"""]


def test_cpu_second_session_figures():
    folder = ROOT / "results" / "cpu" / "evidence" / "speed" / "second-session"
    new = [json.loads((folder / f"preload-{i}.json").read_text()) for i in (1, 2, 3)]
    old = [json.loads((folder / f"old-tree-{i}.json").read_text()) for i in (1, 2)]
    assert {d["env"]["git"]["commit"][:7] for d in new} == {"47c87df"} and not new[0]["env"]["git"]["dirty"]
    assert {d["env"]["git"]["commit"][:7] for d in old} == {"9905f25"} and not old[0]["env"]["git"]["dirty"]
    lo, hi = min(d["wall_s"] for d in new), max(d["wall_s"] for d in new)
    olo, ohi = min(d["wall_s"] for d in old), max(d["wall_s"] for d in old)
    assert f"(`47c87df`, three runs) took {lo:.1f}-{hi:.1f} s" in TEXT
    assert f"(`9905f25`, two runs right before, in a worktree) {olo:.1f}-{ohi:.1f} s" in TEXT
    assert hi < 40 and ohi < 40
    assert not any(d["env"].get("warnings") for d in new)  # the forkserver no longer reads as "CPU busy"


def test_readme_speed_figures():
    readme = " ".join((ROOT / "README.md").read_text().split())
    call12 = _runs("call12", "bench")
    assert (f"{call12[0]['wall_s']:.1f} s for a first run (empty compile and autotune caches), then "
            f"{call12[1]['wall_s']:.1f}, {call12[2]['wall_s']:.1f} and {call12[3]['wall_s']:.1f} s") in readme
    assert "(`results/h200/evidence/speed/2026-12-01/call12/`)" in readme
    old = json.loads((SPEED / "per-scheme-imports-1.json").read_text())
    assert f"the runner before issue 15 took {old['wall_s']:.0f} s on the same scenario" in readme
    cpu = [json.loads((ROOT / "results/cpu/evidence/speed/third-session" / f"preload-{i}.json").read_text()) for i in (1, 2, 3)]
    walls = [d["wall_s"] for d in cpu]
    assert "`results/cpu/evidence/speed/third-session/`" in readme
    assert f"2-core CPU (this project's CI machine kind): {min(walls):.1f}-{max(walls):.1f} s" in readme
    skipped = [r for r in cpu[0]["rows"] if r["status"] == "skipped"]
    assert len(skipped) == 13 and len(cpu[0]["rows"]) == 26
    assert "(13 rows measured, 13 skipped;" in readme and "(13 of decode's 26:" in readme
    named = ("tf32", "fp8-dynamic", "int4-weight-only", "int4-plain", "int4-preshuffled", "fp8-int4")
    assert {r["base_scheme"] for r in skipped} == set(named) | {f"{k}-gemlite" for k in
                                                                 ("int4-weight-only", "int8-weight-only",
                                                                  "fp8-weight-only", "fp8-dynamic")}
    assert sum(r["base_scheme"] == "fp8-dynamic" for r in skipped) == 3  # "fp8-dynamic in its three forms"
    assert sum(r["base_scheme"] == "int4-weight-only" for r in skipped) == 2


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_decode", ROOT / "scripts" / "bench_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _walls(docs: list[dict]) -> str:
    """``38.6 and 43.4`` or ``43.8, 43.9 and 41.6``."""
    walls = [f"{d['wall_s']:.1f}" for d in docs]
    return walls[0] if len(walls) == 1 else ", ".join(walls[:-1]) + " and " + walls[-1]


def _range(values: list[float], digits: int = 1) -> str:
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def third_session_figures() -> dict:
    """The figures of docs/speed.md's third-session section, from calls 9 to 12."""
    bench = _bench()
    c9, c9lean = _runs("call9", "bench", n=3), _runs("call9", "bench", "lean-preload", n=3)
    c10, c10lean = _runs("call10", "preload", n=3), _runs("call10", "lean", "lean-preload", n=2)
    c11, c12 = _runs("call11", "bench", n=3), _runs("call12", "bench", n=4)
    split = {id(d): bench.timeline_split(d) for d in c10 + c10lean + c11 + c12}

    def part(docs, key):
        return [split[id(d)][key] for d in docs]

    def first_call(doc, scheme):
        return next(r["compile"]["first_call_s"] for r in doc["rows"] if r["scheme"] == scheme and r.get("compile"))

    nvml = (CALLS / "call10" / "nvml-cost.txt").read_text().split()
    sweep = json.loads((CALLS / "call11" / "sweep-1-cut.json").read_text())
    w8a8 = next(r for r in sweep["rows"] if r["scheme"] == "w8a8-dynamic")
    return {
        "c10rel": _range(part(c10, "write and release")), "c11rel": _range(part(c11 + c12, "write and release")),
        "fp8c_c10": " and ".join(f"{first_call(d, 'fp8-weight-only+compiled'):.1f}" for d in c10[1:]),
        "fp8c_after": _range([first_call(d, "fp8-weight-only+compiled") for d in c11[1:] + c12[1:]]),
        "c10meas": _range(part(c10[1:], "measuring")), "c11meas": _range(part(c11[1:] + c12[1:], "measuring")),
        "nvml_ms": f"{float(nvml[nvml.index('init+open+shutdown') + 2]) * 1e3:.0f}",
        "read_us": f"{float(nvml[nvml.index('read') + 2]) * 1e6:.0f}",
        "lean_ready": _range(part(c10lean, "forkserver ready")), "pre_ready": _range(part(c10, "forkserver ready")),
        "lean9": _range([d["wall_s"] for d in c9lean]), "pre9": _range([d["wall_s"] for d in c9[1:]]),
        "lean10": _range([d["wall_s"] for d in c10lean]), "pre10": _range([d["wall_s"] for d in c10[1:]]),
        "lean_kernel": _range([bench.phases(d)["method:kernel"] for d in c10lean]),
        "pre_kernel": _range([bench.phases(d)["method:kernel"] for d in c10]),
        "c11w": _walls(c11[1:]), "c12w": _walls(c12[1:]), "c12c": f"{c12[0]['wall_s']:.1f}",
        "c12go": _range(part(c12[1:], "first go")), "c12meas": _range(part(c12[1:], "measuring")),
        "sweep_done": str(len({r["scheme"] for r in sweep["rows"]})), "sweep_wall": f"{sweep['wall_s']:.0f}",
        "sweep_rows": str(len(sweep["rows"])), "sweep_w8a8": f"{w8a8['worker_phases_s']['after_go']:.0f}",
    }


THIRD = """## A timeline of each run, and the target reached (2026-12-01, third session)"""


def _third_section() -> str:
    raw = (ROOT / "docs" / "speed.md").read_text()
    start = raw.index(THIRD)
    return raw[start:raw.index("## The CPU (2 cores)", start)]


def test_third_session_figures():
    figures = third_session_figures()
    section = _third_section()
    assert "{" + "{" not in section  # every figure filled in
    for key, value in figures.items():
        assert value, key
    # the template is the committed text with each figure replaced by its name: they must agree
    filled = " ".join(THIRD_TEMPLATE.format(**figures).split())
    assert filled == " ".join(_prose(section).split())


def test_third_session_runs_are_what_the_text_says():
    c11, c12 = _runs("call11", "bench", n=3), _runs("call12", "bench", n=4)
    assert all(d["wall_s"] <= 45 for d in c11[1:] + c12[1:])  # "every one at most 45 s"
    assert len({d["env"]["gpu_uuid"] for d in c12}) == 1 and len({d["env"]["gpu_uuid"] for d in c11}) == 1
    for d in c11 + c12:
        compiled = [r for r in d["rows"] if r.get("compile")]
        assert compiled and all(r["compile"]["compile_threads"] == 1 for r in compiled)
    sweep = json.loads((CALLS / "call11" / "sweep-1-cut.json").read_text())
    assert sweep["complete"] is False and len({r["scheme"] for r in sweep["rows"]}) < 17
    lean = _runs("call10", "lean", "lean-preload", n=2) + _runs("call9", "bench", "lean-preload", n=3)
    default = _runs("call10", "preload", n=3) + _runs("call9", "bench", n=3)
    assert min(d["wall_s"] for d in lean) > max(d["wall_s"] for d in default[1:3] + default[4:])  # warm runs


def _prose(section: str) -> str:
    """The section without its generated blocks (their content is checked by gen_docs --check)."""
    import re

    return re.sub(r"<!-- BEGIN: (.*?) -->.*?<!-- END -->", r"<!-- BEGIN: \1 --> <!-- END -->", section, flags=re.S)


#: docs/speed.md's third-session section, its generated blocks empty and each figure a {name} of
#: third_session_figures().
THIRD_TEMPLATE = """## A timeline of each run, and the target reached (2026-12-01, third session)

The phases above are each worker's own; they do not say where the run's wall time went *between*
workers. Every result file now carries `workers.timeline`: per worker, when the runner asked for
it, when it was forked, got its go, finished measuring, wrote its rows, said `done` and exited
(seconds since the run's start; the worker's own readings share the runner's clock,
`qbench.runner.TIMELINE_EVENTS`). `scripts/bench_decode.py --timeline` splits `wall_s` with it into
parts that add up: the start (to the first worker's go), measuring (the workers' `after_go`),
writing and releasing, the hand-offs, and the end.

Calls 10 to 12 each got a fresh H200 (run 1 fills the caches; files and code in
`results/h200/evidence/speed/README.md`). Call 10 is the code at the start of the session plus the timeline;
call 11 adds the two fixes below; call 12 is call 11's code again, four runs:

```sh
python scripts/bench_decode.py --timeline results/h200/evidence/speed/2026-12-01/call10/preload/preload-1.json results/h200/evidence/speed/2026-12-01/call10/preload/preload-2.json results/h200/evidence/speed/2026-12-01/call10/preload/preload-3.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-4.json
```
<!-- BEGIN: python scripts/bench_decode.py --timeline results/h200/evidence/speed/2026-12-01/call10/preload/preload-1.json results/h200/evidence/speed/2026-12-01/call10/preload/preload-2.json results/h200/evidence/speed/2026-12-01/call10/preload/preload-3.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-4.json --> <!-- END -->

What call 10's timeline showed, and what was done:

- **Writing and releasing took {c10rel} s per run**, about 0.2 s per scheme: before saying `done`
  each worker ran `gc.collect()` and `torch.cuda.empty_cache()`, so that the next worker, which
  builds while this one exits, finds the memory it found before. It only matters where two
  workers' memory would not fit together; the runner now decides that from the scenario's memory
  estimate (`qbench.runner.must_release`: two peaks of `qbench.memory.estimate_bytes` plus the
  waiting workers' contexts against the free memory) and tells the worker. Decode's layer needs a
  fraction of a GiB: the part is {c11rel} s in calls 11 and 12.
- **The compiled schemes' first call varied with the same cache hits**: fp8-weight-only+compiled's
  took {fp8c_c10} s in call 10's warm runs, each an `fxgraph_cache_hit`. Importing Inductor's
  `async_compile` (which the compiled workers do while they prepare, to save 2 s after the go) starts a
  pool of compile processes, one per core: 16 per compiled worker on this host, each importing
  torch, competing for the CPU with the measuring worker and the first call. qbench sets Inductor's
  `compile_threads` to 1 in its workers (`qbench.compile_info.single_compile_thread`; rows record
  `compile.compile_threads`; `TORCHINDUCTOR_COMPILE_THREADS` overrides): a scheme compiles a handful
  of kernels, and after the first run reads them from Inductor's disk cache. In calls 11 and 12 the
  same first call took {fp8c_after} s, and measuring fell from {c10meas} s to {c11meas} s.
- Smaller: NVML is initialised once per process instead of at each of the seven readings of a row
  (`nvmlInit` + open + `nvmlShutdown` took {nvml_ms} ms against {read_us} µs for one clock reading,
  `call10/nvml-cost.txt`), and an eager worker no longer imports Dynamo just to read its counters.
- **`QBENCH_PRELOAD=lean` was tried and removed.** Without Dynamo in the preload the forkserver was
  ready sooner ({lean_ready} s after the start against {pre_ready} s), but every run was slower (all
  lean runs came after the default's first run had filled the caches): call 9 {lean9} s against
  {pre9} s for the default's warm runs, call 10 {lean10} s against {pre10} s. Starting
  torch.profiler (the `kernel` method) evaluates `hasattr(torch, "_inductor")`, a lazy import of
  Inductor and Dynamo, so each worker paid that import after its go: the `kernel` method took
  {lean_kernel} s per run in call 10's lean runs against {pre_kernel} s.

**The H200 target is met**: with both fixes, the warm runs took {c11w} s (call 11) and {c12w} s
(call 12), every one at most 45 s; a first run on a fresh machine {c12c} s. What is left is the
start ({c12go} s to the first go: the forkserver's preload of torch and Dynamo, which the first worker
needs) and measuring itself ({c12meas} s), whose largest parts are the timing methods and the first
calls of the compiled and gemlite schemes:

```sh
python scripts/bench_decode.py --summarize results/h200/evidence/speed/2026-12-01/call11/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-4.json
```
<!-- BEGIN: python scripts/bench_decode.py --summarize results/h200/evidence/speed/2026-12-01/call11/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call11/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-1.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-2.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-3.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-4.json --> <!-- END -->

Numbers unchanged? Call 10 (before the fixes) against call 12 (after), two machines: the rows
whose kernel does not depend on the process agree within a few percent; the gemlite and
`+compiled` rows, whose kernels each process tunes or compiles anew, move as they did between two
runs of one design (above):

```sh
qbench compare results/h200/evidence/speed/2026-12-01/call10/preload/preload-2.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-3.json --format github --threshold 1.2
```
<!-- BEGIN: qbench compare results/h200/evidence/speed/2026-12-01/call10/preload/preload-2.json results/h200/evidence/speed/2026-12-01/call12/bench/preload-3.json --format github --threshold 1.2 --> <!-- END -->

**The 11-M sweep is not at its 120 s target, and was not measured whole**: in call 11 it ran after
the decode runs with its compile caches cold for M > 1 and was cut by its 200 s limit after
{sweep_done} of its 17 schemes, {sweep_wall} s in (`call11/sweep-1-cut.json`; the first
session's sweep took 209 s). Its time is measurement: {sweep_rows} rows, each timed by five methods
to a 1 % CI or 0.5 s per method, and w8a8-dynamic alone took {sweep_w8a8} s after its go (host-synced
calls of 1.6 ms). Meeting 120 s would mean a looser timing budget for the sweep, a trade the issue
did not ask for; it is left open.

"""


def test_cpu_third_session_figures():
    folder = ROOT / "results" / "cpu" / "evidence" / "speed" / "third-session"
    load = lambda name: json.loads((folder / name).read_text())  # noqa: E731
    before = [load(f"before-cpu-preload-{i}.json") for i in (1, 2, 3)]
    old = [load(f"old-tree-{i}.json") for i in (1, 2)]
    new = [load(f"preload-{i}.json") for i in (1, 2, 3)]
    commits = lambda docs: {d["env"]["git"]["commit"][:7] for d in docs if not d["env"]["git"]["dirty"]}  # noqa: E731
    assert commits(before) == {"5a9944a"} and commits(old) == {"392e9f2"} and commits(new) == {"7fb2d59"}
    assert f"(`392e9f2`, two runs in a worktree) took {_walls(old)} s" in TEXT
    assert f"the tree with the timeline {_range([d['wall_s'] for d in before])} s" in TEXT
    bench = _bench()
    last = bench.timeline_split(before[2])
    assert f"{last['next not ready']:.1f} s of \"next not ready\" in a {before[2]['wall_s']:.1f} s run" in TEXT
    after = [bench.timeline_split(d) for d in new]
    assert {f"{a['next not ready']:.1f}" for a in after} == {"0.3"} and "hand-offs cost 0.3 s" in TEXT
    assert all(0.5 < a["first go"] - last["first go"] < 1.5 for a in after)  # "about a second later"
    assert f"three runs took {_walls(new)} s" in TEXT and max(d["wall_s"] for d in new) < 40
    assert all(d["workers"]["preloaded"] == ["qbench._preload", "qbench._preload_cpu"] for d in new)
    assert not any(d["env"].get("warnings") for d in before + old + new[:2])
    assert new[2]["env"]["warnings"][0].startswith("CPU busy: 0.7 cores busy")
    assert "the third one's environment record warns that 0.7 cores were busy" in TEXT


def test_the_first_sessions_sweep_time():
    assert round(_load("../../sweep.json")["wall_s"]) == 209 and "the first session's sweep took 209 s" in TEXT
