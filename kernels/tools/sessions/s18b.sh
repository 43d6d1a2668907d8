#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): why the weight gradients still lose
# 33% (grad_w2) and 65% (grad_w13) gathering their rows inside (MOE_FAST_GATHER_FIRST=0) after the leaner
# producer (s18a): ncu source counters of one 30b grad_w2 and one grad_w13 launch, gathered and copied; the
# SASS CSVs come back for the stall reasons per code region (kernels/tools/ncu_top_stalls.py).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18b}; mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for v in gathered copied; do
  for w in 0 1; do   # launch 0 of ws_wgrad in a pass is grad_w2, launch 1 grad_w13
    [ $SECONDS -gt 300 ] && break
    env=""; [ $v = gathered ] && env="MOE_FAST_GATHER_FIRST=0"
    env $env MOE_FAST_LINEINFO=1 timeout 100 $NCU -k regex:'^ws_wgrad$' --launch-skip $w --launch-count 1 --section SpeedOfLight \
       --section WarpStateStats --section SourceCounters -f -o /tmp/w-$v-$w \
       .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > /tmp/ncu-$v-$w.log 2>&1
    echo "== ncu 30b ws_wgrad launch $w [$v] rc $? at ${SECONDS}s"
    $NCU -i /tmp/w-$v-$w.ncu-rep --page details 2>&1 | grep -E "Duration|Compute \(SM\)|Memory Throughput|Warp Cycles Per Issued|Issued Warp" | head -6
    $NCU -i /tmp/w-$v-$w.ncu-rep --page source --csv --print-source sass > $OUT/sass-$v-$w.csv 2>/dev/null
  done
done
echo total ${SECONDS}s
