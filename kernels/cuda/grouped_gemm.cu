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
