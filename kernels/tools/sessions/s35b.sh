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
mkdir -p /tmp/gpu_fast_corpus; cp fuzz/corpus/gpu_fast/* /tmp/gpu_fast_corpus/
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 timeout $F .gpu/fuzz/gpu_fast -max_total_time=$((F - 25)) \
    -max_len=16 -len_control=0 -rss_limit_mb=8192 -report_slow_units=60 -artifact_prefix=$OUT/ /tmp/gpu_fast_corpus > $OUT/fuzz.log 2>&1
echo "== fuzz gpu_fast rc $? for ${F}s ($(ls /tmp/gpu_fast_corpus | wc -l) corpus units) at ${SECONDS}s"
grep -E "INITED|^#[0-9]+.*(DONE|pulse)|panicked|SUMMARY|crash-|Slowest unit" $OUT/fuzz.log | tail -8
echo "total ${SECONDS}s"
