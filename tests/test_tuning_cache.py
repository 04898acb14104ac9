"""tuning_cache: a library's autotune configs kept between runs (gemlite's on the GPU). On the CPU a
fake library stands in: a dict of "tuned configs" that its kernel fills on the first call at a new
M, and that load/save move to and from the file, as gemlite's ``load_config`` / ``cache_config`` do."""

from __future__ import annotations

import json

import pytest
import torch

from qbench import scenario, schemes
from qbench.schemes import tuning_cache
from qbench.measure import measure_scheme
from qbench.row import Row
from qbench.schemes.base import Scheme, TensorPart
from tests.conftest import small_scenario_toml

CPU = torch.device("cpu")


class _FakeLibrary:
    """In-memory configs, keyed like gemlite's ("(M bucket, N, K)"), and how many were tuned."""

    def __init__(self):
        self.configs: dict[str, dict] = {}
        self.tuned = 0

    def tune(self, m, n, k):
        key = str((m, n, k))
        if key not in self.configs:
            self.tuned += 1
            self.configs[key] = {"BLOCK_SIZE_K": 64, "num_warps": 4}

    def load(self, path):
        with open(path, encoding="utf-8") as f:
            self.configs.update(json.load(f))
        return len(self.configs)

    def save(self, path):
        merged = {}
        try:  # as gemlite's cache_config: a file it cannot read is replaced
            with open(path, encoding="utf-8") as f:
                merged = json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        merged.update(self.configs)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(merged, f)
        return len(merged)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("QBENCH_CACHE_DIR", str(folder))
    monkeypatch.delenv("QBENCH_TUNING_CACHE", raising=False)
    return folder


def _cache(lib):
    return tuning_cache.TuningCache(library="fakelib", version=lambda device: "1.0 GPU/X 80GB", load=lib.load,
                                    save=lib.save)


def test_the_file_name_carries_library_version_and_gpu_and_is_file_safe(cache_dir):
    path = tuning_cache.path_for(_cache(_FakeLibrary()), CPU)
    assert path == cache_dir / "fakelib-1.0_GPU_X_80GB.json"


def test_the_default_folder_is_xdg_cache_home_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("QBENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning_cache.folder() == tmp_path / "xdg" / "qbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuning_cache.folder() == tmp_path / "home" / ".cache" / "qbench"


def test_a_second_session_loads_what_the_first_saved(cache_dir):
    first = _FakeLibrary()
    session = tuning_cache.Session(_cache(first), CPU)
    session.open()
    first.tune(1, 128, 256)
    first.tune(16, 128, 256)
    record = session.close()
    assert record == {"file": str(cache_dir / "fakelib-1.0_GPU_X_80GB.json"), "loaded": 0, "saved": 2, "note": None}
    second = _FakeLibrary()  # a new worker process: nothing in memory
    session = tuning_cache.Session(_cache(second), CPU)
    session.open()
    second.tune(1, 128, 256)  # cached: not tuned again
    second.tune(128, 128, 256)  # a new M bucket: tuned
    assert second.tuned == 1
    assert session.close() == {"file": record["file"], "loaded": 2, "saved": 3, "note": None}


def test_switched_off_nothing_is_read_or_written(cache_dir, monkeypatch):
    monkeypatch.setenv("QBENCH_TUNING_CACHE", "0")
    lib = _FakeLibrary()
    session = tuning_cache.Session(_cache(lib), CPU)
    session.open()
    lib.tune(1, 128, 256)
    assert session.close() == {"file": None, "loaded": 0, "saved": 0, "note": "QBENCH_TUNING_CACHE=0: tuned from scratch"}
    assert not cache_dir.exists()


def test_an_unreadable_file_is_replaced_and_the_row_says_why(cache_dir):
    """A corrupt file is not read (this run tunes from scratch) and is replaced by this run's
    configs, so the next run reads them instead of tuning from scratch forever."""
    cache_dir.mkdir()
    path = cache_dir / "fakelib-1.0_GPU_X_80GB.json"
    path.write_text("{not json")
    lib = _FakeLibrary()
    session = tuning_cache.Session(_cache(lib), CPU)
    session.open()
    lib.tune(1, 128, 256)
    record = session.close()
    assert record["loaded"] == 0 and record["saved"] == 1
    assert record["note"].startswith("not read: JSONDecodeError") and record["note"].endswith("(replaced when saved)")
    assert json.loads(path.read_text()) == {"(1, 128, 256)": {"BLOCK_SIZE_K": 64, "num_warps": 4}}
    again = tuning_cache.Session(_cache(_FakeLibrary()), CPU)
    again.open()
    assert again.record == {"file": str(path), "loaded": 1, "saved": 0, "note": None}


def test_a_path_that_cannot_even_be_checked_is_a_note_not_a_failure(tmp_path, monkeypatch):
    """A folder name too long for the file system: Path.exists() raises (not ENOENT); the row says
    "no cache" and the library tunes as if there were none."""
    monkeypatch.setenv("QBENCH_CACHE_DIR", str(tmp_path / ("a" * 300)))
    session = tuning_cache.Session(_cache(_FakeLibrary()), CPU)
    session.open()
    record = session.close()
    assert (record["file"], record["loaded"], record["saved"]) == (None, 0, 0)
    assert record["note"].startswith("no cache: OSError: [Errno 36] File name too long")


def test_the_folder_expands_a_home_relative_path(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("QBENCH_CACHE_DIR", "~/qb-cache")
    assert tuning_cache.folder() == tmp_path / "qb-cache"


def test_a_folder_that_cannot_be_written_is_a_note_not_a_failure(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("QBENCH_CACHE_DIR", str(blocker / "cache"))  # a folder under a file
    lib = _FakeLibrary()
    session = tuning_cache.Session(_cache(lib), CPU)
    session.open()
    lib.tune(1, 128, 256)
    record = session.close()
    assert record["saved"] == 0 and record["note"].startswith("not saved:")


@pytest.mark.parametrize("value", ["yes", "2", ""])
def test_a_bad_switch_is_one_line_before_anything_runs(monkeypatch, value):
    from qbench.runner import RunError, _check_worker_env

    monkeypatch.setenv("QBENCH_TUNING_CACHE", value)
    with pytest.raises(RunError, match=f"QBENCH_TUNING_CACHE: must be 0 or 1, got {value!r}"):
        _check_worker_env()


class _TunedLinear(torch.nn.Module):
    """A linear whose "kernel" tunes itself on the first call at each M, as gemlite's do."""

    def __init__(self, weight, lib):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
        self.lib = lib

    def forward(self, x):
        self.lib.tune(x.shape[0], *self.weight.shape)
        return torch.nn.functional.linear(x, self.weight)


def test_measured_rows_record_the_cache_and_a_second_run_tunes_nothing(cache_dir, tmp_path):
    libs = []

    def build(weight, bias, options):
        return _TunedLinear(weight, libs[-1])

    lib_of_run = lambda: libs[-1]  # noqa: E731  the cache talks to the current run's library
    cache = tuning_cache.TuningCache(library="fakelib", version=lambda device: "1.0",
                                     load=lambda p: lib_of_run().load(p), save=lambda p: lib_of_run().save(p))
    schemes.register(Scheme(
        name="tuned-test", library="torch", family="float", summary="tunes on first call (test only)",
        weight_dtype="float32", activation_dtype=torch.float32, compute_dtype="fp32", nominal_bits=32, build=build,
        parts=lambda m: [TensorPart("weight", "payload", m.weight.detach())], tuning_cache=cache,
    ))
    try:
        path = tmp_path / "s.toml"
        path.write_text(small_scenario_toml(["tuned-test"], m=(1, 2)))
        sc = scenario.load(path)
        libs.append(_FakeLibrary())  # each run: a fresh library, as in a fresh worker
        first = measure_scheme(sc, 0, CPU)
        libs.append(_FakeLibrary())
        second = measure_scheme(sc, 0, CPU)
    finally:
        schemes._REGISTRY.pop("tuned-test", None)
    file = str(cache_dir / "fakelib-1.0.json")
    for row in first + second:
        assert row["status"] == "ok", row["reason"]
        Row.model_validate(row)
    assert [r["tuning_cache"] for r in first] == [{"file": file, "loaded": 0, "saved": 2, "note": None}] * 2
    assert [r["tuning_cache"] for r in second] == [{"file": file, "loaded": 2, "saved": 2, "note": None}] * 2
    assert [lib.tuned for lib in libs] == [2, 0]  # M = 1 and 2 tuned by the first run only


def test_only_schemes_that_name_a_cache_carry_the_field(cache_dir, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(small_scenario_toml(["fp32"], m=(1,)))
    row, = measure_scheme(scenario.load(path), 0, CPU)
    assert "tuning_cache" not in row
    assert not cache_dir.exists()


def test_every_gemlite_scheme_keeps_its_tuned_configs():
    gemlite = [s for s in schemes.all_schemes() if s.library == "gemlite"]
    assert len(gemlite) == 4
    assert all(s.tuning_cache is not None and s.tuning_cache.library == "gemlite" for s in gemlite)
    assert all(s.tuning_cache is None for s in schemes.all_schemes() if s.library != "gemlite")
