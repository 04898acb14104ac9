"""The quality job end to end on the CPU: every registered scheme, the flags, sensitivity, the
run's files, and the pick on speed and quality together."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qbench import schemes
from tests.quality.conftest import TEXT, make_checkpoint, run_scheme, write_scenario

ROOT = Path(__file__).resolve().parents[2]
HAMLET = ROOT / "data" / "text" / "hamlet.txt"

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ck(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("q") / "ck")


@pytest.mark.parametrize("name", [s.name for s in schemes.all_schemes()])
def test_every_registered_scheme(tmp_path, ck, name):
    """Each scheme gives an ok row (its kernel, or emulated and flagged so) or a skipped row saying why."""
    scheme = schemes.get(name)
    # another text: TEXT repeats one sentence, so no span of it is held out from the evaluated chunks
    extra = f'calibration = {{ text = "{HAMLET}", chunks = 2 }}' if scheme.needs_calibration else ""
    row = run_scheme(write_scenario(tmp_path, ck, [name], extra=extra), 0, tmp_path)
    assert row["status"] in ("ok", "skipped"), row.get("reason")
    if row["status"] == "skipped":
        assert row["reason"]
        return
    s = row["stats"]
    assert s["tokens"] == 4 * 31 and s["kld"]["mean"] > -1e-6 and 0 <= s["same_top"] <= 1
    emulated = scheme.unavailable_reason(torch.device("cpu"), scheme.options_model()) is not None
    assert row["emulated"] == emulated
    assert ("emulated" in [f["name"] for f in row["flags"]]) == emulated
    if emulated:  # an emulation that fake-quantizes activations dynamically is an estimate, and its flag says so
        text = next(f["text"] for f in row["flags"] if f["name"] == "emulated")
        estimate = scheme.emulate(torch.randn(256, 256), None, scheme.options_model()).estimate
        assert ("an estimate" in text) == estimate, text
        assert estimate == (name in ("fp8-dynamic", "w8a8-dynamic", "fp8-int4", "int8-bnb", "fp8-dynamic-gemlite"))
    if not emulated:
        assert row["linear_stored_bytes"] > 0
    assert row["reference"]["dtype"] == "float32"


def test_reference_is_computed_once_per_run(tmp_path, ck):
    scenario = write_scenario(tmp_path, ck, ["fp32", "bf16"])
    first, second = run_scheme(scenario, 0, tmp_path), run_scheme(scenario, 1, tmp_path)
    assert first["reference"]["computed_s"] > 0 and "computed_s" not in second["reference"]
    assert len(list(tmp_path.glob("quality-reference-*.bin"))) == 1
    assert first["stats"]["ref_ppl"] == second["stats"]["ref_ppl"]


def test_bf16_is_closer_than_int8_weight_only(tmp_path, ck):
    scenario = write_scenario(tmp_path, ck, ["bf16", "int8-weight-only", "int4-intx"])
    kld = [run_scheme(scenario, i, tmp_path)["stats"]["kld"]["mean"] for i in range(3)]
    assert 0 < kld[0] < kld[1] < kld[2]


def test_sensitivity_by_role_and_by_block(tmp_path, ck):
    row = run_scheme(write_scenario(tmp_path, ck, ["int4-intx"], extra='sensitivity = "role"'), 0, tmp_path)
    parts = row["sensitivity"]
    assert sorted(p["part"] for p in parts) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                       "down_proj"])
    assert [p["kld"] for p in parts] == sorted((p["kld"] for p in parts), reverse=True)
    assert all(p["kld"] < row["stats"]["kld"]["mean"] * 1.5 for p in parts)  # one part alone, not the whole model
    other = tmp_path / "block"
    other.mkdir()
    row = run_scheme(write_scenario(other, ck, ["int4-intx"], extra='sensitivity = "block"'), 0, other)
    assert sorted(p["part"] for p in row["sensitivity"]) == ["block 0", "block 1"]


def test_seeded_preset_is_flagged_synthetic(tmp_path, ck):
    (tmp_path / "text.txt").write_text(TEXT)
    path = tmp_path / "q.toml"
    path.write_text(f'name = "q"\ndevice = "cpu"\n[model]\nname = "tiny"\n[quality]\ntext = "text.txt"\nchunk = 64\n'
                    f'chunks = 4\ntokenizer = "{ck / "tokenizer.json"}"\n[[schemes]]\nname = "bf16"\n')
    row = run_scheme(path, 0, tmp_path)
    assert [f["name"] for f in row["flags"]] == ["synthetic-weights"] and row["weights"].startswith("seeded")


def test_prequantized_checkpoint_is_flagged(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    (ck / "qbench-prequantized.json").write_text(json.dumps({"note": "dequantized from a Q4_1 GGUF"}))
    row = run_scheme(write_scenario(tmp_path, ck, ["int8-weight-only"]), 0, tmp_path)
    assert {"name": "prequantized-weights", "text": "dequantized from a Q4_1 GGUF"} in row["flags"]


def test_compiled_entry_is_measured_eager_and_flagged(tmp_path, ck):
    path = write_scenario(tmp_path, ck, [])
    path.write_text(path.read_text() + '[[schemes]]\nname = "bf16"\nmode = "compiled"\n')
    row = run_scheme(path, 0, tmp_path)
    assert "not-compiled" in [f["name"] for f in row["flags"]]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qbench", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_run_then_recommend_on_both_halves(tmp_path, ck):
    """qbench run of a quality scenario and of a step scenario on the same checkpoint; recommend
    --max-kld picks per (M, context) among the schemes within the budget; model shows both halves."""
    quality = write_scenario(tmp_path, ck, ["fp32", "bf16", "int8-weight-only"])
    proc = _run("run", str(quality), "--out", "quality.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "mean KLD" in proc.stdout and "llama.cpp's convention" in proc.stdout
    (tmp_path / "step.toml").write_text(
        f'name = "s"\ndevice = "cpu"\nm = [1]\n[model]\ncheckpoint = "{ck}"\ncontext = [16]\nmethods = ["step_cpu"]\n'
        '[timing]\nwarmup = 1\nmin_reps = 3\nmax_reps = 5\nbudget_s = 0.05\n'
        '[[schemes]]\nname = "fp32"\n[[schemes]]\nname = "bf16"\n[[schemes]]\nname = "int8-weight-only"\n')
    proc = _run("run", "step.toml", "--out", "step.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    q = {r["scheme"]: r for r in json.loads((tmp_path / "quality.json").read_text())["rows"]}
    budget = (q["bf16"]["stats"]["kld"]["mean"] + q["int8-weight-only"]["stats"]["kld"]["mean"]) / 2
    proc = _run("recommend", "step.json", "quality.json", "--max-kld", f"{budget:.6g}", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (rec,) = json.loads(proc.stdout)["by_m_context"]
    assert (rec["m"], rec["context"]) == (1, 16) and rec["pick"] in ("fp32", "bf16")  # int8 is outside the budget
    assert rec["quality"]["kld"] <= budget
    proc = _run("recommend", "step.json", "quality.json", "--max-kld", "1e-12", cwd=tmp_path)
    assert "outside the budget: bf16 (mean KLD" in proc.stdout  # only the reference's own computation meets 1e-12
    proc = _run("model", "ck", "step.json", "quality.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert " M=1/16" in proc.stdout and "speed-up over bf16" in proc.stdout and "mean KLD" in proc.stdout
    proc = _run("recommend", "step.json", "quality.json", "--max-rel-err", "0.01", cwd=tmp_path)
    assert proc.returncode == 2 and "--max-kld" in proc.stderr
    proc = _run("compare", "quality.json", "quality.json", cwd=tmp_path)
    assert proc.returncode == 2 and "quality result" in proc.stderr


def test_recommend_refuses_step_and_quality_of_different_weights(tmp_path, ck):
    from qbench import decision as view

    class R:  # the fields the check reads: a file's rows and scenario, a row's weights and checkpoint_id
        def __init__(self, **kw):
            self.__dict__.update(kw)

    def doc(model, **row):
        return R(rows=[R(checkpoint_id=None, **row)], scenario=R(model_extra={"model": model, "source": "x.toml"}))

    # a seeded step of Llama-3-8B's shapes is no speed half of this checkpoint: the configs differ
    step = doc({"name": "llama3-8b"}, weight_source="seeded ...")
    quality = doc({"checkpoint": str(ck)}, weights=f"checkpoint {ck} (float32)")
    why, note = view.pairing([step], [quality])
    assert why and "hidden 4096" in why and "must have the quality checkpoint's config" in why and note is None
    # two checkpoint paths, no checkpoint_id: the paths differ
    why, _ = view.pairing([doc({}, weight_source="checkpoint other (float32)")], [quality])
    assert why and "the paths differ" in why and "same checkpoint" in why
    # a step file with a checkpoint_id beside an older quality file without one, of another config: said as another
    # model, not as a missing checkpoint_id (a newcomer's fresh step beside the committed SmolLM2 quality file)
    newer = doc({"name": "llama3-8b"}, weight_source="checkpoint x (float32)")
    newer.rows[0].checkpoint_id = "a" * 64
    why, _ = view.pairing([newer], [quality])
    assert why.startswith("the step files ran hidden 4096") and "another model" in why and "checkpoint_id" not in why


def test_step_and_quality_halves_of_different_kv_caches_are_refused():
    """A step file with the cache at the activation dtype beside a quality file through an fp8 cache (or the
    reverse) is not one configuration: the joined pick would show a KLD that includes a cache the step never ran."""
    from types import SimpleNamespace as R

    from qbench import decision

    def step(dtype):
        return R(rows=[R(kv_cache={"dtype": dtype, "itemsize": 2}), R(kv_cache=None)])  # a row before kv_cache

    def quality(kv):
        return R(rows=[R(kv_cache=kv)])

    fp8 = {"dtype": "float8_e4m3fn", "scale": "static per (block, KV head)"}
    why = decision.kv_caches([step("bfloat16")], [quality(fp8)])
    assert why == ("the step files ran activation-dtype KV caches, the quality files fp8 ones: a model decision "
                   "takes speed and quality with the same cache (pair an fp8-cache step file with an fp8-cache "
                   "quality file)")
    assert decision.kv_caches([R(rows=[R(kv_cache={"dtype": "float8_e4m3fn"})])], [quality(None)]).startswith(
        "the step files ran fp8 KV caches, the quality files activation-dtype ones")
    assert decision.kv_caches([step("bfloat16")], [quality(None)]) is None
    assert decision.kv_caches([R(rows=[R(kv_cache={"dtype": "float8_e4m3fn"})])], [quality(fp8)]) is None
    # two caches on each side: equal sets, yet rows would pair across caches (break trial 7, defect 1)
    both = [R(rows=[R(kv_cache={"dtype": "float8_e4m3fn"})]), step("bfloat16")]
    assert decision.kv_caches(both, [quality(fp8), quality(None)]) == (
        "the step files ran activation-dtype and fp8 KV caches: a model decision reads one cache at a time; give the "
        "step and quality files of one cache")


def test_a_step_row_in_two_step_files_is_refused_by_the_joined_pick(tmp_path):
    """Two runs of one step scenario beside a quality file: the joined pick would pool both runs' rows (ties named
    twice); refused in one line naming both files, as qbench model on step files refuses it."""
    import shutil

    step = ROOT / "results" / "h200" / "step_tiny_trained.json"
    copy = shutil.copy(step, tmp_path / "again.json")
    proc = _run("recommend", str(step), str(copy), str(ROOT / "results" / "h200" / "quality_tiny.json"),
                "--max-kld", "0.01", cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (f"qbench recommend: {copy}: fp32 at M=1, context 128 is in {step} too: a "
                                           "model decision reads one run per step row; to compare runs give the "
                                           "step files alone")


@pytest.mark.parametrize("command", [["model", "m"], ["recommend"]])
def test_quality_files_of_two_checkpoints_are_refused(command):
    """The committed tiny and SmolLM2 quality files side by side: one line, exit 2 (schemes are
    compared on one checkpoint at a time); the H200 and CPU files of one checkpoint are accepted."""
    files = ["results/cpu/quality_tiny.json", "results/cpu/quality_smollm2.json"]
    proc = _run(*command, *files, "--max-kld", "0.01", cwd=ROOT) if command == ["recommend"] else \
        _run(*command, *files, cwd=ROOT)
    assert proc.returncode == 2 and "2 different weights" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = _run("recommend", "results/h200/quality_tiny.json", "results/cpu/quality_tiny.json", "--max-kld", "0.01",
                cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_float16_logprobs_keep_the_reference_exact(tmp_path, ck):
    """Log-probabilities shared at float16: each scheme's are rounded the same way, so the reference
    against itself is still KL 0; a quantized scheme's KL stays close to the float32 file's."""
    exact = run_scheme(write_scenario(tmp_path, ck, ["fp32", "int4-intx"]), 1, tmp_path)
    half = tmp_path / "half"
    half.mkdir()
    scenario = write_scenario(half, ck, ["fp32", "int4-intx"], extra='logprobs = "float16"')
    ref, q = run_scheme(scenario, 0, half), run_scheme(scenario, 1, half)
    assert ref["stats"]["kld"]["mean"] == 0 and ref["reference"]["logprobs"] == "float16"
    assert q["stats"]["kld"]["mean"] == pytest.approx(exact["stats"]["kld"]["mean"], rel=0.05, abs=1e-4)


def test_recommend_on_prequantized_rows_says_where_the_weights_come_from(capsys):
    """A budget read off the committed SmolLM2 rows (weights already on Q4_1's grid) names the bias
    under the table: int4 at group 32 meets 0.01 there only because it shares the GGUF's blocks."""
    from qbench import cli

    path = Path(__file__).resolve().parents[2] / "results/cpu/quality_smollm2.json"
    assert cli.main(["recommend", str(path), "--max-kld", "0.01"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert next(x for x in out if x.startswith("int4-weight-only[group_size=32] ")).split()[-1] == "yes"
    assert next(x for x in out if x.startswith("int4-weight-only[group_size=64] ")).split()[1] == "no:"
    assert out[-2].startswith("prequantized-weights: dequantized from SmolLM2-135M-Instruct.Q4_1.gguf")
    assert out[-1].endswith("biased low") and max(map(len, out)) <= 120  # the note wraps within 120 characters


def test_a_failed_quality_row_is_said_in_one_line(tmp_path, ck):
    """A quality row has no M: the runner's line for a failed row crashed on ``row['m']`` (KeyError)
    and hid the reason; it now names the scheme and the reason."""
    scenario = write_scenario(tmp_path, ck, ["bf16"], extra="[timing]\nscheme_timeout_s = 0.05")
    proc = _run("run", str(scenario), "--out", "q.json", cwd=tmp_path)
    assert "KeyError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "bf16: failed: " in proc.stdout + proc.stderr
    (row,) = json.loads((tmp_path / "q.json").read_text())["rows"]
    assert row["status"] == "failed" and "0.05" in row["reason"]


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("name, size", [("fp32", 4), ("bf16", 2)])
def test_model_bytes_count_every_tensor_once(tmp_path, tied, name, size):
    """A float scheme's model bytes are the checkpoint's parameters at its width, each once: the
    float LM head was counted twice, and a tied one held as a copy (SmolLM2's bf16 row read 364.6 MiB
    for a 256.6 MiB checkpoint)."""
    from safetensors import safe_open

    from tests.quality.conftest import make_checkpoint

    ck = make_checkpoint(tmp_path / "ck", tied=tied)
    with safe_open(str(ck / "model.safetensors"), "pt") as f:
        params = sum(f.get_slice(k).get_shape()[0] * (f.get_slice(k).get_shape()[1:] or [1])[0] for k in f.keys())
    row = run_scheme(write_scenario(tmp_path, ck, [name]), 0, tmp_path)
    assert row["model_stored_bytes"] == params * size  # tied: the float head shares the embedding's tensor
