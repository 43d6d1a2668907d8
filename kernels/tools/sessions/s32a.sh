#!/usr/bin/env bash
# Prepared in session 31 for the next one (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"];
# ~3 minutes on an H100, ~6 on an H200; no step starts after UNTIL s, default 360). At most 8 files in $OUT.
# 1. On an H200 only: the burst rounds of both presets against the shared baseline (the issue's own method on
#    its card; not run since session 12).
# 2. The padding's share on 235b under heat: the padding skips (`WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1`, off by
#    default because racecheck hangs on them) A/B'd on 235b. s31e put ~6% of dX's cycles on padding rows; the
#    skips leave about half of them. Only measured on 30b so far (B/A 0.9915).
# 3. ncu at the locked clock on 235b's gemm1 against cuBLAS's kernel for the dense GEMM1 shape (131072 x 3072 x
#    4096), as s31e did for dX: where the gathered, SwiGLU-fused GEMM spends its cycles and bytes.
# (Session 32 added, first: fc_swiglu_bwd_rows with cvt.rn.bf16x2 conversions (`FC_SWIGLU_BWD_CVT=1`), and
# with div.rn's branch-free fast path as well (`=2`), heated A/Bs on 30b; the kernel moves 1.21 GB in 0.373 ms
# on the H200 (3.2 TB/s) at 711 W, and its code shrinks from 4552 to 3080 instructions with the first.
# Then `SWIGLU_RCP=1`: every SwiGLU quotient by rcp.approx.f32 instead of div.rn (B's values differ from A's;
# the A/B's oracle check on B must pass; GEMM1 11640 -> 9568 instructions). At most 8 files: 4 A/B logs, 2
# burst logs, s32a.out, and the ncu pages only if the burst did not run.)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s32a}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
UNTIL=${UNTIL:-360}
nvidia-smi --query-gpu=name --format=csv,noheader
export AB_HEAT=3000 AB_UNTIL=$UNTIL
ab qwen3-30b-a3b 8 swb-cvt "MOE_FAST_DEFINES=FC_SWIGLU_BWD_CVT=1"
ab qwen3-30b-a3b 8 swb-cvt2 "MOE_FAST_DEFINES=FC_SWIGLU_BWD_CVT=2"
ab qwen3-30b-a3b 8 swiglu-rcp "MOE_FAST_DEFINES=SWIGLU_RCP=1"
h200_burst $UNTIL burst-h200
ab qwen3-235b-a22b 8 skips-235b "MOE_FAST_DEFINES=WS_SKIP_EMPTY_WG=2 WS_SKIP_EMPTY_K=1"
if [ $SECONDS -lt $((UNTIL - 60)) ]; then  # ncu last (~4 minutes), started only before UNTIL - 60 s
    S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats"
    timeout 150 $(ncu_bin) -k regex:'^ws_gemm1_swiglu$' --launch-count 1 $S -f -o /tmp/g1 \
        .gpu/bin/moe-oracle bench-gpu --preset qwen3-235b-a22b --tokens 16384 --engines ws --reps 1 --check-tokens 0 > /tmp/ncu-g1.log 2>&1
    echo "== ncu gemm1 rc $? at ${SECONDS}s"
    ncu_cublas 131072 3072 4096 /tmp/cb1 /tmp/ncu-cb1.log $S  # 235b's GEMM1, dense
    for r in g1 cb1; do ncu_summary /tmp/$r $OUT/$r-details.txt; done
fi
echo "total ${SECONDS}s"
