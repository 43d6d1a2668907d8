#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): does the tile order change what
# 235b's GEMM1 and dX read from HBM? ncu bytes per kernel (as s18h.sh) with every row GEMM's tiles column tile
# fastest (MOE_FAST_RASTER_M=0) and in groups of 2 and 16 row tiles; s18h ran the default (8 for GEMM1 and dX).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18i}; mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for g in 0 2 16; do
  [ $SECONDS -gt 150 ] && break
  MOE_FAST_RASTER_M=$g timeout 100 $NCU --cache-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
     --csv .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/bytes-r$g.csv 2> $OUT/bytes-r$g.err
  echo "== ncu bytes 235b MOE_FAST_RASTER_M=$g rc $? at ${SECONDS}s"
  python3 kernels/tools/ncu_bytes.py $OUT/bytes-r$g.csv 2>&1 | grep -E "ws_gemm1|ws_rows|total"
done
echo total ${SECONDS}s
