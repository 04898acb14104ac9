mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > $OUT/env.txt 2>&1
cp devrun/fit.toml $OUT/
timeout 150 python3 -m qbench run devrun/fit.toml -o $OUT/step_llama31_8b_fit.json > $OUT/run.log 2>&1; echo rc $?
tail -12 $OUT/run.log
python3 -c "
import json; d=json.load(open('$OUT/step_llama31_8b_fit.json'))
for r in d['rows']: print(r['scheme'], r['m'], r['context'], r['status'], r.get('blocks_built'), r.get('peak_memory_bytes'), (r.get('reason') or '')[:200])"
