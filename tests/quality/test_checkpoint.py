"""Checkpoints as users have them (sharded, tied embeddings, Qwen2 biases), checked against
``transformers``; bad checkpoints and texts refused in one line before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from qbench.scenario import ScenarioError, load
from tests.quality.conftest import TEXT, hf_nll, make_checkpoint, run_scheme, write_scenario

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind, tied, shard", [("llama", False, False), ("llama", True, False),
                                               ("llama", False, True), ("qwen2", False, False)],
                         ids=["llama", "tied", "sharded", "qwen2-bias"])
def test_reference_perplexity_equals_transformers(tmp_path, kind, tied, shard):
    ck = make_checkpoint(tmp_path / "ck", kind, tied=tied, shard=shard)
    if shard:
        assert (ck / "model.safetensors.index.json").is_file()
    scenario = write_scenario(tmp_path, ck, ["fp32"], chunk=64, chunks=4)
    row = run_scheme(scenario, 0, tmp_path)
    assert row["status"] == "ok", row.get("reason")
    ids = [b for b in TEXT.encode()]
    nll = hf_nll(ck, ids, 64, 4, bos=256)
    hf_ppl = float(torch.tensor(nll, dtype=torch.float64).mean().exp())
    assert row["stats"]["tokens"] == len(nll) == 4 * 31
    assert row["stats"]["ref_ppl"] == pytest.approx(hf_ppl, rel=1e-5)
    # the fp32 scheme runs the reference's computation: KL 0, every top token the same
    assert row["stats"]["kld"]["mean"] == 0 and row["stats"]["same_top"] == 1.0


def _refused(path, key: str, *words: str) -> str:
    with pytest.raises(ScenarioError) as exc:
        load(path)
    text = str(exc.value)
    assert exc.value.key.startswith(key), text
    assert "\n" not in text and text.startswith(str(path))
    for w in words:
        assert w in text, text
    return text


def test_no_tokenizer(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    (ck / "tokenizer.json").unlink()
    _refused(write_scenario(tmp_path, ck, ["fp32"]), "model.checkpoint.tokenizer.json", "tokenizer.json")


def test_text_shorter_than_one_chunk(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    _refused(write_scenario(tmp_path, ck, ["fp32"], text="too short", chunks=1), "quality.text", "9 tokens", "64")


def test_too_few_scored_tokens(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    _refused(write_scenario(tmp_path, ck, ["fp32"], chunks=2), "quality.chunks", "62 scored tokens", "100")


def test_not_llama_family(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    config = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    _refused(write_scenario(tmp_path, ck, ["fp32"]), "model.checkpoint.model_type", "'gpt2'")


def test_index_naming_a_missing_shard(tmp_path):
    ck = make_checkpoint(tmp_path / "ck", shard=True)
    index = json.loads((ck / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    (ck / shard).unlink()
    _refused(write_scenario(tmp_path, ck, ["fp32"]), "model.checkpoint.index.weight_map", shard)


def test_weight_of_the_wrong_shape(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    config = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**config, "intermediate_size": 192}))
    _refused(write_scenario(tmp_path, ck, ["fp32"]), "model.checkpoint.model.layers.0.mlp.gate_proj.weight",
             "[256, 128]", "[192, 128]")


def test_weight_of_the_wrong_dtype(tmp_path):
    from safetensors.torch import load_file, save_file

    ck = make_checkpoint(tmp_path / "ck")
    tensors = load_file(ck / "model.safetensors")
    tensors["model.layers.1.self_attn.v_proj.weight"] = tensors["model.layers.1.self_attn.v_proj.weight"].to(torch.int8)
    save_file(tensors, ck / "model.safetensors")
    _refused(write_scenario(tmp_path, ck, ["fp32"]), "model.checkpoint.model.layers.1.self_attn.v_proj.weight", "'I8'")


def test_cli_refuses_bad_input_and_writes_nothing(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    (ck / "tokenizer.json").unlink()
    scenario = write_scenario(tmp_path, ck, ["fp32"])
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "qbench", "run", str(scenario), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "tokenizer.json" in proc.stderr
    assert not out.exists() and not list(tmp_path.glob("out*"))
