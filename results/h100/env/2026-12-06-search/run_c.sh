#!/usr/bin/env bash
# GPU call C: the SmolLM2 search's proof step (its verified recipes timed where its speed file was), then the CUDA
# tests of the calibrated int4 schemes (the kernel reads out the calibrated weight).
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv > $OUT/nvidia-smi.csv
t0=$(date +%s)
timeout 120 python3 -m qbench run scenarios/search_smollm2_proof_step.toml -o $OUT/search_smollm2_proof_step.json --quiet > $OUT/search_smollm2_proof_step.log 2>&1; echo "proof step rc $? $(( $(date +%s) - t0 )) s"
timeout 90 python3 -m pytest -q -m cuda -p no:cacheprovider tests/schemes/test_calibrated.py tests/schemes/test_emulate.py -k "hqq or gptq or awq" > $OUT/pytest-cuda-calibrated.log 2>&1; echo "cuda calibrated rc $?"; tail -3 $OUT/pytest-cuda-calibrated.log
