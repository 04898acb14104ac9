"""tp.timing: the slowest rank's reading keeps why its loop stopped (per_rank_cold's local_gemm_us
had no ``stop``, unlike every other reading)."""

import torch

from qbench.timing.stats import Stats
from qbench.tp.timing import _slowest_rank


class _TwoRanks:
    """A RankGroup stand-in: this rank's floats, and rank 1's (slower, stopped on budget)."""

    def __init__(self, other: list[float]):
        self.other = other

    def gather_floats(self, values):
        return torch.tensor([values, self.other], dtype=torch.float64)


def test_the_slowest_ranks_stop_and_converged_come_through():
    mine = Stats(10.0, 9.0, 11.0, 10.0, 0.05, 40, True, "ci-target")
    # rank 1: median 12 (slower), not converged, stop index 1 = "budget"
    stats, medians = _slowest_rank(mine, _TwoRanks([12.0, 11.0, 13.0, 12.0, 0.1, 25.0, 0.0, 1.0]))
    assert medians == [10.0, 12.0]
    assert (stats.median, stats.p10, stats.p90, stats.n) == (12.0, 11.0, 13.0, 25)
    assert stats.converged is False and stats.stop == "budget"
    assert stats.to_dict()["stop"] == "budget"


def test_this_rank_when_it_is_the_slowest_and_no_stop_reason():
    mine = Stats(20.0, 19.0, 21.0, 20.0, 0.01, 30, None, None)
    stats, _ = _slowest_rank(mine, _TwoRanks([12.0, 11.0, 13.0, 12.0, 0.1, 25.0, 1.0, 0.0]))
    assert stats.median == 20.0 and stats.converged is None and stats.stop is None
