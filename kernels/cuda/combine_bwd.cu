// Combine backward: bwd.do rows (the combine's adjoint in its rows argument) and grad.topk_weights (its
// adjoint in the weights), one thread per slot looping over the hidden features in order: no atomics.
#include "bf16.cuh"

// do[r, c] = w[t, j] * dy[t, c] for the row r of (t, j), stored bf16.
extern "C" __global__ void dispatch_weighted(const bf16_t* __restrict__ dy, const float* __restrict__ weights,
                                             const int* __restrict__ row_token, const int* __restrict__ row_slot,
                                             bf16_t* __restrict__ d_o, int rows, int top_k, int hidden) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * hidden) return;
    int r = (int)(i / hidden), c = (int)(i % hidden);
    int t = row_token[r];
    d_o[i] = f32_to_bf16(weights[t * top_k + row_slot[r]] * bf16_to_f32(dy[(long long)t * hidden + c]));
}

// grad_w[t, j] = <dy[t], o[row(t, j)]> in f32 (0 for -1 slots).
extern "C" __global__ void slot_dots(const bf16_t* __restrict__ dy, const bf16_t* __restrict__ o,
                                     const int* __restrict__ slot_row, float* __restrict__ grad_w, int tokens,
                                     int top_k, int hidden) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)tokens * top_k) return;
    int t = (int)(i / top_k);
    int r = slot_row[i];
    float acc = 0.0f;
    if (r >= 0)
        for (int c = 0; c < hidden; ++c)
            acc = fmaf(bf16_to_f32(dy[(long long)t * hidden + c]), bf16_to_f32(o[(long long)r * hidden + c]), acc);
    grad_w[i] = acc;
}

// Un-dispatch: grad_x[t, c] = Σ_j dx_rows[row(t, j), c] in slot order, f32, stored bf16.
extern "C" __global__ void undispatch(const bf16_t* __restrict__ dx_rows, const int* __restrict__ slot_row,
                                      bf16_t* __restrict__ grad_x, int tokens, int top_k, int hidden) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)tokens * hidden) return;
    int t = (int)(i / hidden), c = (int)(i % hidden);
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) {
        int r = slot_row[t * top_k + j];
        if (r >= 0) acc += bf16_to_f32(dx_rows[(long long)r * hidden + c]);
    }
    grad_x[i] = f32_to_bf16(acc);
}
