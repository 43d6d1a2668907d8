#!/usr/bin/env bash
# Session 14, second call: do the 235b row GEMMs starve on L2 misses (the per-expert weights are 25 MB, two
# experts' worth in flight exceed the 50 MB L2; 30b's are 6 MB)? Nsight Compute's L2 hit rate and DRAM traffic
# of GEMM2 and dX (the two ws_rows_bmn launches of one forward+backward), 235b against 30b, fixed order
# against dynamic (MOE_FAST_DYNAMIC=none / all; the scheduler is compiled in by default since session 14).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for p in qwen3-235b-a22b qwen3-30b-a3b; do
  for d in none all; do  # MOE_FAST_DYNAMIC: the fixed order, every GEMM dynamic
    [ $SECONDS -gt ${S14B_UNTIL:-430} ] && break
    echo "=== $p [$d] at ${SECONDS}s"
    MOE_FAST_DYNAMIC=$d timeout 120 $NCU -k regex:'^ws_rows_bmn$' --launch-count 2 \
       --section SpeedOfLight --section MemoryWorkloadAnalysis -f -o /tmp/prof \
       .gpu/bin/moe-oracle bench-gpu --preset $p --tokens 16384 --engines ws --reps 1 --check-tokens 0 > /tmp/ncu.log 2>&1
    echo "ncu rc $?"; grep -iE "error|==PROF==.*(Disconnected|failed)" /tmp/ncu.log | head -3
    $NCU -i /tmp/prof.ncu-rep --page details 2>&1 | grep -E "ws_rows_bmn|Duration|DRAM Throughput|L2 Hit Rate|L1/TEX Hit|Memory Throughput|Mem Busy|Max Bandwidth|L2 Compression" | head -24
  done
done
echo total ${SECONDS}s
