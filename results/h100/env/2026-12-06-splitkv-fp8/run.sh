#!/usr/bin/env bash
# Device call 2, from the tree's root (the site packages' archive one folder up): the split-KV CUDA tests, the
# first kernel timed as it was (before.py), then the configuration sweep of this tree (its default rows the new
# per-dtype tiling), bf16 and fp8 caches, M = 1 and 16, 32,768 and 4,096 positions.
export PYTHONUNBUFFERED=1
T0=$SECONDS
D=results/h100/env/2026-12-06-splitkv-fp8
mkdir -p /tmp/site && tar -xJf ../.site.tar.xz -C /tmp/site
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv
  python3 -c "import torch,triton;print(torch.__version__,triton.__version__)"; } > $OUT/env.txt 2>&1
PYTHONPATH=/tmp/site:$PWD timeout 80 python3 -m pytest -q -p no:cacheprovider tests/model/test_splitkv_cuda.py > $OUT/pytest-cuda.log 2>&1
echo "pytest rc $? at $((SECONDS - T0)) s"; tail -2 $OUT/pytest-cuda.log
PYTHONPATH=$PWD timeout 40 python3 $D/before.py $D/before_splitkv.py $OUT/before.json > $OUT/before.log 2>&1
echo "before rc $? at $((SECONDS - T0)) s"
LEFT=$(( 225 - (SECONDS - T0) ))
PYTHONPATH=$PWD timeout $LEFT python3 -m qbench.model.attention_bench --sweep --plan grid --deadline $(( LEFT - 25 )) \
  --max-gib 8 --context 32768 4096 --m 1 16 --out $OUT/sweep.json > $OUT/sweep.log 2>&1
echo "sweep rc $? at $((SECONDS - T0)) s"
python3 $D/summary.py $OUT/before.json $OUT/sweep.json
