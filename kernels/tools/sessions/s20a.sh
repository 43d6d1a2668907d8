#!/usr/bin/env bash
# Session 20, first call (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): the clustered GEMMs
# (B multicast to both blocks of a cluster) with the cluster-wide dynamic tile queue. The scheduler test first
# (clustered kernels bitwise against the default, default dynamic choice and all dynamic; a deadlock shows as
# its timeout), memcheck of the clustered + dynamic kernels on the edge shapes, then interleaved A/Bs.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s20a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
REQUIRE_GPU=1 timeout 150 .gpu/bin/gpu_fast --test-threads=1 the_dynamic_tile_scheduler_changes_no_bits > $OUT/sched.log 2>&1
echo "== scheduler test rc $? at ${SECONDS}s"; grep -E "^test |test result|panicked|fast kernels" $OUT/sched.log | cut -c1-300 | head -12
MOE_FAST_CLUSTERED=all MOE_FAST_DYNAMIC=all MOE_FAST_ENGINES=ws timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 \
    .gpu/bin/gpu_fast --test-threads=1 fast_layer_matches_the_oracle_on_edge_shapes > $OUT/cs-memcheck.log 2>&1
echo "== memcheck (clustered, all dynamic) rc $? at ${SECONDS}s"; grep -E "ERROR SUMMARY|test result" $OUT/cs-memcheck.log | head -3
AB_UNTIL=480
ab qwen3-235b-a22b 8 235b-c3 "MOE_FAST_CLUSTERED=ws_gemm1_swiglu,ws_rows,ws_rows_bmn"
ab qwen3-30b-a3b 10 30b-c3 "MOE_FAST_CLUSTERED=ws_gemm1_swiglu,ws_rows,ws_rows_bmn"
ab qwen3-235b-a22b 8 235b-call "MOE_FAST_CLUSTERED=all"
ab qwen3-30b-a3b 10 30b-call-dyn "MOE_FAST_CLUSTERED=all; MOE_FAST_DYNAMIC=all"
echo total ${SECONDS}s
