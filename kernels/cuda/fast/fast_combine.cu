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

// weights == null: plain sum (un-dispatch); else the weighted combine.
extern "C" __global__ void fc_combine(const bf16_t* __restrict__ rows, const float* __restrict__ weights,
                                      const int* __restrict__ slot_row, bf16_t* __restrict__ out, int tokens,
                                      int top_k, int hidden) {
    int chunks = hidden >> 3;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)tokens * chunks) return;
    int t = (int)(i / chunks), ch = (int)(i % chunks);
    float acc[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[c] = 0.0f;
    for (int j = 0; j < top_k; ++j) {
        int r = slot_row[t * top_k + j];
        if (r < 0) continue;
        float f[8];
        unpack8(*(const uint4*)(rows + (long long)r * hidden + ch * 8), f);
        if (weights) {
            float w = weights[t * top_k + j];
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[c] = fmaf(w, f[c], acc[c]);
        } else {
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[c] += f[c];
        }
    }
    *(uint4*)(out + (long long)t * hidden + ch * 8) = pack8(acc);
}

// dst[slot_row[t, j]] = src[t] for every routed slot (slot_row -1: none) of `cols` (a multiple of 8) bf16 each:
// the gathered operand of a backward GEMM copied into expert order once, so that the GEMM reads it by TMA in
// whole tiles. Every row is a slot's, so every row is written. Token-major, so that each source row is read
// once (not top_k times, which the expert-ordered gather did: 1.07 GB of traffic for 30b's X against 0.6).
extern "C" __global__ void fc_scatter_rows(const bf16_t* __restrict__ src, const int* __restrict__ slot_row, bf16_t* __restrict__ dst, int tokens, int top_k,
                                           int cols) {
    const int chunks = cols >> 3;
    const long long n = (long long)tokens * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long t = i / chunks, ch = i - t * chunks;
        const uint4 v = __ldg((const uint4*)(src + t * cols + ch * 8));
        for (int j = 0; j < top_k; ++j) {
            const int r = __ldg(slot_row + t * top_k + j);
            if (r >= 0) *(uint4*)(dst + (long long)r * cols + ch * 8) = v;
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

// Benchmark data made on the device (large weights need no host generation or copy): bf16 values uniform in
// [-scale, scale) from a counter hash (splitmix64) of (seed, index), so a run is reproducible.
extern "C" __global__ void fc_fill_random(bf16_t* __restrict__ out, long long n, unsigned long long seed, float scale) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long z = seed + 0x9E3779B97F4A7C15ull * (unsigned long long)(i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (1.0f / 16777216.0f);
        out[i] = f32_to_bf16((2.0f * u - 1.0f) * scale);
    }
}
