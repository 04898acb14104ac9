"""scripts/bench_decode.py's tables and refusals, and scripts/find_commit.py's refusals, on committed files."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summary_of_a_committed_run(capsys):
    bench = _script("bench_decode")
    path = ROOT / "results/h200/speed/preload-1.json"
    doc = json.loads(path.read_text())
    assert bench.main(["--summarize", str(path)]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["preload-1.json", "qbench preloaded, 6 ahead", "26", f"{doc['wall_s']:.0f}"]
    seen, prepare = set(), 0.0  # prepare summed once per scheme (its M rows share one worker)
    for row in doc["rows"]:
        if row["scheme"] not in seen:
            seen.add(row["scheme"])
            prepare += row["worker_phases_s"]["prepare"]
    assert cells[4] == f"{prepare:.1f}"


def test_old_files_say_not_recorded(capsys):
    bench = _script("bench_decode")
    assert bench.main(["--summarize", str(ROOT / "results/h200/decode.json")]) == 0
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
        sys.argv = ["find_commit.py", str(ROOT / "results/h200/decode.json")]
        assert find.main() == 2
    finally:
        sys.argv = argv
    assert "env.source_digest: absent" in capsys.readouterr().err


def test_files_of_two_calls_with_one_name_are_told_apart(capsys):
    bench = _script("bench_decode")
    base = ROOT / "results/h200/speed/2026-12-01"
    paths = [base / "call6/new/preload-4.json", base / "call8/bench/preload-4.json"]
    assert bench.main(["--summarize", *map(str, paths)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[2:]
    assert [line.strip("|").split("|")[0].strip() for line in lines] == ["call6/new/preload-4.json",
                                                                          "call8/bench/preload-4.json"]
