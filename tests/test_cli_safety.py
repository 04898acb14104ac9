"""CLI behaviour users of this field expect (issue 13): machine formats alone on stdout, --version,
--debug anywhere, one-line device errors, incomplete files refused by recommend and flagged by
the other readers, one progress line per scheme off a terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qbench import cli
from tests.conftest import small_scenario_toml


def _qbench(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "qbench", *argv], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    (folder / "tiny.toml").write_text(small_scenario_toml(["fp32", "bf16"], m=(1,)))
    proc = _qbench("run", str(folder / "tiny.toml"), "--format", "json", "--out", str(folder / "x.json"))
    return folder, proc


def test_run_format_json_stdout_is_the_document_alone(tiny_run):
    folder, proc = tiny_run
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)  # nothing but the document on stdout
    assert [r["scheme"] for r in rows] == ["fp32", "bf16"]
    assert "wrote" in proc.stderr and "times:" in proc.stderr


def test_run_prints_a_markdown_table_alone_on_stdout(capsys):
    """qbench run --format github: the table lines on stdout, its notes on stderr (as the readers)."""
    cli._table("| a |\n|---|\n| 1 |\n\n  fp8 (M=1) skipped: needs CUDA", "github")
    cap = capsys.readouterr()
    assert cap.out == "| a |\n|---|\n| 1 |\n" and cap.err == "  fp8 (M=1) skipped: needs CUDA\n"
    cli._table("a  b\n-  -", "simple")
    assert capsys.readouterr().out == "a  b\n-  -\n"


def test_progress_is_one_line_per_scheme_off_a_terminal(tiny_run):
    _, proc = tiny_run
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert len(lines) == 2 and lines[0].startswith("[1/2] fp32: ok x1 (") and lines[1].startswith("[2/2] bf16: ok x1 (")


def test_version():
    proc = _qbench("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("qbench ")


def test_debug_after_the_subcommand_shows_the_traceback(tmp_path):
    missing = str(tmp_path / "nope.toml")
    plain = _qbench("run", missing)
    debug = _qbench("run", missing, "--debug")
    assert plain.returncode == 2 and plain.stderr.strip() == f"qbench: {missing}: no such file"
    assert "Traceback" in debug.stderr


@pytest.mark.parametrize("device", ["gpu", "CPU", "cpu:1"])
def test_a_bad_device_is_one_line(device, capsys):
    assert cli.main(["list", "--device", device]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"qbench: device {device!r}: must be auto, cpu, cuda or cuda:N (lower case)"


def test_incomplete_files_are_refused_by_recommend_and_flagged_by_compare(tiny_run, tmp_path, capsys):
    folder, _ = tiny_run
    doc = json.loads((folder / "x.json").read_text())
    doc["complete"] = False
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(doc))
    assert cli.main(["recommend", str(cut), "--max-rel-err", "0.01"]) == 2
    assert "is incomplete" in capsys.readouterr().err
    assert cli.main(["recommend", str(cut), "--max-rel-err", "0.01", "--allow-incomplete"]) in (0, 1)
    assert "warning:" in capsys.readouterr().err
    cli.main(["compare", str(cut), str(folder / "x.json")])
    assert f"warning: {cut} is incomplete" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(cli.EXIT_CODES))
def test_every_subcommand_help_names_its_exit_codes(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    assert "exit status: " in capsys.readouterr().out


def test_one_output_flag_spelling(tmp_path):
    parser = cli.build_parser()
    assert parser.parse_args(["run", "s.toml", "-o", "x.json"]).out == "x.json"
    assert parser.parse_args(["plot", "r.json", "--out", "c.png"]).output == "c.png"


def test_scheme_options_are_not_coerced_from_strings(tmp_path):
    from qbench import scenario

    for option in ('threshold = "6"', 'double_quant = "off"'):
        name = "int8-bnb" if "threshold" in option else "nf4-bnb"
        path = tmp_path / "o.toml"
        path.write_text(f'name = "x"\nm = 1\n[[schemes]]\nname = "{name}"\n{option}\n')
        with pytest.raises(scenario.ScenarioError) as err:
            scenario.load(path)
        assert err.value.key == f"schemes[0].{option.split(' ')[0]}"


def test_list_honours_csv_and_json_and_refuses_unknown(capsys):
    import csv
    import io

    from qbench import schemes

    assert cli.main(["list", "--device", "cpu", "--format", "csv"]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0][0] == "scheme" and [r[0] for r in table[1:]] == schemes.names()
    assert cli.main(["list", "--device", "cpu", "--format", "json"]) == 0
    assert [r["scheme"] for r in json.loads(capsys.readouterr().out)] == schemes.names()
    assert cli.main(["list", "--format", "bogus"]) == 2


def test_list_fits_120_characters_in_a_terminal_and_wide_keeps_every_column(capsys):
    """Its widest line was 296 characters; the others views fit 120 (the description wraps in its cell)."""
    from qbench import schemes

    assert cli.main(["list", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 120
    assert all(f"{name} " in out for name in schemes.names())
    assert cli.main(["list", "--device", "cpu", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "activations" in wide.splitlines()[1] and max(map(len, wide.splitlines())) > 120


def test_quiet_before_the_subcommand(tmp_path):
    folder = tmp_path
    (folder / "t.toml").write_text(small_scenario_toml(["bf16"], m=(1,)))
    proc = _qbench("-q", "run", str(folder / "t.toml"), "--out", str(folder / "q.json"))
    assert proc.returncode == 0, proc.stderr
    assert not [line for line in proc.stderr.splitlines() if line.startswith(("[1/", "warning:"))]


def test_run_schemes_measures_only_the_labels_given_in_the_scenarios_order(tmp_path):
    (tmp_path / "s.toml").write_text(small_scenario_toml(["fp32", "bf16", "fp16"], m=(1,)))
    proc = _qbench("run", str(tmp_path / "s.toml"), "--schemes", "fp16,fp32", "--out", str(tmp_path / "x.json"),
                   "--quiet")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "x.json").read_text())
    assert [r["scheme"] for r in doc["rows"]] == ["fp32", "fp16"]
    assert [s["name"] for s in doc["scenario"]["schemes"]] == ["fp32", "fp16"]


@pytest.mark.parametrize("value", ["int9", "fp32,int9", ","])
def test_run_schemes_with_a_label_the_scenario_lacks_is_one_line_and_writes_nothing(tmp_path, value):
    (tmp_path / "s.toml").write_text(small_scenario_toml(["fp32", "bf16"], m=(1,)))
    proc = _qbench("run", str(tmp_path / "s.toml"), "--schemes", value, "--out", str(tmp_path / "x.json"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "s.toml: --schemes: no scheme labelled" in lines[0] and "fp32; bf16" in lines[0]
    assert list(tmp_path.iterdir()) == [tmp_path / "s.toml"]


def test_run_schemes_takes_a_label_with_a_comma_whole_and_is_repeatable(tmp_path):
    """Labels of schemes with two options hold a comma; a value that is a label is taken whole, and
    --schemes may be given more than once."""
    from qbench import scenario

    text = small_scenario_toml(["int4-intx", "fp32", "bf16"], m=(1,)).replace(
        'name = "int4-intx"', 'name = "int4-intx"\ngroup_size = 64\nlabel = "intx, g64"')
    (tmp_path / "s.toml").write_text(text)
    sc = scenario.load(tmp_path / "s.toml")
    assert [e.label for e in scenario.only_schemes(sc, ["intx, g64"]).schemes] == ["intx, g64"]
    assert [e.label for e in scenario.only_schemes(sc, ["bf16", "intx, g64"]).schemes] == ["intx, g64", "bf16"]
    assert [e.label for e in scenario.only_schemes(sc, ["fp32,bf16"]).schemes] == ["fp32", "bf16"]
    proc = _qbench("run", str(tmp_path / "s.toml"), "--schemes", "fp32", "--schemes", "bf16",
                   "--out", str(tmp_path / "x.json"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert [r["scheme"] for r in json.loads((tmp_path / "x.json").read_text())["rows"]] == ["fp32", "bf16"]


@pytest.mark.parametrize("existing", ["r.json", "r.partial.json"])
def test_a_refused_rerun_is_answered_before_torch_and_leaves_no_forkserver(tmp_path, existing):
    """A rerun onto an existing result or partial file took 3.9 s to refuse and left a forkserver
    importing torch for seconds: the output is checked before torch and before the forkserver."""
    (tmp_path / "t.toml").write_text(small_scenario_toml(["bf16"], m=(1,)))
    (tmp_path / existing).write_text("{}")
    probe = ("import json, sys; from qbench import cli, forkserver; "
             f"rc = cli.main(['run', {str(tmp_path / 't.toml')!r}, '--out', {str(tmp_path / 'r.json')!r}]); "
             "print(json.dumps([rc, 'torch' in sys.modules, list(forkserver.pids())]))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert json.loads(proc.stdout.splitlines()[-1]) == [2, False, []], proc.stderr
    assert proc.stderr.count("\n") == 1 and str(tmp_path / existing) in proc.stderr
