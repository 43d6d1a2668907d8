"""Scalar formats and block quantisers written from shared/docs/numerics.md (independent of the project's code)."""
import numpy as np

F32 = np.float32


def f32(x):
    return np.asarray(x, np.float64).astype(np.float32)


def bf16(x):
    """f32 -> bf16 (RNE), returned as f32 values."""
    u = np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32).astype(np.uint64)
    r = ((u >> 16) & 1) + 0x7FFF
    u2 = ((u + r) & 0xFFFF0000).astype(np.uint32)
    return u2.view(np.float32)


def bf16_bits(x):
    return (np.ascontiguousarray(bf16(x)).view(np.uint32) >> 16).astype(np.uint16)


def e4m3(x):
    """f32 -> E4M3 saturating (PTX satfinite), RNE, subnormals kept; returned as f64 values."""
    x = np.asarray(x, np.float64)
    ax = np.abs(x)
    _, ex = np.frexp(ax)
    e = np.maximum(ex - 1, -6)
    q = np.ldexp(1.0, e - 3)
    r = np.round(ax / q) * q
    r = np.minimum(r, 448.0)
    r = np.where(np.isnan(x), np.nan, r)
    return np.copysign(r, x)


def elog2(v, minexp=-6):
    """alignment exponent of an E4M3 operand (hardware reading: subnormals at the minimum exponent)."""
    av = np.abs(v)
    _, ex = np.frexp(av)
    e = np.maximum(ex - 1, minexp).astype(np.int64)
    return np.where(av == 0, -10**6, e)


def _blocks(X, gr, gc):
    """reshape 2-D X [R,C] into padded blocks [nbr, gr, nbc, gc] (zero padded), returns (B, R, C)."""
    R, C = X.shape
    nbr, nbc = -(-R // gr), -(-C // gc)
    P = np.zeros((nbr * gr, nbc * gc), np.float64)
    P[:R, :C] = X
    return P.reshape(nbr, gr, nbc, gc), R, C


def quant(X, gr, gc, rule='deepgemm'):
    """Quantise 2-D X (f32 values) in gr x gc blocks. Returns (q values f64 [R,C], scale f32 [nbr,nbc]) with
    X ~ q * scale (scale = dequantisation multiplier)."""
    X = np.asarray(X, np.float32).astype(np.float64)
    Bk, R, C = _blocks(X, gr, gc)
    amax = np.abs(Bk).max(axis=(1, 3)).astype(np.float32)  # [nbr, nbc], exact (max of f32)
    if rule == 'deepgemm448':  # DeepGEMM's Python reference: x * fl(448/amax), scale = fl(amax/448)
        am = np.maximum(amax, F32(1e-4))
        scale = (am / F32(448.0)).astype(np.float32)
        mult = (F32(448.0) / am).astype(np.float32).astype(np.float64)
        q = e4m3(f32(Bk * mult[:, None, :, None]))
    elif rule == 'deepgemmdiv':  # CUDA quant kernels (e.g. sglang per_token_group_quant_fp8): x / fl(amax/448)
        am = np.maximum(amax, F32(1e-4))
        scale = (am / F32(448.0)).astype(np.float32)
        q = e4m3(f32(Bk / scale.astype(np.float64)[:, None, :, None]))
    elif rule == 'deepgemm':
        am = np.maximum(amax, F32(1e-4))
        sf = (am / F32(448.0)).astype(np.float32)
        inv = (F32(1.0) / sf).astype(np.float32)
        mult = inv.astype(np.float64)
        scale = sf
        xs = f32(Bk * mult[:, None, :, None])
        q = e4m3(xs)
    elif rule == 'te-pow2':
        with np.errstate(divide='ignore', over='ignore', invalid='ignore'):
            s = (F32(448.0) / amax).astype(np.float32)
        bad = (amax == 0) | ~np.isfinite(amax)
        s = np.where(bad, F32(1.0), s)
        s = np.where(np.isinf(s), np.finfo(np.float32).max, s)
        _, ex = np.frexp(s.astype(np.float64))
        s = np.ldexp(1.0, ex - 1)  # round down to a power of two
        mult = s
        scale = (1.0 / s).astype(np.float32)
        xs = f32(Bk * mult[:, None, :, None])
        q = e4m3(xs)
    elif rule == 'mx-floor':
        _, ex = np.frexp(amax.astype(np.float64))
        se = np.where(amax == 0, -127, (ex - 1) - 8)
        se = np.clip(se, -127, 127)
        scale = np.ldexp(1.0, se).astype(np.float32)
        xs = f32(Bk / np.ldexp(1.0, se)[:, None, :, None])
        q = e4m3(xs)
    else:
        raise ValueError(rule)
    q = q.reshape(Bk.shape[0] * gr, Bk.shape[2] * gc)[:R, :C]
    return q, scale.astype(np.float32)


def expand(scale, gr, gc, R, C):
    return np.repeat(np.repeat(scale, gr, 0), gc, 1)[:R, :C]
