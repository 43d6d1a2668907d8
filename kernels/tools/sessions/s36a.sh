#!/usr/bin/env bash
# Session 36 (after `bash kernels/tools/stage_gpu.sh`; carry [".gpu"]; END s, default 540): on an H200 the burst
# rounds of both presets, then the heated ones (no round starts after UNTIL s, default 330), as s33b.sh; then,
# on any card, the gpu_fast fuzz target from the seeds for what is left (at least 60 s). Its inputs shorter
# than 12 bytes now decode from their own padding, not zeros (s35b's corpus shrank to 1-12-byte units; with
# zeros, an input shorter than 11 bytes ran on the mma engine, one shorter than 9 with seed 1).
source kernels/tools/sessions/ab_lib.sh
session_start s36a
UNTIL=${UNTIL:-330}
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
    *H200*) h200_burst $UNTIL burst; baselines $UNTIL heated ;;
    *) echo "not an H200: no rounds" ;;
esac
F=$((${END:-540} - SECONDS)); [ $F -lt 60 ] && F=60
fuzz_gpu_fast $F
echo "total ${SECONDS}s"
