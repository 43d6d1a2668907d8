#!/usr/bin/env bash
# Session 38 (after `bash kernels/tools/stage_gpu.sh`; carry [".gpu"]; END s, default 540): on any card the
# burst rounds of both presets, then the heated ones (no round starts after UNTIL s, default 260): the
# issue's card is an H200, which last ran them in session 29, and on an H100 they are this session's
# same-call ratios. Then the command-line GPU tests, then the gpu_fast fuzz target for what is left.
source kernels/tools/sessions/ab_lib.sh
session_start s38a
UNTIL=${UNTIL:-260}
BASELINE_HEAT=0 baselines $UNTIL burst
baselines $UNTIL heated
cli_gpu_tests
F=$((${END:-540} - SECONDS)); [ $F -lt 60 ] && F=60
fuzz_gpu_fast $F
echo "total ${SECONDS}s"
