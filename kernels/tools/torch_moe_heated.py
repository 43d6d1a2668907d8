"""The PyTorch baseline with its timed phases measured in the power-capped steady state.

usage: python3 torch_moe_heated.py --heat-ms MS [the baseline's arguments: --preset P --tokens T --compile ...]
       [--baseline-script PATH (default: torch_moe_baseline.py beside this file)]

Runs the shared baseline (../shared/bench/torch_moe_baseline.py, staged by kernels/tools/stage_gpu.sh into
.gpu/bench/) unchanged, except that before each timed phase (forward; forward+backward) the same work runs back
to back for MS milliseconds, each pass synchronised as the timed reps are. Why: the baseline times 20 reps right
after 3 warm-up calls, a burst of ~0.1-0.3 s, while a training run keeps the GPU at its power cap. With
`moe-oracle bench-gpu --heat-ms MS --baseline .gpu/bench/torch_moe_heated.py` both sides get the same heat.
Prints what the baseline prints (one JSON line per case)."""
import argparse
import importlib.util
import os
import sys
import time


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--heat-ms", type=float, required=True)
    ap.add_argument("--baseline-script", default=os.path.join(here, "torch_moe_baseline.py"))
    args, rest = ap.parse_known_args()
    if not 0 <= args.heat_ms <= 600_000:
        fail(f"--heat-ms {args.heat_ms}: expected 0 to 600000")
    if not os.path.isfile(args.baseline_script):
        fail(f"the baseline {args.baseline_script} does not exist (stage it: bash kernels/tools/stage_gpu.sh)")
    spec = importlib.util.spec_from_file_location("torch_moe_baseline", args.baseline_script)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    timed = base.bench

    def heated(fn, warm=3, rep=20):
        import torch
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < args.heat_ms:
            fn()
            torch.cuda.synchronize()
        return timed(fn, warm=0, rep=rep)

    base.bench = heated  # main() looks bench up in its module at call time
    sys.argv = [args.baseline_script] + rest
    base.main()


if __name__ == "__main__":
    main()
