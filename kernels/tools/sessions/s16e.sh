#!/usr/bin/env bash
# Session 16, fifth call (the build of s16d; carry [".gpu"]): 235b only.
# 1. A/B MOE_FAST_CLUSTERED=ws_rows_bmn (dX in clusters of 2 with the weight tile multicast: ncu in s16b/s16c had
#    235b's dX at 80-86% of the L2's bandwidth, which the multicast cuts by a third), and with ws_wgrad too;
# 2. the default against the baseline again (a second same-default sample of the ratio);
# 3. ncu on 235b's ws_wgrad (the weight gradients run at ~495 TFLOP/s there against ~590 on 30b): L2 hit rate,
#    DRAM and L2 throughput.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s16e}; mkdir -p $OUT
. kernels/tools/sessions/ab_lib.sh
AB_UNTIL=100 ab qwen3-235b-a22b 8 235-cl-dx "MOE_FAST_CLUSTERED=ws_rows_bmn"
AB_UNTIL=100 ab qwen3-235b-a22b 8 235-cl-dx-wgrad "MOE_FAST_CLUSTERED=ws_rows_bmn,ws_wgrad"
if [ $SECONDS -lt 200 ]; then
  timeout 90 .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 10 --check-tokens 1 \
      --check-wgrad 32 --baseline .gpu/bench/torch_moe_baseline.py > $OUT/bench-235b.log 2>&1
  echo "== default 235b with the baseline rc $? at ${SECONDS}s"
  grep -E "^fast|^\||speedup|^  [a-z]" $OUT/bench-235b.log | grep -v route | cut -c1-160 | head -20
fi
[ $SECONDS -lt 260 ] && ncu_235b ws_wgrad 70 "weight gradients"
echo total ${SECONDS}s
