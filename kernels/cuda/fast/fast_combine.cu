// The memory-bound ends of the layer, 8 features (16 bytes) per thread, no atomics: the weighted combine
// y[t] = Σ_j w[t,j]·o[row(t,j)] and the un-dispatch grad_x[t] = Σ_j dx_rows[row(t,j)], each summed in f32 in
// slot order; and the routing-weight gradient from the dA GEMM's per-row partial sums, in tile order.
#include "bf16.cuh"

__device__ __forceinline__ void unpack8(uint4 v, float* f) {
    unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = bf16_to_f32((bf16_t)(w[i] & 0xffffu));
        f[2 * i + 1] = bf16_to_f32((bf16_t)(w[i] >> 16));
    }
}
__device__ __forceinline__ uint4 pack8(const float* f) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (unsigned)f32_to_bf16(f[2 * i]) | ((unsigned)f32_to_bf16(f[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Each thread keeps several 16-byte loads in flight (session 19: 2-6% faster than one at a time, and the only
// way a few SMs come near HBM's bandwidth: one load per thread at a time gave 13 GB/s per SM on 8 SMs beside a
// GEMM, branch s19-side-stream). Grid-stride loops, so any grid covers the rows. Compiled for 1024-thread blocks
// (at most 64 registers a thread: 48-52 here, as measured; without the bound ptxas takes 54, one block of 256
// fewer per SM).

// weights == null: plain sum (un-dispatch); else the weighted combine. A token's rows are loaded FC_SLOTS slots
// at a time (all in flight), then summed in slot order (the same order, hence bits, as one at a time); 8 at a
// time spilled under that bound.
#define FC_SLOTS 4
extern "C" __global__ void __launch_bounds__(1024) fc_combine(const bf16_t* __restrict__ rows, const float* __restrict__ weights,
                                      const int* __restrict__ slot_row, bf16_t* __restrict__ out, int tokens,
                                      int top_k, int hidden) {
    const int chunks = hidden >> 3;
    const long long n = (long long)tokens * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int t = (int)(i / chunks), ch = (int)(i % chunks);
        float acc[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[c] = 0.0f;
        for (int j0 = 0; j0 < top_k; j0 += FC_SLOTS) {
            uint4 v[FC_SLOTS];
            int r[FC_SLOTS];
#pragma unroll
            for (int u = 0; u < FC_SLOTS; ++u) {
                r[u] = j0 + u < top_k ? slot_row[t * top_k + j0 + u] : -1;
                if (r[u] >= 0) v[u] = *(const uint4*)(rows + (long long)r[u] * hidden + ch * 8);
            }
#pragma unroll
            for (int u = 0; u < FC_SLOTS; ++u) {
                if (r[u] < 0) continue;
                float f[8];
                unpack8(v[u], f);
                if (weights) {
                    const float w = weights[t * top_k + j0 + u];
#pragma unroll
                    for (int c = 0; c < 8; ++c) acc[c] = fmaf(w, f[c], acc[c]);
                } else {
#pragma unroll
                    for (int c = 0; c < 8; ++c) acc[c] += f[c];
                }
            }
        }
        *(uint4*)(out + (long long)t * hidden + ch * 8) = pack8(acc);
    }
}

// dst[slot_row[t, j]] = src[t] for every routed slot (slot_row -1: none) of `cols` (a multiple of 8) bf16 each:
// the gathered operand of a backward GEMM copied into expert order once, so that the GEMM reads it by TMA in
// whole tiles. Every row is a slot's, so every row is written. Token-major, so that each source row is read
// once (not top_k times, which the expert-ordered gather did: 1.07 GB of traffic for 30b's X against 0.6).
// Each thread loads FC_SCATTER_UNROLL chunks (grid-stride apart) before storing any.
#define FC_SCATTER_UNROLL 4
extern "C" __global__ void __launch_bounds__(1024) fc_scatter_rows(const bf16_t* __restrict__ src, const int* __restrict__ slot_row, bf16_t* __restrict__ dst, int tokens, int top_k,
                                           int cols) {
    const int chunks = cols >> 3;
    const long long n = (long long)tokens * chunks, stride = (long long)gridDim.x * blockDim.x;
    for (long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; i0 < n; i0 += FC_SCATTER_UNROLL * stride) {
        uint4 v[FC_SCATTER_UNROLL];
        int t[FC_SCATTER_UNROLL], ch[FC_SCATTER_UNROLL];
#pragma unroll
        for (int u = 0; u < FC_SCATTER_UNROLL; ++u) {
            const long long i = i0 + u * stride;
            t[u] = -1;
            if (i < n) {
                t[u] = (int)(i / chunks);
                ch[u] = (int)(i - (long long)t[u] * chunks);
                v[u] = __ldg((const uint4*)(src + (long long)t[u] * cols + ch[u] * 8));
            }
        }
#pragma unroll
        for (int u = 0; u < FC_SCATTER_UNROLL; ++u) {
            if (t[u] < 0) continue;
            for (int j = 0; j < top_k; ++j) {
                const int r = __ldg(slot_row + t[u] * top_k + j);
                if (r >= 0) *(uint4*)(dst + (long long)r * cols + ch[u] * 8) = v[u];
            }
        }
    }
}

// grad_w[slot] = Σ_tiles part[row, tile] in tile order (0 for -1 slots).
extern "C" __global__ void fc_slot_grad(const float* __restrict__ part, int n_tiles, const int* __restrict__ slot_row,
                                        float* __restrict__ grad_w, int slots) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= slots) return;
    int r = slot_row[s];
    float acc = 0.0f;
    if (r >= 0)
        for (int t = 0; t < n_tiles; ++t) acc += part[(long long)r * n_tiles + t];
    grad_w[s] = acc;
}

// Benchmark data made on the device (large weights need no host generation or copy), element i from a counter
// hash (splitmix64) of (seed, i), so a run is reproducible: fill_rows calls value(hash) for every element.
__device__ __forceinline__ unsigned long long fill_hash(unsigned long long seed, long long i) {
    unsigned long long z = seed + 0x9E3779B97F4A7C15ull * (unsigned long long)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
template <class Value>
__device__ __forceinline__ void fill_rows(bf16_t* __restrict__ out, long long n, unsigned long long seed, Value value) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = f32_to_bf16(value(fill_hash(seed, i)));
}

// bf16 values uniform in [-scale, scale).
extern "C" __global__ void fc_fill_random(bf16_t* __restrict__ out, long long n, unsigned long long seed, float scale) {
    fill_rows(out, n, seed, [=](unsigned long long z) { return (2.0f * ((float)(z >> 40) * (1.0f / 16777216.0f)) - 1.0f) * scale; });
}

// Normal values of standard deviation `scale`, as the PyTorch baseline draws (torch.randn): at the power cap the
// tensor cores' joules may depend on the operands' bits, so a benchmark against it draws from the same
// distribution (session 30 measured uniform and normal inputs at the same speed). Box-Muller on two 24-bit
// uniforms of one hash: u1 in (0, 1), so the log is finite; the largest magnitude is sqrt(-2 ln 2^-25) = 5.9
// standard deviations.
extern "C" __global__ void fc_fill_normal(bf16_t* __restrict__ out, long long n, unsigned long long seed, float scale) {
    fill_rows(out, n, seed, [=](unsigned long long z) {
        const float u1 = ((float)(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
        const float u2 = (float)((z >> 16) & 0xFFFFFFull) * (1.0f / 16777216.0f);
        return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * scale;
    });
}
