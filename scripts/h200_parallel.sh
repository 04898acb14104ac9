#!/usr/bin/env bash
# Two H200 suites at once on a 2-GPU host, one per GPU (CUDA_VISIBLE_DEVICES), to fit the re-run of every
# committed result into the device budget. Usage on the GPU host:
#   bash scripts/h200_parallel.sh OUTDIR "STEPS FOR GPU 0" "STEPS FOR GPU 1"
# Each GPU's suite writes OUTDIR/gpuN/ (scripts/h200_suite.sh); nvidia-smi topology goes to OUTDIR/topo.txt.
set -u
out=${1:?OUTDIR}; steps0=${2:?steps for GPU 0}; steps1=${3:?steps for GPU 1}
mkdir -p "$out"
nvidia-smi topo -m > "$out/topo.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,driver_version --format=csv > "$out/gpus.csv"
CUDA_VISIBLE_DEVICES=0 QBENCH_TARBALL=/tmp/gpu0.tar.gz bash scripts/h200_suite.sh "$out/gpu0" $steps0 > "$out/gpu0.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 QBENCH_TARBALL=/tmp/gpu1.tar.gz bash scripts/h200_suite.sh "$out/gpu1" $steps1 > "$out/gpu1.log" 2>&1 &
wait
cat "$out"/gpu*/suite.log
