"""The independent FP8 kernel model against `moe-oracle check` (run by tests/fp8_independent.rs).

    python3 tests/independent_fp8/scenarios.py MOE_ORACLE_BIN SCRATCH_DIR

The model (kernel.py, fmt.py; session 38's audit) was written from shared/docs/numerics.md, golden-format.md
and the README only, without reading reference/ or src/. Each scenario writes a random case (gencase.py),
runs the model as a kernel with one accumulation variant, quantiser or bug, writes its candidate (st.py) and
runs `check`; the exit status must be the expected one:
- faithful kernels with other accumulation orders than the recipe's (f32 blocks in reverse order, exact
  then rounded once, the Hopper model) must pass `check --recipe R` (0; fp8-block, fp8-block-te, fp8-bwd,
  mxfp8): a failure is a false alarm;
- kernels that scale blocks as x / sf or x * fl32(448/amax) must fail fp8-block (1: exact E4M3 ties broken
  the other way, beyond fwd.h's accumulation allowance) and pass the recipe that names their scale rule;
- injected bugs must fail (1): a weight-scale block off by one, transposed weight-scale blocks, the
  activation's scale used for the weight; a missing FP8 promotion with --same-schedule; and `diagnose` must
  name the pattern of the two it knows, and of the two quantiser variants (PATTERNS).
Prints one line per scenario and exits 1 if any status differs from the expected one.
"""
import json
import os
import subprocess
import sys

import gencase
import st
from harness import check_table, write_candidate

BIN, SCRATCH = sys.argv[1], sys.argv[2]
os.makedirs(SCRATCH, exist_ok=True)


def recipe_file(base, scale, name):
    """A recipe JSON: `base` with every operand's `deepgemm` scale rule replaced by `scale`."""
    p = subprocess.run([BIN, "recipes", "--show", base], capture_output=True, text=True, check=True)
    r = json.loads(p.stdout)
    r["name"] = name
    for g in r.values():
        if isinstance(g, dict):
            for op in g.values():
                if isinstance(op, dict) and op.get("scale") == "deepgemm":
                    op["scale"] = scale
    path = os.path.join(SCRATCH, name + ".json")
    with open(path, "w") as f:
        json.dump(r, f)
    return path


# (name, recipe the case and kernel follow, case shape T H I E k, seed, profile, kernel mode, quantiser,
#  bug, check's --recipe (None: the case's), --same-schedule, expected exit status)
S = []
SHAPES = [(126, 192, 128, 5, 2), (64, 256, 96, 4, 2), (150, 136, 200, 3, 1), (40, 384, 256, 8, 4),
          (97, 320, 64, 6, 2), (33, 128, 160, 2, 2), (180, 256, 128, 7, 4)]
for i, prof in enumerate(gencase.PROFILES):
    shape = SHAPES[i]
    for mode in ("hopper", "f32", "exact"):
        S.append((f"fp8-block {prof} {mode}", "fp8-block", shape, 100 + i, prof, mode, None, None, None, False, 0))
    if i % 2 == 0:
        for mode in ("hopper", "f32"):
            S.append((f"fp8-block-te {prof} {mode}", "fp8-block-te", shape, 200 + i, prof, mode, None, None, None, False, 0))
        S.append((f"fp8-bwd {prof} exact", "fp8-bwd", shape, 300 + i, prof, "exact", None, None, None, False, 0))
# mxfp8 (1x32 blocks, UE8M0 FLOOR scales; the model accumulates exactly or in f32, not in the recipe's
# Blackwell model): FLOOR saturates near each block's amax, and the bound holds that error almost exactly,
# so these pass at err/bound ~0.999-1.000.
for i in (0, 1, 6):
    for mode in ("exact", "f32"):
        S.append((f"mxfp8 {gencase.PROFILES[i]} {mode}", "mxfp8", SHAPES[i], 400 + i, gencase.PROFILES[i], mode, None, None, None, False, 0))
# The same kernels with the Hopper schedule, declared: --same-schedule leaves only storage rounding.
S.append(("fp8-block normal hopper --same-schedule", "fp8-block", SHAPES[0], 100, "normal", "hopper", None, None, None, True, 0))
# Quantiser variants (cases found by the audit's sweep to break ties visibly in fwd.h).
DIV = ("fp8-block-div", "deepgemm-div")
R448 = ("fp8-block-448", "deepgemm-max-over-amax")
S += [
    ("x / sf kernel, fp8-block", "fp8-block", (126, 192, 128, 5, 2), 4000, "zeroblocks", "hopper", "div", None, None, False, 1),
    ("x / sf kernel, deepgemm-div", "fp8-block", (126, 192, 128, 5, 2), 4000, "zeroblocks", "hopper", "div", None, DIV, False, 0),
    ("x / sf kernel, deepgemm-div, --same-schedule", "fp8-block", (126, 192, 128, 5, 2), 4000, "zeroblocks", "hopper", "div", None, DIV, True, 0),
    ("x * 448/amax kernel, fp8-block", "fp8-block", (179, 192, 128, 2, 2), 2002, "normal", "hopper", "448", None, None, False, 1),
    ("x * 448/amax kernel, deepgemm-max-over-amax", "fp8-block", (179, 192, 128, 2, 2), 2002, "normal", "hopper", "448", None, R448, False, 0),
]
# Bugs.
for bug in ("scale_off1", "scale_T", "wrong_scale"):
    S.append((f"bug {bug}", "fp8-block", (128, 384, 256, 4, 2), 9000, "normal", "hopper", None, bug, None, False, 1))
S.append(("bug nopromo, --same-schedule", "fp8-block", (128, 384, 256, 4, 2), 9000, "normal", "hopper", None, "nopromo", None, True, 1))

# The bug pattern `diagnose` must name (its "pattern:" line), by scenario name.
PATTERNS = {
    "bug scale_off1": "scale-block-off-by-one",
    "bug nopromo, --same-schedule": "missing-promotion",
    "x / sf kernel, fp8-block": "quantiser-variant",
    "x * 448/amax kernel, fp8-block": "quantiser-variant",
}
# ... and the scale rule it then names.
RULES = {"x / sf kernel, fp8-block": "deepgemm-div", "x * 448/amax kernel, fp8-block": "deepgemm-max-over-amax"}

bad = 0
for (name, recipe, (T, H, I, E, k), seed, prof, mode, quant, bug, check_recipe, same, want) in S:
    case = os.path.join(SCRATCH, "case.safetensors")
    cand = os.path.join(SCRATCH, "cand.safetensors")
    gencase.make(case, T, H, I, E, k, seed, prof, recipe)
    c, meta = st.read(case)
    write_candidate(cand, c, meta, recipe, mode, bug=bug, q448=quant == "448", qdiv=quant == "div")
    r = recipe if check_recipe is None else recipe_file(recipe, check_recipe[1], check_recipe[0])
    cmd = [BIN, "check", case, "--candidate", cand, "--recipe", r] + (["--same-schedule"] if same else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    worst = max(check_table(p.stdout), key=lambda r: r[2], default=None)
    worst = f"{worst[0]} {worst[2]:.3e}" if worst else ""
    ok = p.returncode == want
    if name in PATTERNS:
        d = subprocess.run([BIN, "diagnose"] + cmd[2:], capture_output=True, text=True)
        lines = [l for l in d.stdout.splitlines() if l.strip().startswith("pattern:")]
        named = [l.split()[1] for l in lines]
        ok = ok and named == [PATTERNS[name]] and all(l.endswith(" " + RULES[name] + ")") for l in lines if name in RULES)
        name += f" (diagnose names {', '.join(named) or 'no pattern'})"
    bad += not ok
    print(f"{'ok ' if ok else 'BAD'} exit {p.returncode} (want {want})  {name}  [T={T} H={H} I={I} E={E} k={k} seed {seed}]  worst {worst}"
          + ("" if ok or p.returncode in (0, 1) else "\n    " + (p.stdout + p.stderr).strip()[-400:]), flush=True)
print(f"{len(S) - bad} of {len(S)} scenarios as expected")
sys.exit(1 if bad else 0)
