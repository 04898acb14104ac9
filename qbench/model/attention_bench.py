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

``--sweep``: the split-KV kernel alone, one row per configuration (tile length, warps, pipeline
stages, fp8-to-float16 conversion, slice count) for each cache dtype of ``--kv`` (``bf16``; ``fp8``:
e4m3 with a per-KV-head absmax scale, read and dequantized in the kernel), so the per-dtype tiling
of :func:`qbench.model.splitkv.tiling` is chosen by measurement. ``--plan grid`` measures the first
kernel's fixed configuration (``baseline``: 64-position tiles, 4 warps, 2 stages, two programs per
SM), the per-dtype default (``default``), the tile grid (``--block-n``, ``--warps``, ``--stages``)
at its default slice count, then slice counts for the default and the two fastest of the grid;
``--plan confirm`` the baseline against the default alone. Bytes count the stored cache (fp8: one
byte a value, plus its scales).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Callable, Optional

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
    split = SplitKV(m, kv_heads, group, d, s, device, kv_dtype=torch.bfloat16)  # the step's tiling of a bf16 cache

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


#: The tile grid of ``--plan grid`` unless told: positions per tile, warps, stages.
GRID_BLOCK_N, GRID_WARPS, GRID_STAGES = (64, 128, 256), (4, 8), (2, 3, 4)
#: Shared memory a configuration may take for its pipelined K and V tiles (an H100 block has 227 KiB).
SMEM_LIMIT = 200 * 1024


def fits(block_n: int, stages: int, d: int, itemsize: int) -> bool:
    """Whether ``stages`` K and V tiles of ``block_n`` x ``d`` values fit :data:`SMEM_LIMIT`."""
    return stages * 2 * block_n * d * itemsize <= SMEM_LIMIT


def split_counts(batch_kv_heads: int, seq_len: int, block_n: int, sms: int) -> list[int]:
    """Slice counts of the slice sweep: about 1, 2, 3, 4, 6 and 8 programs per SM, at most one
    tile per slice."""
    most = max(1, math.ceil(seq_len / block_n))
    return sorted({min(most, max(1, math.ceil(w * sms / batch_kv_heads))) for w in (1, 2, 3, 4, 6, 8)})


def kv_caches(kv: str, m: int, kv_heads: int, s: int, d: int, layers: int, gen, device) -> list[tuple]:
    """``layers`` distinct caches ``(k, v, k_scale, v_scale)``, ``[M, H_kv, S, D]``: bfloat16 normal
    values, or those values in fp8 (e4m3) with their per-KV-head absmax scales."""
    from qbench.model.llama import fp8_quantize, fp8_scale
    out = []
    for _ in range(layers):
        k, v = (torch.randn(m, kv_heads, s, d, device=device, generator=gen, dtype=torch.bfloat16) for _ in range(2))
        if kv == "fp8":
            ks, vs = fp8_scale(k), fp8_scale(v)
            k, v = fp8_quantize(k, ks), fp8_quantize(v, vs)
            out.append((k, v, ks, vs))
        else:
            out.append((k, v, None, None))
    return out


def reference(q: torch.Tensor, k, v, ks, vs) -> torch.Tensor:
    """float64 attention of ``q [M, H_kv, G, D]`` over the cache's values (dequantized when scaled)."""
    k, v = k.double(), v.double()
    if ks is not None:
        k, v = k * ks.double().view(1, -1, 1, 1), v * vs.double().view(1, -1, 1, 1)
    return torch.softmax(q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v


class Sweep:
    """The split-KV configurations of one (cache dtype, M, S), each timed over the same caches."""

    def __init__(self, kv: str, m: int, s: int, heads: int, kv_heads: int, d: int, layers: int,
                 bandwidth: float, device, reps: int):
        self.kv, self.m, self.s, self.kv_heads, self.d = kv, m, s, kv_heads, d
        self.group, self.layers, self.bandwidth, self.device, self.reps = heads // kv_heads, layers, bandwidth, device, reps
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        gen = torch.Generator(device=device).manual_seed(s * 31 + m)
        self.q = torch.randn(m, kv_heads, self.group, d, device=device, generator=gen, dtype=torch.bfloat16)
        self.caches = kv_caches(kv, m, kv_heads, s, d, layers, gen, device)
        self.ref = reference(self.q, *self.caches[0])
        itemsize = self.caches[0][0].element_size()
        self.itemsize = itemsize
        self.nbytes = 2 * m * kv_heads * s * d * itemsize + (2 * kv_heads * 4 if kv == "fp8" else 0)

    def measure(self, tag: str, tile, splits: Optional[int] = None) -> dict:
        """One row: the configuration, its error against float64 and its time per layer."""
        from qbench.model.splitkv import SplitKV
        row = {"attention": "splitkv", "kv": self.kv, "m": self.m, "context": self.s, "tag": tag,
               "block_n": tile.block_n, "num_warps": tile.num_warps, "num_stages": tile.num_stages,
               "f16": tile.f16, "layers": self.layers, "kv_bytes_per_layer": self.nbytes}
        try:
            attn = SplitKV(self.m, self.kv_heads, self.group, self.d, self.s, self.device, splits=splits,
                           sms=self.sms, tile=tile)
            row.update(splits=attn.splits, split_len=attn.split_len)
            out = torch.empty_like(self.q)
            k0, v0, ks0, vs0 = self.caches[0]
            attn(self.q, k0, v0, out=out, k_scale=ks0, v_scale=vs0)
            row["rel_err"] = float((out.double() - self.ref).norm() / self.ref.norm())

            def step():
                for k, v, ks, vs in self.caches:
                    attn(self.q, k, v, out=out, k_scale=ks, v_scale=vs)
            times = sorted(graph_time(step, self.reps))
            per_layer = statistics.median(times) / self.layers
            row.update(us_per_layer=per_layer * 1e6, p10_us=times[len(times) // 10] / self.layers * 1e6,
                       p90_us=times[len(times) * 9 // 10] / self.layers * 1e6,
                       gb_s=self.nbytes / per_layer / 1e9, floor_pct=100 * (self.nbytes / self.bandwidth) / per_layer)
        except Exception as exc:  # a configuration Triton cannot build (shared memory): the row says so
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps(row), flush=True)
        return row

    def plan(self, plan: str, expired: Callable[[], bool],
             grid: tuple = (GRID_BLOCK_N, GRID_WARPS, GRID_STAGES)) -> list[dict]:
        """The rows of ``plan`` (``grid`` or ``confirm``; ``grid``: tile lengths, warps, stages),
        until ``expired()``."""
        from qbench.model.splitkv import Tiling, tiling
        default = tiling(self.caches[0][0].dtype)
        rows = [self.measure("baseline", Tiling()), self.measure("default", default)]
        if plan == "confirm":
            return rows
        fp8 = self.kv == "fp8"
        for block_n in grid[0]:
            for warps in grid[1]:
                for stages in grid[2]:
                    for f16 in ((False, True) if fp8 and block_n > 64 and stages > 2 else (False,)):
                        if fits(block_n, stages, self.d, self.itemsize) and not expired():
                            rows.append(self.measure("grid", Tiling(block_n, warps, stages, default.waves,
                                                                    default.min_blocks, f16)))
        timed = sorted((r for r in rows if "us_per_layer" in r and r["tag"] == "grid"), key=lambda r: r["us_per_layer"])
        for best in [rows[1]] + timed[:2]:
            tile = Tiling(best["block_n"], best["num_warps"], best["num_stages"], f16=best["f16"])
            for n in split_counts(self.m * self.kv_heads, self.s, tile.block_n, self.sms):
                if n != best.get("splits") and not expired():
                    rows.append(self.measure("splits", tile, n))
        return rows


def sweep(a, bandwidth: float, device, doc: dict) -> None:
    """The split-KV sweep of ``a`` (parsed arguments) into ``doc["rows"]``, the file rewritten after
    each (dtype, M, S) so that a run cut short keeps what it measured."""
    start = time.monotonic()
    expired = (lambda: time.monotonic() - start > a.deadline) if a.deadline else (lambda: False)
    for s in sorted(a.context, reverse=True):
        for m in a.m:
            for kv in a.kv:
                if expired():
                    return
                itemsize = 1 if kv == "fp8" else 2
                per_layer = 2 * m * a.kv_heads * s * a.head_dim * itemsize
                layers = max(2, min(a.layers, int(a.max_gib * 2**30 // per_layer)))
                sw = Sweep(kv, m, s, a.heads, a.kv_heads, a.head_dim, layers, bandwidth, device, a.reps)
                doc["rows"] += sw.plan(a.plan, expired, (a.block_n, a.warps, a.stages))
                del sw
                torch.cuda.empty_cache()
                with open(a.out, "w") as f:
                    json.dump(doc, f, indent=1)


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
    p.add_argument("--sweep", action="store_true", help="split-KV configurations per KV-cache dtype (see --plan)")
    p.add_argument("--plan", choices=("grid", "confirm"), default="grid")
    p.add_argument("--kv", nargs="+", choices=("bf16", "fp8"), default=["bf16", "fp8"])
    p.add_argument("--block-n", type=int, nargs="+", default=list(GRID_BLOCK_N), help="--plan grid: tile lengths")
    p.add_argument("--warps", type=int, nargs="+", default=list(GRID_WARPS), help="--plan grid: warps")
    p.add_argument("--stages", type=int, nargs="+", default=list(GRID_STAGES), help="--plan grid: pipeline stages")
    p.add_argument("--reps", type=int, default=20, help="graph replays per --sweep configuration")
    p.add_argument("--deadline", type=float, default=0, help="--sweep: seconds after which no new configuration starts")
    a = p.parse_args(argv)
    device = torch.device("cuda")
    bw = copy_bandwidth(device)
    if a.sweep:
        import triton
        doc = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__, "triton": triton.__version__,
               "copy_bandwidth_gb_s": bw / 1e9, "sms": torch.cuda.get_device_properties(device).multi_processor_count,
               "shape": {"heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim},
               "plan": a.plan, "argv": sys.argv[1:] if argv is None else list(argv), "rows": []}
        sweep(a, bw, device, doc)
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
        return 0
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
