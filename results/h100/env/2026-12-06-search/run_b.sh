#!/usr/bin/env bash
# GPU call B: the search's own cost at Llama-3.1-8B shapes (seeded).
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv > $OUT/nvidia-smi.csv
t1=$(date +%s)
timeout 330 python3 -m qbench run scenarios/search_llama31_8b_cost.toml -o $OUT/search_llama31_8b_cost.json > $OUT/search_llama31_8b_cost.log 2>&1; echo "8b search rc $? $(( $(date +%s) - t1 )) s"
tail -8 $OUT/search_llama31_8b_cost.log
