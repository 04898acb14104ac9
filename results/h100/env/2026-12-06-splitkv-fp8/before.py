"""The first split-KV kernel (qbench/model/splitkv.py at bff3750, copied beside this script as
before_splitkv.py) timed by this tree's ``attention_bench`` sweep rows: its fixed tiling (64-position
tiles, 4 warps, 2 stages, two programs per SM), the slice count as a compile-time constant and one
combine program per (sequence, KV head). Usage: ``python3 before.py before_splitkv.py OUT.json``."""
import importlib.util
import json
import sys
import types

import torch

import qbench.model  # noqa: F401  (the package, before its splitkv is replaced by the old file)

spec = importlib.util.spec_from_file_location("qbench.model.splitkv", sys.argv[1])
old = importlib.util.module_from_spec(spec)
sys.modules["qbench.model.splitkv"] = old
spec.loader.exec_module(old)


class Old(old.SplitKV):
    def __init__(self, *args, tile=None, **kwargs):  # the old class has no tiling: it is fixed
        super().__init__(*args, **kwargs)


old.SplitKV = Old
from qbench.model import attention_bench as ab  # noqa: E402

dev = torch.device("cuda")
bw = ab.copy_bandwidth(dev)
tile = types.SimpleNamespace(block_n=64, num_warps=4, num_stages=2, f16=False)
rows = []
for s in (32768, 4096):
    for m in (1, 16):
        for kv in ("bf16", "fp8"):
            per_layer = 2 * m * 8 * s * 128 * (1 if kv == "fp8" else 2)
            layers = max(2, min(32, int(8 * 2**30 // per_layer)))
            sw = ab.Sweep(kv, m, s, 32, 8, 128, layers, bw, dev, 20)
            rows.append(sw.measure("before", tile))
            del sw
            torch.cuda.empty_cache()
with open(sys.argv[2], "w") as f:
    json.dump({"device": torch.cuda.get_device_name(dev), "copy_bandwidth_gb_s": bw / 1e9, "rows": rows}, f, indent=1)
