import pytest

from qbench.timing.settings import TimingSettings


def test_defaults():
    s = TimingSettings()
    assert (s.warmup, s.min_reps, s.max_reps, s.target_rel_ci, s.budget_s, s.graph_calls, s.flush_multiple) == (
        10, 20, 2000, 0.01, 2.0, 20, 4)


@pytest.mark.parametrize(
    "kw", [{"warmup": -1}, {"min_reps": 0}, {"max_reps": 5}, {"target_rel_ci": 0}, {"budget_s": 0},
           {"graph_calls": 0}, {"flush_multiple": 0}])
def test_rejects_with_value(kw):
    with pytest.raises(ValueError, match=str(list(kw.values())[0])):
        TimingSettings(**kw)
