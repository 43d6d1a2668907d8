#!/usr/bin/env bash
# Session 20 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): dA_raw's side-tile releases after a
# __syncwarp (s20e's racecheck reported ws_copy_box's shared loads racing the producer's refill: lane 0's
# arrival released only its own reads). racecheck again, every gpu_fast test, and the cost on both presets
# (B = MOE_FAST_DEFINES=WS_NO_SIDE_SYNCWARP, a timing switch that restored the old release; removed after this
# call, its A/B done: rerun the A/B at commit 07fc588), with one sample
# per preset against the baseline in between (the call may land on an H200, where the targets were set).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s20f}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
s=$SECONDS
MOE_FAST_ENGINES=ws timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool racecheck --error-exitcode 9 .gpu/bin/gpu_fast --test-threads=1 \
    fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-racecheck.log 2>&1
echo "== racecheck (ws engine, edge shapes) rc $? $((SECONDS - s)) s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|test result|Race reported" $OUT/cs-racecheck.log | head -4
gpu_fast_all
nvidia-smi --query-gpu=name --format=csv,noheader
baselines 230 final-3
AB_UNTIL=300
ab qwen3-30b-a3b 10 30b-nosync "MOE_FAST_DEFINES=WS_NO_SIDE_SYNCWARP"
ab qwen3-235b-a22b 6 235b-nosync "MOE_FAST_DEFINES=WS_NO_SIDE_SYNCWARP"
echo total ${SECONDS}s
