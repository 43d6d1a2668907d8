#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): HBM bytes read and written by every
# kernel of a 30b and a 235b forward+backward (ncu, caches not flushed between kernels, so the counts are what a
# pass moves), to rank the levers by bytes (NOTES.md, next steps). The CSVs come back; the per-kernel table of
# the last pass is printed by kernels/tools/ncu_bytes.py.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18h}; mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for p in qwen3-30b-a3b qwen3-235b-a22b; do
  [ $SECONDS -gt 150 ] && break
  timeout 150 $NCU --cache-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
     --csv .gpu/bin/moe-oracle bench-gpu --preset $p --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/bytes-$p.csv 2> $OUT/bytes-$p.err
  echo "== ncu bytes $p rc $? at ${SECONDS}s"
  python3 kernels/tools/ncu_bytes.py $OUT/bytes-$p.csv 2>&1 | tail -20
done
echo total ${SECONDS}s
