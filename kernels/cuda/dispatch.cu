// Dispatch: gather each dispatched row's token activations (rows in expert-major order).
#include "bf16.cuh"

extern "C" __global__ void gather_rows(const bf16_t* __restrict__ x, const int* __restrict__ row_token,
                                       bf16_t* __restrict__ x_rows, int rows, int hidden) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long n = (long long)rows * hidden;
    if (i >= n) return;
    int r = (int)(i / hidden), c = (int)(i % hidden);
    x_rows[i] = x[(long long)row_token[r] * hidden + c];
}
