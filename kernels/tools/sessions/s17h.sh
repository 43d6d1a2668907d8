#!/usr/bin/env bash
# Session 17 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): why GEMM1 is ~9% slower gathering X's
# rows by cp.async than reading kept rows by TMA (MOE_FAST_SAVE_X_ROWS=1), when the probe
# (kernels/tools/probes/tma_row_gather.cu) streamed cp.async gathers faster than one TMA box: ncu of one 30b
# ws_gemm1_swiglu launch each way (speed of light, memory, warp states, the SASS lines with the most stall samples);
# then the same for grad_w2 with its rows copied first or gathered inside.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17h}; mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for v in gather kept; do
  [ $SECONDS -gt 200 ] && break
  env=""; [ $v = kept ] && env="MOE_FAST_SAVE_X_ROWS=1"
  env $env MOE_FAST_LINEINFO=1 timeout 100 $NCU -k regex:'^ws_gemm1_swiglu$' --launch-skip 1 --launch-count 1 --section SpeedOfLight \
     --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters -f -o $OUT/g1-$v \
     .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu-$v.log 2>&1
  echo "== ncu 30b ws_gemm1_swiglu [$v] rc $? at ${SECONDS}s"
  $NCU -i $OUT/g1-$v.ncu-rep --page details 2>&1 | grep -E "Duration|DRAM Throughput|L2 Hit Rate|L1/TEX Hit|Memory Throughput|Max Bandwidth|Compute \(SM\)|Warp Cycles Per Issued|Stall" | head -16
  $NCU -i $OUT/g1-$v.ncu-rep --page source --csv --print-source sass > $OUT/sass-$v.csv 2>/dev/null
  python3 kernels/tools/ncu_top_stalls.py $OUT/sass-$v.csv 12 2>&1 | head -14
done
# and why the weight gradients lose 42-53% gathering their rows inside (s17g): grad_w2 (the first ws_wgrad launch
# of a pass) with its dY rows copied first (default) and gathered by cp.async (MOE_FAST_GATHER_FIRST=0)
for v in copied gathered; do
  [ $SECONDS -gt 420 ] && break
  env=""; [ $v = gathered ] && env="MOE_FAST_GATHER_FIRST=0"
  env $env MOE_FAST_LINEINFO=1 timeout 100 $NCU -k regex:'^ws_wgrad$' --launch-count 1 --section SpeedOfLight \
     --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters -f -o $OUT/w2-$v \
     .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu-w2-$v.log 2>&1
  echo "== ncu 30b grad_w2 (ws_wgrad) [$v] rc $? at ${SECONDS}s"
  $NCU -i $OUT/w2-$v.ncu-rep --page details 2>&1 | grep -E "Duration|DRAM Throughput|L2 Hit Rate|Memory Throughput|Max Bandwidth|Compute \(SM\)|Warp Cycles Per Issued" | head -10
  $NCU -i $OUT/w2-$v.ncu-rep --page source --csv --print-source sass > $OUT/sass-w2-$v.csv 2>/dev/null
  python3 kernels/tools/ncu_top_stalls.py $OUT/sass-w2-$v.csv 12 2>&1 | head -14
done
echo total ${SECONDS}s
