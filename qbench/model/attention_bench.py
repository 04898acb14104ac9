"""Decode attention alone, per layer, at a model's shapes: which implementation reads the KV cache
nearest the HBM floor (``python -m qbench.model.attention_bench --out FILE.json``, CUDA only).

Candidates, each on the decode step's shapes (M sequences, one new token each, S cached positions):
``sdpa-group-rows`` (the step's call today, :func:`qbench.model.llama.decode_attention`: the G query
heads of a KV head as the query rows of one SDPA call, ``[M, H_kv, G, D]``), ``flex`` (torch's
FlexAttention, compiled, ``enable_gqa``: its decoding path), ``splitkv`` (:mod:`qbench.model.splitkv`).
Each runs over ``layers`` distinct caches (more bytes than L2 holds, as in a step) inside one CUDA
graph; a replay is timed with CUDA events and divided by ``layers``. Bytes are the cache's K and V
read once (2 · M · H_kv · S · D · element size); the floor is those bytes over the measured
device-to-device copy bandwidth (bytes read + written by a 1 GiB copy). Error: relative Frobenius
error of layer 0's output against float64 attention.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from typing import Callable

import torch


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30) -> float:
    """Bytes/s of a device-to-device copy (read + written), median of 20."""
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    times = []
    for _ in range(23):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); b.copy_(a); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return nbytes / statistics.median(times[3:])


def graph_time(fn: Callable[[], None], reps: int = 30) -> list[float]:
    """Seconds per replay of ``fn`` captured in one CUDA graph (warmed up first)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); graph.replay(); e.record(); torch.cuda.synchronize()
        out.append(s.elapsed_time(e) / 1e3)
    return out


def candidates(m: int, heads: int, kv_heads: int, d: int, s: int, device) -> dict[str, Callable]:
    """name -> f(q [M, H, 1, D], k, v [M, H_kv, S, D]) -> [M, H, 1, D]."""
    from qbench.model.llama import decode_attention
    from qbench.model.splitkv import SplitKV
    group = heads // kv_heads
    split = SplitKV(m, kv_heads, group, d, s, device)

    def rows(q, k, v):
        return decode_attention(q.view(m, kv_heads, group, d), k, v, 1 / math.sqrt(d)).view(m, heads, 1, d)

    def splitkv(q, k, v):
        return split(q.view(m, kv_heads, group, d), k, v).view(m, heads, 1, d)

    found = {"sdpa-group-rows": rows, f"splitkv[{split.splits}]": splitkv}
    try:
        from torch.nn.attention.flex_attention import flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
        found["flex"] = lambda q, k, v: flex(q, k, v, enable_gqa=True)
    except Exception as exc:  # a torch without FlexAttention: the row says so
        print(f"flex: not available: {exc}", file=sys.stderr)
    return found


def measure(m: int, s: int, heads: int, kv_heads: int, d: int, layers: int, bandwidth: float, device) -> list[dict]:
    """One row per candidate at (M, S)."""
    gen = torch.Generator(device=device).manual_seed(s * 31 + m)
    q = torch.randn(m, heads, 1, d, device=device, generator=gen, dtype=torch.bfloat16)
    caches = [(torch.randn(m, kv_heads, s, d, device=device, generator=gen, dtype=torch.bfloat16),
               torch.randn(m, kv_heads, s, d, device=device, generator=gen, dtype=torch.bfloat16))
              for _ in range(layers)]
    k0, v0 = caches[0]
    ref = (torch.softmax(q.double().view(m, kv_heads, heads // kv_heads, d) @ k0.double().transpose(-1, -2)
                         / math.sqrt(d), -1) @ v0.double()).view(m, heads, 1, d)
    nbytes = 2 * m * kv_heads * s * d * 2
    rows = []
    for name, fn in candidates(m, heads, kv_heads, d, s, device).items():
        row = {"attention": name, "m": m, "context": s, "layers": layers, "kv_bytes_per_layer": nbytes}
        try:
            out = fn(q, k0, v0)
            row["rel_err"] = float((out.double() - ref).norm() / ref.norm())
            outs = [None] * layers

            def step():
                for i, (k, v) in enumerate(caches):
                    outs[i] = fn(q, k, v)
            times = graph_time(step)
            per_layer = statistics.median(times) / layers
            row.update(us_per_layer=per_layer * 1e6, p10_us=sorted(times)[len(times) // 10] / layers * 1e6,
                       p90_us=sorted(times)[len(times) * 9 // 10] / layers * 1e6,
                       gb_s=nbytes / per_layer / 1e9, floor_pct=100 * (nbytes / bandwidth) / per_layer)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
        print(json.dumps(row), flush=True)
    del caches
    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--m", type=int, nargs="+", default=[1, 16])
    p.add_argument("--context", type=int, nargs="+", default=[128, 4096, 32768])
    p.add_argument("--max-gib", type=float, default=24.0, help="cache bytes per (M, S) at most; fewer layers beyond")
    p.add_argument("--layers", type=int, default=32)
    a = p.parse_args(argv)
    device = torch.device("cuda")
    bw = copy_bandwidth(device)
    rows = []
    for m in a.m:
        for s in a.context:
            per_layer = 2 * m * a.kv_heads * s * a.head_dim * 2
            layers = max(2, min(a.layers, int(a.max_gib * 2**30 // per_layer)))
            rows += measure(m, s, a.heads, a.kv_heads, a.head_dim, layers, bw, device)
    doc = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
           "copy_bandwidth_gb_s": bw / 1e9, "shape": {"heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim},
           "rows": rows}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
