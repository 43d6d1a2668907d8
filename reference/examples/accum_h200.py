"""Tensor-core accumulation on the GPU, for `accum_h200.rs` to compare with `accum::gemm_nt`.

Draws seeded bf16 and E4M3 matrices A [M, K], B [N, K] and writes, under $OUT (or argv[1]), raw
little-endian f32 files `<name>.<rows>x<cols>.f32` (every bf16 / E4M3 value is an f32 exactly):
- bf16: `a_bf16`, `b_bf16`, and `c_bf16` = A·Bᵀ by cuBLAS with f32 output (`torch.mm(..., out_dtype=f32)`),
  when this PyTorch offers out_dtype;
- e4m3: `a_e4m3`, `b_e4m3`, `c_fp8` = `torch._scaled_mm` with unit scales and f32 output, and
  `c_fp8_fast` with `use_fast_accum=True`.
Run: python3 accum_h200.py [OUT]
"""
import os
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "out")
os.makedirs(out, exist_ok=True)
dev = "cuda"
print(torch.__version__, torch.cuda.get_device_name(0))


def save(name, t):
    t = t.detach().to("cpu", torch.float32).contiguous()
    r, c = t.shape
    t.numpy().astype("<f4").tofile(os.path.join(out, f"{name}.{r}x{c}.f32"))


for (m, n, k) in [(64, 64, 256), (64, 64, 2048)]:
    g = torch.Generator(device="cpu").manual_seed(1234 + k)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(n, k, generator=g) * 0.05
    # A few columns of much larger magnitude, so that alignment and truncation matter.
    a[:, ::37] *= 64.0
    tag = f"k{k}"
    a16, b16 = a.to(torch.bfloat16).to(dev), b.to(torch.bfloat16).to(dev)
    save(f"a_bf16_{tag}", a16)
    save(f"b_bf16_{tag}", b16)
    try:
        c16 = torch.mm(a16, b16.t(), out_dtype=torch.float32)
        save(f"c_bf16_{tag}", c16)
    except Exception as e:  # older PyTorch: no out_dtype
        print("bf16 f32-output GEMM unavailable:", e)
    a8 = (a * 8).clamp(-448, 448).to(torch.float8_e4m3fn).to(dev)
    b8 = (b * 64).clamp(-448, 448).to(torch.float8_e4m3fn).to(dev)
    save(f"a_e4m3_{tag}", a8.to(torch.float32))
    save(f"b_e4m3_{tag}", b8.to(torch.float32))
    one = torch.tensor(1.0, device=dev)
    for fast in (False, True):
        c8 = torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast)
        save(f"c_fp8{'_fast' if fast else ''}_{tag}", c8)
print("written to", out, sorted(os.listdir(out)))
