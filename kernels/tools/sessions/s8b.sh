#!/usr/bin/env bash
# Session 8, third call: why WS_CLUSTER=2 ran at ~60% of the default's speed (s8a.sh): the resident-cluster count
# of the occupancy query, a forced count of 66 clusters, and the CUTLASS-style arrive semantics.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
b() { timeout 60 .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 10 --check-tokens 1 --check-wgrad 32 2>&1 | grep -E "fast kernels|fast forward|^  [gdws]|oracle|error" | cut -c1-120; }
echo "=== default"; b
echo "=== WS_CLUSTER=2"; MOE_FAST_DEFINES="WS_CLUSTER=2" b
echo "=== WS_CLUSTER=2 MOE_FAST_CLUSTERS=66"; MOE_FAST_CLUSTERS=66 MOE_FAST_DEFINES="WS_CLUSTER=2" b
echo "=== WS_CLUSTER=2 WS_CLUSTER_ARRIVE_CTA MOE_FAST_CLUSTERS=66"; MOE_FAST_CLUSTERS=66 MOE_FAST_DEFINES="WS_CLUSTER=2 WS_CLUSTER_ARRIVE_CTA" b
nvidia-smi -q | grep -iE "MIG|Compute Mode|Multiprocessor" | head
echo "total ${SECONDS}s"
