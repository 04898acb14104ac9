"""The break trial's input defects of the quality job, each on its repro: a variant of the committed
trained checkpoint (config.json or tensors edited with safetensors) or of its text, made in a tmp
folder. Every bad input is one line naming the file, key and value (exit 2), before anything is
measured; inputs that change under a kept result are refused by ``--resume``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest

from qbench import cli, runner
from qbench.model import checkpoint
from qbench.results import read_results

ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"
HAMLET = ROOT / "data" / "text" / "hamlet.txt"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """A digest cache of this test alone, and no checkpoint or folder remembered from earlier."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(checkpoint.CACHE_ENV, str(folder))
    monkeypatch.setattr(checkpoint, "_OPENED", {})
    monkeypatch.setattr(checkpoint, "_RESOLVED", {})
    return folder


def variant(dest: Path, config: Optional[Callable[[dict], None]] = None,
            tensors: Optional[Callable[[dict], None]] = None) -> Path:
    """A copy of the trained checkpoint at ``dest``, its config.json edited by ``config`` (in place)
    and its tensors by ``tensors`` (a dict name -> torch tensor, edited in place)."""
    shutil.copytree(TRAINED, dest)
    if config is not None:
        data = json.loads((dest / "config.json").read_text())
        config(data)
        (dest / "config.json").write_text(json.dumps(data, indent=1))
    if tensors is not None:
        pytest.importorskip("torch")
        from safetensors.torch import load_file, save_file

        data = {k: v.clone() for k, v in load_file(dest / "model.safetensors").items()}
        tensors(data)
        save_file(data, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def scenario(folder: Path, checkpoint_dir: Path, schemes=("fp32",), *, text: Path = HAMLET, chunk: int = 128,
             chunks: Optional[int] = 2, extra: str = "", name: str = "q.toml") -> Path:
    lines = ['name = "q"', 'device = "cpu"', "[model]", f'checkpoint = "{checkpoint_dir}"', "[quality]",
             f'text = "{text}"', f"chunk = {chunk}"]
    if chunks is not None:
        lines.append(f"chunks = {chunks}")
    lines.append(extra)
    for s in schemes:
        lines += ["[[schemes]]", f'name = "{s}"']
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def check_line(path: Path, capsys) -> tuple[int, list[str]]:
    """``qbench check PATH`` in this process: its exit status and its stderr lines."""
    rc = cli.main(["check", str(path)])
    return rc, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# --- --resume after the inputs changed in place --------------------------------------------------------

def _fake_rows(monkeypatch):
    """Workers that measure nothing: each scheme gets its blank row, skipped (the resume check is
    what is tested, not the measurement)."""
    from qbench.quality.measure import blank_rows

    def rows(self, index):
        entry = self.scenario.schemes[index]
        (row,) = blank_rows(self.scenario, entry, entry.scheme, self.dev)
        return [{**row, "status": "skipped", "reason": "not measured (test)"}]

    monkeypatch.setattr(runner._Workers, "rows", rows)


@pytest.mark.parametrize("edit", ["text", "weights", "config"])
def test_resume_refuses_rows_of_another_text_or_checkpoint(tmp_path, monkeypatch, capsys, edit):
    pytest.importorskip("torch")
    _fake_rows(monkeypatch)
    ck = variant(tmp_path / "ck")
    text = tmp_path / "hamlet.txt"
    shutil.copy(HAMLET, text)
    out = tmp_path / "q.json"
    assert cli.main(["run", str(scenario(tmp_path, ck, ["fp32"], text=text)), "--out", str(out), "--quiet"]) == 1
    kept = read_results(out).to_json()["rows"][0]
    if edit == "text":
        text.write_text(text.read_text(encoding="utf-8")[::-1], encoding="utf-8")
    elif edit == "weights":
        from safetensors.torch import load_file, save_file

        data = {k: v.clone() for k, v in load_file(ck / "model.safetensors").items()}
        data["model.layers.0.mlp.down_proj.weight"] *= 2
        save_file(data, ck / "model.safetensors", metadata={"format": "pt"})
    else:
        config = json.loads((ck / "config.json").read_text())
        config["rms_norm_eps"] = 1e-3
        (ck / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    sc = scenario(tmp_path, ck, ["fp32", "bf16"], text=text)
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    key = "text_sha256" if edit == "text" else "checkpoint_id"
    what = "the text's content" if edit == "text" else "the checkpoint's content"
    assert line.startswith(f"qbench: cannot resume: {out}: {what}")
    assert f"({key} '{kept[key][:12]}…' in row 'fp32', '" in line
    assert read_results(out).to_json()["rows"] == [kept]  # the kept file as it was


def test_resume_on_the_same_inputs_adds_the_missing_scheme(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    _fake_rows(monkeypatch)
    ck = variant(tmp_path / "ck")
    out = tmp_path / "q.json"
    assert cli.main(["run", str(scenario(tmp_path, ck, ["fp32"])), "--out", str(out), "--quiet"]) == 1
    sc = scenario(tmp_path, ck, ["fp32", "bf16"])
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 1  # skipped rows only
    assert [r["scheme"] for r in read_results(out).to_json()["rows"]] == ["fp32", "bf16"]
