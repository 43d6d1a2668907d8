// Grouped GEMM, simple and obviously right: out[r, n] = Σ_k a[r, k] · w[expert(r), n, k], one thread per
// output, f32 accumulation in increasing k, stored as bf16. The reference the fast kernels are compared with.
#include "bf16.cuh"

extern "C" __global__ void grouped_gemm_nt(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w,
                                           const int* __restrict__ row_expert, bf16_t* __restrict__ out,
                                           int rows, int n_out, int k) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * n_out) return;
    int r = (int)(i / n_out), n = (int)(i % n_out);
    const bf16_t* ar = a + (long long)r * k;
    const bf16_t* wr = w + ((long long)row_expert[r] * n_out + n) * k;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc = fmaf(bf16_to_f32(ar[j]), bf16_to_f32(wr[j]), acc);
    out[i] = f32_to_bf16(acc);
}

// Data gradient: out[r, n] = Σ_k a[r, k] · w[expert(r), k, n] (the weight used transposed), f32, stored bf16.
extern "C" __global__ void grouped_gemm_nn(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w,
                                           const int* __restrict__ row_expert, bf16_t* __restrict__ out,
                                           int rows, int n_out, int k) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * n_out) return;
    int r = (int)(i / n_out), n = (int)(i % n_out);
    const bf16_t* ar = a + (long long)r * k;
    const bf16_t* we = w + (long long)row_expert[r] * k * n_out;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc = fmaf(bf16_to_f32(ar[j]), bf16_to_f32(we[(long long)j * n_out + n]), acc);
    out[i] = f32_to_bf16(acc);
}

// Weight gradient over a variable number of rows per expert: dw[e, p, q] = Σ_{r of e} a[r, p] · b[r, q],
// one thread per output looping over the expert's rows in order (deterministic, no atomics), stored f32.
// An expert without rows gets exactly zero.
extern "C" __global__ void grouped_wgrad(const bf16_t* __restrict__ a, const bf16_t* __restrict__ b,
                                         const int* __restrict__ expert_offsets, float* __restrict__ dw,
                                         int experts, int p_dim, int q_dim) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)experts * p_dim * q_dim) return;
    int e = (int)(i / ((long long)p_dim * q_dim));
    int pq = (int)(i % ((long long)p_dim * q_dim));
    int p = pq / q_dim, q = pq % q_dim;
    float acc = 0.0f;
    for (int r = expert_offsets[e]; r < expert_offsets[e + 1]; ++r)
        acc = fmaf(bf16_to_f32(a[(long long)r * p_dim + p]), bf16_to_f32(b[(long long)r * q_dim + q]), acc);
    dw[i] = acc;
}
