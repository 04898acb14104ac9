#!/usr/bin/env bash
# Device call 1 (tree at e8ee6de, run from its root): the split-KV configuration sweep (bf16 and fp8 caches;
# M = 1, 16; 32,768 and 4,096 positions), then the kernel's CUDA tests (the step-row tests left for call 2).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv
  python3 -c "import torch,triton;print(torch.__version__,triton.__version__)"; } > $OUT/env.txt 2>&1
T0=$SECONDS
timeout 170 python3 -m qbench.model.attention_bench --sweep --plan grid --deadline 135 --max-gib 8 \
  --context 32768 4096 --m 1 16 --out $OUT/sweep.json > $OUT/sweep.log 2>&1
echo "bench rc $? at $((SECONDS - T0)) s"
timeout 50 python3 -m pytest -q -p no:cacheprovider tests/model/test_splitkv_cuda.py -k "not step_rows" > $OUT/pytest.log 2>&1
echo "pytest rc $? at $((SECONDS - T0)) s"; tail -2 $OUT/pytest.log
