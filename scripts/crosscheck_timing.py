"""Cross-check qbench's cold/warm timing against triton.testing on a CUDA GPU.

For bf16 and (torchao present) int4 weight-only nn.Linear(4096, 4096, bias=False) at
M=1 and M=512: time_cold vs triton.testing.do_bench (which zeroes a 256 MB buffer to flush
L2 before each call) and time_warm vs triton.testing.do_bench_cudagraph, both asked for
the median. Pass when |ours / triton - 1| <= 0.10. Prints a table; writes JSON to --out.

Usage: python scripts/crosscheck_timing.py --out crosscheck.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TOLERANCE = 0.10
# Run from a checkout without installing: put the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_layers(k: int, n: int) -> dict:
    """{scheme: module} on CUDA: bf16, and int4-weight-only when torchao can build it."""
    import torch

    torch.manual_seed(0)
    base = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layers = {"bf16": base}
    try:
        import copy

        from torchao.quantization import Int4WeightOnlyConfig, quantize_

        q = copy.deepcopy(base)
        quantize_(q, Int4WeightOnlyConfig(group_size=128, int4_packing_format="tile_packed_to_4d"))
        layers["int4-weight-only"] = q
    except Exception as exc:  # noqa: BLE001 - reported, the bf16 rows still run
        print(f"int4-weight-only skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    return layers


def compare(ours_us: float, theirs_us: float) -> dict:
    """{ours_us, triton_us, ratio, pass} with ratio = ours / triton."""
    ratio = ours_us / theirs_us
    return {"ours_us": ours_us, "triton_us": theirs_us, "ratio": ratio, "pass": abs(ratio - 1) <= TOLERANCE}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON output path")
    p.add_argument("--m", type=int, nargs="+", default=[1, 512], help="M values (rows)")
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--n", type=int, default=4096)
    args = p.parse_args(argv)

    import torch
    import triton.testing
    from tabulate import tabulate

    from qbench.timing import L2Flusher, TimingSettings, time_cold, time_warm

    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    settings = TimingSettings()
    flusher = L2Flusher("cuda", settings.flush_multiple)
    rows = []
    with torch.inference_mode():
        for scheme, layer in build_layers(args.k, args.n).items():
            for m in args.m:
                x = torch.randn(m, args.k, device="cuda", dtype=torch.bfloat16)
                fn = lambda: layer(x)  # noqa: E731
                cold = time_cold(fn, settings, flusher)
                tc = triton.testing.do_bench(fn, return_mode="median") * 1e3
                rows.append({"scheme": scheme, "m": m, "method": "cold vs do_bench", **compare(cold.median, tc)})
                warm = time_warm(fn, settings)
                tw = triton.testing.do_bench_cudagraph(fn, return_mode="median") * 1e3
                rows.append({"scheme": scheme, "m": m, "method": "warm vs do_bench_cudagraph", **compare(warm.median, tw)})
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": triton.__version__, "tolerance": TOLERANCE, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2))
    print(tabulate(rows, headers="keys", floatfmt=".2f"))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
