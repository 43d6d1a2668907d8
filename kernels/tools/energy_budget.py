"""Where a pass's joules go against cuBLAS's, and what a speed target leaves: reads one `bench-gpu ...
--heat-ms 3000 --kernel-energy-ms MS --baseline .gpu/bench/torch_moe_heated.py` log and one
`kernels/tools/matmul_ceiling.py --preset P` log of the same GPU, and prints, per GEMM of ours, its pJ/FLOP
beside cuBLAS's at the same shape as a dense GEMM (the excess joules a pass), then the arithmetic of the
target: under the power cap a pass's time is its energy over ~700 W, so a ratio R against the compiled
baseline needs at most (the baseline's joules per pass) / R, and the GEMMs at cuBLAS's pJ/FLOP take part of it.

usage: python3 kernels/tools/energy_budget.py BENCH_LOG CUBLAS_LOG [--target 2.0]
e.g.   python3 kernels/tools/energy_budget.py kernels/tools/sessions/logs/s28a/bench-30b-energy.log \
           kernels/tools/sessions/logs/s28a/cublas-qwen3-30b-a3b.log --target 2

The weight gradients have no dense GEMM of their own shape in the cuBLAS log (their reduction runs over each
expert's rows); they are set beside the dense GEMM with the same three dimensions and the lower pJ/FLOP
(marked "analogue"). A malformed or incomplete log gives one `error:` line and status 2.
"""
import argparse, json, re, sys
from typing import NamedTuple

# our GEMM's kernel label: its (M, N, K), each one of the layer's sizes (rows, H, I, 2I)
GEMMS = {
    "gemm1+swiglu": ("rows", "2I", "H"),
    "gemm2": ("rows", "H", "I"),
    "dA_raw": ("rows", "I", "H"),
    "dX_rows": ("rows", "H", "2I"),
    "wgrad_w2": ("H", "I", "rows"),
    "wgrad_w13": ("2I", "H", "rows"),
}


class Row(NamedTuple):
    label: str
    ms: float  # per launch
    joules: float  # per launch
    pj_per_flop: float
    cublas_pj_per_flop: float
    match: str  # "same shape" or "analogue"
    at_cublas_joules: float  # what cuBLAS's pJ/FLOP gives for this GEMM's FLOPs


class BadLog(Exception):
    pass


def parse_bench(text):
    """The layer's sizes, the per-kernel energy lines and the heat lines of a bench-gpu log."""
    m = re.search(r"H=(\d+) I=(\d+) E=\d+ k=\d+, (\d+) dispatched rows", text)
    if not m:
        raise BadLog("no 'H=.. I=.. E=.. k=.., N dispatched rows' line: not a bench-gpu log")
    dims = {"H": int(m.group(1)), "I": int(m.group(2)), "2I": 2 * int(m.group(2)), "rows": int(m.group(3))}
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("energy per kernel (")), None)
    if start is None:
        raise BadLog("no 'energy per kernel (' block: run bench-gpu with --kernel-energy-ms")
    kernels = {}
    for l in lines[start + 2:]:
        f = l.split()
        if not l.startswith("  ") or len(f) < 4 or l.lstrip().startswith("("):
            break
        try:
            kernels[f[0]] = (float(f[1]), float(f[2]))  # ms, J per launch
        except ValueError:
            break  # a kernel the metering did not resolve
    if not kernels:
        raise BadLog("the 'energy per kernel' block has no kernel lines")
    heat = lambda prefix: [float(x) for x in re.findall(rf"^{prefix}: .*?, ([0-9.]+) J per pass", text, re.M)]
    ours, compiled = heat("heat"), heat(r"baseline --compile heat")
    if len(ours) != 2 or len(compiled) != 2:
        raise BadLog(f"need two 'heat:' and two 'baseline --compile heat:' lines with joules (forward, then forward+backward); found {len(ours)} and {len(compiled)}")
    return dims, kernels, ours[1], compiled[1]


def parse_cublas(text):
    """{(M, N, K): cuBLAS's sustained pJ/FLOP} from matmul_ceiling.py's JSON lines."""
    shapes = {}
    for l in text.splitlines():
        if not l.startswith("{"):
            continue
        try:
            d = json.loads(l)
        except json.JSONDecodeError as e:
            raise BadLog(f"a cuBLAS line is not JSON ({e})")
        m = re.search(r"(\d+)x(\d+)x(\d+)$", str(d.get("shape", "")))
        if not m or d.get("sustained_pj_per_flop") is None:
            continue
        shapes[tuple(int(x) for x in m.groups())] = float(d["sustained_pj_per_flop"])
    if not shapes:
        raise BadLog("no cuBLAS shape with sustained_pj_per_flop: run matmul_ceiling.py where NVML is readable")
    return shapes


def budget(dims, kernels, shapes):
    """A Row per GEMM of ours that was metered, and the joules of the other metered kernels."""
    rows = []
    for label, mnk in GEMMS.items():
        if label not in kernels:
            continue
        shape = tuple(dims[x] for x in mnk)
        flops = 2.0 * shape[0] * shape[1] * shape[2]
        ms, j = kernels[label]
        if shape in shapes:
            ref, kind = shapes[shape], "same shape"
        else:
            same = [v for s, v in shapes.items() if sorted(s) == sorted(shape)]
            if not same:
                raise BadLog(f"no cuBLAS shape with the dimensions of {label} {shape}")
            ref, kind = min(same), "analogue"
        rows.append(Row(label, ms, j, j / flops * 1e12, ref, kind, flops * ref * 1e-12))
    other = sum(j for name, (_, j) in kernels.items() if name not in GEMMS)
    return rows, other


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_log")
    ap.add_argument("cublas_log")
    ap.add_argument("--target", type=float, default=2.0, help="the speed ratio against compiled torch (default 2.0)")
    ap.error = lambda message: fail(message)  # one line, not argparse's usage block
    a = ap.parse_args()
    try:
        if not a.target > 0:
            raise BadLog(f"--target must be a positive ratio, got {a.target}")
        texts = []
        for p in (a.bench_log, a.cublas_log):
            try:
                texts.append(open(p, encoding="utf-8", errors="replace").read())
            except OSError as e:
                raise BadLog(f"cannot read {p}: {e.strerror}")
        dims, kernels, ours_j, compiled_j = parse_bench(texts[0])
        rows, other = budget(dims, kernels, parse_cublas(texts[1]))
    except BadLog as e:
        fail(str(e))
    need = compiled_j / a.target
    print("  kernel          ms/launch  J/launch  ours pJ/FLOP  cuBLAS pJ/FLOP             excess J")
    for r in rows:
        print(f"  {r.label:<15} {r.ms:9.3f} {r.joules:9.4f} {r.pj_per_flop:13.3f} {r.cublas_pj_per_flop:15.3f} ({r.match:<10}) {r.joules - r.at_cublas_joules:+8.3f}")
    gemm_j, at_ref = sum(r.joules for r in rows), sum(r.at_cublas_joules for r in rows)
    print(f"GEMMs {gemm_j:.3f} J a pass, at cuBLAS's pJ/FLOP {at_ref:.3f} J (excess {gemm_j - at_ref:+.3f} J); the other metered kernels {other:.3f} J")
    print(f"pass (over the heat): ours {ours_j:.3f} J, compiled torch {compiled_j:.3f} J, ratio {compiled_j / ours_j:.2f}x")
    print(f"{a.target:g}x needs at most {need:.3f} J a pass: the GEMMs at cuBLAS's pJ/FLOP leave {need - at_ref:.3f} J for everything else (today {other:.3f} J)")


if __name__ == "__main__":
    main()
