"""Why does qbench's ``cold`` exceed an HBM-streamed CUDA graph? A plain-torch experiment (issue 10).

Run on a CUDA host: ``python scripts/cold_experiment.py --out cold-experiment.json``. Plain torch
only (no qbench timing code), so it can judge qbench's methods. For bf16 layers of several sizes
at M = 1 it times one ``F.linear`` call with:

- ``graph_stream``: one CUDA graph calling L distinct weight copies (together >= 4 x L2) in order,
  replay time / L: what a decode engine sees (the reference);
- ``cold_write_sleep``: qbench <= 0.1's cold: ``_sleep`` (hides the launch), a flush that
  *writes* 4 x L2, start event, call, end event;
- ``cold_read_sleep``: the same with a flush that only *reads* 4 x L2 (L2 left clean);
- ``cold_write_read_sleep``: write flush, then a read of a second buffer (dirty lines written
  back during the flush, L2 left clean);
- ``cold_read_nosleep``: read flush, no ``_sleep`` (launch not hidden);
- ``warm_graph``: a graph of 20 calls on ONE weight (L2-hot).

It also times, for host-syncing calls (a ``.item()`` inside), cold with and without the busy
``_sleep``, 5 repeats each, to see which one scatters; and, where torchao is importable, the
fp8-dynamic call with kernel_preference TORCH and AUTO (mslk when installed) as a graph stream.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def events(n):
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]


def median_us(pairs, per=1):
    return statistics.median(s.elapsed_time(e) * 1e3 / per for s, e in pairs)


def graph_of(calls, reps=200):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    pairs = events(reps)
    for s, e in pairs:
        s.record()
        g.replay()
        e.record()
    torch.cuda.synchronize()
    out = median_us(pairs, len(calls))
    g.reset()
    return out


def cold(fn, flush, sleep_cycles, reps=200):
    pairs = events(reps)
    for _ in range(5):
        flush()
        fn()
    torch.cuda.synchronize()
    for s, e in pairs:
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return median_us(pairs)


def cold_sync_samples(fn, flush, sleep_cycles, reps=50):
    """Median cold time (µs) of a host-syncing fn: ``reps`` samples, each synchronized."""
    out = []
    s, e = events(1)[0]
    for _ in range(reps):
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        flush()
        if not sleep_cycles:
            torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e3)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    wbuf = torch.empty(4 * l2 // 4, dtype=torch.int32, device=dev)
    rbuf = torch.ones(4 * l2 // 4, dtype=torch.int32, device=dev)
    rbuf2 = torch.ones(4 * l2 // 4, dtype=torch.int32, device=dev)
    sink = torch.empty((), dtype=torch.int64, device=dev)
    val = [0]

    def flush_write():
        val[0] += 1
        wbuf.fill_(val[0])

    def flush_read():
        torch.sum(rbuf, dim=0, dtype=torch.int64, out=sink)

    def flush_write_read():
        flush_write()
        torch.sum(rbuf2, dim=0, dtype=torch.int64, out=sink)

    # ~200 µs of _sleep keeps the GPU busy past the host's enqueue of one plain linear call
    start, end = events(1)[0]
    start.record(); torch.cuda._sleep(1_000_000); end.record(); end.synchronize()
    us_per_cycle = start.elapsed_time(end) * 1e3 / 1_000_000
    cycles = int(300 / us_per_cycle)
    report = {"l2_bytes": l2, "device": torch.cuda.get_device_name(), "torch": torch.__version__, "layers": []}
    torch.manual_seed(0)
    for k, n in ((4096, 4096), (8192, 8192), (8192, 28672)):
        w0 = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k**0.5
        x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
        copies = max(4, -(-4 * l2 // w0.nbytes))
        ws = [w0.clone() for _ in range(copies)]
        calls = [(lambda w=w: F.linear(x, w)) for w in ws]
        fn = calls[0]
        row = {"k": k, "n": n, "weight_bytes": w0.nbytes, "copies": copies,
               "hbm_floor_us_at_4.8TBps": w0.nbytes / 4.8e12 * 1e6}
        row["graph_stream"] = graph_of(calls)
        row["graph_stream_repeat"] = graph_of(calls)
        row["warm_graph"] = graph_of([fn] * 20)
        row["cold_write_sleep"] = cold(fn, flush_write, cycles)
        row["cold_read_sleep"] = cold(fn, flush_read, cycles)
        row["cold_write_read_sleep"] = cold(fn, flush_write_read, cycles)
        row["cold_read_nosleep"] = cold(fn, flush_read, 0)
        row["cold_write_sleep_repeat"] = cold(fn, flush_write, cycles)
        row["cold_read_sleep_repeat"] = cold(fn, flush_read, cycles)
        report["layers"].append(row)
        print(json.dumps(row), flush=True)
        del ws, calls, fn, w0
        torch.cuda.empty_cache()

    # a host-syncing call: linear + .item() on the output
    w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64
    x = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)

    def syncing():
        y = F.linear(x, w)
        return y.abs().max().item()

    sync = {"sleep": [cold_sync_samples(syncing, flush_read, cycles * 10) for _ in range(5)],
            "nosleep_synced": [cold_sync_samples(syncing, flush_read, 0) for _ in range(5)]}
    report["host_sync"] = sync
    print("host_sync", json.dumps(sync), flush=True)

    try:  # the row that scattered: bitsandbytes LLM.int8 (host sync inside), M = 1
        import bitsandbytes as bnb

        lin = bnb.nn.Linear8bitLt(4096, 4096, bias=False, has_fp16_weights=False, threshold=6.0)
        lin.weight = bnb.nn.Int8Params(torch.randn(4096, 4096, dtype=torch.float16) / 64,
                                       requires_grad=False, has_fp16_weights=False)
        lin = lin.to(dev)
        xb = torch.randn(1, 4096, device=dev, dtype=torch.float16)
        with torch.inference_mode():
            bnb_call = lambda: lin(xb)  # noqa: E731
            t0 = time.perf_counter()
            for _ in range(20):
                bnb_call()
            torch.cuda.synchronize()
            host_us = (time.perf_counter() - t0) / 20 * 1e6
            busy = int(min(20_000.0, 2 * host_us + 20) / us_per_cycle)
            report["host_sync_bnb"] = {
                "eager_us": host_us,
                "sleep": [cold_sync_samples(bnb_call, flush_read, busy) for _ in range(5)],
                "nosleep_synced": [cold_sync_samples(bnb_call, flush_read, 0) for _ in range(5)],
            }
        print("host_sync_bnb", json.dumps(report["host_sync_bnb"]), flush=True)
    except Exception as exc:
        report["host_sync_bnb"] = {"error": f"{type(exc).__name__}: {exc}"}

    try:
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_
        from torchao.quantization.quantize_.common import KernelPreference

        fp8 = {}
        for pref in ("TORCH", "AUTO"):
            for m in (1, 16):
                mods = []
                for _ in range(8):
                    lin = torch.nn.Linear(4096, 4096, bias=False, device=dev, dtype=torch.bfloat16)
                    quantize_(lin, Float8DynamicActivationFloat8WeightConfig(
                        granularity=PerRow(), kernel_preference=getattr(KernelPreference, pref)))
                    mods.append(lin)
                xm = torch.randn(m, 4096, device=dev, dtype=torch.bfloat16)
                with torch.inference_mode():
                    calls = [(lambda mod=mod: mod(xm)) for mod in mods]
                    t0 = time.perf_counter()
                    stream = graph_of(calls)
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                        calls[0]()
                        torch.cuda.synchronize()
                names = sorted({e.name[:80] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
                fp8[f"{pref} M={m}"] = {"graph_stream_us": stream, "kernels": names, "wall_s": time.perf_counter() - t0}
                print(pref, m, stream, names, flush=True)
        report["fp8_dynamic"] = fp8
    except Exception as exc:  # torchao missing or the call fails: say so in the report
        report["fp8_dynamic"] = {"error": f"{type(exc).__name__}: {exc}"}
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
