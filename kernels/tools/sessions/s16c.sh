#!/usr/bin/env bash
# Session 16, third call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]). The new defaults (X's
# rows kept from the forward, WS_PARTIAL_STAGED=2):
# 1. gpu_fast (all four tests), gpu_layer, layer_api;
# 2. the default against the baseline, 30b and 235b;
# 3. A/B of WS_RASTER_M (row tiles fastest in groups of G, so that the readers of a weight column start together):
#    235b G=8 and 16, 30b G=8;
# 4. ncu on 235b's dX with WS_RASTER_M=8: does the L2 hit rate (71% in s16b) go up?
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16c}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 170 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
. kernels/tools/sessions/ab_lib.sh
layer_tests .gpu/bin 200
for p in qwen3-30b-a3b qwen3-235b-a22b; do
  [ $SECONDS -gt 330 ] && break
  timeout 170 .gpu/bin/moe-oracle bench-gpu --preset $p --tokens 16384 --engines ws --reps 10 --check-tokens 1 \
      --check-wgrad 32 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-$p.log 2>&1
  echo "== default $p with the baseline rc $? at ${SECONDS}s"
  grep -E "^fast|oracle|^\||speedup|^  [a-z]|memory" $OUT/bench-$p.log | grep -v route | cut -c1-160 | head -26
done
AB_UNTIL=420 ab qwen3-235b-a22b 8 235-raster8 "MOE_FAST_DEFINES=WS_RASTER_M=8"
AB_UNTIL=440 ab qwen3-30b-a3b 16 30-raster8 "MOE_FAST_DEFINES=WS_RASTER_M=8"
AB_UNTIL=460 ab qwen3-235b-a22b 8 235-raster16 "MOE_FAST_DEFINES=WS_RASTER_M=16"
if [ $SECONDS -lt 520 ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
  MOE_FAST_DEFINES=WS_RASTER_M=8 timeout 70 $NCU -k regex:'^ws_rows_bmn$' --launch-count 2 --section SpeedOfLight --section MemoryWorkloadAnalysis -f -o $OUT/prof \
     .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu.log 2>&1
  echo "== ncu 235b WS_RASTER_M=8 rc $? at ${SECONDS}s"
  $NCU -i $OUT/prof.ncu-rep --page details 2>&1 | grep -E "ws_rows_bmn|Duration|DRAM Throughput|L2 Hit Rate|Max Bandwidth" | head -12
fi
echo total ${SECONDS}s
