"""Fixtures for the CUDA timing tests: a bf16 4096x4096 product at M=1."""

import pytest
import torch

#: Short settings so the CUDA tests stay fast.
FAST = dict(warmup=3, min_reps=10, max_reps=200, budget_s=0.5)


@pytest.fixture
def fast_settings():
    from qbench.timing.settings import TimingSettings

    return TimingSettings(**FAST)


@pytest.fixture
def bf16_matmul():
    """fn() computing x @ w, x [1, 4096] bf16, w [4096, 4096] bf16 (random), on CUDA."""
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    return lambda: x @ w
