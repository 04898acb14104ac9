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


def test_nvml_is_initialised_once_per_process_and_reads_each_time(monkeypatch):
    """Seven readings (one row's worth) cost one ``nvmlInit`` and no shutdown; each reading still
    queries the clocks; a device that cannot be opened says so, and is tried again next time."""
    import sys
    import types

    from qbench import gpu_state

    calls = {"init": 0, "shutdown": 0, "clock": 0, "open": 0}

    class NVMLError(Exception):
        pass

    def open_by_index(index):
        calls["open"] += 1
        if index == 5:
            raise NVMLError("Not Found")
        return f"handle{index}"

    def clock(handle, which):
        calls["clock"] += 1
        return 1980

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: calls.__setitem__("init", calls["init"] + 1),
        nvmlShutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        nvmlDeviceGetHandleByIndex=open_by_index, nvmlDeviceGetClockInfo=clock,
        nvmlDeviceGetTemperature=lambda h, w: 40, nvmlDeviceGetPowerUsage=lambda h: 120000,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(gpu_state, "_HANDLES", {})
    monkeypatch.setattr(gpu_state, "_pci_bus_id", lambda index: None)
    for _ in range(7):
        state = gpu_state.read_gpu_state(0)
        assert state["sm_clock_mhz"] == 1980 and state["power_w"] == 120.0 and state["throttle_reasons"] == []
    assert (calls["init"], calls["open"], calls["shutdown"], calls["clock"]) == (1, 1, 0, 14)
    for _ in range(2):
        state, reason = gpu_state.read_gpu_state_with_reason(5)
        assert state is None and reason == "NVML could not open device 5: Not Found"
    assert (calls["init"], calls["open"], calls["shutdown"]) == (3, 3, 2)
