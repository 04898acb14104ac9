"""Shared test helpers: small scenarios, the CUDA skip reason, running one subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA (no CUDA device on this machine)")
RESULTS = Path(__file__).resolve().parent.parent / "results"


def committed_results(pattern: str = "*.json") -> list[Path]:
    """The files under results/ matching ``pattern``, without results/runs/ (where ``qbench run``
    writes by default, gitignored): a user's own runs never decide a test."""
    return sorted(p for p in RESULTS.rglob(pattern) if p.relative_to(RESULTS).parts[0] != "runs")


def small_scenario_toml(schemes: list[str], m=(1, 4), k: int = 256, n: int = 128, extra: str = "") -> str:
    """A scenario TOML text for a small layer (fast on CPU)."""
    lines = ['name = "tiny"', "seed = 3", f"m = {list(m)}", extra, "[layer]", f"in_features = {k}",
             f"out_features = {n}", "[timing]", "warmup = 1", "min_reps = 3", "max_reps = 10", "budget_s = 0.05"]
    for s in schemes:
        lines += ["[[schemes]]", f'name = "{s}"']
    return "\n".join(lines) + "\n"


def edited_copy(tmp_path: Path, src, name: str, edit) -> str:
    """A copy of result file ``src`` under ``tmp_path`` named ``name``, after ``edit(doc)`` (a hand-edited file)."""
    import json

    doc = json.loads(Path(src).read_text())
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def run_subcommand(module, name: str, *argv: str):
    """Parse ``name ARGV`` with only ``module``'s subcommand registered (a reader module's
    ``COMMAND``, :class:`qbench.readers.common.Command`) and return what it returns (the exit
    status; bad input: 2); argparse errors raise SystemExit(2)."""
    parser = argparse.ArgumentParser()
    module.COMMAND.register(parser.add_subparsers())
    args = parser.parse_args([name, *argv])
    return args.func(args)


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory):
    """qbench's on-disk caches (the checkpoint digests, :func:`qbench.model.checkpoint.cache_dir`) in
    a folder of this session, never the user's ``~/.cache/qbench``; subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("qbench-cache")))
        yield
