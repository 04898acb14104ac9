# Source this on the H200 host (no network): installs the staged wheels (.whl/, filled by
# ../shared/device/stage-wheels.sh torchao==0.18.0 bitsandbytes==0.50.2 pydantic==2.14.4
# pydantic_core==2.50.5 annotated-types typing-inspection typing-extensions) into /tmp/site.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, torchao, bitsandbytes, pydantic; print('torch', torch.__version__, 'torchao', torchao.__version__, 'bnb', bitsandbytes.__version__, 'pydantic', pydantic.__version__, torch.cuda.get_device_name())"
