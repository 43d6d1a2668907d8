#!/usr/bin/env bash
# Session 19 (stage first: bash kernels/tools/stage_gpu.sh && bash kernels/tools/stage_ref.sh s19-narrow-tiles
# narrow; carry [".gpu"]): why 128 x 128 tiles lost 40% on 235b's dX. ncu's SpeedOfLight, WarpStateStats and
# SchedulerStats of one dX launch each way: main's ws_rows_bmn (the second launch of a backward: the first is
# dA_raw) and the branch's ws_rows_bmn_n128 (MOE_FAST_NARROW=dX).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s19h}; mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
B="bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0"
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats"
timeout 100 $NCU -k regex:'^ws_rows_bmn$' --launch-skip 1 --launch-count 1 $S -f -o $OUT/wide .gpu/bin/moe-oracle $B > $OUT/wide.log 2>&1
echo "== wide rc $? at ${SECONDS}s"
MOE_FAST_NARROW=dX timeout 100 $NCU -k regex:'^ws_rows_bmn_n128$' --launch-count 1 $S -f -o $OUT/narrow .gpu/narrow/bin/moe-oracle $B > $OUT/narrow.log 2>&1
echo "== narrow rc $? at ${SECONDS}s"
for r in wide narrow; do
  echo "== $r"
  $NCU -i $OUT/$r.ncu-rep --page details 2>&1 | grep -i -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issued Ipc|No Eligible|Warp Cycles Per Issued|stall|Eligible Warps" | cut -c1-400 | head -30
done
echo total ${SECONDS}s
