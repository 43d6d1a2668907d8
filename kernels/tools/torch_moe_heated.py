"""The PyTorch baseline with its timed phases measured in the power-capped steady state.

usage: python3 torch_moe_heated.py --heat-ms MS [the baseline's arguments: --preset P --tokens T --compile ...]
       [--baseline-script PATH (default: torch_moe_baseline.py beside this file)]

Runs the shared baseline (../shared/bench/torch_moe_baseline.py, staged by kernels/tools/stage_gpu.sh into
.gpu/bench/) unchanged, except that before each timed phase (forward; forward+backward) the same work runs back
to back for MS milliseconds, each pass synchronised as the timed reps are. Why: the baseline times 20 reps right
after 3 warm-up calls, a burst of ~0.1-0.3 s, while a training run keeps the GPU at its power cap. With
`moe-oracle bench-gpu --heat-ms MS --baseline .gpu/bench/torch_moe_heated.py` both sides get the same heat.
Prints what the baseline prints (one JSON line per case) and, on stderr, one line per heat: the passes it ran
and, where NVML is there, the energy they used (joules per pass: under the power cap, the ratio of two layers'
joules per pass is what sets their ratio of times); `bench-gpu` shows these lines in its log."""
import argparse
import ctypes
import importlib.util
import os
import sys
import time


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def energy_counter(torch):
    """A function giving the GPU's energy counter in millijoules (NVML, the device torch runs on), or None
    and why not."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        return None, f"no NVML library ({e})"
    if nvml.nvmlInit_v2() != 0:
        return None, "nvmlInit failed"
    dev, count = ctypes.c_void_p(), ctypes.c_uint()
    try:
        uuid = "GPU-" + str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        found = nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(dev)) == 0
    except (AttributeError, RuntimeError):
        found = False
    if not found:  # an older torch without the UUID: only a lone GPU is unambiguous
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value != 1:
            return None, "cannot tell which NVML device torch runs on"
        if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) != 0:
            return None, "nvmlDeviceGetHandleByIndex failed"

    def read():
        mj = ctypes.c_ulonglong()
        return mj.value if nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(mj)) == 0 else None
    if read() is None:
        return None, "no energy counter on this GPU"
    return read, None


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

    counter = []  # [read or None, why not], opened at the first heat (torch's device is known by then)

    def heated(fn, warm=3, rep=20):
        import torch
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        if args.heat_ms > 0 and not counter:
            counter.extend(energy_counter(torch))
            if counter[1]:
                print(f"energy: not measured ({counter[1]})", file=sys.stderr)
        read = counter[0] if counter else None
        mj0, passes, t0 = read() if read else None, 0, time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < args.heat_ms:
            fn()
            torch.cuda.synchronize()
            passes += 1
        if args.heat_ms > 0:
            ms = (time.perf_counter() - t0) * 1e3
            mj1 = read() if read else None
            energy = ""
            if mj0 is not None and mj1 is not None:
                j = (mj1 - mj0) / 1e3
                energy = f": {j:.1f} J, {j / max(passes, 1):.3f} J per pass, {j / (ms / 1e3):.0f} W mean"
            print(f"heat: {passes} passes in {ms:.0f} ms before the timed reps{energy}", file=sys.stderr, flush=True)
        return timed(fn, warm=0, rep=rep)

    base.bench = heated  # main() looks bench up in its module at call time
    sys.argv = [args.baseline_script] + rest
    base.main()


if __name__ == "__main__":
    main()
