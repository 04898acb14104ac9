"""The scheme registry: a name maps to a :class:`~qbench.schemes.base.Scheme`.

Adding a scheme means adding one ``register(Scheme(...))`` call in one module of this package;
the CLI, the scenario loader and the parametrized tests pick it up. Extra modules named in the
``QBENCH_PLUGINS`` environment variable (comma-separated import paths) are imported too, in the
parent and in every worker process, so tests and users can register schemes of their own.

What a scenario needs of a scheme (its options, the multiples of K and N) is in the torch-free
:mod:`qbench.schemes.specs`; importing this package does not import torch either (``Scheme``,
``TensorPart`` and the scheme modules are imported when first used). The byte ledger that counts
what a built scheme stores, by the roles of its :class:`~qbench.schemes.base.TensorPart` list, is
:mod:`qbench.schemes.ledger`; the autotune cache a scheme may declare
(:attr:`~qbench.schemes.base.Scheme.tuning_cache`) is :mod:`qbench.schemes.tuning_cache`; the FP32
matmul precision the fp32 and tf32 layers set and check (and the environment record reports) is
:mod:`qbench.schemes.precision`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from qbench.schemes.specs import SchemeOptions, UnknownSchemeError, plugins, unknown

if TYPE_CHECKING:
    from qbench.schemes.base import Scheme, TensorPart

_REGISTRY: dict[str, "Scheme"] = {}
_BUILTIN_MODULES = ("qbench.schemes.float_schemes", "qbench.schemes.torchao_schemes", "qbench.schemes.bnb_schemes",
                    "qbench.schemes.gemlite_schemes")
_loaded = False


class PluginError(ValueError):
    """A ``QBENCH_PLUGINS`` module that cannot be imported, fails, or registers a name twice; one
    line naming the variable, the module and what went wrong."""


def __getattr__(name: str):
    if name in ("Scheme", "TensorPart"):  # torch: imported on first use only
        from qbench.schemes import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(scheme: Scheme) -> Scheme:
    """Add ``scheme`` to the registry and return it.

    Raises:
        ValueError: if a scheme of that name is already registered.
    """
    if scheme.name in _REGISTRY:
        raise ValueError(f"scheme {scheme.name!r} is already registered")
    _REGISTRY[scheme.name] = scheme
    return scheme


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    for module in plugins():
        try:
            importlib.import_module(module)
        except (Exception, RecursionError) as exc:
            what = "cannot be imported" if isinstance(exc, ImportError) else "failed while importing"
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
            _loaded = False  # the next call says it again
            raise PluginError(f"environment variable QBENCH_PLUGINS: module {module!r} {what} ({detail})") from None


def all_schemes() -> list[Scheme]:
    """Every registered scheme, in registration order."""
    _load()
    return list(_REGISTRY.values())


def names() -> list[str]:
    """Every registered scheme name, in registration order."""
    return [s.name for s in all_schemes()]


def get(name: str) -> Scheme:
    """The scheme registered as ``name``.

    Raises:
        UnknownSchemeError: with the closest registered names in the message.
    """
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise unknown(name, list(_REGISTRY)) from None


__all__ = ["PluginError", "Scheme", "SchemeOptions", "TensorPart", "UnknownSchemeError", "all_schemes", "get", "names",
           "register"]
