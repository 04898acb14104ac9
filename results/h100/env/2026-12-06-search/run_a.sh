#!/usr/bin/env bash
# GPU call A: SmolLM2's step on seeded weights of its config (the speed half of its search), then the search's own
# cost at Llama-3.1-8B shapes (seeded).
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv > $OUT/nvidia-smi.csv
python3 -c "import torch,triton,torchao,bitsandbytes;print(torch.__version__,triton.__version__,torchao.__version__,bitsandbytes.__version__)" > $OUT/versions.txt
t0=$(date +%s)
timeout 100 python3 -m qbench run scenarios/step_smollm2_shapes.toml -o $OUT/step_smollm2_shapes.json --quiet > $OUT/step_smollm2_shapes.log 2>&1; echo "smollm2 step rc $? $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
/usr/bin/time -v timeout 480 python3 -m qbench run scenarios/search_llama31_8b_cost.toml -o $OUT/search_llama31_8b_cost.json > $OUT/search_llama31_8b_cost.log 2>&1; echo "8b search rc $? $(( $(date +%s) - t1 )) s"
tail -25 $OUT/search_llama31_8b_cost.log
