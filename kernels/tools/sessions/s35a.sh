#!/usr/bin/env bash
# Session 35, first call (build 4f4aacc; first `cargo +nightly fuzz build gpu_fast --release`, then
# `bash kernels/tools/stage_gpu.sh`; carry [".gpu"]; ~9 minutes): every gpu_fast test, of which
# `the_fuzz_seeds_pass` (the eight committed seeds through the fuzz target's own check) has not run on a GPU,
# and the layer tests; on an H200 the burst rounds of both presets (the method on its card), on another
# card the burst round of 235b alone (its oracle check now uses the certified dots: its check time, 15.2 s
# a token before, is in the log); then the gpu_fast fuzz target from the seeds until ~570 s (faster check, not
# yet run on a GPU).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s35a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
gpu_fast_all
layer_tests .gpu/bin 300
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
    *H200*) h200_burst 330 burst ;;
    *) bench_round qwen3-235b-a22b 0 burst-qwen3-235b-a22b ;;
esac
F=$((570 - SECONDS)); [ $F -lt 60 ] && F=60
mkdir -p /tmp/gpu_fast_corpus; cp fuzz/corpus/gpu_fast/* /tmp/gpu_fast_corpus/
ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 REQUIRE_GPU=1 timeout $F .gpu/fuzz/gpu_fast -max_total_time=$((F - 25)) \
    -max_len=16 -len_control=0 -rss_limit_mb=8192 -artifact_prefix=$OUT/ /tmp/gpu_fast_corpus > $OUT/fuzz.log 2>&1
echo "== fuzz gpu_fast rc $? for ${F}s ($(ls /tmp/gpu_fast_corpus | wc -l) corpus units) at ${SECONDS}s"
grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)|panicked|SUMMARY|crash-" $OUT/fuzz.log | tail -5
echo "total ${SECONDS}s"
