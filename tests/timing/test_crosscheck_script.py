"""scripts/crosscheck_timing.py: runs --help and refuses to run without CUDA on any machine; its pure
parts (pairs and ratios, the reference's copy count, per-call medians) are checked here on the CPU."""

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "crosscheck_timing.py"
MiB = 1 << 20


def _load():
    spec = importlib.util.spec_from_file_location("crosscheck_timing", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cc = _load()


def test_help_runs_without_gpu():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--out" in out.stdout
    assert "--stream-m" in out.stdout and "--replays" in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA exit")
def test_main_without_cuda_exits_2_and_writes_nothing(tmp_path, capsys):
    assert cc.main(["--out", str(tmp_path / "x.json")]) == 2
    assert not (tmp_path / "x.json").exists()
    assert "needs CUDA" in capsys.readouterr().err


def test_too_few_replays_refused():
    with pytest.raises(SystemExit) as info:
        cc.parse_args(["--out", "x.json", "--replays", "99"])
    assert info.value.code == 2
    args = cc.parse_args(["--out", "x.json"])
    assert (args.m, args.stream_m, args.replays, args.checks) == ([1, 512], [1, 16], 200, ["triton", "stream"])
    assert args.stream_schemes == ["bf16", "int4-weight-only", "int8-weight-only+compiled"]


def test_compare_keeps_the_first_versions_keys():
    row = cc.compare(9.0, 10.0)
    assert row == {"ours_us": 9.0, "triton_us": 10.0, "ratio": pytest.approx(0.9), "pass": True}
    assert cc.compare(11.5, 10.0)["pass"] is False


def test_pair_ratio_and_tolerance():
    row = cc.pair(10.5, 10.0)
    assert set(row) == {"qbench_us", "reference_us", "ratio", "pass"}
    assert row["ratio"] == pytest.approx(1.05) and row["pass"] is True
    assert cc.pair(8.9, 10.0)["pass"] is False and cc.pair(9.0, 10.0)["pass"] is True
    assert cc.pair(11.0, 10.0, tolerance=0.05)["pass"] is False
    assert cc.pair(2.0, 1.0, ours_key="a", theirs_key="b") == {"a": 2.0, "b": 1.0, "ratio": 2.0, "pass": False}


@pytest.mark.parametrize("ours, theirs", [(None, 10.0), (10.0, None), (10.0, 0.0), (float("nan"), 1.0),
                                          (1.0, float("inf")), (-1.0, 1.0)])
def test_pair_with_a_missing_side_fails_without_a_ratio(ours, theirs):
    row = cc.pair(ours, theirs)
    assert row["ratio"] is None and row["pass"] is False


@pytest.mark.parametrize("copy_bytes, copies", [(32 * MiB, 8), (17 * MiB // 2, 29), (128 * MiB, 4), (60 * MiB, 4),
                                                (15 * MiB, 16), (15 * MiB + 1, 16)])
def test_reference_copies_hand_computed(copy_bytes, copies):
    assert cc.reference_copies(copy_bytes, 60 * MiB) == copies


def test_reference_copies_rejects():
    with pytest.raises(ValueError):
        cc.reference_copies(0, 60 * MiB)
    with pytest.raises(ValueError):
        cc.reference_copies(MiB, 0)


@settings(deadline=None)
@given(copy_bytes=st.integers(1 << 16, 1 << 34), l2=st.integers(1 << 20, 1 << 28))
def test_reference_copies_agree_with_qbench_plan_when_unbounded(copy_bytes, l2):
    """Two implementations of one rule: the same count wherever qbench's plan is not bounded."""
    from qbench.timing.stream import plan_copies

    plan = plan_copies(copy_bytes, l2, None, max_copies=1 << 30)
    assert cc.reference_copies(copy_bytes, l2) == plan.copies


def test_per_call_median_and_batches():
    assert cc.per_call_median_us([0.08, 0.1, 0.09], 8) == pytest.approx(11.25)  # 0.09 ms / 8 = 11.25 µs
    assert cc.per_call_median_us([1.0, 3.0], 2) == 1000.0
    with pytest.raises(ValueError):
        cc.per_call_median_us([], 8)
    with pytest.raises(ValueError):
        cc.per_call_median_us([1.0], 0)
    assert cc.batches(120, 50) == [50, 50, 20] and cc.batches(100, 50) == [50, 50] and cc.batches(0) == []
    assert sum(cc.batches(200)) == 200 and max(cc.batches(200)) <= cc.REPLAYS_PER_SYNC


def test_all_pass():
    ok, bad = {"pass": True}, {"pass": False}
    assert cc.all_pass([ok], [ok, ok]) and not cc.all_pass([ok], [bad]) and not cc.all_pass([], [])


def test_stream_scheme_entries_are_valid_qbench_entries():
    from qbench.scenario import from_dict

    for label, entry in cc.STREAM_SCHEMES.items():
        sc = from_dict({"name": "x", "m": [1], "timing": {"methods": ["stream"]}, "schemes": [entry]}, "x.toml")
        assert sc.schemes[0].label == label


def test_tensor_bytes_counts_what_the_ledger_counts():
    """The reference counts bytes on its own; on a plain and a torchao layer it matches qbench's ledger."""
    from qbench import schemes
    from qbench.schemes import ledger

    layer = torch.nn.Linear(256, 128)
    assert cc.tensor_bytes(layer) == (256 * 128 + 128) * 4
    scheme = schemes.get("int8-weight-only")
    if scheme.unavailable_reason(torch.device("cpu"), scheme.options_model()):
        pytest.skip("torchao is not installed")
    q = scheme.build(torch.randn(128, 256), None, scheme.options_model())
    assert cc.tensor_bytes(q) == ledger.count(scheme.parts(q)).stored_bytes
    assert math.isclose(cc.tensor_bytes(q), 128 * 256 + 128 * 2 * 2, rel_tol=0.05)
