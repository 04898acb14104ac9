"""GPU clock, temperature and power through NVML (package nvidia-ml-py, module pynvml).

Read before and after a row's timing; a clock that dropped while timing (thermal or power
capping) makes the later samples slower than the earlier ones.
"""

from __future__ import annotations

from typing import Any

from qbench.row import flag_record


def _pci_bus_id(device_index: int) -> str | None:
    """NVML PCI bus id ("00000000:19:00.0") of torch's CUDA device `device_index`, so that
    CUDA_VISIBLE_DEVICES renumbering does not point NVML at another GPU; None if unknown."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        p = torch.cuda.get_device_properties(device_index)
        return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except (ImportError, AttributeError, RuntimeError, AssertionError):
        return None


#: device index -> NVML handle, NVML initialised once per process and left open until it exits
#: (:func:`read_gpu_state_with_reason`): a worker reads the GPU state about seven times per row, and
#: ``nvmlInit`` enumerates every GPU each time, where the reading itself is a few driver queries.
_HANDLES: dict[int, Any] = {}


def read_gpu_state_with_reason(device_index: int) -> tuple[dict[str, Any] | None, str | None]:
    """Like :func:`read_gpu_state`, plus the reason when the state is None.

    Returns:
        (state, None) or (None, one-line reason).
    """
    try:
        import pynvml
    except ImportError as exc:
        return None, f"nvidia-ml-py (pynvml) not installed: {exc}"
    handle = _HANDLES.get(device_index)
    if handle is None:
        try:
            pynvml.nvmlInit()  # reference-counted by NVML: one per device opened, never shut down
        except pynvml.NVMLError as exc:
            return None, f"NVML unavailable: {exc}"
        try:
            bus = _pci_bus_id(device_index)
            handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus) if bus is not None
                      else pynvml.nvmlDeviceGetHandleByIndex(device_index))
        except pynvml.NVMLError as exc:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
            return None, f"NVML could not open device {device_index}: {exc}"
        _HANDLES[device_index] = handle
    try:
        state: dict[str, Any] = {}
        reasons: dict[str, str] = {}

        def read(key: str, getter, scale: float = 1.0) -> None:
            try:
                state[key] = getter() * scale
            except pynvml.NVMLError as exc:
                state[key] = None
                reasons[key] = str(exc)

        read("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        read("mem_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM))
        read("temp_c", lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        # nvmlDeviceGetPowerUsage returns milliwatts (NVML API reference).
        read("power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(handle), 1e-3)
        try:
            mask = _throttle_mask(pynvml, handle)
            state["throttle_reasons"] = throttle_names(mask, pynvml)
        except (pynvml.NVMLError, AttributeError) as exc:
            state["throttle_reasons"] = None
            reasons["throttle_reasons"] = str(exc)
        if reasons:
            state["reasons"] = reasons
        return state, None
    except pynvml.NVMLError as exc:  # a handle gone stale (GPU reset): open it again next time
        _HANDLES.pop(device_index, None)
        return None, f"NVML could not read device {device_index}: {exc}"


#: NVML clock-event (throttle) reason bits that slow a measurement, by the name qbench records
#: (NVML API reference, "Clocks Event Reasons"; GpuIdle and ApplicationsClocksSetting are not
#: slow-downs and are left out).
SLOWDOWN_REASONS = {
    "sw_power_cap": "nvmlClocksThrottleReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksThrottleReasonHwSlowdown",
    "sync_boost": "nvmlClocksThrottleReasonSyncBoost",
    "sw_thermal": "nvmlClocksThrottleReasonSwThermalSlowdown",
    "hw_thermal": "nvmlClocksThrottleReasonHwThermalSlowdown",
    "hw_power_brake": "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
}


def _throttle_mask(pynvml, handle) -> int:
    getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(getter(handle))


def throttle_names(mask: int, pynvml) -> list[str]:
    """The slow-down reasons set in an NVML clock-event mask, by :data:`SLOWDOWN_REASONS` name
    (bits the installed pynvml does not define are skipped)."""
    return [name for name, const in SLOWDOWN_REASONS.items()
            if getattr(pynvml, const, None) is not None and mask & int(getattr(pynvml, const))]


def static_info(device_index: int) -> dict[str, Any]:
    """UUID and enforced power limit (W) of one GPU through NVML; ``{}`` without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: nothing to record
        return {}
    try:
        bus = _pci_bus_id(device_index)
        handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus) if bus is not None
                  else pynvml.nvmlDeviceGetHandleByIndex(device_index))
        out: dict[str, Any] = {}
        for key, getter, scale in (("gpu_uuid", pynvml.nvmlDeviceGetUUID, None),
                                   ("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, 1e-3)):
            try:
                value = getter(handle)
                value = value.decode() if isinstance(value, bytes) else value
                out[key] = value * scale if scale else value
            except pynvml.NVMLError:
                out[key] = None
        return out
    except pynvml.NVMLError:
        return {}
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def read_gpu_state(device_index: int) -> dict[str, Any] | None:
    """SM clock, memory clock, temperature and power of one GPU, or None without NVML.

    Args:
        device_index: torch's CUDA device index (mapped to NVML by PCI bus id when torch
            sees CUDA, else used as the NVML index).

    Returns:
        ``{"sm_clock_mhz": int, "mem_clock_mhz": int, "temp_c": int, "power_w": float,
        "throttle_reasons": [names of :data:`SLOWDOWN_REASONS` active, e.g. "sw_power_cap"]}``
        (MHz, °C, W); a field NVML cannot read is None and named in ``"reasons"``.
        None when pynvml is missing, NVML fails to initialize (e.g. no NVIDIA driver,
        as on a CPU machine) or the device cannot be opened; the reason is given by
        :func:`read_gpu_state_with_reason`. Never raises for those cases.
    """
    return read_gpu_state_with_reason(device_index)[0]


def clock_dropped(before: dict | None, after: dict | None, tolerance: float = 0.05) -> bool:
    """True when the SM clock after is more than `tolerance` (fraction) below before.

    Returns False when either reading or its ``sm_clock_mhz`` is missing (unknown is
    not reported as a drop). Read `before` after the warm-up, not at idle: an idle GPU
    sits at a low clock (345 MHz idle vs 1980 MHz under load on an H200, KINDS.md).

    Raises:
        ValueError: tolerance outside [0, 1).
    """
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"clock_dropped: tolerance must be in [0, 1), got {tolerance}")
    b = (before or {}).get("sm_clock_mhz")
    a = (after or {}).get("sm_clock_mhz")
    if not b or a is None:
        return False
    return a < b * (1.0 - tolerance)


def record_reading(row: dict, method: str, device: Any) -> None:
    """A fresh reading (:func:`read_gpu_state`) right after ``method``'s last sample into
    ``row["gpu_state"]["by_method"][method]`` (``row``: a row dict of any job kind; ``device``: a
    ``torch.device``), and a ``throttled`` flag when a slow-down reason (power cap, thermal, ...) was
    active. Nothing on a CPU device or when NVML gives no reading."""
    if device.type != "cuda":
        return
    reading = read_gpu_state(device.index or 0)
    if reading is None:
        return
    state = row.get("gpu_state") or {}
    state.setdefault("by_method", {})[method] = reading
    row["gpu_state"] = state
    active = reading.get("throttle_reasons") or []
    if active:
        row["flags"].append(flag_record("throttled", f"{', '.join(active)} active right after {method}"))
