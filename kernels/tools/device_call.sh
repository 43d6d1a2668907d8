#!/usr/bin/env bash
# One device call for the fast kernels: the GPU tests, optional timing variants, the benches against the
# PyTorch baseline in the same call, the demo round trip through `check`, compute-sanitizer (memcheck, racecheck,
# synccheck, initcheck), and the gpu_fast fuzz target when it is staged. Every step is guarded by the call's
# elapsed time so that the summary always comes back; logs go to $OUT (one file per step), the summary to stdout.
#
# Staged here first (the GPU machine has no Rust): `bash kernels/tools/stage_gpu.sh` (or `../shared/tools/gpu-pack`,
# too large to carry with the working tree now; at least the moe-oracle binary
# and the gpu_fast, gpu_layer, layer_api test binaries in .gpu/bin, and ../shared/bench/*.py in .gpu/bench);
# the fuzz step runs when stage_gpu.sh staged the gpu_fast fuzz target (it builds it when cargo-fuzz is installed).
# Then, through the device tool with carry [".gpu"]:
#   bash kernels/tools/device_call.sh                       (everything, default kernels)
#   VARIANTS="WS_GEMM1_TMA=0;WS_EXP_NO_STORE" bash kernels/tools/device_call.sh
#       (each ;-separated MOE_FAST_DEFINES set timed on 30b first, without the baseline; see fast_ws.cu; and its
#       outputs on a small golden case compared bitwise with the default's)
#   BENCH_ONLY=1 bash kernels/tools/device_call.sh          (skip the tests, sanitizer and fuzzing)
#   NO_BENCH=1 ...                                          (skip the two benches against the baseline)
# Budget: about 6 minutes with everything (racecheck on four edge cases ~50 s, the two baseline benches ~2 minutes).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
B=.gpu/bin
OUT=${OUT:-/tmp/device_call}
mkdir -p "$OUT"
LIMIT=${LIMIT:-540} # stop starting new steps after this many seconds

left() { [ $SECONDS -lt $(( LIMIT - $1 )) ]; }
tst() { # name, timeout
    s=$(date +%s)
    timeout "$2" $B/$1 --test-threads=1 > "$OUT/$1.log" 2>&1
    rc=$?
    echo "== $1 rc $rc $(( $(date +%s) - s )) s: $(grep -E 'test result' "$OUT/$1.log" | tail -1)"
    grep -E "panicked|FAILED" "$OUT/$1.log" | head -5
}

[ -z "${BENCH_ONLY:-}" ] && tst gpu_fast 150

if [ -n "${VARIANTS:-}" ]; then
    IFS=';' read -ra vs <<< "$VARIANTS"
    # a case with whole 64-row groups and I % 128 == 0 (so that every epilogue path runs), on which each variant's
    # outputs must be bitwise the default's (a switch that changes a kernel every engine shares, such as
    # FC_SWIGLU_BWD_IN_RANGE, is invisible to gpu_fast's comparison of engines)
    $B/moe-oracle golden --preset qwen3-30b-a3b --tokens 512 --hidden 256 --intermediate 256 --experts 8 --top-k 2 \
        -o "$OUT/vcase.safetensors" > /dev/null 2>&1
    for d in "" "${vs[@]}"; do
        left 60 || break
        echo "=== MOE_FAST_DEFINES=[$d] at ${SECONDS}s"
        MOE_FAST_DEFINES="$d" $B/moe-oracle run "$OUT/vcase.safetensors" --device cuda --kernels fast --intermediates \
            -o "$OUT/v.safetensors" > "$OUT/v.log" 2>&1 || { echo "run failed:"; tail -2 "$OUT/v.log"; }
        if [ -z "$d" ]; then
            mv "$OUT/v.safetensors" "$OUT/v0.safetensors"
        elif cmp -s "$OUT/v.safetensors" "$OUT/v0.safetensors"; then
            echo "outputs on the variant case: bitwise the default's"
        else
            echo "OUTPUTS ON THE VARIANT CASE DIFFER FROM THE DEFAULT'S"
        fi
        MOE_FAST_DEFINES="$d" timeout 60 $B/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws \
            --check-tokens 1 --check-wgrad 64 --reps 5 2>&1 | grep -E "fast forward|^  [gdws]|error|oracle"
    done
fi

for preset in qwen3-30b-a3b qwen3-235b-a22b; do
    [ -n "${NO_BENCH:-}" ] && break
    left 110 || break
    timeout 110 $B/moe-oracle bench-gpu --preset $preset --tokens 16384 --engines ws --check-tokens 2 --check-wgrad 128 \
        --reps 10 --baseline .gpu/bench/torch_moe_baseline.py > "$OUT/bench-$preset.log" 2>&1
    echo "== bench $preset rc $? at ${SECONDS}s"
    grep -E "^  |^fast|oracle|^\||speedup|selective|kept|device memory" "$OUT/bench-$preset.log" | grep -v route
done

if [ -z "${BENCH_ONLY:-}" ]; then
    left 40 && tst gpu_layer 30
    left 30 && tst layer_api 20
    if left 30; then
        $B/moe-oracle demo -o "$OUT/demo.safetensors" --save-case "$OUT/case.safetensors" > /dev/null 2>&1
        $B/moe-oracle run "$OUT/case.safetensors" --device cuda --kernels fast --intermediates -o "$OUT/cand.safetensors" > "$OUT/demo-run.log" 2>&1
        echo "== run --device cuda --kernels fast rc $?"
        $B/moe-oracle check "$OUT/case.safetensors" --candidate "$OUT/cand.safetensors" --recipe bf16 > "$OUT/demo-check.log" 2>&1
        echo "== check --recipe bf16 rc $?"
        rm -f "$OUT"/*.safetensors
    fi
    # (sanitize_ws: kernels/tools/sessions/ab_lib.sh; every edge shape, but racecheck on RACE_CASES: all 14 took
    # 102 s in session 20 and ran past 300 s since; synccheck and initcheck ran 3 s on four cases in s22b)
    source kernels/tools/sessions/ab_lib.sh
    for tool in memcheck racecheck synccheck initcheck; do
        lim=160; cases=""; [ $tool = racecheck ] && lim=200 && cases=${RACE_CASES:-10,11,12,14}
        left $lim || break
        sanitize_ws $tool $lim "$cases"
    done
    if [ -x .gpu/fuzz/gpu_fast ] && left 60; then
        fuzz_gpu_fast 70
    fi
fi
echo "total ${SECONDS}s"
