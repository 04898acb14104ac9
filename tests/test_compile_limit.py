"""A compiled scheme keeps its compiled graph for every M of a sweep (more than Dynamo's default
recompile limit of 8 static shapes)."""

import pytest

from qbench.measure import measure_scheme
from qbench.scenario import from_dict
import torch


@pytest.mark.slow
def test_compiled_rows_stay_compiled_past_eight_m_values():
    import shutil

    if not any(shutil.which(c) for c in ("cc", "gcc", "c++")):
        pytest.skip("torch.compile on CPU needs a C++ compiler")
    m = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    sc = from_dict({"name": "limit", "m": m, "layer": {"in_features": 64, "out_features": 32},
                    "timing": {"warmup": 1, "min_reps": 3, "max_reps": 3, "budget_s": 0.01},
                    "schemes": [{"name": "fp32", "mode": "compiled"}]}, "limit.toml")
    rows = measure_scheme(sc, 0, torch.device("cpu"))
    assert [r["status"] for r in rows] == ["ok"] * len(m), [r["reason"] for r in rows]
    assert all(r["compile"]["graphs_compiled"] >= 1 for r in rows), [r["compile"] for r in rows]
    # every graph compiled went through Inductor's FX graph cache: a hit, a miss or a bypass
    for r in rows:
        counts = r["compile"]["cache_counters"]
        assert sum(counts.get(f"fxgraph_cache_{k}", 0) for k in ("hit", "miss", "bypass")) >= 1, counts
