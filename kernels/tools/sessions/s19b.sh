#!/usr/bin/env bash
# Session 19, second call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the row GEMMs' tiles in
# one group per expert (MOE_FAST_RASTER_M=expert, FastLayer::set_tile_order(Some(TileOrder::Experts))) and
# dA_raw's row stores through ws_copy_box: every gpu_fast test (bitwise against the other orders,
# NaN-poisoned), interleaved A/Bs on 235b and 30b, the HBM bytes per kernel of a 235b pass in that order
# (against s18h's 7.67 / 7.47 GB read by GEMM1 / dX), then memcheck of the ws engine's edge shapes.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s19b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu_fast_all
AB_UNTIL=300
ab qwen3-235b-a22b 8 235b-expert "MOE_FAST_RASTER_M=expert"
ab qwen3-30b-a3b 10 30b-expert "MOE_FAST_RASTER_M=expert"
if [ $SECONDS -lt 330 ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
  MOE_FAST_RASTER_M=expert timeout 100 $NCU --cache-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
     --csv .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/bytes-235b-expert.csv 2> $OUT/bytes-235b-expert.err
  echo "== ncu bytes 235b expert order rc $? at ${SECONDS}s"
  python3 kernels/tools/ncu_bytes.py $OUT/bytes-235b-expert.csv 2>&1 | tail -14
fi
[ $SECONDS -lt 400 ] && memcheck_ws
echo total ${SECONDS}s
