"""Random cases through the independent FP8 kernel model and `moe-oracle check`: the false-alarm sweep of
session 38's audit, to rerun after a change to the bounds or the recipes.

    python3 tests/independent_fp8/sweep.py MOE_ORACLE_BIN SCRATCH_DIR [CASES_PER_RECIPE] [FIRST_SEED]

For each recipe (fp8-block, fp8-block-te, fp8-bwd, mxfp8) and seed: a random shape (H and I multiples of 8,
some not of 128, E 2-8, k 1-4, T 16-199) and one of gencase.PROFILES, the model run with each accumulation
variant (hopper, f32 blocks in reverse order, exact then rounded; mxfp8: exact and f32), and `check --recipe R`.
Faithful variants must pass: prints every failure with its reproducer, and per recipe the worst err/bound per
tensor. Cases whose exact results leave f32's range fail for every f32 kernel and are counted apart.
"""
import os
import subprocess
import sys

import numpy as np

import gencase
import st
from harness import check_table, write_candidate

BIN, SCRATCH = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 10
SEED0 = int(sys.argv[4]) if len(sys.argv) > 4 else 1
os.makedirs(SCRATCH, exist_ok=True)
MODES = {"fp8-block": ("hopper", "f32", "exact"), "fp8-block-te": ("hopper", "f32", "exact"),
         "fp8-bwd": ("hopper", "f32", "exact"), "mxfp8": ("exact", "f32")}


failures = 0
for recipe, modes in MODES.items():
    worst, runs, overflow = {}, 0, 0
    for seed in range(SEED0, SEED0 + N):
        rng = np.random.default_rng(seed)
        H = int(rng.choice([128, 136, 192, 256, 320, 384]))
        I = int(rng.choice([64, 96, 128, 160, 200, 256]))
        E = int(rng.integers(2, 9))
        k = min(int(rng.choice([1, 2, 2, 4])), E)
        T = int(rng.integers(16, 200))
        prof = gencase.PROFILES[seed % len(gencase.PROFILES)]
        case = os.path.join(SCRATCH, "case.safetensors")
        cand = os.path.join(SCRATCH, "cand.safetensors")
        gencase.make(case, T, H, I, E, k, seed, prof, recipe)
        c, meta = st.read(case)
        for mode in modes:
            write_candidate(cand, c, meta, recipe, mode)
            p = subprocess.run([BIN, "check", case, "--candidate", cand, "--recipe", recipe], capture_output=True, text=True)
            rows = check_table(p.stdout)
            runs += 1
            if p.returncode != 0 and any(r == float("inf") for _, _, r in rows):
                overflow += 1
                continue
            for t, _, r in rows:
                worst[t] = max(worst.get(t, 0.0), r)
            if p.returncode != 0:
                failures += 1
                bad = ", ".join(f"{t} {r:.3g}" for t, v, r in rows if v == "FAIL") or (p.stdout + p.stderr).strip()[-300:]
                print(f"FAIL {recipe} seed {seed} {prof} {mode} [T={T} H={H} I={I} E={E} k={k}]: {bad}", flush=True)
    print(f"{recipe}: {runs} runs ({N} cases), {overflow} past f32's range; worst err/bound: "
          + ", ".join(f"{t} {r:.3f}" for t, r in sorted(worst.items())), flush=True)
print(f"{failures} false alarms")
sys.exit(1 if failures else 0)
