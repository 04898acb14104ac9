"""The scheme registry: a name maps to a :class:`~qbench.schemes.base.Scheme`.

Adding a scheme means adding one ``register(Scheme(...))`` call in one module of this package;
the CLI, the scenario loader and the parametrized tests pick it up. Extra modules named in the
``QBENCH_PLUGINS`` environment variable (comma-separated import paths) are imported too, in the
parent and in every worker process, so tests and users can register schemes of their own.
"""

from __future__ import annotations

import difflib
import importlib
import os

from qbench.schemes.base import Scheme, SchemeOptions, TensorPart

_REGISTRY: dict[str, Scheme] = {}
_BUILTIN_MODULES = ("qbench.schemes.float_schemes", "qbench.schemes.torchao_schemes", "qbench.schemes.bnb_schemes",
                    "qbench.schemes.gemlite_schemes")
_loaded = False


class UnknownSchemeError(KeyError):
    """A scheme name that is not registered; the message suggests the closest names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


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
    plugins = [p.strip() for p in os.environ.get("QBENCH_PLUGINS", "").split(",") if p.strip()]
    for module in (*_BUILTIN_MODULES, *plugins):
        importlib.import_module(module)


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
        close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownSchemeError(f"unknown scheme {name!r}{hint} (known: {', '.join(_REGISTRY)})") from None


__all__ = ["Scheme", "SchemeOptions", "TensorPart", "UnknownSchemeError", "all_schemes", "get", "names", "register"]
