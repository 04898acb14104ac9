"""Readable kernel names for tables (:func:`short_kernel`); the JSON keeps torch.profiler's full names."""

from __future__ import annotations

import re

_TEMPLATE_HINT = re.compile(r"([A-Za-z_]\w*(?:Functor\w*|_kernel_cuda|_kernel|gemm\w*)|launch_\w+)")
#: Wrappers that say little about what the kernel computes; named only when nothing else is.
_GENERIC = {"BinaryFunctor", "BUnaryFunctor", "AUnaryFunctor", "gpu_kernel"}
_MAX_NAME = 72


def _mangled_identifiers(name: str, limit: int) -> list[str]:
    """The first ``limit`` length-prefixed identifiers of an Itanium-mangled name, in order."""
    out, i = [], 0
    while i < len(name) and len(out) < limit:
        match = re.compile(r"\d+").search(name, i)
        if match is None:
            break
        length, start = int(match.group()), match.end()
        ident = name[start:start + length]
        if len(ident) == length and re.fullmatch(r"[A-Za-z_]\w*", ident):
            out.append(ident)
            start += length
        i = start
    return out


def short_kernel(name: str) -> str:
    """A readable kernel name: ``void``, namespaces and arguments dropped; over 72 characters, the template arguments
    replaced by the functor or kernel they name (``void at::native::elementwise_kernel<128, 2, ...MulFunctor<float>>
    (...)`` -> ``elementwise_kernel<MulFunctor>``; ``cutlass::Kernel2<cutlass_80_...>`` -> ``cutlass_80_...``)."""
    s = name.strip()
    if re.match(r"^(Memcpy|Memset)\b", s):  # "Memcpy DtoH (Device -> Pinned)": keep whole
        return s
    if s.startswith("_ZN"):  # an Itanium-mangled name (CUTLASS kernels of mslk): its first identifiers
        names = _mangled_identifiers(s, 5)
        if len(names) >= 2:
            inner = "::".join(names[2:])
            return "::".join(names[:2]) + (f"<{inner}>" if inner else "")
    s = s.replace("(anonymous namespace)::", "")
    s = re.sub(r"^void\s+", "", s)
    if s.startswith("std::enable_if<"):  # cuBLAS: "std::enable_if<..., void>::type internal::gemvx::kernel<...>"
        s = re.sub(r"^std::enable_if<.*?>::type\s+", "", s, count=1)
    depth = 0
    for i, ch in enumerate(s):  # drop the (argument list) that follows the template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            s = s[:i]
            break
    lt = s.find("<")
    base = s if lt < 0 else s[:lt]
    parts = base.split("::")
    base = "::".join(parts[-2:]) if parts[-1] == "kernel" else parts[-1]  # gemvx::kernel
    args = "" if lt < 0 else s[lt + 1: s.rfind(">") if s.rfind(">") > lt else len(s)]
    if base.startswith("Kernel") and args:  # cutlass::Kernel2<the real kernel name>
        return args.split(",")[0].strip()
    whole = base + (f"<{args}>" if args else "")
    if len(whole) <= _MAX_NAME:
        return whole
    hints = []
    for h in _TEMPLATE_HINT.findall(args):
        h = h.rsplit("::", 1)[-1]
        if h != base and h not in hints and not h.startswith("gpu_kernel_impl"):
            hints.append(h)
    hints = [h for h in hints if h not in _GENERIC] or hints
    return f"{base}<{', '.join(hints[:2])}>" if hints else base
