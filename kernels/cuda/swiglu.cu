// SwiGLU on the stored pre-activations h = [gate | up] (bf16), in f32, stored as bf16.
// clamp_limit < 0 selects plain SwiGLU; otherwise the gpt-oss clamped variant with alpha.
#include "bf16.cuh"

extern "C" __global__ void swiglu_fwd(const bf16_t* __restrict__ h, bf16_t* __restrict__ a, int rows, int inter,
                                      float alpha, float clamp_limit) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * inter) return;
    int r = (int)(i / inter), c = (int)(i % inter);
    float g = bf16_to_f32(h[(long long)r * 2 * inter + c]);
    float u = bf16_to_f32(h[(long long)r * 2 * inter + inter + c]);
    float out;
    if (clamp_limit < 0.0f) {
        out = g / (1.0f + expf(-g)) * u;
    } else {
        g = fminf(g, clamp_limit);
        u = fminf(fmaxf(u, -clamp_limit), clamp_limit);
        out = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
    a[i] = f32_to_bf16(out);
}
