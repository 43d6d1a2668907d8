#!/usr/bin/env bash
# The probes, built and run on the GPU machine (one device call, the repository carried as usual):
#   bash kernels/tools/probes/run.sh
set -u
export PATH=/usr/local/cuda/bin:$PATH
d=$(mktemp -d)
for p in tma_row_gather; do
  if nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o $d/$p kernels/tools/probes/$p.cu -lcuda 2> $d/$p.log; then
    echo "== $p"; timeout 120 $d/$p; echo "== $p rc $?"
  else
    echo "== $p: build failed"; head -30 $d/$p.log
  fi
done
