#!/usr/bin/env bash
# Diagnose the CUDA suite's stop inside tests/quality/test_quality_cuda.py (session 5): the kernel tests with no
# capture (a native exit's message reaches the log), then the files after it with a junit file.
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv > $OUT/env.txt 2>&1
T0=$SECONDS
timeout 200 python3 -m pytest -s -v -m cuda -p no:cacheprovider tests/quality/test_quality_cuda.py -k runs_its_kernel \
  --junitxml=$OUT/junit-quality.xml > $OUT/pytest-quality.log 2>&1
echo "quality rc $? at $((SECONDS - T0)) s"; grep -E "PASSED|FAILED|SKIPPED|ERROR|Fatal|exit|Error" $OUT/pytest-quality.log | tail -40
timeout $(( ${DEADLINE:-560} - (SECONDS - T0) )) python3 -m pytest -rfEs -m cuda -p no:cacheprovider tests/schemes tests/step \
  tests/test_ceilings.py tests/test_gpu_state.py tests/test_inputs.py tests/test_ledger.py tests/test_measure_stream.py \
  tests/test_precision.py tests/timing --junitxml=$OUT/junit-rest.xml > $OUT/pytest-rest.log 2>&1
echo "rest rc $? at $((SECONDS - T0)) s"; tail -25 $OUT/pytest-rest.log
