#!/usr/bin/env bash
# Device calls of session 4: STEPS picks what runs, in order, under DEADLINE seconds:
#   recipe (tests/model/test_recipe_cuda.py), main (step_llama31_8b), kv (step_llama31_8b_kv_fp8),
#   tests (pytest -m cuda tests), decode (decode.toml, compared with results/h200/decode.json).
# A devrun/carry/<stem>.partial.json (brought back from an earlier cut call) is resumed.
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export TORCHINDUCTOR_COMPILE_THREADS=16 TORCHINDUCTOR_CACHE_DIR=$PWD/.compile-cache/inductor TRITON_CACHE_DIR=$PWD/.compile-cache/triton
T0=$SECONDS
# compile caches brought back by an earlier call (devrun/cache/compile-cache.tar.xz), unless this warm machine has its own
if [ ! -d .compile-cache ] && [ -f devrun/cache/compile-cache.tar.xz ]; then
  tar -xJf devrun/cache/compile-cache.tar.xz && echo "compile cache restored: $(du -sm .compile-cache | cut -f1) MB"
fi
left() { echo $(( ${DEADLINE:-570} - (SECONDS - T0) )); }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used,memory.total --format=csv
  python3 -c "import torch,triton,torchao,bitsandbytes;print(torch.__version__,triton.__version__,torchao.__version__,bitsandbytes.__version__)"; } > $OUT/env-${TAG:-c}.txt 2>&1
cat $OUT/env-${TAG:-c}.txt
run() {  # scenario, output stem, max seconds
  local t=$(( $(left) < $3 ? $(left) : $3 )) res=
  if [ $t -lt 40 ]; then echo "$2: not run ($(left) s left)"; return; fi
  for f in devrun/carry/$2.partial.json devrun/carry/$2.json; do [ -f $f ] && cp $f $OUT/ && res=--resume; done
  local only=$4; [ -n "$only" ] && only="--schemes $only"
  timeout $t python3 -m qbench run scenarios/$1.toml -o $OUT/$2.json $res $only --quiet >> $OUT/$2.log 2>&1
  echo "$2 rc $? at $((SECONDS - T0)) s"; tail -3 $OUT/$2.log
}
for s in ${STEPS:-main kv}; do case $s in
  recipe) timeout 150 python3 -m pytest -x -rA -m cuda -p no:cacheprovider tests/model/test_recipe_cuda.py -k step_recipes > $OUT/pytest-recipe.log 2>&1
          echo "recipe tests rc $? at $((SECONDS - T0)) s"; tail -60 $OUT/pytest-recipe.log ;;
  main) run step_llama31_8b step_llama31_8b 560 "$SCHEMES_MAIN" ;;
  kv) run step_llama31_8b_kv_fp8 step_llama31_8b_kv_fp8 400 "$SCHEMES_KV" ;;
  tests) timeout $(( $(left) - 5 )) python3 -m pytest -rfEs -m cuda -p no:cacheprovider --junitxml=$OUT/pytest-cuda.xml tests > $OUT/pytest-cuda.log 2>&1
         echo "cuda tests rc $? at $((SECONDS - T0)) s"; tail -30 $OUT/pytest-cuda.log ;;
  decode) t=$(( $(left) - 10 )); timeout $t python3 -m qbench run scenarios/decode.toml -o $OUT/decode.json --quiet > $OUT/decode.log 2>&1
          echo "decode rc $? at $((SECONDS - T0)) s"
          python3 -m qbench compare results/h200/decode.json $OUT/decode.json --allow-other-machine 2>&1 | tail -45 ;;
esac; done
# bring the compile caches back when small enough to carry next time (64 MiB in all with .site.tar.xz's 21 MB)
if [ -d .compile-cache ] && [ -n "$TAR" ]; then
  echo "compile cache: $(du -sm .compile-cache | cut -f1) MB"
  tar -cf - .compile-cache | timeout 90 xz -T16 -6 > $OUT/compile-cache.tar.xz
  sz=$(stat -c %s $OUT/compile-cache.tar.xz); echo "compile-cache.tar.xz: $((sz >> 20)) MB"
  [ $sz -gt $((36 << 20)) ] && rm -f $OUT/compile-cache.tar.xz && echo "too large to carry: not brought back"
fi
ls $OUT
python3 - <<'PY'
import json, os, glob
for f in sorted(glob.glob(os.environ["OUT"] + "/step*.json")):
    d = json.load(open(f))
    for r in d["rows"]:
        lat = {k: round(v["median"]) for k, v in (r.get("latency_us") or {}).items() if v}
        a = r.get("attention") or {}
        print(os.path.basename(f)[:-5], r["scheme"], r["m"], r["context"], r["status"], (r.get("reason") or "")[:60], lat,
              "floor", round(r.get("hbm_floor_us") or 0), "attn", a.get("kernel"), round(a.get("us") or 0),
              round(100 * (a.get("floor_fraction") or 0)), "%", "blocks", r.get("blocks_built"), r.get("flags"))
PY
