"""Independent numpy model of a faithful FP8 MoE kernel (forward + backward), written from numerics.md,
golden-format.md and the README only. Variants of GEMM accumulation:
  hopper : Hopper wgmma FP8 model (K=32/instr, n=13, 13-bit RZ out), promotion every 128 into f32 via
           fma(fl(sa*sb), partial, final)          [= the recipe's schedule]
  f32    : per 128-block partial in f32 BLAS (sgemm order), blocks in REVERSED order, final = fl(fl(s*p)+final)
  exact  : whole scaled dot product exact (longdouble), rounded once to f32
  split  : hopper partials, but two split-K halves promoted separately and added at the end
Bugs (for detection tests): nopromo, scale_off1, scale_T, wrong_scale, wgrad_rowwise
"""
import numpy as np
np.seterr(over="ignore")
from fmt import f32, bf16, e4m3, elog2, quant, expand

BIG = -10**6


def _rz(S, frac):
    m, ex = np.frexp(S)
    return np.ldexp(np.trunc(np.ldexp(m, frac + 1)), ex - frac - 1)


def _exp_of(C):
    a = np.abs(C)
    _, ex = np.frexp(a)
    return np.where(a == 0, BIG, ex - 1)


def tc_chain(A, B, EA, EB, C, n, kinst, outfrac):
    """Tensor-core model: chain instructions of kinst over the K of A [M,K], B [N,K] starting from C [M,N]."""
    K = A.shape[1]
    for c in range(0, K, kinst):
        a = A[:, None, c:c + kinst]
        b = B[None, :, c:c + kinst]
        P = a * b
        Ep = np.where(P == 0, BIG, EA[:, None, c:c + kinst] + EB[None, :, c:c + kinst])
        E = np.maximum(Ep.max(-1), _exp_of(C))
        z = E <= BIG // 2
        Es = np.where(z, 0, E)
        sc = np.ldexp(1.0, n - Es)
        S = np.trunc(P * sc[..., None]).sum(-1) + np.trunc(C * sc)
        S = S / sc
        C = np.where(z, 0.0, _rz(S, outfrac))
    return C


def fma_f32(s, p, acc):
    """correctly rounded f32 of s*p + acc (s*p exact in f64), via round-to-odd in f64."""
    x = s * p
    hi = x + acc
    bb = hi - x
    lo = (x - (hi - bb)) + (acc - bb)
    bits = hi.view(np.int64)
    even = (bits & 1) == 0
    adj = (lo != 0) & even & (hi != 0)
    hi2 = np.where(adj, np.nextafter(hi, np.where(lo > 0, np.inf, -np.inf)), hi)
    return hi2.astype(np.float32).astype(np.float64)


def gemm(QA, SA, QB, SB, kb, mode, rowchunk=64, bug=None):
    """out[M,N] = sum_k QA[m,k]*SA[m,k//kb] * QB[n,k]*SB[n,k//kb]; QA/QB values f64, SA [M,nkb], SB [N,nkb]."""
    M, K = QA.shape
    N = QB.shape[0]
    nkb = -(-K // kb)
    out = np.zeros((M, N))
    if M == 0 or N == 0:
        return out
    EA, EB = elog2(QA), elog2(QB)
    for r0 in range(0, M, rowchunk):
        A = QA[r0:r0 + rowchunk]; ea = EA[r0:r0 + rowchunk]; sa = SA[r0:r0 + rowchunk]
        m = A.shape[0]
        if mode == 'exact':
            acc = np.zeros((m, N), np.longdouble)
            for j in range(nkb):
                sl = slice(j * kb, (j + 1) * kb)
                P = A[:, sl] @ QB[:, sl].T  # exact in f64 (fp8 products, <= 128 terms)
                s = (sa[:, j:j + 1].astype(np.longdouble) * SB[None, :, j].astype(np.longdouble))
                acc += s * P.astype(np.longdouble)
            out[r0:r0 + m] = acc.astype(np.float32)
            continue
        if mode == 'f32':
            fin = np.zeros((m, N), np.float32)
            for j in reversed(range(nkb)):
                sl = slice(j * kb, (j + 1) * kb)
                P = A[:, sl].astype(np.float32) @ QB[:, sl].T.astype(np.float32)
                s = (sa[:, j:j + 1].astype(np.float32) * SB[None, :, j].astype(np.float32))
                fin = (s * P).astype(np.float32) + fin
            out[r0:r0 + m] = fin
            continue
        # hopper-style
        halves = [range(nkb)] if mode != 'split' else [range(0, nkb // 2), range(nkb // 2, nkb)]
        tot = None
        for hr in halves:
            fin = np.zeros((m, N))
            for j in hr:
                sl = slice(j * kb, (j + 1) * kb)
                P = tc_chain(A[:, sl], QB[:, sl], ea[:, sl], EB[:, sl], np.zeros((m, N)), 13, 32, 13)
                s = f32(sa[:, j:j + 1].astype(np.float64) * SB[None, :, j].astype(np.float64)).astype(np.float64)
                if bug == 'nopromo':  # accumulator kept in the tensor core's 13-bit RZ format
                    fin = _rz(s * P + fin, 13)
                else:
                    fin = fma_f32(s, P, fin)
            tot = fin if tot is None else f32(tot + fin).astype(np.float64)
        out[r0:r0 + m] = tot
    return out


def gemm_bf16(A, B, mode):
    """bf16-operand GEMM (fp8-bwd forward): out = A @ B.T of bf16 values."""
    if mode == 'exact':
        return (A.astype(np.longdouble) @ B.T.astype(np.longdouble)).astype(np.float32).astype(np.float64)
    if mode == 'f32':
        return (A.astype(np.float32) @ B.T.astype(np.float32)).astype(np.float64)
    EA = np.where(A == 0, BIG, _exp_of(A)); EB = np.where(B == 0, BIG, _exp_of(B))
    out = np.zeros((A.shape[0], B.shape[0]))
    for r0 in range(0, A.shape[0], 64):
        out[r0:r0 + 64] = tc_chain(A[r0:r0 + 64].astype(np.float64), B.astype(np.float64), EA[r0:r0 + 64], EB,
                                   np.zeros((min(64, A.shape[0] - r0), B.shape[0])), 25, 16, 23)
    return out


class Recipe:
    def __init__(self, name):
        self.name = name
        if name in ('fp8-block', 'fp8-bwd'):
            self.rule, self.gk, self.wblk = 'deepgemm', 128, (128, 128)
        elif name == 'fp8-block-te':
            self.rule, self.gk, self.wblk = 'te-pow2', 128, (128, 128)
        elif name == 'mxfp8':
            self.rule, self.gk, self.wblk = 'mx-floor', 32, None  # 1x32 along the contraction, re-quantised
        self.fp8_fwd = name != 'fp8-bwd'


def qact(X, R, bug=None):
    """1 x gk groups along the last (contraction) axis; returns q, per-(row,kblock) scales."""
    q, s = quant(X, 1, R.gk, R.rule)
    return q, s


def qweight(W, R, transpose=False, bug=None):
    """weight W [N,K] as the B operand (out = A @ W.T). For 128x128 blocks the transposed use reuses the same
    blocks (transpose=True means B = W.T, contraction over W's rows). Returns QB [N',K'], SB [N',nkb]."""
    if R.wblk is None:  # mxfp8: quantise along the contraction from the source
        Wb = W.T if transpose else W
        return quant(Wb, 1, R.gk, R.rule)
    q, s = quant(W, 128, 128, R.rule)
    if bug == 'scale_T':
        s2 = np.empty_like(s)
        for i in range(s.shape[0]):
            for j in range(s.shape[1]):
                s2[i, j] = s[j % s.shape[0], i % s.shape[1]] if True else 0
        s = s2
    if bug == 'scale_off1':
        s = s[np.minimum(np.arange(s.shape[0]) + 1, s.shape[0] - 1)]
    if transpose:
        q = q.T
        SB = np.repeat(s.T, 128, 0)[:q.shape[0]]
    else:
        SB = np.repeat(s, 128, 0)[:q.shape[0]]
    return q, SB


def moe(case, recipe, mode='hopper', fused=False, bug=None, q448=False, qdiv=False):
    R = Recipe(recipe)
    if q448 and R.rule == 'deepgemm':
        R.rule = 'deepgemm448'
    if qdiv and R.rule == 'deepgemm':
        R.rule = 'deepgemmdiv'
    x, w13, w2 = case['x'], case['w13'], case['w2']
    ids, tw, dy = case['topk_ids'], case['topk_weights'].astype(np.float32), case['dy']
    T, H = x.shape
    E, I2, _ = w13.shape
    I = I2 // 2
    rows = sorted([(int(ids[t, j]), t, j) for t in range(T) for j in range(ids.shape[1]) if ids[t, j] >= 0])
    M = len(rows)
    re = np.array([r[0] for r in rows], np.int64)
    rt = np.array([r[1] for r in rows], np.int64)
    rs = np.array([r[2] for r in rows], np.int64)
    offs = np.searchsorted(re, np.arange(E + 1)).astype(np.int32)
    wrow = tw[rt, rs].astype(np.float32)

    h32 = np.zeros((M, I2)); o = np.zeros((M, H), np.float32); o32 = np.zeros((M, H), np.float32)
    if R.fp8_fwd:
        qx, sx = qact(x, R)
    wq13, wq2 = {}, {}
    for e in range(E):
        a0, a1 = offs[e], offs[e + 1]
        if a1 == a0:
            continue
        if R.fp8_fwd:
            QB, SB = qweight(w13[e], R, bug=bug)
            SA = sx[rt[a0:a1]]
            if bug == 'wrong_scale':
                SB = np.repeat(SA[:1], QB.shape[0], 0)  # activation's scales used for the weight too
            h32[a0:a1] = gemm(qx[rt[a0:a1]], SA, QB, SB, R.gk, mode, bug=bug)
        else:
            h32[a0:a1] = gemm_bf16(x[rt[a0:a1]], w13[e], mode)
    h = bf16(f32(h32)).astype(np.float64)
    hs = f32(h32).astype(np.float64) if fused else h
    g, u = hs[:, :I], hs[:, I:]
    g32 = g.astype(np.float32); u32 = u.astype(np.float32)
    sig = (np.float32(1) / (np.float32(1) + np.exp(-g32))).astype(np.float32)
    a = bf16((g32 * sig).astype(np.float32) * u32).astype(np.float64)
    for e in range(E):
        a0, a1 = offs[e], offs[e + 1]
        if a1 == a0:
            continue
        if R.fp8_fwd:
            qa, sa = qact(a[a0:a1], R)
            QB, SB = qweight(w2[e], R, bug=bug)
            oo = gemm(qa, sa, QB, SB, R.gk, mode, bug=bug)
        else:
            oo = gemm_bf16(a[a0:a1], w2[e], mode)
        o[a0:a1] = bf16(f32(oo))
        if fused:
            o32[a0:a1] = f32(oo)
    # combine: y_t = sum_j w_j * o_row  (f32 fma chain in slot order), stored bf16
    y = np.zeros((T, H), np.float64)
    k = ids.shape[1]
    rowof = {(t, j): r for r, (e, t, j) in enumerate(rows)}
    for j in range(k):
        for t in range(T):
            r = rowof.get((t, j))
            if r is None:
                continue
            y[t] = fma_f32(np.float64(wrow[r]), (o32 if fused else o)[r].astype(np.float64), y[t])
    y = bf16(f32(y))

    # ---------------- backward
    do = bf16((dy[rt] * wrow[:, None]).astype(np.float32)).astype(np.float64)
    gtw = np.zeros(tw.shape, np.float32)
    gtw[rt, rs] = f32((dy[rt].astype(np.float64) * o.astype(np.float64)).sum(1))
    da = np.zeros((M, I)); dxr = np.zeros((M, H))
    gw13 = np.zeros(w13.shape, np.float32); gw2 = np.zeros(w2.shape, np.float32)
    qdo, sdo = qact(do, R)
    for e in range(E):
        a0, a1 = offs[e], offs[e + 1]
        if a1 == a0:
            continue
        QB, SB = qweight(w2[e], R, transpose=True, bug=bug)   # B = w2[e].T  [I, H]
        da[a0:a1] = gemm(qdo[a0:a1], sdo[a0:a1], QB, SB, R.gk, mode, bug=bug)
    da32f = f32(da)
    da = bf16(f32(da)).astype(np.float64)
    # swiglu backward (f32) from the stored h
    g, u = (hs[:, :I], hs[:, I:])
    g32 = g.astype(np.float32); u32 = u.astype(np.float32); da32 = da32f if fused else da.astype(np.float32)
    sig = (np.float32(1) / (np.float32(1) + np.exp(-g32))).astype(np.float32)
    silu = g32 * sig
    dsilu = sig * (np.float32(1) + g32 * (np.float32(1) - sig))
    dg = da32 * u32 * dsilu
    du = da32 * silu
    dh = bf16(np.concatenate([dg, du], 1).astype(np.float32)).astype(np.float64)
    qdh, sdh = qact(dh, R)
    for e in range(E):
        a0, a1 = offs[e], offs[e + 1]
        if a1 == a0:
            continue
        QB, SB = qweight(w13[e], R, transpose=True, bug=bug)  # B = w13[e].T [H, 2I]
        dxr[a0:a1] = gemm(qdh[a0:a1], sdh[a0:a1], QB, SB, R.gk, mode, bug=bug)
        # wgrad: operands re-quantised column-wise along tokens (groups of gk tokens within the expert)
        for (G, Aop, Bop) in ((gw2, do[a0:a1], a[a0:a1]), (gw13, dh[a0:a1], x[rt[a0:a1]].astype(np.float64))):
            if bug == 'wgrad_rowwise' and R.wblk is not None:
                # reuse the row-wise (1x128 along features) copies: dequantise and feed in high precision
                qa_, sa_ = quant(Aop, 1, 128, R.rule); qb_, sb_ = quant(Bop, 1, 128, R.rule)
                Ad = qa_ * np.repeat(sa_, 128, 1)[:, :Aop.shape[1]]
                Bd = qb_ * np.repeat(sb_, 128, 1)[:, :Bop.shape[1]]
                G[e] = f32(Ad.T @ Bd)
                continue
            qA, sA = quant(Aop.T, 1, R.gk, R.rule)
            qB, sB = quant(Bop.T, 1, R.gk, R.rule)
            G[e] = gemm(qA, sA, qB, sB, R.gk, mode, bug=bug)
    dxr32 = f32(dxr)
    dxr = bf16(f32(dxr)).astype(np.float64)
    gx = np.zeros((T, H), np.float64)
    for j in range(k):
        for t in range(T):
            r = rowof.get((t, j))
            if r is None:
                continue
            gx[t] = f32(gx[t] + (dxr32 if fused else dxr)[r])
    gx = bf16(f32(gx))
    f = lambda v: np.asarray(v, np.float64).astype(np.float32)
    out = {
        'y': f(y), 'grad.x': f(gx), 'grad.w13': f(gw13), 'grad.w2': f(gw2), 'grad.topk_weights': f(gtw),
        'fwd.row_token': rt.astype(np.int32), 'fwd.row_slot': rs.astype(np.int32), 'fwd.expert_offsets': offs,
        'fwd.h': f(h), 'fwd.a': f(a), 'fwd.o': f(o), 'bwd.do': f(do), 'bwd.da': f(da), 'bwd.dh': f(dh),
        'bwd.dx_rows': f(dxr),
    }
    extras = {}
    if R.fp8_fwd:
        extras['q.x'] = qx; extras['q.x.scale'] = sx
    extras['q.bwd.do'] = qdo; extras['q.bwd.do.scale'] = sdo
    extras['q.bwd.dh'] = qdh; extras['q.bwd.dh.scale'] = sdh
    return out, extras
