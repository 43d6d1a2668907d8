#!/usr/bin/env bash
# Session 16, last call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]):
# 1. gpu_fast on the final build (the same kernels and host code as s16d; the test's poisoned runs refactored);
# 2. where 235b's weight gradients stall (ncu WarpStateStats and SourceCounters of ws_wgrad, the grad_w13
#    launch: the second of a pass), for the next session: SM throughput 80% and L2 hit rate 89-92% in s16e, yet
#    ~500 TFLOP/s against 30b's ~590.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16f}; mkdir -p $OUT
REQUIRE_GPU=1 timeout 120 .gpu/bin/gpu_fast --test-threads=1 > $OUT/gpu_fast.log 2>&1
echo "== gpu_fast rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked" $OUT/gpu_fast.log | cut -c1-300 | head -8
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
MOE_FAST_LINEINFO=1 timeout 120 $NCU -k regex:'^ws_wgrad$' --launch-skip 1 --launch-count 1 --section WarpStateStats \
   --section SourceCounters --section SpeedOfLight -f -o $OUT/wgrad .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b \
   --tokens 16384 --engines ws --reps 1 --check-tokens 0 > $OUT/ncu.log 2>&1
echo "== ncu 235b ws_wgrad (grad_w13) rc $? at ${SECONDS}s"
$NCU -i $OUT/wgrad.ncu-rep --page details 2>&1 | grep -E "Duration|Stall|Warp Cycles|Issued Warp|Eligible|Active Warps|No Eligible|Compute \(SM\)|Memory Throughput" | head -24
$NCU -i $OUT/wgrad.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>/dev/null
python3 kernels/tools/ncu_top_stalls.py $OUT/sass.csv 20 2>&1 | head -24
echo total ${SECONDS}s
