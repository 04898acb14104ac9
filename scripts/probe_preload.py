"""Which scheme packages may the runner's forkserver import before forking workers?

For each package: a fresh interpreter imports torch and the package (import seconds recorded), reports
``torch.cuda.is_initialized()``, then forks a child that runs a CUDA matmul. A package is fork-safe
when CUDA is not initialised after the import and the child's matmul succeeds (exit 0).
``qbench._preload.FORK_SAFE_PACKAGES`` lists the packages this probe found safe on the H200.

Usage (on a CUDA host): python scripts/probe_preload.py --out probe-preload.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
name = sys.argv[1]
if name != "-":
    __import__(name)
t2 = time.perf_counter()
initialised = torch.cuda.is_initialized()
pid = os.fork()
if pid == 0:
    try:
        x = torch.randn(256, 256, device="cuda")
        float((x @ x).sum())
        os._exit(0)
    except BaseException as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        os._exit(1)
_, status = os.waitpid(pid, 0)
print(json.dumps({"package": name, "torch_import_s": t1 - t0, "import_s": t2 - t1,
                  "cuda_initialized_after_import": initialised, "forked_child_exit": os.waitstatus_to_exitcode(status)}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("packages", nargs="*", default=["-", "torchao", "bitsandbytes", "mslk", "gemlite",
                                                        "qbench._preload"])
    args = parser.parse_args()
    results = []
    for name in args.packages:
        proc = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True, timeout=300)
        line = (proc.stdout.strip().splitlines() or [""])[-1]
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = {"package": name, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
        record["fork_safe"] = (record.get("cuda_initialized_after_import") is False
                               and record.get("forked_child_exit") == 0)
        results.append(record)
        print(json.dumps(record))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"kind": "probe-preload", "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
