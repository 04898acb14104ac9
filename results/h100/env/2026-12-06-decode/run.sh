#!/usr/bin/env bash
# decode.toml on this tree (main), compared with the committed H200 file; SIDE=base runs ea4f3da (base/) instead.
ROOT=$PWD
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used --format=csv > $OUT/nvidia-smi-$SIDE.csv
cat $OUT/nvidia-smi-$SIDE.csv
PYTHONPATH=/tmp/site python3 -c "import torch,triton,torchao,bitsandbytes;print(torch.__version__,triton.__version__,torchao.__version__,bitsandbytes.__version__)" > $OUT/versions.txt
DIR=$ROOT; [ "$SIDE" = base ] && DIR=$ROOT/base
(cd $DIR && PYTHONPATH=/tmp/site:$DIR timeout 560 python3 -m qbench run scenarios/decode.toml -o $OUT/decode_$SIDE.json --quiet > $OUT/decode_$SIDE.log 2>&1); echo "decode $SIDE rc $?"
PYTHONPATH=/tmp/site:$ROOT python3 -m qbench compare results/h200/decode.json $OUT/decode_$SIDE.json --allow-other-machine 2>&1 | tail -45
