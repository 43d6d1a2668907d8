// Hopper path: wgmma (sm_90a) from shared memory with 128-byte swizzle, fed by a 4-stage cp.async pipeline
// (rows gathered by index, as in fast_gemm.cu). Block tile 128 x 256 x 64: two warpgroups, each issuing
// m64n256k16 on its 64 rows; one commit group kept in flight.
//   wg_gemm1_swiglu, wg_rows: A and B K-major (GEMM1 + SwiGLU, GEMM2; dX with transposed weights)
//   wg_dgrad_swiglu: dA with the SwiGLU backward fused in the epilogue (transposed W2)
//   wg_rows_bmn: B MN-major, i.e. the weights read as stored: dX rows, and dA_raw (bf16) for the
//                     row-wise fc_swiglu_bwd_rows (the default backward: no transposed copies, and the
//                     SwiGLU backward outside the GEMM, where it measured 4x faster than in the epilogue)
//   wg_wgrad: both operands MN-major, the weight gradients over each expert's rows
//
// K-major tiles: 64 bf16 = 128 bytes per line, 16-byte chunk index XOR line % 8 (fast_gemm.cu's layout),
// exactly wgmma's 128-byte-swizzle K-major canonical layout when each tile starts on a 1024-byte boundary:
// 8-line groups 1024 bytes apart (the descriptor's stride offset), k16 steps 32 bytes apart in the line.
// MN-major tiles: blocks of 64 M/N elements x 64 k lines in the same swizzled lines; k lines 128 bytes apart,
// 8-line groups 1024 bytes apart (stride offset), 64-element blocks 8192 bytes apart (leading offset), k16
// steps 2048 bytes apart.
// Needs FastGemmParams, EPI_*, swiglu_f/_b, cp_async16, smem_u32 from fast_gemm.cu (same translation unit).

#define WG_BM 128
#define WG_BN 256
#define WG_BK 64
#define WG_STAGES 4
#define WG_A_BYTES (WG_BM * WG_BK * 2)
#define WG_B_BYTES (WG_BN * WG_BK * 2)
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma m64n256k16, bf16 inputs from shared memory (both K-major, 128-byte swizzle), f32 accumulators in
// d[128] (always accumulated into: they start at zero).
__device__ __forceinline__ void wgmma_m64n256k16(float* d, unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

// The same with both operands MN-major (A stored M-contiguous, B N-contiguous): the transpose flags set.
__device__ __forceinline__ void wgmma_m64n256k16_tt(float* d, unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

// A K-major, B MN-major (N-contiguous): the weights read as stored in the data-gradient GEMMs.
__device__ __forceinline__ void wgmma_m64n256k16_bt(float* d, unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
    unsigned long long d = 0;
    d |= (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= (unsigned long long)(16 >> 4) << 16;    // leading offset: unused for swizzled K-major
    d |= (unsigned long long)(1024 >> 4) << 32;  // stride offset: 8 lines of 128 bytes
    d |= 1ull << 62;                             // 128-byte swizzle
    return d;
}
// MN-major 128-byte-swizzle operand (weight gradients): blocks of 64 M (or N) elements x 64 k lines, each
// line 128 bytes with chunks XOR line % 8; k lines 128 bytes apart, 8-line groups 1024 bytes apart (stride
// offset), 64-element blocks along M/N 8192 bytes apart (leading offset).
__device__ __forceinline__ unsigned long long wg_desc_mn(unsigned addr) {
    unsigned long long d = 0;
    d |= (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= (unsigned long long)(8192 >> 4) << 16;
    d |= (unsigned long long)(1024 >> 4) << 32;
    d |= 1ull << 62;
    return d;
}
__device__ __forceinline__ void wg_fence_acc(float* d) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// One k-tile (64 deep) of a warpgroup's 64 x 256 accumulators: four m64n256k16 from the stage at sA (this
// warpgroup's 64 lines already added) and sB. KIND 0: A and B K-major; 1: A K-major, B MN-major (weights read
// as stored); 2: both MN-major (weight gradients).
template <int KIND>
__device__ __forceinline__ void wg_mma_ktile(float* d, unsigned sA, unsigned sB) {
#pragma unroll
    for (int kk = 0; kk < WG_BK / 16; ++kk) {
        if (KIND == 0)
            wgmma_m64n256k16(d, wg_desc(sA + kk * 32), wg_desc(sB + kk * 32));
        else if (KIND == 1)
            wgmma_m64n256k16_bt(d, wg_desc(sA + kk * 32), wg_desc_mn(sB + kk * 2048));
        else
            wgmma_m64n256k16_tt(d, wg_desc_mn(sA + kk * 2048), wg_desc_mn(sB + kk * 2048));
    }
}

// The first N of a weight-gradient k-tile's four 16-row slices, between their own fence and commit
// (WS_SKIP_EMPTY_K: an expert's last k-tile whose slices past N are zero-filled rows, which would add nothing).
// The fence and the commit sit inside each caller's branch: a branch that joins between a wgmma and its
// commit makes ptxas inject warpgroup arrives of its own (C7519).
template <int N>
__device__ __forceinline__ void wg_mma_slices_tt(float* d, unsigned sA, unsigned sB) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < N; ++kk) wgmma_m64n256k16_tt(d, wg_desc_mn(sA + kk * 2048), wg_desc_mn(sB + kk * 2048));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Row GEMMs: load the stage (A: rows m0..m_end gathered by index, k0..k0+64; B: the expert's weights for output
// columns n0..n0+256) with the block's 256 threads. Out-of-range chunks are zero-filled.
// B_MN: B read N-contiguous (the weight as stored, [k][n] per expert) through MN-major descriptors, so the
// data-gradient GEMMs need no transposed copy of the weights.
template <int EPI, bool B_MN>
__device__ __forceinline__ void wg_load_rows(const FastGemmParams& p, unsigned sA, unsigned sB, const bf16_t* b_base, int m0, int m_end, int n0, int k0, int tid) {
    const int k_end = p.k_dim;
    const int n_lines = (EPI == EPI_SWIGLU_FWD) ? p.inter : p.n_dim;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // A: 128 lines x 8 chunks
        int ci = tid + i * 256;
        int line = ci >> 3, ch = ci & 7;
        int m = m0 + line, k = k0 + ch * 8;
        bool ok = m < m_end && k < k_end;
        long long src = ok ? (p.a_idx ? p.a_idx[m] : m) : 0;
        cp_async16(sA + 2 * swz<8>(line, ch), p.a + src * p.lda + (ok ? k : 0), ok);
    }
    if (B_MN) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // B: 64 k lines x 256 n (4 blocks of 64), N-contiguous
            int ci = tid + i * 256;
            int line = ci >> 5, ch = ci & 31;
            int k = k0 + line, n = n0 + ch * 8;
            bool ok = k < k_end && n < p.n_dim;
            cp_async16(sB + (ch >> 3) * 8192 + 2 * swz<8>(line, ch & 7), b_base + (ok ? (long long)k * p.ldb + n : 0), ok);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // B: 256 lines x 8 chunks, K-contiguous
            int ci = tid + i * 256;
            int line = ci >> 3, ch = ci & 7;
            int k = k0 + ch * 8;
            int nrow;
            bool ok;
            if (EPI == EPI_SWIGLU_FWD) {  // gate and up rows of one intermediate index interleaved in groups of 8
                int grp = line >> 3, q = (n0 >> 1) + (grp >> 1) * 8 + (line & 7);
                ok = q < p.inter;
                nrow = (grp & 1) ? p.inter + q : q;
            } else {
                nrow = n0 + line;
                ok = nrow < n_lines;
            }
            ok = ok && k < k_end;
            cp_async16(sB + 2 * swz<8>(line, ch), b_base + (ok ? (long long)nrow * p.ldb + k : 0), ok);
        }
    }
}

// Row GEMMs' epilogue from a warpgroup's accumulators: d[4j + c] is row r_in + 8*(c/2) (r_in = 64-row group
// + 16 * warp in group + lane/4), column 8j + c_in + c%2 of the 128 x 256 tile at (m0, n0). n_tile / n_tiles:
// the column tile's index and count (the SwiGLU backward's per-tile partial sums).
template <int EPI>
__device__ __forceinline__ void wg_epilogue_rows(const FastGemmParams& p, float* d, int m0, int m_end, int n0, int r_in, int c_in, int lane, int n_tile, int n_tiles) {
    if (EPI == EPI_STORE) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            int m = m0 + r_in + hf * 8;
            if (m >= m_end) continue;
            bf16_t* crow = p.c + (long long)m * p.ldc;
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                int n = n0 + j * 8 + c_in;
                float v0 = d[4 * j + 2 * hf], v1 = d[4 * j + 2 * hf + 1];
                if (n + 1 < p.n_dim) {
                    *(unsigned*)(crow + n) = (unsigned)f32_to_bf16(v0) | ((unsigned)f32_to_bf16(v1) << 16);
                } else if (n < p.n_dim) {
                    crow[n] = f32_to_bf16(v0);
                }
            }
        }
    } else if (EPI == EPI_SWIGLU_FWD || EPI == EPI_SWIGLU_FWD_SPLIT) {
        // gate and up accumulators of intermediate index q: blocks 2jp and 2jp + 1 (interleaved B tile) or
        // jp and jp + 16 (split B tile)
        constexpr int G = (EPI == EPI_SWIGLU_FWD) ? 2 : 1, U = (EPI == EPI_SWIGLU_FWD) ? 1 : 16;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            int r = m0 + r_in + hf * 8;
            if (r >= m_end) continue;
            bf16_t* hrow = p.c + (long long)r * p.ldc;
            bf16_t* arow = p.c2 + (long long)r * p.inter;
#pragma unroll
            for (int jp = 0; jp < 16; ++jp) {
                int q = (n0 >> 1) + jp * 8 + c_in;
                if (q >= p.inter) continue;
                bf16_t gb[2], ub[2], ab[2];
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    gb[c] = f32_to_bf16(d[4 * (G * jp) + 2 * hf + c]);
                    ub[c] = f32_to_bf16(d[4 * (G * jp + U) + 2 * hf + c]);
                    ab[c] = f32_to_bf16(swiglu_f(bf16_to_f32(gb[c]), bf16_to_f32(ub[c]), p.alpha, p.clamp_limit));
                }
                if (q + 1 < p.inter) {
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
    } else {  // EPI_SWIGLU_BWD: d = dA_raw (unweighted), N = I; a warp holds whole rows of the tile
        // H is read in batches of 8 column pairs loaded together (one memory round trip per batch instead of
        // one per pair); I is a multiple of 8 and q is even, so a pair never straddles the end of a row.
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            int r = m0 + r_in + hf * 8;
            bool live = r < m_end;
            float rowdot = 0.0f;
            float w = live ? p.row_w[r] : 0.0f;
            const bf16_t* hrow = p.h + (long long)(live ? r : 0) * 2 * p.inter;
            bf16_t* dhrow = p.c + (long long)r * 2 * p.inter;
            bf16_t* aprow = p.c2 + (long long)r * p.inter;
#pragma unroll
            for (int cj = 0; cj < 4; ++cj) {
                unsigned gp[8], up[8];
#pragma unroll
                for (int jj = 0; jj < 8; ++jj) {
                    int q = n0 + (cj * 8 + jj) * 8 + c_in;
                    bool ok = live && q < p.inter;
                    gp[jj] = ok ? __ldg((const unsigned*)(hrow + q)) : 0u;
                    up[jj] = ok ? __ldg((const unsigned*)(hrow + p.inter + q)) : 0u;
                }
#pragma unroll
                for (int jj = 0; jj < 8; ++jj) {
                    int j = cj * 8 + jj;
                    int q = n0 + j * 8 + c_in;
                    if (!live || q >= p.inter) continue;
                    bf16_t dg[2], du[2], ap[2];
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        float g = bf16_to_f32((bf16_t)(c ? gp[jj] >> 16 : gp[jj] & 0xffffu));
                        float u = bf16_to_f32((bf16_t)(c ? up[jj] >> 16 : up[jj] & 0xffffu));
                        float a = bf16_to_f32(f32_to_bf16(swiglu_f(g, u, p.alpha, p.clamp_limit)));
                        float dv = bf16_to_f32(f32_to_bf16(d[4 * j + 2 * hf + c]));  // dA_raw as stored in bf16 (fc_swiglu_bwd_rows)
                        rowdot = fmaf(dv, a, rowdot);
                        float gg, uu;
                        swiglu_b(g, u, w * dv, p.alpha, p.clamp_limit, gg, uu);
                        dg[c] = f32_to_bf16(gg);
                        du[c] = f32_to_bf16(uu);
                        ap[c] = f32_to_bf16(w * a);
                    }
                    *(unsigned*)(dhrow + q) = (unsigned)dg[0] | ((unsigned)dg[1] << 16);
                    *(unsigned*)(dhrow + p.inter + q) = (unsigned)du[0] | ((unsigned)du[1] << 16);
                    *(unsigned*)(aprow + q) = (unsigned)ap[0] | ((unsigned)ap[1] << 16);
                }
            }
            rowdot += __shfl_xor_sync(0xffffffffu, rowdot, 1);
            rowdot += __shfl_xor_sync(0xffffffffu, rowdot, 2);
            if (live && (lane & 3) == 0) p.ds_part[(long long)r * n_tiles + n_tile] = rowdot;
        }
    }
}

// Weight gradients: load the stage (k lines = the expert's rows k0..k_end gathered by index; A: 128 m, B: 256
// n, both MN-major) with the block's 256 threads.
__device__ __forceinline__ void wg_load_wgrad(const FastGemmParams& p, unsigned sA, unsigned sB, int m0, int n0, int k0, int k_end, int tid) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // A: 64 k lines x 128 m (2 blocks of 64)
        int ci = tid + i * 256;
        int line = ci >> 4, ch = ci & 15;
        int k = k0 + line, m = m0 + ch * 8;
        bool ok = k < k_end && m < p.m_dim;
        long long src = ok ? (p.a_idx ? p.a_idx[k] : k) : 0;
        cp_async16(sA + (ch >> 3) * 8192 + 2 * swz<8>(line, ch & 7), p.a + src * p.lda + (ok ? m : 0), ok);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // B: 64 k lines x 256 n (4 blocks of 64)
        int ci = tid + i * 256;
        int line = ci >> 5, ch = ci & 31;
        int k = k0 + line, n = n0 + ch * 8;
        bool ok = k < k_end && n < p.n_dim;
        long long src = ok ? (p.b_idx ? p.b_idx[k] : k) : 0;
        cp_async16(sB + (ch >> 3) * 8192 + 2 * swz<8>(line, ch & 7), p.b + src * p.ldb + (ok ? n : 0), ok);
    }
}

// Weight gradients' epilogue: bf16 stores of the warpgroup's rows of expert e's 128 x 256 tile at (m0, n0).
__device__ __forceinline__ void wg_epilogue_wgrad(const FastGemmParams& p, const float* d, int e, int m0, int n0, int r_in, int c_in) {
    bf16_t* cbase = p.c + (long long)e * p.c_estride;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        int m = m0 + r_in + hf * 8;
        if (m >= p.m_dim) continue;
        bf16_t* crow = cbase + (long long)m * p.ldc;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            int n = n0 + j * 8 + c_in;
            if (n < p.n_dim)  // n even, n_dim a multiple of 8: the pair is inside the row
                *(unsigned*)(crow + n) = (unsigned)f32_to_bf16(d[4 * j + 2 * hf]) | ((unsigned)f32_to_bf16(d[4 * j + 2 * hf + 1]) << 16);
        }
    }
}

// The shared memory of the wgmma GEMMs, aligned to 1024 bytes (the host adds 1 KiB of slack to the dynamic size).
__device__ __forceinline__ unsigned wg_smem_base() {
    extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
    unsigned raw = smem_u32(wg_smem_raw);
    return raw + ((1024u - (raw & 1023u)) & 1023u);
}

// The non-persistent kernels' main loop: one 128 x 256 tile per block, 256 threads (two warpgroups) both
// loading (cp.async, two k-tiles ahead) and computing. load(stage_A_address, stage_B_address, kt) fills the
// stage of k-tile kt; a_off is this warpgroup's offset in the A tile. KIND as in wg_mma_ktile.
template <int KIND, class Load>
__device__ __forceinline__ void wg_plain_mainloop(float* d, unsigned sbase, int nk, unsigned a_off, Load load) {
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < WG_STAGES - 2; ++s) {
        if (s < nk) load(sbase + s * WG_STAGE_BYTES, sbase + s * WG_STAGE_BYTES + WG_A_BYTES, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; ++kt) {
        cp_async_wait<WG_STAGES - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        // every warpgroup has finished the wgmma of tile kt - 2 (waited below), so its stage is free
        {
            int nt = kt + WG_STAGES - 2;
            if (nt < nk) {
                unsigned sA = sbase + (nt % WG_STAGES) * WG_STAGE_BYTES;
                load(sA, sA + WG_A_BYTES, nt);
            }
            cp_async_commit();
        }
        unsigned sA = sbase + (kt % WG_STAGES) * WG_STAGE_BYTES, sB = sA + WG_A_BYTES;
        wg_fence_acc(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        wg_mma_ktile<KIND>(d, sA + a_off, sB);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        wg_fence_acc(d);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wg_fence_acc(d);
    cp_async_wait<0>();
}

// Row GEMMs, blockIdx.y = row tile, blockIdx.x = column tile.
template <int EPI, bool B_MN>
__device__ __forceinline__ void wg_gemm(const FastGemmParams& p) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, wq = warp & 3;
    if ((int)blockIdx.y >= *p.tile_count) return;
    const int* tl = p.tiles + 3 * blockIdx.y;
    const int e = tl[0], m0 = tl[1], m_end = tl[2];
    const int n0 = blockIdx.x * WG_BN;
    const bf16_t* b_base = p.b + (long long)e * p.b_estride;
    float d[128];
    wg_plain_mainloop<B_MN ? 1 : 0>(d, wg_smem_base(), (p.k_dim + WG_BK - 1) / WG_BK, wg * (64 * 128), [&](unsigned sA, unsigned sB, int kt) {
        wg_load_rows<EPI, B_MN>(p, sA, sB, b_base, m0, m_end, n0, kt * WG_BK, tid);
    });
    const int r_in = wg * 64 + wq * 16 + (lane >> 2), c_in = (lane & 3) * 2;
    wg_epilogue_rows<EPI>(p, d, m0, m_end, n0, r_in, c_in, lane, blockIdx.x, gridDim.x);
}
// Weight gradients on wgmma: dW_e[m, n] = Σ_{r of e} A[srcA(r), m] · B[srcB(r), n] over the expert's rows, both
// operands MN-major (read as stored: rows of dH, gathered rows of X or dY, rows of A'), grid.z = expert, any
// row count (zero rows store exact zeros).
__device__ __forceinline__ void wg_wgrad_body(const FastGemmParams& p) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, wq = warp & 3;
    const int e = blockIdx.z, m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * WG_BN;
    const int k_begin = p.offsets[e], k_end = p.offsets[e + 1];
    float d[128];
    wg_plain_mainloop<2>(d, wg_smem_base(), (k_end - k_begin + WG_BK - 1) / WG_BK, wg * 8192, [&](unsigned sA, unsigned sB, int kt) {
        wg_load_wgrad(p, sA, sB, m0, n0, k_begin + kt * WG_BK, k_end, tid);
    });
    const int r_in = wg * 64 + wq * 16 + (lane >> 2), c_in = (lane & 3) * 2;
    wg_epilogue_wgrad(p, d, e, m0, n0, r_in, c_in);
}
#define WG_WGRAD_BODY wg_wgrad_body(p);
#define WG_BODY(E) wg_gemm<E, false>(p);
#define WG_BODY_BMN(E) wg_gemm<E, true>(p);
#else
#define WG_BODY(E) __trap();
#define WG_BODY_BMN(E) __trap();
#define WG_WGRAD_BODY __trap();
#endif

extern "C" __global__ void __launch_bounds__(256, 1) wg_gemm1_swiglu(const FastGemmParams p) { WG_BODY(EPI_SWIGLU_FWD) }
extern "C" __global__ void __launch_bounds__(256, 1) wg_rows(const FastGemmParams p) { WG_BODY(EPI_STORE) }
extern "C" __global__ void __launch_bounds__(256, 1) wg_dgrad_swiglu(const FastGemmParams p) { WG_BODY(EPI_SWIGLU_BWD) }
extern "C" __global__ void __launch_bounds__(256, 1) wg_wgrad(const FastGemmParams p) { WG_WGRAD_BODY }
// weights read as stored (N-contiguous B): dX rows and dA_raw (bf16, for fc_swiglu_bwd_rows; f32 until session 17)
extern "C" __global__ void __launch_bounds__(256, 1) wg_rows_bmn(const FastGemmParams p) { WG_BODY_BMN(EPI_STORE) }

// SwiGLU backward on whole rows, one warp per row, from dA_raw = dY[token]·W2 (unweighted, stored in bf16 as
// PyTorch stores dA and as the oracle's bf16 recipe keeps it: session 17 halved its bytes): dA = w·dA_raw,
// A recomputed from H exactly as the forward did, dH and A' = w·A stored in bf16, and the routing-weight
// gradient's row sum <dA_raw, A> into ds_row[r]: each lane sums its 8-column chunks (columns 8 lane + 256 i)
// in column order, then a fixed butterfly across the lanes. 16-byte loads and stores (I is a multiple of 8).
extern "C" __global__ void fc_swiglu_bwd_rows(const bf16_t* __restrict__ da_raw, const bf16_t* __restrict__ h,
                                              const float* __restrict__ row_w, bf16_t* __restrict__ dh,
                                              bf16_t* __restrict__ aw, float* __restrict__ ds_row, int rows,
                                              int inter, float alpha, float clamp_limit) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    float w = row_w[r];
    const bf16_t* drow = da_raw + (long long)r * inter;
    const bf16_t* hrow = h + (long long)r * 2 * inter;
    bf16_t* dhrow = dh + (long long)r * 2 * inter;
    bf16_t* arow = aw + (long long)r * inter;
    float rowdot = 0.0f;
#pragma unroll 2
    for (int q = 8 * lane; q < inter; q += 256) {
        const uint4 dp = __ldcs((const uint4*)(drow + q));
        const uint4 gp = *(const uint4*)(hrow + q), up = *(const uint4*)(hrow + inter + q);
        const unsigned dw[4] = {dp.x, dp.y, dp.z, dp.w}, gw[4] = {gp.x, gp.y, gp.z, gp.w}, uw[4] = {up.x, up.y, up.z, up.w};
        unsigned dg[4], du[4], ap[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            dg[i] = du[i] = ap[i] = 0;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                float g = bf16_to_f32((bf16_t)(c ? gw[i] >> 16 : gw[i] & 0xffffu));
                float u = bf16_to_f32((bf16_t)(c ? uw[i] >> 16 : uw[i] & 0xffffu));
                float d = bf16_to_f32((bf16_t)(c ? dw[i] >> 16 : dw[i] & 0xffffu)), af, gg, uu;
                swiglu_fb(g, u, w * d, alpha, clamp_limit, af, gg, uu);  // one exponential for A and its gradient
                float a = bf16_to_f32(f32_to_bf16(af));
                rowdot = fmaf(d, a, rowdot);
                dg[i] |= (unsigned)f32_to_bf16(gg) << (16 * c);
                du[i] |= (unsigned)f32_to_bf16(uu) << (16 * c);
                ap[i] |= (unsigned)f32_to_bf16(w * a) << (16 * c);
            }
        }
        *(uint4*)(dhrow + q) = make_uint4(dg[0], dg[1], dg[2], dg[3]);
        *(uint4*)(dhrow + inter + q) = make_uint4(du[0], du[1], du[2], du[3]);
        *(uint4*)(arow + q) = make_uint4(ap[0], ap[1], ap[2], ap[3]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) rowdot += __shfl_xor_sync(0xffffffffu, rowdot, o);
    if (lane == 0) ds_row[r] = rowdot;
}

// out[e][c][r] = in[e][r][c] for a batch of [rows][cols] bf16 matrices (rows, cols even), through a 64 x 64
// tile in shared memory: each thread reads and writes bf16 pairs, so a warp moves 128 contiguous bytes.
extern "C" __global__ void fc_transpose(const bf16_t* __restrict__ in, bf16_t* __restrict__ out, int rows, int cols) {
    __shared__ bf16_t tile[64][66];
    long long base = (long long)blockIdx.z * rows * cols;
    int c0 = blockIdx.x * 64, r0 = blockIdx.y * 64;
    int tx = threadIdx.x, ty = threadIdx.y;  // 32 x 8
    for (int i = ty; i < 64; i += 8) {
        int r = r0 + i, c = c0 + 2 * tx;
        if (r < rows && c < cols) {
            unsigned v = *(const unsigned*)(in + base + (long long)r * cols + c);
            tile[i][2 * tx] = (bf16_t)(v & 0xffffu);
            tile[i][2 * tx + 1] = (bf16_t)(v >> 16);
        }
    }
    __syncthreads();
    for (int i = ty; i < 64; i += 8) {
        int c = c0 + i, r = r0 + 2 * tx;
        if (c < cols && r < rows) {
            unsigned v = (unsigned)tile[2 * tx][i] | ((unsigned)tile[2 * tx + 1][i] << 16);
            *(unsigned*)(out + base + (long long)c * rows + r) = v;
        }
    }
}
