"""Autotune caches kept between runs, for the libraries that tune their kernels on the first call.

gemlite autotunes every Triton kernel at each new (M bucket, N, K, group size) on the first call:
several seconds per scheme on the H200 (``docs/speed.md``), paid again by every run, because its
in-memory cache (``gemlite.core.GEMLITE_TRITON_CONFIG_CACHE``) dies with the worker. gemlite ships
tuned configs for some GPUs (H100, A100, 4090, ...; none for the H200) and documents
``GemLiteLinear.cache_config(file)`` / ``load_config(file)`` for keeping one's own: that is what a
deployment does, and what qbench does here. Inductor and Triton keep their own caches on disk
already (``/tmp/torchinductor_<user>``, ``~/.triton/cache``); qbench leaves them alone.

A scheme names its cache with :class:`TuningCache` (``Scheme.tuning_cache``). The worker loads the
file before building the layer and saves the library's cache after measuring, so the next run on
this GPU starts with the configs the last one tuned. The file name carries the library and Triton
versions and the GPU name: a config tuned on another GPU or version is never read. Each row
records what happened (``tuning_cache``: the file, entries loaded and saved, or why not).

Environment:
    ``QBENCH_CACHE_DIR``: the folder (default ``$XDG_CACHE_HOME/qbench`` or ``~/.cache/qbench``).
    ``QBENCH_TUNING_CACHE``: ``1`` (default) or ``0`` (every run tunes from scratch, nothing is
    read or written). Another value is a :class:`ValueError` naming it, raised before anything runs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

SWITCH = "QBENCH_TUNING_CACHE"
FOLDER = "QBENCH_CACHE_DIR"


@dataclass(frozen=True)
class TuningCache:
    """How one library's autotune cache is kept between runs.

    Attributes:
        library: the library, e.g. ``"gemlite"`` (names the file).
        version: ``version(device) -> str``: what a config depends on besides the library name:
            library and compiler versions and the GPU name (free text; made file-safe).
        load: ``load(path) -> entries``: read the file into the library's cache, return the number
            of tuned configs the library now holds. Called only when the file exists.
        save: ``save(path) -> entries``: write the library's cache (merged with the file) to
            ``path``, return the number of configs written.
    """

    library: str
    version: Callable[[object], str]
    load: Callable[[str], int]
    save: Callable[[str], int]


def check_env() -> None:
    """Raise ValueError (one line) for a bad ``QBENCH_TUNING_CACHE``."""
    value = os.environ.get(SWITCH)
    if value is not None and value not in ("0", "1"):
        raise ValueError(f"environment variable {SWITCH}: must be 0 or 1, got {value!r}")


def enabled() -> bool:
    """Whether tuned configs are read and written (``QBENCH_TUNING_CACHE``, default on)."""
    return os.environ.get(SWITCH, "1") != "0"


def folder() -> Path:
    """``QBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/qbench``, else ``~/.cache/qbench``."""
    if os.environ.get(FOLDER):
        return Path(os.environ[FOLDER]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qbench"


def path_for(cache: TuningCache, device) -> Path:
    """The cache file of ``cache`` on ``device``: ``<folder>/<library>-<version, file-safe>.json``."""
    stem = re.sub(r"[^A-Za-z0-9._+-]+", "_", f"{cache.library}-{cache.version(device)}")
    return folder() / f"{stem}.json"


class Session:
    """One worker's use of a cache: :meth:`open` before the build, :meth:`close` after measuring.

    ``record`` is the row's ``tuning_cache`` value: ``{"file", "loaded", "saved", "note"}``
    (``loaded``: configs held after reading the file, 0 when there was none; ``saved``: configs
    written; ``note``: why nothing was read or written, else null). A cache that cannot be read or
    written never fails a row: the library tunes as if there were none, and ``note`` says why. A
    file that cannot be read (corrupt, empty) is replaced by this run's configs when it is saved,
    so the next run reads them.
    """

    def __init__(self, cache: Optional[TuningCache], device) -> None:
        self.cache, self.device = cache, device
        self.path: Optional[Path] = None
        self.record: Optional[dict] = None

    def open(self) -> None:
        if self.cache is None:
            return
        if not enabled():
            self.record = {"file": None, "loaded": 0, "saved": 0, "note": f"{SWITCH}=0: tuned from scratch"}
            return
        try:
            path = path_for(self.cache, self.device)
            exists = path.exists()  # may raise: a name too long, a folder it may not enter
        except Exception as exc:  # no usable cache file: tune as if uncached
            self.record = {"file": None, "loaded": 0, "saved": 0, "note": _why("no cache", exc)}
            return
        self.path = path
        self.record = {"file": str(path), "loaded": 0, "saved": 0, "note": None}
        if exists:
            try:
                self.record["loaded"] = int(self.cache.load(str(path)))
            except Exception as exc:
                self.record["note"] = _why("not read", exc) + " (replaced when saved)"

    def close(self) -> Optional[dict]:
        """Save the library's cache (merged with the file where it can be read) when :meth:`open`
        chose a file, and return ``record``."""
        if self.path is not None and self.record is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.record["saved"] = int(self.cache.save(str(self.path)))
            except Exception as exc:
                said = self.record["note"]
                self.record["note"] = (f"{said}; " if said else "") + _why("not saved", exc)
        return self.record


def _why(what: str, exc: BaseException) -> str:
    return f"{what}: {type(exc).__name__}: {exc}".splitlines()[0][:200]
