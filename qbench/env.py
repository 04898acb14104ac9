"""The environment a result was measured in, recorded in every result JSON (``env``)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import time
from typing import Optional
from pathlib import Path

import torch

from qbench import __version__, forkserver, hardware
from qbench.schemes import precision


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


def cpu_info() -> dict:
    """``env.cpu_info``: the CPU's model, instruction-set flags, cache sizes (:func:`qbench.hardware.cpu_record`)
    and ``capability``, torch's ``torch.backends.cpu.get_cpu_capability()`` (``"AVX2"``, ``"AVX512"``,
    ``"AMX"``, ...: which of its CPU kernels torch dispatches to; None where torch cannot say)."""
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # an old torch or an exotic build: the flags still tell
        capability = None
    return hardware.cpu_record(capability=capability)


def resolve_device(requested: str) -> torch.device:
    """``auto`` becomes ``cuda:0`` when CUDA is available, else ``cpu``; ``cuda`` becomes ``cuda:0``.

    Raises:
        ValueError: not one of auto, cpu, cuda, cuda:N (``gpu``, ``CPU``, ``cpu:1``), CUDA was asked for
            but is not available, or the index is out of range.
    """
    import re

    if not isinstance(requested, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", requested):
        raise ValueError(f"device {requested!r}: must be auto, cpu, cuda or cuda:N (lower case)")
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
        "gemlite": _version("gemlite"),
        "mslk": _version("mslk-cuda"),  # import name mslk, distribution mslk-cuda
        "triton": _version("triton"),
        "cuda": torch.version.cuda,
        "device": str(device),
        "cpu": _cpu_name(),
        "cpu_info": cpu_info(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "tf32": precision.precision_state(),
        "git": git_state(),
        "source_digest": source_digest(),
        "torchao_extensions": torchao_extension_state(),
        "bitsandbytes_library": bitsandbytes_library(),
        "cublas": _version("nvidia-cublas") or _version("nvidia-cublas-cu13") or _version("nvidia-cublas-cu12"),
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
        from qbench import gpu_state

        env.update(gpu_state.static_info(device.index or 0))
    else:
        env.update(device_name=env["cpu"], compute_capability=None)
        env.update(cpu_load(env["torch_threads"], window_s=0.2, own_pids=forkserver.pids()))
    env["warnings"] = warnings_of(env)
    return env


def git_state(root: Path | None = None) -> dict | None:
    """``{"commit": sha, "dirty": bool}`` of the checkout qbench runs from, or None outside one
    (an installed wheel) or without git. ``dirty``: ``git status --porcelain`` lists a tracked
    change (untracked files do not count)."""
    root = root or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": sha, "dirty": bool(status.strip())}


def source_digest(root: Path | None = None) -> str:
    """SHA-256 over the sorted lines ``"<path> <git blob sha1>"`` of every ``qbench/**/*.py`` file
    (path relative to the checkout, blob sha1 as git computes it: sha1 of ``b"blob <size>\\0" +
    content``). It names the measuring code even where ``git_state`` cannot (a copy with a stale
    ``.git``, an installed tree): ``scripts/find_commit.py DIGEST`` lists the commits whose
    ``qbench/`` has the same digest, from ``git ls-tree`` alone."""
    root = root or Path(__file__).resolve().parent.parent
    lines = []
    for path in sorted((root / "qbench").rglob("*.py")):
        data = path.read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        lines.append(f"{path.relative_to(root).as_posix()} {blob}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def torchao_extension_state() -> dict | None:
    """Whether torchao will load its C++ extensions (``_C*.so``), read without importing torchao
    (its import costs seconds and queries the GPU). Mirrors torchao 0.18's ``__init__``: the
    extensions are skipped when ``TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1`` or when torch is older
    than the one the wheel was built for (2.11). None when torchao is not installed.

    Returns ``{"loaded": bool, "reason": str | None, "so_files": [names]}``; ``loaded`` is what
    torchao's rules predict (a library that fails to dlopen is reported in the worker's log).
    """
    spec = importlib.util.find_spec("torchao")
    if spec is None or not spec.origin:
        return None
    so_files = sorted(p.name for p in Path(spec.origin).parent.glob("_C*.so"))
    reason = None
    if os.environ.get("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "0") == "1":
        reason = "TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1"
    else:
        version = _version("torchao") or ""
        if "+git" not in version and _version_tuple(torch.__version__) < (2, 11):
            reason = f"torch {torch.__version__} is older than 2.11, which torchao {version} needs for its extensions"
    if reason is None and not so_files:
        reason = "the torchao package has no _C*.so files"
    return {"loaded": reason is None, "reason": reason, "so_files": so_files}


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def bitsandbytes_library() -> dict | None:
    """The native library bitsandbytes will load, read without importing it (its import
    initialises CUDA): ``libbitsandbytes_cuda<XY>.so`` for torch's CUDA version, else the CPU one;
    ``{"file": name, "present": bool, "available": [names]}``, or None without bitsandbytes."""
    spec = importlib.util.find_spec("bitsandbytes")
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent
    available = sorted(p.name for p in folder.glob("libbitsandbytes_*"))
    cuda = torch.version.cuda
    stem = f"libbitsandbytes_cuda{cuda.replace('.', '')}" if cuda and torch.cuda.is_available() else "libbitsandbytes_cpu"
    match = next((name for name in available if name.startswith(stem + ".")), None)
    return {"file": match or stem + ".so", "present": match is not None, "available": available}


def busy_cores(before: str, after: str, own_ticks: int = 0) -> float:
    """Cores busy between two readings of the aggregate ``cpu`` line of ``/proc/stat`` (proc(5):
    user nice system idle iowait irq softirq steal ...; idle time is ``idle + iowait``):
    ((busy jiffies - ``own_ticks``) / all jiffies) x the CPUs counted (``os.cpu_count()``), at
    least 0. ``own_ticks``: jiffies this run's own processes spent in the same interval
    (:func:`qbench.forkserver.cpu_ticks`), which are not "other work".

    Raises:
        ValueError: a line that is not an aggregate ``cpu`` line, or no time passed."""
    def fields(line: str) -> list[int]:
        parts = line.split()
        if not parts or parts[0] != "cpu":
            raise ValueError(f"not the aggregate cpu line of /proc/stat: {line!r}")
        return [int(x) for x in parts[1:9]]

    a, b = fields(before), fields(after)
    total = sum(b) - sum(a)
    idle = (b[3] + b[4]) - (a[3] + a[4])
    if total <= 0:
        raise ValueError("no time passed between the two /proc/stat readings")
    return max(0, total - idle - own_ticks) / total * (os.cpu_count() or 1)


def _proc_stat_cpu() -> str | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return f.readline()
    except OSError:
        return None


def cpu_busy(threads: int) -> tuple[dict, Optional[str]]:
    """:func:`cpu_load` right after a timing (this process's ``threads`` counted as its own, a 0.1 s
    ``/proc/stat`` window) and the text of a ``cpu-busy`` flag when other work leaves fewer free
    cores than ``threads`` (the timing shared cores: noisy), else None."""
    load = cpu_load(threads, own_running=threads, window_s=0.1)
    if not load.get("oversubscribed"):
        return load, None
    busy = (f"{load['busy_cores_now']:.1f} cores busy with other work" if load.get("busy_cores_now") is not None
            else f"load {load['load_avg_1min']:.1f}")
    return load, f"{busy} leaves {load['free_cores']:.1f} free cores for {threads} threads: noisy"


def cpu_load(threads: int, own_running: int = 0, window_s: float = 0.0, own_pids: tuple[int, ...] = ()) -> dict:
    """The CPU left for timing: the 1-minute load average (``os.getloadavg``), the cores other work
    takes (load minus ``own_running``, this run's own busy threads, which the average counts too:
    a worker that just timed with 2 threads adds about 2), the cores left free, and whether
    torch's ``threads`` exceed them (then timings share cores with other work).

    With ``window_s`` > 0 (the run's start, where nothing of this run is busy) the cores busy
    *now* are read from ``/proc/stat`` over that window (:func:`busy_cores`, ``busy_cores_now``)
    and decide instead of the 1-minute average, which still counts work that just ended (a
    previous run of a back-to-back benchmark read "load 1.8 on 2 cores" on an idle machine).
    The CPU time of ``own_pids`` over the window is not counted: this run's forkserver, importing
    torch while the run starts (:mod:`qbench.forkserver`), is not other work.
    """
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    now = None
    if window_s > 0:
        first, own_first = _proc_stat_cpu(), forkserver.cpu_ticks(own_pids)
        if first is not None:
            time.sleep(window_s)
            second, own = _proc_stat_cpu(), forkserver.cpu_ticks(own_pids) - own_first
            try:
                now = busy_cores(first, second, own) if second is not None else None
            except ValueError:
                now = None
    others = now if now is not None else (None if load is None else max(0.0, load - own_running))
    if others is None:
        return {"load_avg_1min": None, "free_cores": None, "oversubscribed": None}
    free = max(0.0, (os.cpu_count() or 1) - others)
    out = {"load_avg_1min": load, "free_cores": free, "oversubscribed": threads > free + 0.5}
    if window_s > 0:
        out["busy_cores_now"] = now
    return out


def warnings_of(env: dict) -> list[str]:
    """One line per fact in ``env`` that could make numbers misleading (printed by ``qbench run``)."""
    out = []
    ext = env.get("torchao_extensions")
    if ext and not ext["loaded"]:
        out.append(f"torchao's C++ extensions will not load ({ext['reason']}): torchao schemes may run "
                   "slower fallbacks or fail")
    lib = env.get("bitsandbytes_library")
    if lib and not lib["present"]:
        out.append(f"bitsandbytes has no {lib['file']} (has {', '.join(lib['available']) or 'none'})")
    if env.get("oversubscribed"):
        busy = (f"{env['busy_cores_now']:.1f} cores busy over 0.2 s" if env.get("busy_cores_now") is not None
                else f"load {env['load_avg_1min']:.1f}")
        out.append(f"CPU busy: {busy} on {env['cpu_count']} cores leaves "
                   f"{env['free_cores']:.1f} free for {env['torch_threads']} torch threads: timings will be noisy")
    git = env.get("git")
    if git and git["dirty"]:
        out.append(f"the qbench checkout has uncommitted changes (commit {git['commit'][:10]} + changes)")
    return out


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
