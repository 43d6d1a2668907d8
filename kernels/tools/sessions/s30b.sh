#!/usr/bin/env bash
# Session 30, third call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]; ~4 minutes; no step
# starts after UNTIL s, default 240). Leaves at most 8 files in $OUT (the device returns no more).
# s29a's WS_EXP_NO_STORE A/B left B's intermediates unwritten, so B's kernels after gemm1 read zeros, which
# under the power cap run faster for that reason alone. `--ab "...; SEED_FROM_A=1"` now copies A's H, A, o and
# dA_raw into B after the warm-up, so every GEMM of B reads real operands: the stores' share per GEMM, read
# properly. SEED_FROM_A=1 alone is the control (B/A should be 1).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s30b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
REQUIRE_GPU=1 timeout 90 .gpu/bin/gpu_fast --test-threads=1 device_random_inputs_have_their_distribution seeding_copies_the_gemm_written_intermediates \
    > $OUT/gpu_fast-new.log 2>&1; echo "== gpu_fast (two new tests) rc $?"; grep -E "^test |test result|panicked" $OUT/gpu_fast-new.log
export AB_HEAT=3000 AB_UNTIL=${UNTIL:-240}
ab qwen3-30b-a3b 10 seed-control "SEED_FROM_A=1"
ab qwen3-30b-a3b 10 no-store-seeded "MOE_FAST_DEFINES=WS_EXP_NO_STORE; SEED_FROM_A=1"
ab qwen3-30b-a3b 10 no-tma-issue-seeded "MOE_FAST_DEFINES=WS_EXP_NO_TMA_ISSUE; SEED_FROM_A=1"
# an H200 (the issue's card): the issue's own method, the burst, both presets; else the 235b stores' share
case "$gpu" in
    *H200*) BASELINE_HEAT=0 baselines ${UNTIL:-240} h200-burst ;;
    *) ab qwen3-235b-a22b 6 no-store-seeded-235b "MOE_FAST_DEFINES=WS_EXP_NO_STORE; SEED_FROM_A=1" ;;
esac
echo "total ${SECONDS}s"
