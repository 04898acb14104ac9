"""The step methods on a CUDA device: the tiny model's step captured in a CUDA graph gives the eager
step's tokens, its time is positive and above nothing, and a compiled scheme's rows carry
``step_compiled`` and ``step_reduce_overhead`` readings with the loop's extras."""

from __future__ import annotations

import pytest
import torch

from qbench.scenario import from_dict
from tests.conftest import needs_cuda

pytestmark = [pytest.mark.cuda, needs_cuda]


def _scenario(schemes):
    return from_dict({"name": "step-cuda", "seed": 3, "device": "cuda", "m": [1, 4],
                      "model": {"name": "tiny", "context": [32]},
                      "timing": {"warmup": 2, "min_reps": 5, "max_reps": 30, "budget_s": 0.2},
                      "schemes": schemes}, "<test>")


def test_graph_step_equals_eager_step():
    from qbench.step.measure import _Built

    s = _scenario([{"name": "bf16"}])
    from qbench import schemes

    built = _Built(s, __import__("qbench.model.config", fromlist=["PRESETS"]).PRESETS["tiny"], schemes.get("bf16"),
                   s.schemes[0], torch.device("cuda"))
    with torch.inference_mode():
        cache = built.prefill(32)
        model = built._model(4, 32, cache)
        tokens = torch.arange(4, device="cuda")
        eager = model(tokens).clone()
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(tokens)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(g):
            out = model(tokens)
        g.replay()
        torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_compiled_rows_have_every_step_method():
    from qbench.step.measure import measure_step_scheme

    s = _scenario([{"name": "bf16", "mode": "compiled"}])
    rows = measure_step_scheme(s, 0, torch.device("cuda"), None)
    assert [r["status"] for r in rows] == ["ok", "ok"], [r["reason"] for r in rows]
    for r in rows:
        for method in ("step_graph", "step_compiled", "step_reduce_overhead"):
            assert r["latency_us"][method]["median"] > 0, (method, r["latency_reasons"])
        ro = r["latency_us"]["step_reduce_overhead"]
        assert ro["host_us"] > 0 and ro["synced_us"] > 0 and ro["loop_steps"] > 1
        assert r["linear"]["sum_us"] > 0
        assert r["error"]["top1_agree"] is not None
