#!/usr/bin/env bash
# Session 34, second call (build of s34a; first `cargo +nightly fuzz build gpu_fast --release`, then
# `bash kernels/tools/stage_gpu.sh`, which stages the fuzz target; carry [".gpu"]; ~7 minutes): every gpu_fast
# test and the layer tests (the clamped SwiGLU's bounds tightened after s34a), the burst
# rounds of both presets against the PyTorch baseline (their oracle checks now bound dH through
# act_bound::backward_stored_bf16), then the gpu_fast fuzz target (no corpus is committed: it starts empty; each input a
# layer forward+backward on a random shape, engine and routing, checked against the oracle on every token and
# weight-gradient entry, and run twice, NaN-poisoned, for bitwise equality), not run since session 20. On an
# H200 the heated rounds after that.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s34b}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
UNTIL=${UNTIL:-330}
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_fast_all
layer_tests .gpu/bin 400
BASELINE_HEAT=0 baselines $UNTIL burst
mkdir -p /tmp/gpu_fast_corpus
n0=$(ls /tmp/gpu_fast_corpus | wc -l)
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 timeout ${FUZZ_S:-170} .gpu/fuzz/gpu_fast -max_total_time=$(( ${FUZZ_S:-170} - 20 )) \
    -max_len=64 -artifact_prefix=$OUT/ /tmp/gpu_fast_corpus > $OUT/fuzz.log 2>&1
echo "== fuzz gpu_fast rc $? (corpus $n0 -> $(ls /tmp/gpu_fast_corpus | wc -l) units) at ${SECONDS}s"
grep -E "^#[0-9]+.*(DONE|pulse)|panicked|SUMMARY|crash-" $OUT/fuzz.log | tail -4
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) baselines 500 heated ;; esac
echo "total ${SECONDS}s"
