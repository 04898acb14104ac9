#!/usr/bin/env bash
# One call: the trained checkpoint's decode step on this tree (new) and on main at ea4f3da (base/), same
# machine; every CUDA-marked test; the split-KV attention tests and per-layer attention benchmark.
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
ROOT=$PWD; NEW=/tmp/site:$PWD; BASE=/tmp/site:$PWD/base
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv > $OUT/nvidia-smi.csv
PYTHONPATH=$NEW python3 -c "import torch,triton,torchao,bitsandbytes;print(torch.__version__,triton.__version__,torchao.__version__,bitsandbytes.__version__)" > $OUT/versions.txt
for side in new base new; do
  if [ $side = new ]; then PP=$NEW; dir=$ROOT; else PP=$BASE; dir=$ROOT/base; fi
  n=$((n+1)); (cd $dir && PYTHONPATH=$PP timeout 100 python3 -m qbench run scenarios/step_tiny_trained.toml -o $OUT/step_tiny_trained_${n}_$side.json --quiet) >> $OUT/call.log 2>&1
  echo "step $n $side rc $?"
done
PYTHONPATH=$NEW timeout 120 python3 -m pytest -q -m cuda tests --deselect tests/quality/test_quality_cuda.py --ignore tests/schemes/test_emulate.py -p no:cacheprovider > $OUT/pytest-cuda-rest.log 2>&1; echo "cuda rest rc $?"; tail -2 $OUT/pytest-cuda-rest.log
PYTHONPATH=$NEW timeout 100 python3 -m qbench.model.attention_bench --context 4096 32768 --m 1 --out $OUT/attention_llama31_8b.json >> $OUT/call.log 2>&1; echo "attention bench rc $?"
PYTHONPATH=$NEW timeout 240 python3 -m pytest -q -m cuda tests/quality tests/schemes/test_emulate.py -p no:cacheprovider > $OUT/pytest-cuda-quality.log 2>&1; echo "cuda quality rc $?"; tail -2 $OUT/pytest-cuda-quality.log
python3 - <<'PY'
import json, os
try:
    d = json.load(open(os.environ["OUT"] + "/attention_llama31_8b.json"))
except OSError as e:
    raise SystemExit(str(e))
for r in d["rows"]:
    print(r["attention"], r["m"], r["context"], round(r.get("us_per_layer", -1), 1), round(r.get("floor_pct", -1)), r.get("rel_err"), r.get("error", ""))
PY
