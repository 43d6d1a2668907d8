#!/usr/bin/env bash
# Session 17, third call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]):
# 1. is the epilogues' 13-14% (s17d: WS_EXP_NO_STORE) the time to fill and hand over the staging boxes (which a
#    ping-pong of the consumers would hide) or the global writes themselves (energy at the power cap, which it
#    would not)? WS_EXP_NO_TMA_ISSUE keeps everything but the TMA stores; default and NO_STORE again for
#    reference on this call's GPU; the 30b default under nvidia-smi with 20 reps (is 30b at the cap too?);
# 2. a second sample of both presets against the PyTorch baseline.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17e}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
for p in qwen3-30b-a3b qwen3-235b-a22b; do
  for d in "" WS_EXP_NO_TMA_ISSUE WS_EXP_NO_STORE; do
    [ $SECONDS -gt 220 ] && break
    reps=5; [ $p = qwen3-30b-a3b ] && [ -z "$d" ] && reps=20
    B="--tokens 16384 --engines ws --reps $reps --check-tokens 0"
    if [ -z "$d" ]; then
      timeout 80 bash kernels/tools/smi_during.sh .gpu/bin/moe-oracle bench-gpu --preset $p $B > $OUT/split-$p-default.log 2>&1
    else
      MOE_FAST_DEFINES="$d" timeout 80 .gpu/bin/moe-oracle bench-gpu --preset $p $B > $OUT/split-$p-$d.log 2>&1
    fi
    echo "== $p [${d:-default}] rc $? at ${SECONDS}s"
    grep -E "^fast forward\+|gemm|wgrad|dX_rows|dA_raw|nvidia-smi|SM MHz|sw_power" $OUT/split-$p-${d:-default}.log | cut -c1-100
  done
done
baselines 330 "second sample"
echo total ${SECONDS}s
