mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv > $OUT/env.txt 2>&1
python3 -c "import torch,triton,torchao,bitsandbytes;print(torch.__version__,triton.__version__,torchao.__version__,bitsandbytes.__version__)" >> $OUT/env.txt 2>&1
cp devrun/tuned.toml $OUT/
timeout 540 python3 -m qbench run devrun/tuned.toml -o $OUT/step_llama31_8b_bf16_tuned.json > $OUT/run.log 2>&1; echo rc $?
tail -30 $OUT/run.log
