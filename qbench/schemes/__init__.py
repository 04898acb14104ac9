"""The scheme registry: a name maps to a :class:`~qbench.schemes.scheme.Scheme`.

A scheme is declared once, by one ``register(Scheme(...))`` call: the built-in ones in
:mod:`qbench.schemes.catalog` (options, multiples of K and N, shard rule, and the torch functions
that build it, named and imported when first called). The CLI, the scenario loader, the tp job and
the parametrized tests pick it up. Extra modules named in the ``QBENCH_PLUGINS`` environment
variable (comma-separated import paths) are imported too, in the parent and in every worker
process, so tests and users can register schemes of their own.

Importing this package or loading the built-in registry does not import torch (a plugin module may).
The byte ledger that counts what a built scheme stores, by the roles of its
:class:`~qbench.schemes.base.TensorPart` list, is :mod:`qbench.schemes.ledger`; the autotune cache
a scheme may declare is :mod:`qbench.schemes.tuning_cache`; the FP32 matmul precision the fp32 and
tf32 layers set and check is :mod:`qbench.schemes.precision`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from qbench.schemes.scheme import Scheme
from qbench.schemes.options import SchemeOptions, UnknownSchemeError, plugins, unknown

if TYPE_CHECKING:
    from qbench.schemes.base import TensorPart

_REGISTRY: dict[str, "Scheme"] = {}
_BUILTIN_MODULES = ("qbench.schemes.catalog",)
_loaded = False
_builtin_loaded = False


class PluginError(ValueError):
    """A ``QBENCH_PLUGINS`` module that cannot be imported, fails, or registers a name twice; one
    line naming the variable, the module and what went wrong."""


def __getattr__(name: str):
    if name == "TensorPart":  # torch: imported on first use only
        from qbench.schemes import base

        return base.TensorPart
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


def _load(with_plugins: bool = True) -> None:
    """Import the built-in declarations (once), then, with ``with_plugins``, the ``QBENCH_PLUGINS``
    modules (once; again after a failure, so the next call says it again).

    Raises:
        PluginError: a plugin module cannot be imported, fails, or registers a name twice.
    """
    global _loaded, _builtin_loaded
    if not _builtin_loaded:
        _builtin_loaded = True
        for module in _BUILTIN_MODULES:
            importlib.import_module(module)
    if _loaded or not with_plugins:
        return
    _loaded = True
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
    """The scheme registered as ``name``. A built-in name (or one registered in this process) is
    found without importing the ``QBENCH_PLUGINS`` modules, so validating a scenario of built-in
    schemes imports no torch and no plugin.

    Raises:
        UnknownSchemeError: with the closest registered names in the message.
        PluginError: the name is not built in and a plugin module cannot be imported.
    """
    _load(with_plugins=False)
    if name not in _REGISTRY:
        _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise unknown(name, list(_REGISTRY)) from None


__all__ = ["PluginError", "Scheme", "SchemeOptions", "TensorPart", "UnknownSchemeError", "all_schemes", "get", "names",
           "register"]
