#!/usr/bin/env bash
# Session 35, second call (after `bash kernels/tools/stage_gpu.sh`, which now builds the gpu_fast fuzz target
# with the oracle and moe_kernels uninstrumented; carry [".gpu"]; ~9 minutes): every gpu_fast test (the fast
# check now reuses one scratch buffer a thread for its dots' terms), then the fuzz target from the committed
# seeds until END s (default 560; s35a: 4 inputs in 423 s, the largest seed 248 s, with counters in the check). On an
# H200 the burst rounds of both presets come first and the fuzzing gets what is left. FUZZ_ONLY=1: the fuzzing alone.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s35b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nproc
[ -z "${FUZZ_ONLY:-}" ] && h200_burst 150 burst
[ -z "${FUZZ_ONLY:-}" ] && gpu_fast_all
F=$((${END:-560} - SECONDS)); [ $F -lt 60 ] && F=60
fuzz_gpu_fast $F
echo "total ${SECONDS}s"
