#!/usr/bin/env bash
# Prepared in session 16: the fused dA epilogue again (branch s15-fused-dA, now merged with session 16's main), its
# H loads WG_BWD_AHEAD = 4 steps ahead instead of 1 (s16: 1.66 ms against 0.70 + 0.48 on 30b; one 32-byte load
# pair in flight per thread could not cover HBM's latency). Stage both builds first:
#   bash kernels/tools/stage_gpu.sh && bash kernels/tools/stage_ref.sh s15-fused-dA
# then a device call with carry [".gpu"]: bash kernels/tools/sessions/s17b.sh
# 1. the branch's gpu_fast edge shapes (bitwise across engines, the oracle);
# 2. main's and the branch's 30b benches back to back, twice; 235b once each;
# 3. in the branch's binary, A/B of the depth: WG_BWD_AHEAD=6 and =2 against its default 4 (30b).
# Bar to clear: dA + SwiGLU bwd below dA_raw + swiglu_bwd_rows of the same call (about 1.18 ms on 30b, 4.2 ms
# on 235b); then merge (it also frees the f32 dA_raw buffer, 403 MB on 30b).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s17b}; mkdir -p $OUT
M=.gpu/bin; F=.gpu/s15-fused-dA/bin
B="--tokens 16384 --engines ws --reps 10 --check-tokens 1 --check-wgrad 32"
REQUIRE_GPU=1 timeout 100 $F/gpu_fast --test-threads=1 edge_shapes > $OUT/fused-gpu_fast.log 2>&1
echo "== fused: gpu_fast edge shapes rc $? at ${SECONDS}s"; grep -E "test result|panicked" $OUT/fused-gpu_fast.log | cut -c1-300 | head -3
run() { # side preset round
  local bin=$M; [ $1 = fused ] && bin=$F
  timeout 90 $bin/moe-oracle bench-gpu --preset $2 $B > $OUT/$1-$2-$3.log 2>&1
  echo "== $1 $2 round $3 rc $? at ${SECONDS}s"; grep -E "^fast forward\+|dA|swiglu|oracle" $OUT/$1-$2-$3.log | cut -c1-120
}
for round in 1 2; do run main qwen3-30b-a3b $round; run fused qwen3-30b-a3b $round; done
run main qwen3-235b-a22b 1; run fused qwen3-235b-a22b 1
for d in 6 2; do
  [ $SECONDS -gt 500 ] && break
  timeout 90 $F/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 16 --check-tokens 1 \
      --check-wgrad 16 --ab "MOE_FAST_DEFINES=WG_BWD_AHEAD=$d" > $OUT/ab-ahead-$d.log 2>&1
  echo "== fused A/B WG_BWD_AHEAD=$d rc $? at ${SECONDS}s"; grep -E "^B/A|dA|^outputs|rror" $OUT/ab-ahead-$d.log | cut -c1-120
done
echo total ${SECONDS}s
