#!/usr/bin/env bash
# One device call: the CUDA tests of the attention work, then the trimmed Llama-3.1-8B step with split-KV
# (bf16 KV), split-KV reading an fp8 KV cache, and SDPA at 32,768 positions; int4 compiled if time is left.
# Run from the tree's root with OUT set and the device's site packages on PYTHONPATH.
export PYTHONUNBUFFERED=1
T0=$SECONDS
left() { echo $(( ${DEADLINE:-520} - (SECONDS - T0) )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv
  python3 -c "import torch,triton,torchao;print(torch.__version__,triton.__version__,torchao.__version__)"; } > $OUT/env.txt 2>&1
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/model/test_splitkv_cuda.py tests/step/test_step_cuda.py > $OUT/pytest-cuda.log 2>&1
echo "cuda tests rc $? at $((SECONDS - T0)) s"; tail -3 $OUT/pytest-cuda.log
run() {  # scenario, output stem, schemes, seconds
  local t=$(( $(left) < $4 ? $(left) : $4 ))
  if [ $t -lt 30 ]; then echo "$2: not run ($(left) s left)"; return; fi
  timeout $t python3 -m qbench run scenarios/$1.toml --schemes "$3" -o $OUT/$2.json --quiet >> $OUT/call.log 2>&1
  echo "$2 rc $? at $((SECONDS - T0)) s"
}
run step_llama31_8b_splitkv step_llama31_8b_splitkv bf16,bf16+compiled 150
run step_llama31_8b_kv_fp8 step_llama31_8b_kv_fp8 bf16,bf16+compiled 150
run step_llama31_8b_sdpa step_llama31_8b_sdpa bf16,bf16+compiled 100
run step_llama31_8b_splitkv step_llama31_8b_splitkv_int4 int4-weight-only+compiled 80
run step_llama31_8b_kv_fp8 step_llama31_8b_kv_fp8_int4 int4-weight-only+compiled 80
python3 - <<'PY'
import json, os, glob
for f in sorted(glob.glob(os.environ["OUT"] + "/*.json")):
    d = json.load(open(f))
    for r in d["rows"]:
        lat = {k: round(v["median"]) for k, v in (r.get("latency_us") or {}).items() if v}
        a = r.get("attention") or {}
        print(os.path.basename(f)[16:-5], r["scheme"], r["m"], r["context"], r["status"], (r.get("reason") or "")[:80], lat,
              "floor", round(r["hbm_floor_us"] or 0), "attn", a.get("kernel"), a.get("splits"), round(a.get("us") or 0),
              round(100 * (a.get("floor_fraction") or 0)), "%", "blocks", r.get("blocks_built"),
              "err", round((r.get("error") or {}).get("rel_fro") or 0, 4))
PY
