#!/usr/bin/env bash
# Session 18 (stage first: bash kernels/tools/stage_gpu.sh; carry [".gpu"]): 235b, the persistent row GEMMs'
# tile order: the default (groups of 8 row tiles for GEMM1 and dX, whose experts' weights exceed 16 MiB; column
# tile fastest for GEMM2 and dA_raw) against one setting for every row GEMM: groups of 4, 8 and 16.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/s18g}; mkdir -p $OUT
source kernels/tools/sessions/ab_lib.sh
for g in 4 8 16; do
  AB_UNTIL=200 ab qwen3-235b-a22b 6 raster$g-235b "MOE_FAST_RASTER_M=$g"
done
echo total ${SECONDS}s
