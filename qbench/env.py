"""The environment a result was measured in, recorded in every result JSON (``env``)."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform

import torch

from qbench import __version__, precision


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def resolve_device(requested: str) -> torch.device:
    """``auto`` becomes ``cuda:0`` when CUDA is available, else ``cpu``; ``cuda`` becomes ``cuda:0``.

    Raises:
        ValueError: CUDA was asked for but is not available, or the index is out of range.
    """
    if requested == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {requested!r}: CUDA is not available here (torch {torch.__version__}); use --device cpu")
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {requested!r}: only {torch.cuda.device_count()} CUDA device(s)")
        device = torch.device("cuda", index)
    return device


def collect(device: torch.device) -> dict:
    """Versions, device, clocks-independent facts and FP32 precision flags, JSON-ready."""
    env = {
        "qbench": __version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torchao": _version("torchao"),
        "bitsandbytes": _version("bitsandbytes"),
        "triton": _version("triton"),
        "cuda": torch.version.cuda,
        "device": str(device),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "tf32": precision.precision_state(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            device_name=props.name,
            compute_capability=list(torch.cuda.get_device_capability(device)),
            sm_count=props.multi_processor_count,
            l2_bytes=getattr(props, "L2_cache_size", None),
            memory_bytes=props.total_memory,
            driver=_driver_version(),
        )
    else:
        env.update(device_name=env["cpu"], compute_capability=None)
    return env


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else version
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVML missing or unusable: record why, never fail the run
        return f"unknown ({type(exc).__name__})"
