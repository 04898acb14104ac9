"""scripts/bench_decode.py's tables and refusals, and scripts/find_commit.py's refusals, on committed files."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A committed H200 decode file of 2026-11-30: no worker phases, no timeline, no source digest.
OLD = ROOT / "tests/fixtures/real/h200_decode_2026-11-30.json"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summary_of_a_committed_run(capsys):
    bench = _script("bench_decode")
    path = ROOT / "results/h200/step_llama3_8b.json"
    doc = json.loads(path.read_text())
    assert bench.main(["--summarize", str(path)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["step_llama3_8b.json", "qbench preloaded, 6 ahead", "32", f"{doc['wall_s']:.0f}"]
    seen, prepare = set(), 0.0  # prepare summed once per scheme (its M rows share one worker)
    for row in doc["rows"]:
        if row["scheme"] not in seen:
            seen.add(row["scheme"])
            prepare += row["worker_phases_s"]["prepare"]
    assert cells[4] == f"{prepare:.1f}"


def test_summary_of_a_committed_bench(capsys):
    """A bench.json gives one line per run: its process seconds, qbench's wall_s and the phases."""
    bench = _script("bench_decode")
    path = ROOT / "results/h200/evidence/speed/bench.json"
    runs = json.loads(path.read_text())["runs"]
    assert bench.main(["--summarize", str(path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[2:]
    assert len(lines) == len(runs) == 3
    for line, run in zip(lines, runs):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[:5] == [run["design"], str(run["run"]), f"{run['process_s']:.1f}", f"{run['wall_s']:.1f}",
                             f"{run['phases_s']['prepare']:.1f}"]


def test_old_files_say_not_recorded(capsys):
    bench = _script("bench_decode")
    assert bench.main(["--summarize", str(OLD)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "not recorded (a file from before 2026-12-01)" in line and line.count("not recorded") == 3


def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path):
    bench = _script("bench_decode")
    assert bench.main(["--summarize", str(ROOT / "README.md")]) == 2
    assert capsys.readouterr().err.startswith("bench_decode: ")
    notes = tmp_path / "x.json"
    notes.write_text('{"kind": "bench-decode", "runs": []}')
    assert bench.main(["--per-scheme", str(notes)]) == 2
    assert "not a qbench result file" in capsys.readouterr().err
    import pytest

    with pytest.raises(SystemExit) as exc:
        bench.main([str(tmp_path), "--designs", "foo"])
    assert exc.value.code == 2 and "unknown design 'foo'" in capsys.readouterr().err


def test_find_commit_refuses_files_without_a_digest(capsys):
    find = _script("find_commit")
    import sys

    argv = sys.argv
    try:
        sys.argv = ["find_commit.py", str(OLD)]
        assert find.main() == 2
    finally:
        sys.argv = argv
    assert "env.source_digest: absent" in capsys.readouterr().err


def test_files_of_two_calls_with_one_name_are_told_apart(capsys, tmp_path):
    bench = _script("bench_decode")
    paths = [tmp_path / "call6" / "new" / "preload-4.json", tmp_path / "call8" / "bench" / "preload-4.json"]
    for path in paths:
        path.parent.mkdir(parents=True)
        path.write_text((ROOT / "results/h200/step_llama3_8b.json").read_text())
    assert bench.main(["--summarize", *map(str, paths)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[2:]
    assert [line.strip("|").split("|")[0].strip() for line in lines] == ["call6/new/preload-4.json",
                                                                          "call8/bench/preload-4.json"]


def test_timeline_split_hand_computed():
    """Two workers; the second was not ready when its go was sent (it received it 0.5 s later).
    Start 3.0 + measuring (4 + 2) + write and release (0.25 + 0.25) + turnaround 0.1 + not ready 0.5
    + end 0.4 = wall 10.5 s."""
    bench = _script("bench_decode")
    doc = {"wall_s": 10.5, "workers": {"timeline": [
        {"scheme": "a", "spawn": 0.2, "forked": 2.5, "go": 2.5, "worker_go": 3.0, "worker_measured": 7.0,
         "worker_released": 7.25, "done": 7.3, "exited": 7.6},
        {"scheme": "b", "spawn": 3.1, "forked": 3.2, "go": 7.35, "worker_go": 7.85, "worker_measured": 9.85,
         "worker_released": 10.1, "done": 10.12, "exited": 10.3}]}}
    split = bench.timeline_split(doc)
    expected = {"forkserver ready": 2.5, "first go": 3.0, "measuring": 6.0, "write and release": 0.5,
                "to the next go": 0.1, "next not ready": 0.5, "end": 0.4}
    assert split.keys() == expected.keys() and all(abs(split[k] - v) < 1e-9 for k, v in expected.items()), split
    assert abs(sum(v for k, v in split.items() if k != "forkserver ready") - doc["wall_s"]) < 1e-9


def test_timeline_of_a_worker_that_died_and_of_an_old_file(capsys):
    """A dead worker has no readings of its own: its go and exit stand in (no measuring time lost);
    a file without a timeline gets one cell that says so."""
    bench = _script("bench_decode")
    doc = {"wall_s": 5.0, "workers": {"timeline": [
        {"scheme": "a", "spawn": 0.1, "forked": 1.0, "go": 1.0, "exited": 4.0, "recorded": 4.1}]}}
    split = bench.timeline_split(doc)
    assert (split["first go"], split["measuring"], split["write and release"], split["end"]) == (1.0, 3.0, 0.0, 1.0)
    assert bench.main(["--timeline", str(OLD)]) == 0
    assert "no timeline (written before 2026-12-01, third session)" in capsys.readouterr().out
