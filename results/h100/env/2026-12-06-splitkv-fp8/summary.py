"""Per (cache dtype, M, S): the first kernel (before.json), the baseline and default rows of the sweep, its
four fastest configurations. Usage: ``python3 summary.py before.json sweep.json``."""
import collections
import json
import sys

before = {(r["kv"], r["m"], r["context"]): r for r in json.load(open(sys.argv[1]))["rows"]} if len(sys.argv) > 2 else {}
d = json.load(open(sys.argv[-1]))
print(d["device"], "copy bandwidth", round(d["copy_bandwidth_gb_s"]), "GB/s")
fmt = lambda r: (f'{r["block_n"]}/{r["num_warps"]}/{r["num_stages"]}{"/f16" if r["f16"] else ""} x{r.get("splits")} '
                 f'{r["us_per_layer"]:.1f} us {r["floor_pct"]:.0f} % err {r["rel_err"]:.1e}' if "us_per_layer" in r else r.get("error"))
groups = collections.defaultdict(list)
for r in d["rows"]:
    groups[(r["kv"], r["m"], r["context"])].append(r)
for key, rows in groups.items():
    print(key, len(rows), "rows,", sum("error" in r for r in rows), "failed")
    if key in before:
        print("   before  ", fmt(before[key]))
    for r in rows:
        if r["tag"] in ("baseline", "default"):
            print("  ", r["tag"].ljust(8), fmt(r))
    for r in sorted((r for r in rows if "us_per_layer" in r), key=lambda r: r["us_per_layer"])[:4]:
        print("   fastest ", r["tag"], fmt(r))
