#!/usr/bin/env python3
"""Per kernel, where the executed instructions go: warp-level instructions executed per SASS opcode, and the
SASS lines executed most, from Nsight Compute's source page as CSV (session 31: our GEMMs issue ~1.6x the
instructions per cycle of cuBLAS's at the same shape; this says which).

On the GPU machine:
    ncu -k regex:'^ws_rows_bmn$' --launch-count 2 --section SourceCounters -o prof .gpu/bin/moe-oracle bench-gpu ...
    ncu -i prof.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 kernels/tools/ncu_inst_mix.py sass.csv [LINES]
"""
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_source_csv import read_blocks  # noqa: E402


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    if len(sys.argv) < 2:
        fail("usage: ncu_inst_mix.py SASS_CSV [LINES]")
    if len(sys.argv) > 2 and not sys.argv[2].isdigit():
        fail(f"LINES must be a count, not {sys.argv[2]!r}")
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    try:
        blocks = read_blocks(sys.argv[1])
    except OSError as e:
        fail(f"cannot read {sys.argv[1]}: {e.strerror}")
    if not blocks:
        fail(f"no kernel in {sys.argv[1]} (expected ncu's source page: --page source --csv --print-source sass)")
    for name, lines in blocks:
        key = next((k for k in (lines[0].keys() if lines else []) if k.strip() == "Instructions Executed"), None)
        if key is None:
            print(f"## {name}: no 'Instructions Executed' column")
            continue
        count = lambda l: float((l.get(key) or "0").replace(",", "") or 0)
        total = sum(count(l) for l in lines) or 1.0
        ops = Counter()
        for l in lines:
            words = l.get("Source", "").split()
            if words and words[0].startswith("@"):  # a predicate guard: the opcode is the next word
                words = words[1:]
            ops[words[0].split(".")[0] if words else "?"] += count(l)
        print(f"## {name}: {total:.4g} warp instructions executed, {len(lines)} SASS lines")
        for op, n in ops.most_common(top):
            print(f"  {100 * n / total:5.1f}%  {op}")
        print("  most executed lines:")
        for l in sorted(lines, key=lambda l: -count(l))[:top]:
            print(f"  {100 * count(l) / total:5.1f}%  {l['Address']}  {l.get('Source', '')[:100]}")


if __name__ == "__main__":
    main()
