#!/usr/bin/env bash
# The H200 suite: everything a GPU run must back, in one device call. Usage on the GPU host:
#   bash scripts/h200_suite.sh OUTDIR [STEP ...]   (steps: tests crosscheck decode small_batch prefill seed repeat
#   speed models-rest, or any scenario name)
# speed: scripts/bench_decode.py, three decode runs of the default runner (issue 15). On a fresh
# machine the first run fills the compile and autotune caches; runs 2-3 find them. models-rest: the compiled int4/int8 rows
# the committed model files lack (issue 11; docs/results-h200.md says which).
# Writes result JSON, logs and the environment into OUTDIR and, after every step, a tarball
# ($QBENCH_TARBALL, default OUTDIR.tar.gz): a device call cut off at its time limit still brings
# back every finished step, and the rows of the step it cut (OUTDIR/<step>.partial.json, written
# after every scheme, "complete": false). QBENCH_STEP_TIMEOUT (s, default 900) bounds one scenario step.
# Committing a suite's output (results/<machine>/ holds the current file of each scenario only; see its INDEX.md):
#   OUTDIR/<scenario>.json -> results/h200/<scenario>.json (replacing the older run), OUTDIR/<scenario>.log ->
#   results/h200/env/logs/, nvidia-smi.csv, pip-list.txt, suite.log, pytest-cuda.log -> results/h200/env/<date>/;
#   a step cut off (<step>.partial.json) and completed by a later `qbench run --schemes` run is merged first:
#   python scripts/merge_results.py OUTDIR/<step>.partial.json REST.json --out results/h200/<step>.json
#   (models-rest: the same with the committed file as the base). Never commit a .partial.json. Then record the
#   command and commit in results/h200/env/provenance.toml and run python scripts/results_index.py.
set -u
out=${1:?OUTDIR}; shift
steps=${*:-tests crosscheck decode small_batch prefill seed}
tarball=${QBENCH_TARBALL:-$out.tar.gz}
step_timeout=${QBENCH_STEP_TIMEOUT:-900}
. scripts/device_setup.sh || exit 1
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,driver_version --format=csv > "$out/nvidia-smi.csv"
python3 -m pip list 2>/dev/null | grep -iE "^(torch|torchao|bitsandbytes|triton|pydantic|numpy|nvidia-ml-py|tabulate) " > "$out/pip-list.txt"
for step in $steps; do
  start=$(date +%s.%N)
  case $step in
    tests) timeout 300 python3 -m pytest -q -m cuda -rs tests > "$out/pytest-cuda.log" 2>&1 ;;
    crosscheck) timeout 240 python3 scripts/crosscheck_timing.py --out "$out/crosscheck.json" > "$out/crosscheck.log" 2>&1 ;;
    speed) timeout 600 python3 scripts/bench_decode.py "$out/speed" --runs 3 --designs preload > "$out/speed.log" 2>&1 ;;
    models-rest)
      for s in llama31_70b_down llama31_70b_lm_head; do
        timeout "$step_timeout" python3 -m qbench run "scenarios/$s.toml" --quiet --schemes int4-weight-only+compiled \
          --schemes int8-weight-only+compiled --out "$out/$s-compiled-rest.json" > "$out/$s-compiled-rest.log" 2>&1
      done
      timeout "$step_timeout" python3 -m qbench run scenarios/llama3_8b_lm_head.toml --quiet \
        --schemes int8-weight-only+compiled --out "$out/llama3_8b_lm_head-int8c.json" > "$out/llama3_8b_lm_head-int8c.log" 2>&1 ;;
    repeat) for i in 1 2 3 4 5; do timeout 240 python3 -m qbench run scenarios/decode.toml --quiet --out "$out/decode-repeat-$i.json" > "$out/decode-repeat-$i.log" 2>&1; done ;;
    *) timeout "$step_timeout" python3 -m qbench run "scenarios/$step.toml" --quiet --out "$out/$step.json" > "$out/$step.log" 2>&1 ;;
  esac
  rc=$?
  echo "$step rc=$rc wall_s=$(python3 -c "import time; print(round(time.time() - $start, 1))")" | tee -a "$out/suite.log"
  tar -czf "$tarball.tmp" -C "$(dirname "$out")" "$(basename "$out")"
  mv "$tarball.tmp" "$tarball"
done
