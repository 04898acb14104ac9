"""The checkpoint reader (qbench.model.checkpoint) on variants of the committed trained checkpoint
made in tmp folders: identity by content (same bytes at two paths: one identity; one byte changed:
another; the on-disk digest cache used while inode, size, mtime and ctime are unchanged), and the one-line
refusals at validation time (a NaN or Inf tensor named, a truncated safetensors file)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qbench.model import checkpoint
from qbench.model.checkpoint import ConfigError, open_checkpoint, weight_source
from qbench.scenario import ScenarioError, from_dict

ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama"
HAMLET = ROOT / "data" / "text" / "hamlet.txt"
TENSOR = "model.layers.1.mlp.down_proj.weight"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A digest cache of this test alone, and no checkpoint opened earlier in the process."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(checkpoint.CACHE_ENV, str(folder))
    monkeypatch.setattr(checkpoint, "_OPENED", {})
    return folder


def _copy(dest: Path) -> Path:
    shutil.copytree(TRAINED, dest)
    return dest


def _set_value(folder: Path, name: str, value: float) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[7] = value
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    assert torch.is_tensor(tensors[name])


def test_same_bytes_at_two_paths_have_one_identity_and_one_byte_changes_it(tmp_path, cache):
    a, b = _copy(tmp_path / "a"), _copy(tmp_path / "elsewhere" / "b")
    ida, idb = open_checkpoint(a).identity, open_checkpoint(b).identity
    assert ida == idb == checkpoint.identity(TRAINED)
    assert len(ida) == 64 and int(ida, 16) >= 0
    data = bytearray((b / "model.safetensors").read_bytes())
    data[-5] ^= 0x01  # one bit of the last tensor's last bytes (a finite float stays finite)
    (b / "model.safetensors").write_bytes(bytes(data))
    assert open_checkpoint(b).identity != ida
    config = json.loads((a / "config.json").read_text())  # the config is part of it, canonically
    (a / "config.json").write_text(json.dumps(config, indent=4, sort_keys=False))
    assert open_checkpoint(a).identity == ida
    (a / "config.json").write_text(json.dumps({**config, "eos_token_id": 0}))
    assert open_checkpoint(a).identity != ida


def test_digest_cache_hit_while_the_file_is_untouched_and_missed_after_an_edit_that_keeps_size_and_mtime(tmp_path, cache):
    a = _copy(tmp_path / "a")
    first = open_checkpoint(a).identity
    records = json.loads((cache / "checkpoint-digests.json").read_text())
    assert list(records) == [str((a / "model.safetensors").resolve())]
    checkpoint._OPENED.clear()
    reads = []
    real = checkpoint.read_headers
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoint, "read_headers", lambda *args, **kw: reads.append(1) or real(*args, **kw))
        assert open_checkpoint(a).identity == first
    assert reads.count(1) == 1  # opened once (the lazy reader); the digest came from the cache, not a second read
    path = a / "model.safetensors"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime, but a new ctime: read again
    checkpoint._OPENED.clear()
    assert open_checkpoint(a).identity != first


def test_checkpoint_is_opened_once_per_process(tmp_path, cache, monkeypatch):
    a = _copy(tmp_path / "a")
    first = checkpoint.open_named(str(a), str(tmp_path / "s.toml"))
    monkeypatch.setattr(checkpoint, "read_headers", lambda *a, **k: pytest.fail("headers read twice"))
    assert checkpoint.open_named("a", str(tmp_path / "s.toml")) is first
    assert first.bos == 256 and first.tokenizer_path == a.resolve() / "tokenizer.json"
    assert first.dtype == "float32" and first.config.blocks == 4


def test_weight_source_is_a_normalized_label(tmp_path, cache):
    a = _copy(tmp_path / "a")
    (tmp_path / "sub").mkdir()
    ckpt = checkpoint.open_named("../a", str(tmp_path / "sub" / "s.toml"))
    assert weight_source(ckpt) == f"checkpoint {a.resolve()} (float32)" and ".." not in weight_source(ckpt)


@pytest.mark.parametrize("value, word", [(float("nan"), "NaN"), (float("inf"), "Inf"), (float("-inf"), "Inf")])
def test_non_finite_tensor_is_named(tmp_path, cache, value, word):
    a = _copy(tmp_path / "a")
    _set_value(a, TENSOR, value)
    with pytest.raises(ConfigError) as exc:
        open_checkpoint(a)
    assert exc.value.key == "model.checkpoint"
    assert str(exc.value).startswith(f"model.checkpoint: tensor {TENSOR} holds {word} (1 of 49152 values, in ")
    assert not (cache / "checkpoint-digests.json").exists()  # a refused file is never cached


def test_truncated_file_is_one_line(tmp_path, cache):
    a = _copy(tmp_path / "a")
    data = (a / "model.safetensors").read_bytes()
    (a / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(ConfigError) as exc:
        open_checkpoint(a)
    text = str(exc.value)
    assert text == (f"model.checkpoint: {(a / 'model.safetensors').resolve()} is not a readable safetensors file "
                    "(incomplete metadata, file not fully covered)")


def _step(folder: Path) -> dict:
    return {"name": "s", "device": "cpu", "m": [1], "model": {"checkpoint": str(folder), "context": [8]},
            "schemes": [{"name": "fp32"}]}


def _quality(folder: Path) -> dict:
    return {"name": "q", "device": "cpu", "model": {"checkpoint": str(folder)},
            "quality": {"text": str(HAMLET), "chunk": 256, "chunks": 2}, "schemes": [{"name": "fp32"}]}


@pytest.mark.parametrize("make", [_step, _quality], ids=["step", "quality"])
def test_scenario_validation_refuses_a_nan_weight(tmp_path, cache, make):
    a = _copy(tmp_path / "a")
    _set_value(a, TENSOR, float("nan"))
    with pytest.raises(ScenarioError) as exc:
        from_dict(make(a), "s.toml")
    assert str(exc.value).startswith(f"s.toml: model.checkpoint: tensor {TENSOR} holds NaN")
    assert "\n" not in str(exc.value)


def test_rows_record_the_identity(tmp_path, cache):
    pytest.importorskip("torch")
    from qbench.quality.measure import blank_rows as quality_rows
    from qbench.step.measure import blank_rows as step_rows

    a = _copy(tmp_path / "a")
    want = open_checkpoint(a).identity
    for make, blank in ((_step, step_rows), (_quality, quality_rows)):
        s = from_dict(make(a), str(tmp_path / "s.toml"))
        (row, *_) = blank(s, s.schemes[0], s.schemes[0].scheme, "cpu")
        assert row["checkpoint_id"] == want
    seeded = from_dict({"name": "s", "device": "cpu", "m": [1], "model": {"name": "tiny", "context": [8]},
                        "schemes": [{"name": "fp32"}]}, "s.toml")
    (row, *_) = step_rows(seeded, seeded.schemes[0], seeded.schemes[0].scheme, "cpu")
    assert row["checkpoint_id"] is None


def test_qbench_check_refuses_a_truncated_checkpoint_in_one_line(tmp_path, cache):
    a = _copy(tmp_path / "a")
    (a / "model.safetensors").write_bytes((a / "model.safetensors").read_bytes()[:-100])
    scenario = tmp_path / "q.toml"
    scenario.write_text(f'name = "q"\ndevice = "cpu"\n[model]\ncheckpoint = "a"\n[quality]\ntext = "{HAMLET}"\n'
                        'chunk = 256\nchunks = 2\n[[schemes]]\nname = "fp32"\n')
    proc = subprocess.run([sys.executable, "-m", "qbench", "check", str(scenario)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.checkpoint:" in lines[0] and "not fully covered" in lines[0], proc.stderr


def test_checkpoint_reads_biases_and_dtype(tmp_path, cache):
    from tests.quality.conftest import make_checkpoint

    ck = open_checkpoint(make_checkpoint(tmp_path / "ck", "qwen2"))
    assert ck.config.biased == ("q_proj", "k_proj", "v_proj") and ck.dtype == "float32"
    assert tuple(ck.bias(0, "k_proj").shape) == (64,) and ck.bias(0, "o_proj") is None


def test_a_folder_with_a_single_file_and_an_index_is_read_as_transformers_reads_it(tmp_path):
    """transformers loads model.safetensors before an index (second break trial: qbench read a
    zero-weight shard the index named while transformers read the single file)."""
    import json
    import shutil

    from qbench.model import checkpoint

    folder = tmp_path / "ck"
    shutil.copytree(ROOT / "data" / "checkpoints" / "tiny-shakespeare-llama", folder)
    (folder / "other.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    names = json.loads((folder / "model.safetensors").read_bytes()[8:8 + int.from_bytes(
        (folder / "model.safetensors").read_bytes()[:8], "little")])
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: "other.safetensors" for n in names if n != "__metadata__"}}))
    assert checkpoint.tensor_file(folder, "model.norm.weight") == folder / "model.safetensors"
