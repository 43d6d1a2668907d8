"""The bf16 matmul ceiling of this GPU, in bursts and sustained: is anchors.md's 779 TFLOP/s (8192^3, 20 timed
reps with a sync after each) the rate a layer's GEMMs can hold for milliseconds on end, or a burst the power
controller has not caught up with yet?

usage: python3 kernels/tools/matmul_ceiling.py [--seconds 2.0] [--preset qwen3-30b-a3b|qwen3-235b-a22b]
(run under kernels/tools/smi_during.sh to see the SM clock and the power cap)

For each shape: `burst` = median of 20 CUDA-event timings with a sync after each (the baseline's method);
`sustained` = back-to-back launches for about `--seconds`, timed as a whole, then the median of per-launch
events over the last half of a second stream of launches. Shapes: the anchors' 8192^3, and the qwen3-30b-a3b
layer's row GEMMs at 16384 tokens as one dense GEMM each (M = 16384 * 8 rows; cuBLAS through torch), or
with `--preset qwen3-235b-a22b` that layer's.
Where NVML is there (the reader of torch_moe_heated.py, beside this file), the sustained span's energy too:
joules per GEMM, mean watts and pJ per FLOP, cuBLAS's figures to set beside `bench-gpu --kernel-energy-ms`.
"""
import argparse, json, os, sys, time, torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_moe_heated import energy_counter  # noqa: E402

SHAPES = {  # preset: {name: (M, N, K)}; M = 16384 tokens x 8 slots
    "qwen3-30b-a3b": {
        "square 8192^3": (8192, 8192, 8192),
        "30b GEMM1 131072x1536x2048": (131072, 1536, 2048),
        "30b dX 131072x2048x1536": (131072, 2048, 1536),
        "30b GEMM2 131072x2048x768": (131072, 2048, 768),
        "30b dA 131072x768x2048": (131072, 768, 2048),
    },
    "qwen3-235b-a22b": {
        "235b GEMM1 131072x3072x4096": (131072, 3072, 4096),
        "235b dX 131072x4096x3072": (131072, 4096, 3072),
        "235b GEMM2 131072x4096x1536": (131072, 4096, 1536),
        "235b dA 131072x1536x4096": (131072, 1536, 4096),
    },
}


def kernel_names(f):
    """The GPU kernels one call of `f` launches (cuBLAS's names carry its tile, cluster and warpgroup shape),
    or why not."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            f()
            torch.cuda.synchronize()
        dev = lambda e: getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
        return sorted({e.key for e in prof.key_averages() if dev(e) > 0 and not e.key.startswith(("aten::", "cuda"))})
    except Exception as e:  # a diagnostic only: the timings do not depend on it
        return [f"(no kernel names: {e})"]


def run(m, n, k, seconds, read_mj=None):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * m * n * k
    f = lambda: torch.matmul(a, b, out=c)
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    burst = sorted(ts)[len(ts) // 2]
    # sustained: as many launches as fill `seconds` at the burst rate, timed as one span
    reps = max(10, int(seconds * 1e3 / burst))
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    mj0 = read_mj() if read_mj else None
    s.record()
    for _ in range(reps):
        f()
    e.record(); torch.cuda.synchronize()
    mj1 = read_mj() if read_mj else None
    whole = s.elapsed_time(e) / reps
    energy = {}
    if mj0 is not None and mj1 is not None:
        j = (mj1 - mj0) / 1e3 / reps
        energy = {"sustained_j": j, "sustained_w": j / (whole * 1e-3), "sustained_pj_per_flop": j / flop * 1e12}
    # and per launch, within a second back-to-back stream: median over its last half
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in evs:
        s.record(); f(); e.record()
    torch.cuda.synchronize()
    tail = sorted(s.elapsed_time(e) for s, e in evs[reps // 2:])
    tail_med = tail[len(tail) // 2]
    return {"burst_ms": burst, "burst_tflops": flop / burst / 1e9, "sustained_ms": whole,
            "sustained_tflops": flop / whole / 1e9, "stream_tail_median_tflops": flop / tail_med / 1e9,
            "reps": reps, **energy, "kernels": kernel_names(f)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--preset", default="qwen3-30b-a3b", choices=sorted(SHAPES))
    args = p.parse_args()
    read_mj, why = energy_counter(torch)
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "energy": why or "NVML"}))
    for name, (m, n, k) in SHAPES[args.preset].items():
        t = time.time()
        r = run(m, n, k, args.seconds, read_mj)
        r["shape"] = name
        r["wall_s"] = round(time.time() - t, 1)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)


if __name__ == "__main__":
    main()
