# Relative Frobenius error of a candidate file against the oracle's output (a stopgap until `moe-oracle check`):
#   python3 examples/compare_candidate.py CANDIDATE.safetensors ORACLE.safetensors
import sys, numpy as np
from safetensors.numpy import load_file
g, o = load_file(sys.argv[1]), load_file(sys.argv[2])
for n in ["y", "grad.x", "grad.w13", "grad.w2", "grad.topk_weights"]:
    a, b = g[n].astype(np.float64), o[n]
    print(f"{n:20s} rel. Frobenius error vs oracle {np.linalg.norm(a-b)/max(np.linalg.norm(b),1e-30):.3e}")
print("candidate tensors:", sorted(g.keys()))
