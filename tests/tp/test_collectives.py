"""qbench.tp.collectives: bytes moved, by hand from nccl-tests' PERFORMANCE.md factors."""

import pytest

from qbench.tp import collectives


def test_bytes_by_hand():
    # decode, column, p=2: all-gather of [1, 4096] bf16: S = 8192 B, each rank moves (p-1)/p S = 4096 B
    assert collectives.collective_bytes("column", 2, 1, 4096, 2) == {"op": "all_gather", "data_bytes": 8192, "bus_bytes": 4096}
    # prefill, row, p=8: all-reduce of [512, 4096] bf16: S = 4 MiB, 2 (p-1)/p S = 7 MiB
    assert collectives.collective_bytes("row", 8, 512, 4096, 2) == {"op": "all_reduce", "data_bytes": 4194304,
                                                                    "bus_bytes": 7340032}
    # float32 partial sums double it
    assert collectives.collective_bytes("row", 2, 1, 4096, 4)["bus_bytes"] == 16384
    assert collectives.collective_bytes("column", 1, 512, 4096, 2) == {"op": "none", "data_bytes": 0, "bus_bytes": 0}
    assert collectives.collective_bytes("none", 1, 1, 1, 2)["op"] == "none"
    with pytest.raises(ValueError):
        collectives.collective_bytes("column", 0, 1, 1, 2)
    with pytest.raises(ValueError):
        collectives.collective_bytes("diagonal", 2, 1, 1, 2)


def test_bus_gbps():
    assert collectives.bus_gbps(4096, 1.0) == pytest.approx(4.096)
    assert collectives.bus_gbps(0, 1.0) is None and collectives.bus_gbps(10, None) is None
