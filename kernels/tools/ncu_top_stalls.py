#!/usr/bin/env python3
"""Per kernel, the SASS lines with the most warp-stall samples, from Nsight Compute's source page as CSV.

On the GPU machine (kernels compiled with line info by MOE_FAST_LINEINFO=1):
    MOE_FAST_LINEINFO=1 ncu -k regex:'^ws_(gemm1_swiglu|rows|wgrad)$' --launch-count 4 --section SourceCounters \
        -o prof .gpu/bin/moe-oracle bench-gpu --preset qwen3-30b-a3b --tokens 16384 --engines ws --reps 1
    ncu -i prof.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 kernels/tools/ncu_top_stalls.py sass.csv [LINES]
"""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1], errors="replace")))
# the file: for each kernel a "Kernel Name" row, a header row starting with "Address", then one row per SASS line
blocks, cur, hdr = [], None, None
for r in rows:
    if len(r) >= 2 and r[0] == "Kernel Name":
        cur = [r[1], []]; blocks.append(cur); hdr = None; continue
    if r and r[0] == "Address":
        hdr = r; continue
    if cur is not None and hdr and len(r) == len(hdr):
        cur[1].append(dict(zip(hdr, r)))
for name, lines in blocks:
    key = "Warp Stall Sampling (All Samples)"
    tot = sum(float(l.get(key) or 0) for l in lines) or 1
    print(f"## {name}: {len(lines)} SASS lines, {tot:.0f} samples")
    for l in sorted(lines, key=lambda l: -float(l.get(key) or 0))[:int(sys.argv[2]) if len(sys.argv) > 2 else 25]:
        print(f"{100*float(l[key] or 0)/tot:5.1f}%  {l['Address']}  {l['Source'][:110]}")
