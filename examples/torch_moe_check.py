#!/usr/bin/env python3
"""A plain PyTorch MoE layer checked against a golden case.

    python3 examples/torch_moe_check.py golden/qwen3-30b-a3b_bf16.safetensors \
        [--candidate OUT.safetensors] [--dtype float32|bfloat16] [--device cpu|cuda] \
        [--oracle PATH/TO/moe-oracle] [--no-check]

Reads the case (inputs, `moe.config`), runs the layer the case describes (router or given top-k,
per-expert SwiGLU MLPs, weighted combine) in the chosen dtype, computes y and the gradients with autograd
for the case's `dy`, writes them as a candidate file with the case-format names (`y`, `grad.x`, `grad.w13`,
`grad.w2`, `grad.topk_weights`, `grad.router.weight`; F32), then runs

    moe-oracle check CASE --candidate CANDIDATE

and exits with its status (0 all within bounds, 1 a violation, 2 bad input). Needs torch and safetensors
(`pip install torch safetensors`); without them it stops with one `error:` line and status 2.

The layer is the textbook loop over experts, written for clarity, not speed. Routing ties are broken by
torch.topk, which does not promise the lower index first as the format does: a case with exact ties in
the router (golden/*router-ties*) may route differently here.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    import torch
    import torch.nn.functional as F
except ImportError:
    fail("PyTorch is not installed (pip install torch); this example runs a PyTorch MoE layer")
try:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError:
    fail("the safetensors package is not installed (pip install safetensors)")


def route(cfg, x, router_w, router_b):
    """Router as in golden-format.md: scores, (grouped) top-k on score + bias, weights of the chosen."""
    r = cfg["routing"]
    k, e = cfg["top_k"], cfg["experts"]
    logits = x @ router_w.t()
    if r["score"] == "softmax":
        scores = torch.softmax(logits.float(), dim=-1).to(x.dtype)
    else:
        scores = torch.sigmoid(logits)
    sel = scores.detach() + (router_b if router_b is not None else 0)
    if r["groups"]:
        ng, kg = r["groups"]["n_group"], r["groups"]["topk_group"]
        per = e // ng
        grouped = sel.view(-1, ng, per)
        group_score = grouped.topk(min(2, per), dim=-1).values.sum(-1)
        keep = group_score.topk(kg, dim=-1).indices
        mask = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, keep, True)
        sel = sel.masked_fill(~mask.repeat_interleave(per, dim=1), float("-inf"))
    ids = sel.topk(k, dim=-1).indices
    w = scores.gather(1, ids)
    if r["normalize_topk"]:
        w = w / w.sum(-1, keepdim=True)
    return ids, w * r["scaling"]


def activation(cfg, g, u):
    act = cfg["activation"]
    if act == "swiglu":
        return F.silu(g) * u
    p = act["swiglu_clamped"]
    g = g.clamp(max=p["limit"])
    u = u.clamp(-p["limit"], p["limit"])
    return g * torch.sigmoid(p["alpha"] * g) * (u + 1)


def moe_layer(cfg, x, w13, w2, ids, w):
    """y[t] = sum_j w[t, j] * w2[e] @ act(w13[e] @ x[t]) over the used slots (ids >= 0)."""
    i = cfg["intermediate"]
    y = torch.zeros_like(x)
    for e in range(cfg["experts"]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = x[tok] @ w13[e].t()
        a = activation(cfg, h[:, :i], h[:, i:])
        o = a @ w2[e].t()
        y = y.index_add(0, tok, o * w[tok, slot].unsqueeze(1))
    return y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case")
    ap.add_argument("--candidate", help="where to write the candidate (default: next to the case)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--oracle", help="the moe-oracle binary (default: on PATH, else target/release/moe-oracle)")
    ap.add_argument("--no-check", action="store_true", help="only write the candidate")
    a = ap.parse_args()

    if a.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is available to PyTorch")
    try:
        with safe_open(a.case, framework="pt") as f:
            meta = f.metadata() or {}
        t = load_file(a.case)
    except Exception as ex:  # noqa: BLE001 - any reader failure is bad input here
        fail(f"{a.case}: cannot read as safetensors: {str(ex).splitlines()[0] if str(ex) else type(ex).__name__}")
    if meta.get("moe.format") != "1" or "moe.config" not in meta:
        fail(f"{a.case}: not a MoE case file (metadata moe.format 1 and moe.config required)")
    cfg = json.loads(meta["moe.config"])
    if "dy" not in t:
        fail(f"{a.case}: the case has no dy, so there is no backward pass to check")

    dt, dev = getattr(torch, a.dtype), torch.device(a.device)
    leaf = lambda name: t[name].to(dev, dt).requires_grad_(True)  # noqa: E731
    x, w13, w2 = leaf("x"), leaf("w13"), leaf("w2")
    dy = t["dy"].to(dev, dt)
    router_w = None
    if cfg["routing"] is None:
        ids = t["topk_ids"].to(dev)
        w = leaf("topk_weights")
    else:
        router_w = leaf("router.weight")
        bias = t["router.bias"].to(dev, dt) if "router.bias" in t else None
        ids, w = route(cfg, x, router_w, bias)
        w.retain_grad()

    y = moe_layer(cfg, x, w13, w2, ids, w)
    y.backward(dy)

    out = {
        "y": y,
        "grad.x": x.grad,
        "grad.w13": w13.grad,
        "grad.w2": w2.grad,
        "grad.topk_weights": w.grad if w.grad is not None else torch.zeros_like(w),
    }
    if router_w is not None:
        out["grad.router.weight"] = router_w.grad
    out = {n: v.detach().float().cpu().contiguous() for n, v in out.items()}
    cand = a.candidate or os.path.splitext(a.case)[0] + f".torch-{a.dtype}.safetensors"
    save_file(out, cand, metadata={"moe.format": "1", "moe.config": meta["moe.config"]})
    print(f"wrote {cand}: {', '.join(sorted(out))} (torch {torch.__version__}, {a.dtype}, {a.device})")
    if a.no_check:
        return 0

    oracle = a.oracle or shutil.which("moe-oracle") or os.path.join("target", "release", "moe-oracle")
    if not (os.path.isfile(oracle) and os.access(oracle, os.X_OK)):
        fail(f"moe-oracle not found (tried {oracle}); build it with `cargo build --release` or pass --oracle")
    cmd = [oracle, "check", a.case, "--candidate", cand]
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
