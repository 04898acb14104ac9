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


@pytest.mark.parametrize("edit", ["text", "weights", "config", "tokenizer"])
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
    elif edit == "config":
        config = json.loads((ck / "config.json").read_text())
        config["rms_norm_eps"] = 1e-3
        (ck / "config.json").write_text(json.dumps(config))
    else:  # a normalizer added: the same text gives other tokens (second break trial)
        tok = json.loads((ck / "tokenizer.json").read_text())
        tok["normalizer"] = {"type": "Lowercase"}
        (ck / "tokenizer.json").write_text(json.dumps(tok))
    capsys.readouterr()
    sc = scenario(tmp_path, ck, ["fp32", "bf16"], text=text)
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    key = {"text": "text_sha256", "tokenizer": "tokenizer_sha256"}.get(edit, "checkpoint_id")
    what = {"text": "the text's content", "tokenizer": "the tokenizer's content"}.get(edit, "the checkpoint's content")
    assert line.startswith(f"qbench: cannot resume: {out}: {what}")
    assert f"({key} '{kept[key][:12]}…' in row 'fp32', '" in line
    assert read_results(out).to_json()["rows"] == [kept]  # the kept file as it was


def _fake_calibrated_rows(monkeypatch):
    """As :func:`_fake_rows`, a calibrated scheme's row also carrying the ``calibration`` record the
    worker writes (:func:`qbench.quality.calibrate.record`: the calibration text's sha256)."""
    from qbench.quality import calibrate
    from qbench.quality.measure import blank_rows

    def rows(self, index):
        entry = self.scenario.schemes[index]
        (row,) = blank_rows(self.scenario, entry, entry.scheme, self.dev)
        if entry.scheme.needs_calibration:
            c = self.scenario.quality.calibration
            row["calibration"] = calibrate.record(self.scenario, c.chunks * (c.chunk or self.scenario.quality.chunk))
        return [{**row, "status": "skipped", "reason": "not measured (test)"}]

    monkeypatch.setattr(runner._Workers, "rows", rows)


def test_resume_refuses_rows_calibrated_on_another_calibration_text(tmp_path, monkeypatch, capsys):
    """The calibration text edited in place (same path, other bytes) between the interrupted run and
    the resume: the kept GPTQ row's calibration.text_sha256 is not the file's now, so the resume is
    refused like an edited evaluated text, naming the key and both digests, the file left as it was
    (the break trial found the old row kept beside new ones of another calibration)."""
    pytest.importorskip("torch")
    _fake_calibrated_rows(monkeypatch)
    ck = variant(tmp_path / "ck")
    cal = tmp_path / "cal.txt"
    cal.write_text(HAMLET.read_text(encoding="utf-8")[-20000:], encoding="utf-8")
    extra = f'calibration = {{ text = "{cal}", chunks = 2 }}'
    out = tmp_path / "q.json"
    assert cli.main(["run", str(scenario(tmp_path, ck, ["bf16", "int4-gptq"], extra=extra)), "--out", str(out),
                     "--quiet"]) == 1
    kept = read_results(out).to_json()["rows"]
    digest = kept[1]["calibration"]["text_sha256"]
    assert "calibration" not in kept[0] and len(digest) == 64
    sc = scenario(tmp_path, ck, ["bf16", "int4-gptq", "int4-awq"], extra=extra)
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 1  # the same bytes: resumed
    kept = read_results(out).to_json()["rows"]
    assert [r["scheme"] for r in kept] == ["bf16", "int4-gptq", "int4-awq"]
    cal.write_text(cal.read_text(encoding="utf-8")[::-1], encoding="utf-8")
    capsys.readouterr()
    sc = scenario(tmp_path, ck, ["bf16", "int4-gptq", "int4-awq", "int4-hqq"], extra=extra)
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert line.startswith(f"qbench: cannot resume: {out}: the calibration text's content changed since its rows "
                           f"were measured (calibration.text_sha256 '{digest[:12]}…' in row 'int4-gptq', '"), line
    assert read_results(out).to_json()["rows"] == kept  # the kept file as it was


def test_resume_of_another_scenario_names_the_key_that_differs(tmp_path, monkeypatch, capsys):
    """A refusal for another scenario names the innermost key that differs with both values, not the
    whole ``quality`` table cut off at 80 characters before it (the break trial's line ended in
    ``'reference': ...`` and hid ``calibration.first_chunk``); still one line."""
    pytest.importorskip("torch")
    _fake_calibrated_rows(monkeypatch)
    ck = variant(tmp_path / "ck")
    out = tmp_path / "q.json"
    assert cli.main(["run", str(scenario(tmp_path, ck, ["int4-gptq"], extra="calibration = { chunks = 2, "
                                         "first_chunk = 8 }")), "--out", str(out), "--quiet"]) == 1
    capsys.readouterr()
    sc = scenario(tmp_path, ck, ["int4-gptq", "int4-awq"], extra="calibration = { chunks = 2, first_chunk = 40 }")
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert line == (f"qbench: cannot resume: {out} was measured with another scenario (quality.calibration.first_chunk: "
                    "8 there, 40 now); choose another --out")
    sc = scenario(tmp_path, ck, ["int4-gptq"], chunk=64, chunks=4, extra="calibration = { chunks = 2, first_chunk = 8 }")
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert "(quality.chunk: 128 there, 64 now; quality.chunks: 2 there, 4 now)" in line, line


def test_resume_on_the_same_inputs_adds_the_missing_scheme(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    _fake_rows(monkeypatch)
    ck = variant(tmp_path / "ck")
    out = tmp_path / "q.json"
    assert cli.main(["run", str(scenario(tmp_path, ck, ["fp32"])), "--out", str(out), "--quiet"]) == 1
    sc = scenario(tmp_path, ck, ["fp32", "bf16"])
    assert cli.main(["run", str(sc), "--out", str(out), "--resume", "--quiet"]) == 1  # skipped rows only
    assert [r["scheme"] for r in read_results(out).to_json()["rows"]] == ["fp32", "bf16"]


# --- bad input refused at check: one line naming the file, the key and the value --------------------

def _set(key, value):
    def edit(c):
        c[key] = value
    return edit


def _rope_parameters(params):
    """transformers 5's spelling: RoPE in rope_parameters only (no rope_scaling, no top-level theta)."""
    def edit(c):
        c["rope_parameters"] = params
        c.pop("rope_scaling", None)
        c.pop("rope_theta", None)
    return edit


def _rope(scaling):
    def edit(c):
        c["rope_scaling"] = scaling
        c.pop("rope_parameters", None)
    return edit


def _shape(name, shape):
    """A header entry of tensor ``name`` whose shape is ``shape`` (written into the raw header)."""
    def edit(folder: Path):
        path = folder / "model.safetensors"
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        header[name] = shape
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    return edit


CONFIG_CASES = {
    # case: (config edit, key in the line, words in the line)
    "eps_inf": (_set("rms_norm_eps", float("inf")), "rms_norm_eps", ["must be a finite number", "inf"]),
    "rope_theta_inf": (lambda c: c.update(rope_theta=float("inf"), rope_parameters={"rope_type": "default",
                                                                                    "rope_theta": float("inf")}),
                       "rope_theta", ["must be a finite number"]),
    "theta_conflict": (_set("rope_theta", 500000.0), "rope_theta",
                       ["500000.0 at the top level", "rope_parameters.rope_theta = 10000.0", "transformers 5 reads "
                        "rope_parameters", "refuses the conflict"]),
    "rope_linear_nofactor": (_rope({"rope_type": "linear"}), "rope_scaling.factor",
                             ["missing", "rope_type 'linear' needs factor"]),
    "rope_linear_zero": (_rope({"rope_type": "linear", "factor": 0.0}), "rope_scaling.factor", ["must be > 0"]),
    "rope_llama3_partial": (_rope({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 256}), "rope_scaling.low_freq_factor",
                            ["missing"]),
    "rope_params_llama3_partial": (_rope_parameters({"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 256}),
                                   "rope_parameters.low_freq_factor", ["missing"]),  # the table the config wrote
    "bos_oob": (_set("bos_token_id", 300), "bos_token_id", ["one token id in 0..256", "got 300"]),
    "bos_neg": (_set("bos_token_id", -1), "bos_token_id", ["got -1"]),
    "bos_list": (_set("bos_token_id", [256]), "bos_token_id", ["got [256]"]),
    "layers_huge": (_set("num_hidden_layers", 1000000), "config.num_hidden_layers",
                    ["1000000 in", "holds the tensors of 4 blocks"]),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_config_values_are_one_line_at_check(tmp_path, capsys, case):
    edit, key, words = CONFIG_CASES[case]
    ck = variant(tmp_path / "ck", config=edit)
    rc, lines = check_line(scenario(tmp_path, ck), capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert f": model.checkpoint.{key}: " in lines[0], lines[0]
    for w in words:
        assert w in lines[0], lines[0]


def test_mistral_chunk_beyond_the_sliding_window_is_refused(tmp_path, capsys):
    ck = variant(tmp_path / "ck", config=lambda c: c.update(model_type="mistral", sliding_window=32))
    rc, lines = check_line(scenario(tmp_path, ck, chunk=128), capsys)
    assert rc == 2 and len(lines) == 1
    assert "quality.chunk: longer than" in lines[0] and "sliding_window = 32 (mistral)" in lines[0]
    assert "got 128" in lines[0]
    capsys.readouterr()
    rc, lines = check_line(scenario(tmp_path, ck, chunk=32, chunks=8, name="ok.toml"), capsys)
    assert rc == 0, lines  # within the window: full attention is the window's attention
    rc, lines = check_line(scenario(tmp_path, ck, ["int4-gptq"], chunk=32, chunks=8, name="cal.toml",
                                    extra="calibration = { chunks = 2, first_chunk = 40, chunk = 64 }"), capsys)
    assert rc == 2 and len(lines) == 1 and "quality.calibration.chunk: longer than" in lines[0], lines
    assert "sliding_window = 32 (mistral)" in lines[0] and "use chunk <= 32, got 64" in lines[0]


def test_step_context_beyond_the_sliding_window_is_refused(tmp_path, capsys):
    ck = variant(tmp_path / "ck", config=lambda c: c.update(model_type="mistral", sliding_window=32))
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\ndevice = "cpu"\nm = [1]\n[model]\ncheckpoint = "{ck}"\ncontext = [64]\n'
                    '[[schemes]]\nname = "fp32"\n')
    rc, lines = check_line(path, capsys)
    assert rc == 2 and len(lines) == 1 and "model.context: the step at context 64" in lines[0], lines
    assert "sliding_window = 32" in lines[0]


@pytest.mark.parametrize("shape", [128, None, "x"], ids=["int", "null", "str"])
def test_malformed_header_shape_is_one_line(tmp_path, capsys, shape):
    ck = variant(tmp_path / "ck")
    entry = {"dtype": "F32", "shape": shape, "data_offsets": [0, 4]}
    _shape("model.norm.weight", entry)(ck)
    rc, lines = check_line(scenario(tmp_path, ck), capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert "model.checkpoint: " in lines[0] and "is not a readable safetensors file" in lines[0], lines[0]


def test_header_entry_that_is_not_an_object_is_one_line(tmp_path, capsys):
    ck = variant(tmp_path / "ck")
    _shape("model.norm.weight", ["F32", [128], [0, 512]])(ck)
    rc, lines = check_line(scenario(tmp_path, ck), capsys)
    assert rc == 2 and len(lines) == 1 and "is not a readable safetensors file" in lines[0], lines


@pytest.mark.parametrize("lie", ["offsets", "dtype", "truncated"])
def test_lying_or_truncated_safetensors_is_refused_at_check(tmp_path, capsys, lie):
    ck = variant(tmp_path / "ck")
    path = ck / "model.safetensors"
    if lie == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        entry = header["model.norm.weight"]
        if lie == "offsets":
            entry["data_offsets"] = [entry["data_offsets"][0], entry["data_offsets"][1] + 4]
        else:
            entry["dtype"] = "F16"
        _shape("model.norm.weight", entry)(ck)
    rc, lines = check_line(scenario(tmp_path, ck), capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert f"model.checkpoint: {path.resolve()} is not a readable safetensors file (" in lines[0], lines[0]


def _sharded(folder: Path, weight_map_value) -> None:
    """The checkpoint as an index naming one shard, the first tensor's entry replaced by ``weight_map_value``."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        names = list(f.keys())
    shard = "model-00001-of-00001.safetensors"
    (folder / "model.safetensors").rename(folder / shard)
    weight_map = {n: shard for n in names}
    weight_map[names[0]] = weight_map_value
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


@pytest.mark.parametrize("value", [1, "../ck/model-00001-of-00001.safetensors", "/etc/passwd"],
                         ids=["nonstr", "traversal", "absolute"])
def test_index_shard_that_is_not_a_file_of_the_folder_is_refused(tmp_path, capsys, value):
    ck = variant(tmp_path / "ck")
    _sharded(ck, value)
    rc, lines = check_line(scenario(tmp_path, ck), capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert "model.checkpoint.index.weight_map: " in lines[0] and f"names shard {value!r}, which is not in" in lines[0]


@pytest.mark.parametrize("kind", ["fifo", "devzero", "folder"])
def test_text_that_is_not_a_regular_file_is_refused(tmp_path, capsys, kind):
    ck = variant(tmp_path / "ck")
    if kind == "fifo":
        text = tmp_path / "fifo"
        os.mkfifo(text)
    elif kind == "devzero":
        text = Path("/dev/zero")
    else:
        text = tmp_path
    rc, lines = check_line(scenario(tmp_path, ck, text=text), capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert f"quality.text: {text} is not a regular file" in lines[0]


# --- what check says of how a checkpoint is read ------------------------------------------------------

def _check_out(path: Path, capsys) -> str:
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_check_says_every_whole_chunk_and_no_bos(tmp_path, capsys):
    ck = variant(tmp_path / "ck", config=lambda c: c.pop("bos_token_id"))
    out = _check_out(scenario(tmp_path, ck, chunks=None), capsys)
    assert "every whole chunk of 128 tokens" in out
    assert "note: config.json has no bos_token_id: no BOS is put first in a chunk" in out


def test_tied_config_with_a_stored_head_uses_the_head_as_transformers_5(tmp_path, capsys):
    ck = variant(tmp_path / "ck", config=_set("tie_word_embeddings", True))
    out = _check_out(scenario(tmp_path, ck), capsys)
    assert "tie_word_embeddings is true but lm_head.weight is stored: the stored head is used" in out
    opened = checkpoint.open_checkpoint(ck)
    assert opened.config.tie_embeddings is False


def test_fewer_layers_than_tensors_are_noted(tmp_path, capsys):
    ck = variant(tmp_path / "ck", config=_set("num_hidden_layers", 2))
    out = _check_out(scenario(tmp_path, ck), capsys)
    assert "holds the tensors of 4 blocks; num_hidden_layers = 2 uses the first 2" in out


def test_mixed_dtypes_take_the_config_dtype_and_say_so(tmp_path, capsys):
    ck = variant(tmp_path / "ck", tensors=lambda t: t.update(
        {"model.layers.0.self_attn.q_proj.weight": t["model.layers.0.self_attn.q_proj.weight"].bfloat16()}))
    out = _check_out(scenario(tmp_path, ck), capsys)
    assert checkpoint.open_checkpoint(ck).dtype == "float32"
    assert "the tensors' dtypes are mixed (" in out and "1 tensor bfloat16" in out
    assert "taken as float32 (config.json's dtype)" in out


# --- tokenizing only what the run uses ----------------------------------------------------------------

def test_only_the_prefix_the_chunks_need_is_tokenized_and_it_equals_the_whole_texts(tmp_path, cache):
    from qbench.quality import spec
    from qbench.scenario import load

    big = tmp_path / "big.txt"
    big.write_text(HAMLET.read_text(encoding="utf-8") * 40, encoding="utf-8")  # ~7 MB
    sc = load(scenario(tmp_path, TRAINED, text=big, chunk=128, chunks=2))
    calls = []
    from tokenizers import Tokenizer

    real = Tokenizer.encode

    def encode(self, text, *a, **kw):
        calls.append(len(text))
        return real(self, text, *a, **kw)

    spec._TOKENS.clear()
    shutil.rmtree(cache / "tokens")  # validation's ids: tokenized again here, under the patch
    import unittest.mock

    with unittest.mock.patch.object(Tokenizer, "encode", encode):
        ids = spec.read_tokens(sc.model, sc.quality, sc.source)
        assert spec.read_tokens(sc.model, sc.quality, sc.source) is ids  # once per process
    assert len(ids) == 256 and len(calls) == 1 and calls[0] < 8 * 1024, calls
    whole = Tokenizer.from_file(str(TRAINED / "tokenizer.json")).encode(
        HAMLET.read_text(encoding="utf-8"), add_special_tokens=False).ids
    assert ids == whole[:256]


def test_a_text_is_tokenized_once_per_run_and_again_after_an_edit(tmp_path, cache):
    """Validation tokenizes and writes the ids to the disk cache; a worker (a new process: the memo
    empty) reads them without tokenizing; an edited text (same size, mtime restored) misses."""
    from tokenizers import Tokenizer

    from qbench.quality import spec
    from qbench.scenario import load

    text = tmp_path / "t.txt"
    text.write_text(HAMLET.read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    sc = load(scenario(tmp_path, TRAINED, text=text, chunk=128, chunks=2))  # validation tokenizes
    first = spec.read_tokens(sc.model, sc.quality, sc.source)
    assert len(list((cache / "tokens").glob("*.npy"))) == 1
    calls = []
    real = Tokenizer.encode

    def encode(self, t, *a, **kw):
        calls.append(len(t))
        return real(self, t, *a, **kw)

    import unittest.mock

    with unittest.mock.patch.object(Tokenizer, "encode", encode):
        spec._TOKENS.clear()  # a worker process
        again = spec.read_tokens(sc.model, sc.quality, sc.source)
        assert again == first and calls == []
        st = text.stat()
        body = text.read_text(encoding="utf-8")
        text.write_text(("X" + body[1:]), encoding="utf-8")
        os.utime(text, ns=(st.st_atime_ns, st.st_mtime_ns))
        spec._TOKENS.clear()
        edited = spec.read_tokens(sc.model, sc.quality, sc.source)
    assert len(calls) == 1 and edited != first
    assert edited == Tokenizer.from_file(str(TRAINED / "tokenizer.json")).encode(
        ("X" + body[1:]), add_special_tokens=False).ids[:256]


@pytest.mark.parametrize("damage", ["empty", "truncated", "0-d", "float", "2-d"])
def test_a_damaged_token_cache_file_is_a_miss_and_is_rewritten(tmp_path, cache, damage):
    import numpy as np

    from qbench.quality import spec
    from qbench.scenario import load

    sc = load(scenario(tmp_path, TRAINED, chunk=128, chunks=2))
    spec._TOKENS.clear()
    good = spec.read_tokens(sc.model, sc.quality, sc.source)
    (path,) = (cache / "tokens").glob("*.npy")
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:60])
    else:
        value = {"0-d": np.int64(7), "float": np.asarray(good, dtype=np.float64),
                 "2-d": np.asarray(good).reshape(2, -1)}[damage]
        np.save(path, value)
    spec._TOKENS.clear()
    assert spec.read_tokens(sc.model, sc.quality, sc.source) == good
    assert np.load(path).tolist() == good  # rewritten


# --- non-finite statistics and a degenerate reference: a failed row naming the cause ------------------

def _row(scenario_path: Path, index: int, shared: Path) -> dict:
    torch = pytest.importorskip("torch")
    from qbench.quality.measure import measure_quality_scheme
    from qbench.scenario import load

    (row,) = measure_quality_scheme(load(scenario_path), index, torch.device("cpu"), shared_dir=str(shared))
    return row


def test_fp16_overflow_is_a_failed_row_naming_it_and_other_rows_are_kept(tmp_path):
    name = "model.layers.0.mlp.down_proj.weight"
    ck = variant(tmp_path / "ck", tensors=lambda t: t.update({name: t[name] * 3e4}))
    sc = scenario(tmp_path, ck, ["fp32", "fp16"])
    fp32, fp16 = _row(sc, 0, tmp_path), _row(sc, 1, tmp_path)
    assert fp32["status"] == "ok" and fp32["stats"]["kld"]["mean"] == 0
    assert fp16["status"] == "failed"
    assert fp16["reason"].startswith("non-finite statistics (nll on ")
    assert "likely float16 overflow: the model's activations exceed float16's range (6.55e+04)" in fp16["reason"]
    assert "pydantic" not in fp16["reason"]


def test_a_huge_finite_weight_is_a_failed_row_naming_the_statistics(tmp_path):
    """One weight of 1e30 (the second break trial): per-token values stay finite but the perplexity
    overflows e^x; a failed row names the statistics and the cause (was an OverflowError, then a
    pydantic message, in every row)."""
    ck = variant(tmp_path / "ck", tensors=lambda t: t["model.norm.weight"].__setitem__(0, 1e30))
    row = _row(scenario(tmp_path, ck, ["bf16"]), 0, tmp_path)
    assert row["status"] == "failed" and "pydantic" not in row["reason"]
    assert row["reason"].startswith("non-finite statistics (ppl"), row["reason"]
    assert "far out of range in the checkpoint" in row["reason"]


def test_constant_reference_is_a_failed_row(tmp_path):
    """A zero final norm makes every logit 0, as the repro's 1e30 weight saturated the model."""
    ck = variant(tmp_path / "ck", tensors=lambda t: t["model.norm.weight"].zero_())  # every logit 0
    sc = scenario(tmp_path, ck, ["bf16"])
    row = _row(sc, 0, tmp_path)
    assert row["status"] == "failed"
    assert row["reason"].startswith("degenerate reference: its logits are constant on every scored token "
                                    "(perplexity 257, the vocabulary is 257)"), row["reason"]


def test_near_uniform_reference_is_flagged(tmp_path):
    ck = variant(tmp_path / "ck", tensors=lambda t: [v.mul_(0.02) for k, v in t.items() if "norm" not in k])
    row = _row(scenario(tmp_path, ck, ["fp32"]), 0, tmp_path)
    assert row["status"] == "ok"
    assert row["stats"]["ref_ppl"] > 0.9 * 257
    (flag,) = [f for f in row["flags"] if f["name"] == "input-fault"]
    assert flag["text"].startswith("degenerate reference: perplexity ")


# --- keys and options that would be ignored, and recipes refused at check ----------------------------

@pytest.mark.parametrize("extra, key", [("blocks = 1", "model.blocks"), ('methods = ["eager"]', "model.methods"),
                                        ("quantize_lm_head = true", "model.quantize_lm_head")],
                         ids=["blocks", "methods", "quantize_lm_head"])
def test_step_keys_in_a_quality_model_table_are_refused(tmp_path, capsys, extra, key):
    path = scenario(tmp_path, TRAINED)
    text = path.read_text().replace("[quality]", f"{extra}\n[quality]")
    path.write_text(text)
    rc, lines = check_line(path, capsys)
    assert rc == 2 and len(lines) == 1 and key in lines[0], lines


def test_tf32_as_a_recipe_base_is_refused(tmp_path, capsys):
    path = scenario(tmp_path, TRAINED, [])
    path.write_text(path.read_text() + '[[schemes]]\nname = "tf32"\nrecipe = { v = "fp32" }\n')
    rc, lines = check_line(path, capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert "schemes[0].name: tf32 is a process-wide matmul setting" in lines[0]
    assert "cannot be a recipe's base" in lines[0] and "got 'tf32'" in lines[0]


@pytest.mark.parametrize("entry", ['name = "int4-weight-only"\ngroup_size = 256',
                                   'name = "int8-weight-only"\nrecipe = { down = { name = "int4-weight-only", '
                                   'group_size = 256 } }'], ids=["plain", "recipe"])
def test_group_size_k_does_not_divide_is_refused_at_check(tmp_path, capsys, entry):
    path = scenario(tmp_path, TRAINED, [])
    path.write_text(path.read_text() + f"[[schemes]]\n{entry}\n")
    rc, lines = check_line(path, capsys)
    assert rc == 2 and len(lines) == 1, lines
    role = "q_proj (K=128, N=128)" if "recipe" not in entry else "down_proj (K=384, N=128)"
    assert "schemes[0]: " in lines[0] and f"cannot take {role}: needs K a multiple of 256" in lines[0], lines[0]


def test_repeat_on_a_quality_scenario_is_refused(tmp_path, capsys):
    rc = cli.main(["run", str(scenario(tmp_path, TRAINED)), "--repeat", "2", "--out", str(tmp_path / "o.json")])
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("qbench: --repeat: a quality scenario's statistics"), lines
    assert not (tmp_path / "o.json").exists()


# --- messages that point to the fix (newcomer trial, friction 12) ---------------------------------------

def test_a_relative_org_name_path_says_where_relative_paths_are_read(tmp_path, capsys):
    """``my/my-llama`` looks like a Hugging Face id; the refusal still says a relative path is read
    from the scenario file's folder (the user's path was relative to their working directory)."""
    (tmp_path / "my").mkdir()
    path = scenario(tmp_path / "my", Path("my/my-llama"))
    rc, lines = check_line(path, capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert "model.checkpoint: no folder" in lines[0] and "read from the scenario file's folder" in lines[0]


def test_a_missing_tokenizer_names_the_quality_tokenizer_key(tmp_path, capsys):
    ck = variant(tmp_path / "ck")
    (ck / "tokenizer.json").unlink()
    rc, lines = check_line(scenario(tmp_path, ck), capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert "no tokenizer file" in lines[0] and "[quality] tokenizer" in lines[0]


def test_chunks_far_beyond_the_text_are_refused_before_it_is_tokenized(tmp_path, monkeypatch, capsys):
    # the break trial's chunks = 999999 on a large text tokenized it whole (9.6 GB resident) before the refusal;
    # (first_chunk + chunks) x chunk tokens beyond 4 a byte are refused from the file's size, the tokenizer never run
    from qbench.quality import spec as qspec

    text = tmp_path / "t.txt"
    text.write_text("to be or not to be\n" * 60000)  # 1,140,000 bytes: at most 4,560,000 tokens
    monkeypatch.setattr(qspec, "read_tokens", lambda *a, **k: pytest.fail("tokenized"))
    rc, err = check_line(scenario(tmp_path, TRAINED, text=text, chunk=128, chunks=999999), capsys)
    assert rc == 2 and len(err) == 1
    assert "quality.chunks" in err[0] and "is 1140000 bytes" in err[0] and "127999872 tokens" in err[0]
    assert err[0].endswith("got 999999")
