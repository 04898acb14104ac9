"""Mixed recipes on CUDA, on the committed trained checkpoint: the shipped pair of recipe scenarios runs
every part on its own kernel (no part emulated), the step's bytes count each linear by its scheme, and
a recipe of int4 weight-only with int8 v/down projections loses less than int4 alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CUDA

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not CUDA, reason="needs CUDA (no CUDA device on this machine)")]


def _scenario(name: str, tmp_path: Path, **replace: str):
    from qbench.scenario import load

    text = (ROOT / "scenarios" / f"{name}.toml").read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    text = text.replace("../data/", f"{ROOT}/data/")
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load(path)


def test_quality_recipes_run_their_kernels(tmp_path):
    from qbench.quality.measure import measure_quality_scheme

    scenario = _scenario("recipe_tiny_quality", tmp_path, **{"chunks = 64": "chunks = 8"})
    rows = {e.label: measure_quality_scheme(scenario, i, torch.device("cuda"), shared_dir=str(tmp_path))[0]
            for i, e in enumerate(scenario.schemes)}
    for label, row in rows.items():
        assert row["status"] == "ok" and not row["emulated"], (label, row.get("reason"))
    mixed = rows["int4 (v, down int8)"]
    assert {i["ran"] for i in mixed["recipe"]["linears"]} == {"kernel"}
    assert mixed["stats"]["kld"]["mean"] < rows["int4-weight-only"]["stats"]["kld"]["mean"]
    stored = {label: row["linear_stored_bytes"] for label, row in rows.items()}
    # a mixture lies between its pure schemes (on CUDA tinygemm's packed int4 layout of this small model's
    # shapes is larger than int8's, so the order of the two is not assumed); 2 of 4 blocks kept in bf16
    assert min(stored["int4-weight-only"], stored["int8-weight-only"]) < stored["int4 (v, down int8)"] \
        < max(stored["int4-weight-only"], stored["int8-weight-only"])
    assert stored["int4 (v, down int8; ends bf16)"] == stored["int4 (v, down int8)"] // 2 + stored["bf16"] // 2


def test_step_recipes_count_each_linear(tmp_path):
    from qbench.step.measure import measure_step_scheme

    scenario = _scenario("recipe_tiny_step", tmp_path, **{"m = [1, 16]": "m = [1]", "context = [128, 512]": "context = [128]"})
    labels = [e.label for e in scenario.schemes]
    rows = {label: measure_step_scheme(scenario, i, torch.device("cuda"))[0] for i, label in enumerate(labels)}
    for label, row in rows.items():
        assert row["status"] == "ok", (label, row.get("reason"))
    int4, int8, bf16 = (rows[k]["bytes"]["weights"] for k in ("int4-weight-only", "int8-weight-only", "bf16"))
    # the recipe's blocks hold int4 q/k/o/gate/up and int8 v/down: between int4 and int8 everywhere (on
    # CUDA tinygemm's packed int4 layout of this small model's shapes is larger than int8's: no order assumed)
    assert min(int4, int8) < rows["int4 (v, down int8)"]["bytes"]["weights"] < max(int4, int8)
    ends = rows["int4 (v, down int8; ends bf16)"]
    # 2 of the 4 blocks in bf16, the other 2 as in the recipe without kept blocks
    assert ends["bytes"]["weights"] == rows["int4 (v, down int8)"]["bytes"]["weights"] // 2 + bf16 // 2
    assert {i["scheme"]: i["count"] for i in ends["recipe"]["linears"]} == {"bf16": 14, "int4-weight-only": 10,
                                                                          "int8-weight-only": 4}
