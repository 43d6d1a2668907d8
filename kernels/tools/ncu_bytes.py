#!/usr/bin/env python3
"""Per kernel launch, DRAM bytes read and written and the duration, from `ncu --csv --metrics
dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum` (one row per launch and metric); prints the
last forward+backward pass (from the last launch of the routing kernel fr_count on) and its totals.

    python3 kernels/tools/ncu_bytes.py bytes.csv
"""
import csv
import sys

launches = {}  # launch id -> [name, {metric: value}]
order = []
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace"))]
hdr = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
cols = rows[hdr]
ci = {c: cols.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1}
for r in rows[hdr + 1:]:
    if len(r) < len(cols):
        continue
    lid = r[ci["ID"]]
    if lid not in launches:
        launches[lid] = [r[ci["Kernel Name"]].split("(")[0], {}]
        order.append(lid)
    v = float(r[ci["Metric Value"]].replace(",", ""))
    launches[lid][1][r[ci["Metric Name"]]] = v * scale.get(r[ci["Metric Unit"]], 1)
names = [launches[i][0] for i in order]
start = max((k for k, n in enumerate(names) if n == "fr_count"), default=0)
tot = [0.0, 0.0, 0.0]
print(f"{'kernel':28} {'ms':>8} {'read GB':>8} {'write GB':>9} {'TB/s':>6}")
for lid in order[start:]:
    n, m = launches[lid]
    rd, wr, t = m.get("dram__bytes_read.sum", 0), m.get("dram__bytes_write.sum", 0), m.get("gpu__time_duration.sum", 0)
    tot = [tot[0] + t, tot[1] + rd, tot[2] + wr]
    print(f"{n[:28]:28} {t * 1e3:8.3f} {rd / 1e9:8.3f} {wr / 1e9:9.3f} {(rd + wr) / max(t, 1e-12) / 1e12:6.2f}")
print(f"{'total':28} {tot[0] * 1e3:8.3f} {tot[1] / 1e9:8.3f} {tot[2] / 1e9:9.3f} {(tot[1] + tot[2]) / max(tot[0], 1e-12) / 1e12:6.2f}")
