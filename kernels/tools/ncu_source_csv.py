"""Reading Nsight Compute's source page as CSV (`ncu -i REP --page source --csv --print-source sass`): for
each kernel a "Kernel Name" row, a header row starting with "Address", then one row per SASS line. Shared by
ncu_top_stalls.py and ncu_inst_mix.py."""
import csv


def read_blocks(path):
    """[(kernel name, [{column: value} per SASS line])] in the file's order."""
    blocks, cur, hdr = [], None, None
    for r in csv.reader(open(path, errors="replace")):
        if len(r) >= 2 and r[0] == "Kernel Name":
            cur = (r[1], [])
            blocks.append(cur)
            hdr = None
            continue
        if r and r[0] == "Address":
            hdr = r
            continue
        if cur is not None and hdr and len(r) == len(hdr):
            cur[1].append(dict(zip(hdr, r)))
    return blocks
