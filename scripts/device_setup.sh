# Source this on the H200 host (no network). Unpacks the staged site archive .site.tar.xz (built on the
# CPU machine by ../shared/device/stage-site.sh: torchao 0.18, bitsandbytes 0.50, mslk-cuda, gemlite,
# pydantic, nvidia-ml-py, tqdm) into /tmp/site and puts it and the checkout on PYTHONPATH.
[ -f .site.tar.xz ] || { echo "device_setup: .site.tar.xz missing (run bash ../shared/device/stage-site.sh and carry it)"; return 1; }
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, torchao, bitsandbytes, pydantic, importlib.util as u; print('torch', torch.__version__, 'torchao', torchao.__version__, 'bnb', bitsandbytes.__version__, 'pydantic', pydantic.__version__, 'mslk', u.find_spec('mslk') is not None, torch.cuda.get_device_name())"
