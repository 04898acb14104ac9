#!/usr/bin/env bash
# Device call B: the whole Llama-3.1-8B step (split-KV attention, bf16 cache) and the fp8-cache step, with a deadline.
# Run from the tree's root with OUT set. STEPS picks what runs: "main kv" (default) or "kv-rest tests".
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$SECONDS
left() { echo $(( ${DEADLINE:-560} - (SECONDS - T0) )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used,memory.total --format=csv
  python3 -c "import torch,triton,torchao,bitsandbytes;print(torch.__version__,triton.__version__,torchao.__version__,bitsandbytes.__version__)"; } > $OUT/env-${TAG:-b}.txt 2>&1
cat $OUT/env-${TAG:-b}.txt
run() {  # scenario, output stem, max seconds, [--schemes list]
  local t=$(( $(left) < $3 ? $(left) : $3 ))
  if [ $t -lt 40 ]; then echo "$2: not run ($(left) s left)"; return; fi
  timeout $t python3 -m qbench run scenarios/$1.toml ${4:+--schemes "$4"} -o $OUT/$2.json --quiet >> $OUT/$2.log 2>&1
  echo "$2 rc $? at $((SECONDS - T0)) s"
}
for s in ${STEPS:-main kv}; do case $s in
  main) run step_llama31_8b step_llama31_8b 470 ;;
  kv) run step_llama31_8b_kv_fp8 step_llama31_8b_kv_fp8 300 ;;
  tests) timeout $(( $(left) - 5 )) python3 -m pytest -q -m cuda -p no:cacheprovider tests > $OUT/pytest-cuda.log 2>&1
         echo "cuda tests rc $? at $((SECONDS - T0)) s"; tail -3 $OUT/pytest-cuda.log ;;
esac; done
ls $OUT
python3 - <<'PY'
import json, os, glob
for f in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    d = json.load(open(f))
    for r in d["rows"]:
        lat = {k: round(v["median"]) for k, v in (r.get("latency_us") or {}).items() if v}
        a = r.get("attention") or {}
        print(os.path.basename(f)[:-5], r["scheme"], r["m"], r["context"], r["status"], (r.get("reason") or "")[:60], lat,
              "floor", round(r.get("hbm_floor_us") or 0), "attn", a.get("kernel"), round(a.get("us") or 0),
              round(100 * (a.get("floor_fraction") or 0)), "%", "blocks", r.get("blocks_built"))
PY
