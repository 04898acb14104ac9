import pytest
import torch

from qbench.gpu_state import clock_dropped, read_gpu_state, read_gpu_state_with_reason


def test_clock_dropped():
    assert clock_dropped({"sm_clock_mhz": 1980}, {"sm_clock_mhz": 1800})
    assert not clock_dropped({"sm_clock_mhz": 1980}, {"sm_clock_mhz": 1900})
    assert not clock_dropped(None, {"sm_clock_mhz": 1})
    assert not clock_dropped({"sm_clock_mhz": None}, {"sm_clock_mhz": 1})
    with pytest.raises(ValueError):
        clock_dropped({}, {}, tolerance=1.5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_read_gpu_state_none_without_gpu():
    state, reason = read_gpu_state_with_reason(0)
    assert state is None and reason
    assert read_gpu_state(0) is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_read_gpu_state_on_gpu():
    state, reason = read_gpu_state_with_reason(torch.cuda.current_device())
    if state is None:
        pytest.skip(f"NVML not usable here: {reason}")
    assert state["sm_clock_mhz"] > 0 and state["temp_c"] > 0


def test_throttle_names_decode_the_nvml_mask():
    import types

    from qbench.gpu_state import throttle_names

    # bit values of the NVML API reference (nvmlClocksThrottleReason*)
    fake = types.SimpleNamespace(nvmlClocksThrottleReasonSwPowerCap=0x4, nvmlClocksThrottleReasonHwSlowdown=0x8,
                                 nvmlClocksThrottleReasonSwThermalSlowdown=0x20)
    assert throttle_names(0x4 | 0x20 | 0x1, fake) == ["sw_power_cap", "sw_thermal"]  # 0x1 (idle) is no slow-down
    assert throttle_names(0, fake) == []
