#!/usr/bin/env bash
# Session 10, first call: the host code that changed after session 9's last GPU run (KernelSettings /
# FastKernels::load_with, kernels::with_cluster_config, bench-gpu --ab) checked on the GPU:
# gpu_fast on the default and with the weight gradients clustered, gpu_layer and layer_api, bench-gpu --ab on
# a pair with a known answer (WS_SWIGLU_DIV_STANDARD: gemm1 ~1.83 against ~1.67 ms, outputs bitwise equal),
# then the gpu_fast fuzz target (not run since session 7).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
OUT=${OUT:-/tmp/s10a}; mkdir -p $OUT
t() { # name env...
    local n=$1; shift; s=$SECONDS
    env "$@" timeout 120 .gpu/bin/$n --test-threads=1 > $OUT/$n.log 2>&1
    echo "== $n [$*] rc $? $((SECONDS - s)) s: $(grep 'test result' $OUT/$n.log | tail -1 | cut -c1-80)"
    grep -E "panicked|FAILED" $OUT/$n.log | head -5 | cut -c1-200
}
t gpu_fast
t gpu_fast MOE_FAST_CLUSTERED=ws_wgrad
t gpu_layer
t layer_api
s=$SECONDS
timeout 150 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 20 --check-tokens 1 \
    --check-wgrad 32 --ab "MOE_FAST_DEFINES=WS_SWIGLU_DIV_STANDARD" > $OUT/ab.log 2>&1
echo "== bench-gpu --ab rc $? $((SECONDS - s)) s"; grep -vE "^\s*$" $OUT/ab.log | tail -40 | cut -c1-160
if [ -x .gpu/fuzz/gpu_fast ]; then
  mkdir -p /tmp/corpus; s=$SECONDS
  ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 timeout 100 .gpu/fuzz/gpu_fast -max_total_time=80 -max_len=64 /tmp/corpus > $OUT/fuzz.log 2>&1
  echo "== fuzz gpu_fast rc $? $((SECONDS - s)) s ($(ls /tmp/corpus | wc -l) corpus units)"
  grep -E "^#[0-9]+.*(DONE|pulse)|panicked|SUMMARY|crash-|SKIP" $OUT/fuzz.log | tail -3 | cut -c1-200
fi
echo "total ${SECONDS}s"
