#!/usr/bin/env python3
"""The idle time between consecutive kernels on the GPU, from `nsys stats --report cuda_gpu_trace --format csv`
output: prints the last N kernels (default 30) with their duration and the gap before each, then the sums.
Why: a pass of the fast layer is ~14 launches; the gaps say what launch overlap (e.g. programmatic dependent
launch) could win at most.
usage: python3 kernels/tools/nsys_gaps.py TRACE.csv [N]
"""
import csv
import sys

rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.strip()]
start = next(i for i, l in enumerate(lines) if l.startswith('"Start') or l.startswith("Start"))
for r in csv.DictReader(lines[start:]):
    name = r.get("Name", "")
    if r.get("Grid X", "") in ("", None) and "memcpy" in name.lower() or "memset" in name.lower():
        continue
    try:
        rows.append((int(float(r["Start (ns)"])), int(float(r["Duration (ns)"])), name))
    except (KeyError, ValueError):
        continue
rows.sort()
n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
tail = rows[-n:]
busy = gaps = 0
prev_end = None
for s, d, name in tail:
    gap = 0 if prev_end is None else s - prev_end
    if prev_end is not None:
        gaps += max(gap, 0)
    busy += d
    print(f"{name[:40]:40s} {d / 1e3:9.1f} us  gap before {gap / 1e3:7.1f} us")
    prev_end = s + d
print(f"last {len(tail)} kernels: busy {busy / 1e6:.3f} ms, gaps {gaps / 1e6:.3f} ms")
