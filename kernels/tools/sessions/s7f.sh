#!/usr/bin/env bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export REQUIRE_GPU=1
B=.gpu/bin; LIMIT=${LIMIT:-330}
left() { [ $SECONDS -lt $(( LIMIT - $1 )) ]; }
tst() { s=$SECONDS; timeout "$2" $B/$1 --test-threads=1 > /tmp/$1.log 2>&1; echo "== $1 rc $? $((SECONDS-s)) s: $(grep -E 'test result' /tmp/$1.log | tail -1)"; grep -E "panicked|FAILED" /tmp/$1.log | head -5; }
tst gpu_fast 150
b() { timeout 60 $B/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 10 --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast forward|gemm1|dX|oracle" | cut -c1-100 | tr '\n' '|' | sed 's/  */ /g'; echo; }
for r in 1 2; do
  left 60 || break
  echo "=== packed first (default)"; b
  echo "=== WS_SWIGLU_PACK_LATE"; MOE_FAST_DEFINES=WS_SWIGLU_PACK_LATE b
done
for d in "WS_EXP_CLOCKS" "WS_EXP_CLOCKS WS_SWIGLU_PACK_LATE"; do
  left 60 || break
  echo "=== [$d]"
  MOE_FAST_DEFINES="$d" timeout 60 $B/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 1 --check-tokens 0 2>&1 | grep -E "wsclk epi_kind 40 blk 0 wg 0|gemm1" | tail -2
done
left 60 && tst gpu_layer 30
left 50 && tst layer_api 20
if left 40; then
  $B/moe-oracle demo -o /tmp/demo.safetensors --save-case /tmp/case.safetensors > /dev/null 2>&1
  $B/moe-oracle run /tmp/case.safetensors --device cuda --kernels fast --intermediates -o /tmp/cand.safetensors > /tmp/demo-run.log 2>&1; echo "== run --device cuda --kernels fast rc $?"
  $B/moe-oracle check /tmp/case.safetensors --candidate /tmp/cand.safetensors --recipe bf16 > /tmp/demo-check.log 2>&1; echo "== check --recipe bf16 rc $?"; tail -2 /tmp/demo-check.log
fi
CS=/usr/local/cuda/bin/compute-sanitizer
if left 60; then
  s=$SECONDS; MOE_FAST_ENGINES=ws timeout 80 $CS --tool memcheck --error-exitcode 9 $B/gpu_fast --test-threads=1 fast_layer_matches_the_oracle_on_edge_shapes > /tmp/cs-mem.log 2>&1
  echo "== memcheck rc $? $((SECONDS-s)) s"; grep -E "ERROR SUMMARY" /tmp/cs-mem.log | head -2
fi
if [ -x .gpu/fuzz/gpu_fast ] && left 45; then
  mkdir -p /tmp/corpus
  ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 timeout 50 .gpu/fuzz/gpu_fast -max_total_time=35 -max_len=64 /tmp/corpus > /tmp/fuzz.log 2>&1
  echo "== fuzz gpu_fast rc $? ($(ls /tmp/corpus | wc -l) corpus units)"; grep -E "^#[0-9]+.*(DONE|pulse)|panicked|SUMMARY|crash-|SKIP" /tmp/fuzz.log | tail -3
fi
if left 85; then
  s=$SECONDS; MOE_FAST_ENGINES=ws timeout 85 $CS --tool racecheck --error-exitcode 9 $B/gpu_fast --test-threads=1 fast_layer_matches_the_oracle_on_edge_shapes > /tmp/cs-race.log 2>&1
  echo "== racecheck rc $? $((SECONDS-s)) s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" /tmp/cs-race.log | head -2
fi
echo total ${SECONDS}s
