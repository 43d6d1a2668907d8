// Fast grouped GEMM on tensor cores (mma.sync.m16n8k16 bf16, f32 accumulation), with ldmatrix fragment loads
// and a multi-stage cp.async pipeline (FG_STAGES). One template covers every GEMM of the MoE layer:
//
//   row GEMMs   (blocks over a tile list of (expert, 128 rows)):  C[r, n] = Σ_k A[src(r), k] · B_e[n, k]   (B K-major)
//                                                                  or       Σ_k A[src(r), k] · B_e[k, n]   (B N-major)
//   weight-gradient GEMMs (grid.z = expert, contraction over the expert's rows, any count, zero rows -> zeros):
//                                                   dW_e[m, n] = Σ_{r of e} A[srcA(r), m] · B[srcB(r), n]
//
// Operands are read straight from their natural layouts; rows are gathered by index in the loads (no permuted
// copies of X or dY). Every tile in shared memory is "lines" of 64 or 128 bf16 with its 16-byte chunks
// XOR-swizzled by (line % 8), which makes both the cp.async stores and the ldmatrix reads conflict-free.
// Accumulation order is fixed by the code (no split-K, no atomics): results are bitwise run-to-run identical.
//
// Epilogues: plain bf16 store; GEMM1's SwiGLU (stores H and A, gate and up columns of one intermediate index
// land in the same thread because the B tile interleaves gate and up rows in groups of 8); the backward of
// GEMM2's data gradient with the SwiGLU backward (recomputes A from H, writes dH, A' = w·A for dW2, and the
// routing-weight gradient's per-row partial sums <dA_raw, A> for a deterministic second-pass reduction).
#include "bf16.cuh"

#define FG_BM 128
#define FG_BN 128
#define FG_BK 64
#ifndef FG_STAGES
#define FG_STAGES 3  // 96 KiB of shared memory: two blocks per SM
#endif
#define FG_THREADS 256
#define FG_TILE_ELEMS (128 * 64)

// EPI_SWIGLU_FWD_SPLIT: GEMM1's SwiGLU with the B tile as [128 gate rows; 128 up rows] (the TMA-fed persistent
// kernels) instead of gate and up interleaved in groups of 8 lines.
enum { EPI_STORE = 0, EPI_SWIGLU_FWD = 1, EPI_SWIGLU_BWD = 2, EPI_SWIGLU_FWD_SPLIT = 4 };  // (3 was an f32 store, until session 17)

// The row of B_e that line `line` of a K-contiguous B tile starting at n0 reads, and whether it lies inside
// B_e. EPI_SWIGLU_FWD interleaves the gate row (q) and the up row (inter + q) of one intermediate index q in
// groups of 8 lines, so that one accumulator thread holds both halves of a SwiGLU pair.
template <int EPI>
__device__ __forceinline__ int b_tile_row(int line, int n0, int inter, int n_lines, bool& ok) {
    if (EPI == EPI_SWIGLU_FWD) {
        int grp = line >> 3, q = (n0 >> 1) + (grp >> 1) * 8 + (line & 7);
        ok = q < inter;
        return (grp & 1) ? inter + q : q;
    }
    ok = n0 + line < n_lines;
    return n0 + line;
}

// Everything a launch needs; passed by value. Pointers are device addresses.
struct FastGemmParams {
    const bf16_t* a;          // A operand base
    const int* a_idx;         // gather: A line (M line for row GEMMs, K line for wgrad) -> source row; null = identity
    const bf16_t* b;          // B operand base
    const int* b_idx;         // gather for B's K lines (wgrad only); null = identity
    bf16_t* c;                // output
    bf16_t* c2;               // second output: A (SwiGLU fwd) or A' (SwiGLU bwd)
    const bf16_t* h;          // stored H (SwiGLU bwd)
    const float* row_w;       // routing weight of each row (SwiGLU bwd)
    float* ds_part;           // [rows, n_tiles] partial <dA_raw, A> (SwiGLU bwd)
    const int* tiles;         // row GEMMs: [tile][3] = expert, first row, end row
    const int* tile_count;    // row GEMMs: number of valid tiles (device)
    const int* offsets;       // wgrad: expert row offsets [E + 1]
    int* tile_ctr;            // persistent GEMMs: [next tile, blocks done], zero at launch; null: fixed tile order
    bf16_t* a_rows;           // persistent row GEMMs gathering A: the gathered rows also written here (row r of the
                              // GEMM at a_rows + r * lda) by the tiles of column 0; null: not written
    long long lda, ldb, ldc;  // leading dimensions (elements)
    long long b_estride;      // per-expert stride of B (row GEMMs)
    long long c_estride;      // per-expert stride of C (wgrad)
    int m_dim, n_dim, k_dim;  // wgrad: M and N of each expert's output; row GEMMs: N and K (m_dim unused)
    int inter;                // I (SwiGLU epilogues)
    float alpha, clamp_limit; // SwiGLU variant (clamp_limit < 0: plain)
    int raster_m;             // persistent row GEMMs: tiles in groups of raster_m row tiles, row tile fastest; 0: column tile fastest;
                              // < 0: one group per expert (fast_ws.cu, ws_rows_tile)
};

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;  // 0 source bytes: the 16 destination bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// 4 bytes (zero-filled when !valid), through L1
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, bool valid) {
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Element offset of (line, 16-byte chunk) in a swizzled tile whose lines hold 8 * CHUNKS elements.
template <int CHUNKS>
__device__ __forceinline__ int swz(int line, int chunk) {
    return line * (CHUNKS * 8) + ((chunk ^ (line & 7)) << 3);
}

// Two floats as a bf16 pair (lo in the low half), rounded to nearest even by one instruction: the value of
// f32_to_bf16 for every non-NaN input (a NaN becomes the canonical one, not a quieted copy of its payload).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float bf16_lo(unsigned v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(unsigned v) { return __uint_as_float(v & 0xffff0000u); }

// SwiGLU in f32 on bf16-valued inputs; the same code in forward and backward, so the backward's recomputed
// A is bit-identical to the stored forward A. `clamped` is !(limit < 0) (plain SwiGLU when limit < 0).
//
// Each quotient x / den (den = 1 + exp(.) >= 1) is x · rcp.approx.f32(den): MUFU.RCP, 1 ulp (2 u) at most by
// the PTX ISA, subnormal results kept; with the product's rounding the quotient errs by ~3 u where div.rn
// errs by u, inside the oracle's evaluation allowance (16 u forward, 32 u backward:
// reference/src/emulate/act_bound.rs, kernels/src/fast/check.rs). Why not div.rn: its range check and slow
// paths cost GEMM1's epilogue 2,000 SASS instructions and a fallback per box (session 33, heated on 30b: gemm1
// 2.2% faster, the pass 0.7%). Every engine and the SwiGLU backward use it alike.
__device__ __forceinline__ float swiglu_quot(float x, float den) {
    float r;
    asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(den));
    return x * r;
}
__device__ __forceinline__ float swiglu_f_c(float g, float u, float alpha, float limit, bool clamped) {
    if (!clamped) return swiglu_quot(g, 1.0f + expf(-g)) * u;
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return swiglu_quot(g, 1.0f + expf(-alpha * g)) * (u + 1.0f);
}
__device__ __forceinline__ float swiglu_f(float g, float u, float alpha, float limit) { return swiglu_f_c(g, u, alpha, limit, !(limit < 0.0f)); }
__device__ __forceinline__ void swiglu_b(float g, float u, float d, float alpha, float limit, float& dg, float& du) {
    if (limit < 0.0f) {
        float s = swiglu_quot(1.0f, 1.0f + expf(-g));
        dg = d * u * (s * (1.0f + g * (1.0f - s)));
        du = d * (g * s);
    } else {
        float gc = fminf(g, limit);
        float uc = fminf(fmaxf(u, -limit), limit);
        float s = swiglu_quot(1.0f, 1.0f + expf(-alpha * gc));
        dg = g > limit ? 0.0f : d * (uc + 1.0f) * (s * (1.0f + alpha * gc * (1.0f - s)));
        du = fabsf(u) > limit ? 0.0f : d * (gc * s);
    }
}

// swiglu_f and swiglu_b of one element with their common exponential and denominator evaluated once: a gets
// swiglu_f's value, dg and du swiglu_b's, bit for bit (the same expressions on the same operands).
__device__ __forceinline__ void swiglu_fb(float g, float u, float d, float alpha, float limit, float& a, float& dg, float& du) {
    if (limit < 0.0f) {
        const float den = 1.0f + expf(-g);
        a = swiglu_quot(g, den) * u;
        const float s = swiglu_quot(1.0f, den);
        dg = d * u * (s * (1.0f + g * (1.0f - s)));
        du = d * (g * s);
    } else {
        const float gc = fminf(g, limit), uc = fminf(fmaxf(u, -limit), limit);
        const float den = 1.0f + expf(-alpha * gc);
        a = swiglu_quot(gc, den) * (uc + 1.0f);
        const float s = swiglu_quot(1.0f, den);
        dg = g > limit ? 0.0f : d * (uc + 1.0f) * (s * (1.0f + alpha * gc * (1.0f - s)));
        du = fabsf(u) > limit ? 0.0f : d * (gc * s);
    }
}

// A_T: A stored M-contiguous ([k][m] tile), else K-contiguous ([m][k] tile). B_T: B stored N-contiguous ([k][n]
// tile), else K-contiguous ([n][k] tile). WGRAD: grid.z = expert, K = the expert's rows.
template <bool A_T, bool B_T, int EPI, bool WGRAD>
__device__ __forceinline__ void fast_gemm(const FastGemmParams& p) {
    extern __shared__ __align__(128) unsigned char fg_smem[];
    bf16_t* sA = (bf16_t*)fg_smem;                          // STAGES tiles
    bf16_t* sB = sA + FG_STAGES * FG_TILE_ELEMS;            // STAGES tiles
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;                // 2 x 4 warps, warp tile 64 x 32

    int e, m0, m_end, k_begin, k_end;
    const int n0 = blockIdx.x * FG_BN;
    if (WGRAD) {
        e = blockIdx.z;
        m0 = blockIdx.y * FG_BM;
        m_end = p.m_dim;
        k_begin = p.offsets[e];
        k_end = p.offsets[e + 1];
    } else {
        if ((int)blockIdx.y >= *p.tile_count) return;
        const int* t = p.tiles + 3 * blockIdx.y;
        e = t[0];
        m0 = t[1];
        m_end = t[2];
        k_begin = 0;
        k_end = p.k_dim;
    }
    const bf16_t* b_base = WGRAD ? p.b : p.b + (long long)e * p.b_estride;
    const int n_lines = (EPI == EPI_SWIGLU_FWD) ? p.inter : p.n_dim;  // valid B "n" lines

    // One stage: 1024 16-byte chunks of A and of B, 4 of each per thread.
    auto load_stage = [&](int stage, int k0) {
        bf16_t* dA = sA + stage * FG_TILE_ELEMS;
        bf16_t* dB = sB + stage * FG_TILE_ELEMS;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            int ci = tid + i * FG_THREADS;
            if (!A_T) {  // 128 m lines x 8 chunks of k
                int line = ci >> 3, ch = ci & 7;
                int m = m0 + line, k = k0 + ch * 8;
                bool ok = m < m_end && k < k_end;
                long long src = ok ? (p.a_idx ? p.a_idx[m] : m) : 0;
                cp_async16(smem_u32(dA + swz<8>(line, ch)), p.a + src * p.lda + (ok ? k : 0), ok);
            } else {  // 64 k lines x 16 chunks of m
                int line = ci >> 4, ch = ci & 15;
                int k = k0 + line, m = m0 + ch * 8;
                bool ok = k < k_end && m < m_end;
                long long src = ok ? (p.a_idx ? p.a_idx[k] : k) : 0;
                cp_async16(smem_u32(dA + swz<16>(line, ch)), p.a + src * p.lda + (ok ? m : 0), ok);
            }
            if (!B_T) {  // 128 n lines x 8 chunks of k
                int line = ci >> 3, ch = ci & 7;
                int k = k0 + ch * 8;
                bool ok;
                int nrow = b_tile_row<EPI>(line, n0, p.inter, n_lines, ok);
                ok = ok && k < k_end;
                cp_async16(smem_u32(dB + swz<8>(line, ch)), b_base + (ok ? (long long)nrow * p.ldb + k : 0), ok);
            } else {  // 64 k lines x 16 chunks of n
                int line = ci >> 4, ch = ci & 15;
                int k = k0 + line, n = n0 + ch * 8;
                bool ok = k < k_end && n < p.n_dim;
                long long src = ok ? (p.b_idx ? p.b_idx[k] : k) : 0;
                cp_async16(smem_u32(dB + swz<16>(line, ch)), b_base + src * p.ldb + (ok ? n : 0), ok);
            }
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

    const int nk = (k_end - k_begin + FG_BK - 1) / FG_BK;
#pragma unroll
    for (int s = 0; s < FG_STAGES - 1; ++s) {
        if (s < nk) load_stage(s, k_begin + s * FG_BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; ++kt) {
        cp_async_wait<FG_STAGES - 2>();
        __syncthreads();
        {
            int nt = kt + FG_STAGES - 1;
            if (nt < nk) load_stage(nt % FG_STAGES, k_begin + nt * FG_BK);
            cp_async_commit();
        }
        const bf16_t* tA = sA + (kt % FG_STAGES) * FG_TILE_ELEMS;
        const bf16_t* tB = sB + (kt % FG_STAGES) * FG_TILE_ELEMS;
#pragma unroll
        for (int kk = 0; kk < FG_BK / 16; ++kk) {
            unsigned af[4][4], bfr[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int mb = wm * 64 + i * 16;
                if (!A_T) {
                    int line = mb + (lane & 15), ch = kk * 2 + (lane >> 4);
                    ldsm_x4(smem_u32(tA + swz<8>(line, ch)), af[i][0], af[i][1], af[i][2], af[i][3]);
                } else {
                    int idx = lane >> 3;
                    int line = kk * 16 + (lane & 7) + ((idx >> 1) << 3), ch = (mb >> 3) + (idx & 1);
                    ldsm_x4_t(smem_u32(tA + swz<16>(line, ch)), af[i][0], af[i][1], af[i][2], af[i][3]);
                }
            }
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                int nb = wn * 32 + jj * 16;
                int idx = lane >> 3;
                if (!B_T) {
                    int line = nb + (lane & 7) + ((idx >> 1) << 3), ch = kk * 2 + (idx & 1);
                    ldsm_x4(smem_u32(tB + swz<8>(line, ch)), bfr[2 * jj][0], bfr[2 * jj][1], bfr[2 * jj + 1][0],
                            bfr[2 * jj + 1][1]);
                } else {
                    int line = kk * 16 + (lane & 7) + ((idx & 1) << 3), ch = (nb >> 3) + (idx >> 1);
                    ldsm_x4_t(smem_u32(tB + swz<16>(line, ch)), bfr[2 * jj][0], bfr[2 * jj][1], bfr[2 * jj + 1][0],
                              bfr[2 * jj + 1][1]);
                }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_bf16(acc[i][j], af[i], bfr[j][0], bfr[j][1]);
        }
    }
    cp_async_wait<0>();

    // ---- epilogues. Accumulator (i, j, c): row wm*64 + i*16 + lane/4 + 8*(c/2), col wn*32 + j*8 + 2*(lane%4) + c%2.
    const int r_in = lane >> 2, c_in = (lane & 3) * 2;
    if (EPI == EPI_STORE) {
        bf16_t* cbase = WGRAD ? p.c + (long long)e * p.c_estride : p.c;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                int m = m0 + wm * 64 + i * 16 + r_in + hf * 8;
                if (m >= m_end) continue;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    int n = n0 + wn * 32 + j * 8 + c_in;
                    bf16_t* dst = cbase + (long long)m * p.ldc + n;
                    float v0 = acc[i][j][2 * hf], v1 = acc[i][j][2 * hf + 1];
                    if (n + 1 < p.n_dim) {
                        unsigned pack = (unsigned)f32_to_bf16(v0) | ((unsigned)f32_to_bf16(v1) << 16);
                        *(unsigned*)dst = pack;  // n even and ldc even: 4-byte aligned
                    } else if (n < p.n_dim) {
                        dst[0] = f32_to_bf16(v0);
                    }
                }
            }
    } else if (EPI == EPI_SWIGLU_FWD) {
        // acc j = 0, 2 are gate columns, j = 1, 3 the up columns of the same intermediate indices.
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                int r = m0 + wm * 64 + i * 16 + r_in + hf * 8;
                if (r >= m_end) continue;
#pragma unroll
                for (int jp = 0; jp < 2; ++jp) {
                    int q = (n0 >> 1) + wn * 16 + jp * 8 + c_in;
                    if (q >= p.inter) continue;
                    bool two = q + 1 < p.inter;
                    float gf[2], uf[2];
                    bf16_t gb[2], ub[2], ab[2];
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        gb[c] = f32_to_bf16(acc[i][2 * jp][2 * hf + c]);
                        ub[c] = f32_to_bf16(acc[i][2 * jp + 1][2 * hf + c]);
                        gf[c] = bf16_to_f32(gb[c]);
                        uf[c] = bf16_to_f32(ub[c]);
                        ab[c] = f32_to_bf16(swiglu_f(gf[c], uf[c], p.alpha, p.clamp_limit));
                    }
                    bf16_t* hrow = p.c + (long long)r * p.ldc;
                    bf16_t* arow = p.c2 + (long long)r * p.inter;
                    if (two) {
                        *(unsigned*)(hrow + q) = (unsigned)gb[0] | ((unsigned)gb[1] << 16);
                        *(unsigned*)(hrow + p.inter + q) = (unsigned)ub[0] | ((unsigned)ub[1] << 16);
                        *(unsigned*)(arow + q) = (unsigned)ab[0] | ((unsigned)ab[1] << 16);
                    } else {
                        hrow[q] = gb[0];
                        hrow[p.inter + q] = ub[0];
                        arow[q] = ab[0];
                    }
                }
            }
    } else {  // EPI_SWIGLU_BWD: acc = dA_raw = dY[token] · W2_e (unweighted); N = I
        __shared__ float red[4][FG_BM];
        float rowdot[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                rowdot[i][hf] = 0.0f;
                int r = m0 + wm * 64 + i * 16 + r_in + hf * 8;
                if (r >= m_end) continue;
                float w = p.row_w[r];
                const bf16_t* hrow = p.h + (long long)r * 2 * p.inter;
                bf16_t* dhrow = p.c + (long long)r * 2 * p.inter;
                bf16_t* aprow = p.c2 + (long long)r * p.inter;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    int q = n0 + wn * 32 + j * 8 + c_in;
                    if (q >= p.inter) continue;
                    bool two = q + 1 < p.inter;
                    bf16_t dg[2], du[2], ap[2];
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        if (c == 1 && !two) break;
                        float g = bf16_to_f32(hrow[q + c]), u = bf16_to_f32(hrow[p.inter + q + c]);
                        float a = bf16_to_f32(f32_to_bf16(swiglu_f(g, u, p.alpha, p.clamp_limit)));
                        float d = bf16_to_f32(f32_to_bf16(acc[i][j][2 * hf + c]));  // dA_raw as stored in bf16 (fc_swiglu_bwd_rows)
                        rowdot[i][hf] = fmaf(d, a, rowdot[i][hf]);
                        float gg, uu;
                        swiglu_b(g, u, w * d, p.alpha, p.clamp_limit, gg, uu);
                        dg[c] = f32_to_bf16(gg);
                        du[c] = f32_to_bf16(uu);
                        ap[c] = f32_to_bf16(w * a);
                    }
                    if (two) {
                        *(unsigned*)(dhrow + q) = (unsigned)dg[0] | ((unsigned)dg[1] << 16);
                        *(unsigned*)(dhrow + p.inter + q) = (unsigned)du[0] | ((unsigned)du[1] << 16);
                        *(unsigned*)(aprow + q) = (unsigned)ap[0] | ((unsigned)ap[1] << 16);
                    } else {
                        dhrow[q] = dg[0];
                        dhrow[p.inter + q] = du[0];
                        aprow[q] = ap[0];
                    }
                }
            }
        // row partial sums: the quad's 4 lanes (fixed butterfly order), then the 4 warps along N in order
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float v = rowdot[i][hf];
                v += __shfl_xor_sync(0xffffffffu, v, 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                if ((lane & 3) == 0) red[wn][wm * 64 + i * 16 + r_in + hf * 8] = v;
            }
        __syncthreads();
        if (tid < FG_BM) {
            int r = m0 + tid;
            if (r < m_end) {
                float s = ((red[0][tid] + red[1][tid]) + red[2][tid]) + red[3][tid];
                p.ds_part[(long long)r * gridDim.x + blockIdx.x] = s;
            }
        }
    }
}

// Entry points (names the host loads).
extern "C" __global__ void __launch_bounds__(FG_THREADS) fg_gemm1_swiglu(const FastGemmParams p) {
    fast_gemm<false, false, EPI_SWIGLU_FWD, false>(p);
}
extern "C" __global__ void __launch_bounds__(FG_THREADS) fg_rows_nt(const FastGemmParams p) {
    fast_gemm<false, false, EPI_STORE, false>(p);
}
extern "C" __global__ void __launch_bounds__(FG_THREADS) fg_rows_nn(const FastGemmParams p) {
    fast_gemm<false, true, EPI_STORE, false>(p);
}
extern "C" __global__ void __launch_bounds__(FG_THREADS) fg_dgrad_swiglu(const FastGemmParams p) {
    fast_gemm<false, true, EPI_SWIGLU_BWD, false>(p);
}
extern "C" __global__ void __launch_bounds__(FG_THREADS) fg_wgrad(const FastGemmParams p) {
    fast_gemm<true, true, EPI_STORE, true>(p);
}
