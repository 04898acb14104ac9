#!/usr/bin/env bash
# One device call of the model-step work: unpack the staged site packages, keep Inductor's and
# Triton's caches in a carried folder (.compile-cache, brought back as a tarball), run the
# scenarios given, and copy results and logs to $OUT.
#   bash scripts/step_device.sh SCENARIO.toml [SCENARIO.toml ...]
# .compile-cache/compile-cache.txz.part-* (what an earlier call brought back; or an older cache.tar(.gz)) seeds the caches;
# .compile-cache/<name>.partial.json or <name>.json (a run an earlier call cut off, or finished) is resumed:
# only the schemes it lacks are measured (qbench run --resume).
# Carry: the device tool carries at most 64 MiB (tracked files, ~29 MB, + .site.tar.xz + .compile-cache). With the
# 16 MB cache of 2026-12-02c the full site archive (21.7 MB) did not fit; one without gemlite and torchao's tests
# (20.75 MB; the step scenarios need neither) did. Recompress a returned cache with xz -9e to keep it small.
# The cache 2026-12-02d call 2 brought back (both 8B step scenarios; 80 MB Inductor + 629 MB Triton unpacked) is
# 18.6 MB even at xz -9e: too big beside the slim site archive. Both benchmark runs of 2026-12-02d used the 16 MB one.
set -uo pipefail
mkdir -p /tmp/site && tar -xJf .site.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD
mkdir -p .compile-cache
[ -f .compile-cache/cache.tar ] && tar -xf .compile-cache/cache.tar -C .compile-cache
[ -f .compile-cache/cache.tar.gz ] && tar -xzf .compile-cache/cache.tar.gz -C .compile-cache
ls .compile-cache/compile-cache.txz.part-* >/dev/null 2>&1 && cat .compile-cache/compile-cache.txz.part-* | xz -d | tar -x -C .compile-cache
export TORCHINDUCTOR_CACHE_DIR=$PWD/.compile-cache/inductor TRITON_CACHE_DIR=$PWD/.compile-cache/triton
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$OUT/nvidia-smi.csv" 2>&1
# STEP_LIMIT_S: seconds left for the scenarios (the caches are saved after, whatever happened)
end=$(( $(date +%s) + ${STEP_LIMIT_S:-520} ))
for s in "$@"; do
  n=$(basename "$s" .toml)
  left=$(( end - $(date +%s) )); [ $left -lt 20 ] && { echo "$n skipped: no time left" >> "$OUT/summary.txt"; continue; }
  how=--force
  for f in .compile-cache/$n.partial.json .compile-cache/$n.json; do
    [ -f "$f" ] && { cp "$f" "$OUT/$(basename "$f")"; how=--resume; }
  done
  timeout -s INT $left /usr/bin/time -v python3 -m qbench run "$s" -o "$OUT/$n.json" $how > "$OUT/$n.log" 2>&1
  echo "$n rc=$?" >> "$OUT/summary.txt"
  grep -E "Elapsed|Maximum resident" "$OUT/$n.log" >> "$OUT/summary.txt"
done
# the caches come back in parts under the device tool's 16 MiB per file; carry them back in
# .compile-cache/ (cp $FILES_AT/compile-cache.txz.part-* .compile-cache/) for the next call
[ "${STEP_SAVE_CACHE:-1}" = 0 ] || (cd .compile-cache && tar -cf - inductor triton 2>/dev/null | xz -T0 -9 --block-size=32MiB | split -b 15m - "$OUT/compile-cache.txz.part-")
# the device tool brings back few files: everything but the cache parts goes back as one tar, results.tar
(cd "$OUT" && tar -cf results.tar --exclude='compile-cache.txz.part-*' --exclude=results.tar . \
  && find . -maxdepth 1 -type f ! -name results.tar ! -name 'compile-cache.txz.part-*' -delete)
ls -la "$OUT"
