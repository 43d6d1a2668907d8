// Weighted combine without atomics: each token sums its k slot rows in slot order (deterministic), f32.
#include "bf16.cuh"

extern "C" __global__ void combine_fwd(const bf16_t* __restrict__ o, const float* __restrict__ weights,
                                       const int* __restrict__ slot_row, bf16_t* __restrict__ y, int tokens,
                                       int top_k, int hidden) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)tokens * hidden) return;
    int t = (int)(i / hidden), c = (int)(i % hidden);
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) {
        int r = slot_row[t * top_k + j];
        if (r >= 0) acc = fmaf(weights[t * top_k + j], bf16_to_f32(o[(long long)r * hidden + c]), acc);
    }
    y[i] = f32_to_bf16(acc);
}
