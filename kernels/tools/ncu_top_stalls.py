#!/usr/bin/env python3
"""Per kernel, the SASS lines with the most warp-stall samples, from Nsight Compute's source page as CSV.

On the GPU machine (kernels compiled with line info by MOE_FAST_LINEINFO=1):
    MOE_FAST_LINEINFO=1 ncu -k regex:'^ws_(gemm1_swiglu|rows|wgrad)$' --launch-count 4 --section SourceCounters \
        -o prof .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 1
    ncu -i prof.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 kernels/tools/ncu_top_stalls.py sass.csv [LINES]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_source_csv import read_blocks  # noqa: E402

blocks = read_blocks(sys.argv[1])
for name, lines in blocks:
    key = "Warp Stall Sampling (All Samples)"
    tot = sum(float(l.get(key) or 0) for l in lines) or 1
    print(f"## {name}: {len(lines)} SASS lines, {tot:.0f} samples")
    for l in sorted(lines, key=lambda l: -float(l.get(key) or 0))[:int(sys.argv[2]) if len(sys.argv) > 2 else 25]:
        print(f"{100*float(l[key] or 0)/tot:5.1f}%  {l['Address']}  {l['Source'][:110]}")
