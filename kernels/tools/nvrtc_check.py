#!/usr/bin/env python3
"""Compile the fast kernels for sm_90a without a GPU: NVRTC to PTX, then `ptxas -v`, printing each kernel's
registers and spill bytes (a spill in a GEMM's main loop costs more than most tuning gains) and its code size
in SASS instructions.

The translation unit is assembled as kernels/src/fast/source.rs assembles it (the shared header once, each file
without its include of it). Needs NVRTC and ptxas, e.g.:
    pip install --target /tmp/cuda nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12
usage: python3 kernels/tools/nvrtc_check.py [KERNEL_NAME_SUBSTRING] [--cuda /tmp/cuda] [--ptx FILE] [--sass FILE] [-DNAME ...]
--ptx FILE also writes the PTX, e.g. to check that a refactor leaves it byte-identical (diff two such files).
--sass FILE also writes the SASS of the matching kernels (nvdisasm -c -g: with source lines), to count a main
loop's instructions without a GPU; needs nvdisasm: pip install --target /tmp/nvd nvidia-cuda-nvdisasm (CUDA 13's
reads sm_90a cubins), or NVDISASM=path.
"""
import ctypes
import os
import re
import subprocess
import struct
import sys
import tempfile

args = sys.argv[1:]


def take(flag, default=None):
    """The value after `flag` in args (both removed from them), or `default` without the flag."""
    if flag not in args:
        return default
    i = args.index(flag)
    value = args[i + 1]
    del args[i : i + 2]
    return value


cuda = take("--cuda", "/tmp/cuda")
ptx_out = take("--ptx")
sass_out = take("--sass")
defines = [a for a in args if a.startswith("-D")]  # e.g. -DWS_EXP_NO_STORE (as MOE_FAST_DEFINES passes them)
args = [a for a in args if not a.startswith("-D")]
only = args[0] if args else ""
root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
nvrtc_so = os.path.join(cuda, "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
ptxas = os.path.join(cuda, "nvidia/cuda_nvcc/bin/ptxas")
for f in (nvrtc_so, ptxas):
    if not os.path.exists(f):
        sys.exit(f"error: {f} not found (pip install --target {cuda} nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12)")

header = open(os.path.join(root, "kernels/cuda/bf16.cuh")).read().replace("#pragma once", "")
source_rs = open(os.path.join(root, "kernels/src/fast/source.rs")).read()
files = re.findall(r'include_str!\("\.\./\.\./cuda/(fast/[a-z_]+\.cu)"\)', source_rs)
src = "#define FG_STAGES 4\n" + header
for f in files:
    text = open(os.path.join(root, "kernels/cuda", f)).read()
    src += f"\n// ---- {f}\n" + "".join(l + "\n" for l in text.splitlines() if not l.strip().startswith('#include "bf16.cuh"'))

lib = ctypes.CDLL(nvrtc_so)
prog = ctypes.c_void_p()
if lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"moe_fast.cu", 0, None, None) != 0:
    sys.exit("error: nvrtcCreateProgram failed")
opts = [b"--gpu-architecture=sm_90a", b"--fmad=true", b"--std=c++17"] + [d.encode() for d in defines]
rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
n = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(prog, log)
if log.value.strip():
    print(log.value.decode())
if rc != 0:
    sys.exit("error: NVRTC compilation failed")
lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
ptx = ctypes.create_string_buffer(n.value)
lib.nvrtcGetPTX(prog, ptx)
if ptx_out:
    open(ptx_out, "wb").write(ptx.value)


def code_sizes(cubin):
    """Bytes of SASS per kernel: the sizes of the ELF's `.text.<kernel>` sections (16 bytes an instruction)."""
    b = open(cubin, "rb").read()
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx][4]
    sizes = {}
    for name_off, _, _, _, _, size in secs:
        name = b[names + name_off : b.index(b"\0", names + name_off)].decode()
        if name.startswith(".text."):
            sizes[name[len(".text.") :]] = size
    return sizes


with tempfile.TemporaryDirectory() as tmp:
    ptx_path = os.path.join(tmp, "moe_fast.ptx")
    open(ptx_path, "wb").write(ptx.value)
    cubin = os.path.join(tmp, "moe_fast.cubin")
    r = subprocess.run([ptxas, "-arch=sm_90a", "-v", "-o", cubin, ptx_path], capture_output=True, text=True)
    sizes = code_sizes(cubin) if r.returncode == 0 else {}
    if sass_out and r.returncode == 0:
        nvdisasm = os.environ.get("NVDISASM", "/tmp/nvd/nvidia/cu13/bin/nvdisasm")
        if not os.path.exists(nvdisasm):
            sys.exit(f"error: {nvdisasm} not found (pip install --target /tmp/nvd nvidia-cuda-nvdisasm, or set NVDISASM)")
        d = subprocess.run([nvdisasm, "-c", "-g", cubin], capture_output=True, text=True)
        if d.returncode != 0:
            sys.exit(f"error: nvdisasm failed: {d.stderr.strip()}")
        # one part per kernel, each opening with "//---...--- .text.<kernel> ---"; keep the matching ones
        parts = re.split(r"(?m)^(?=//-+ \.text\.)", d.stdout)
        keep = [t for t in parts[1:] if only in re.match(r"//-+ \.text\.(\w+)", t).group(1)]
        open(sass_out, "w").write("".join(keep))
kernel = None
for line in (r.stdout + r.stderr).splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m:
        kernel = m.group(1)
    elif kernel and only in kernel and ("registers" in line or "spill" in line):
        print(f"{kernel:24} {line.split(':', 1)[-1].strip()}")
    elif "error" in line.lower() or "warning" in line.lower() or "C7520" in line or "C7515" in line:
        # C7520: ptxas serialised a kernel's wgmma (session 9: a branch around the MMA cost the clustered
        # GEMMs ~40% of their main-loop cycles), a failure here; C7515 (serialised for another reason) is
        # printed for the caller to judge (cuda_compiles fails on it for the persistent GEMMs)
        print(line)
# code size: an epilogue unrolled over the 128 accumulators can outgrow the instruction cache (session 15: a
# fused dA epilogue of 43,504 instructions ran 4x slower than its 3,256-instruction neighbours)
for k in sorted(sizes):
    if only in k:
        print(f"{k:24} code {sizes[k] // 16} instructions ({sizes[k]} bytes)")
serialised = "C7520" in r.stdout + r.stderr
if serialised:
    print("error: ptxas serialised wgmma instructions (C7520 above)")
sys.exit(r.returncode or (1 if serialised else 0))
