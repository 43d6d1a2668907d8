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

// SwiGLU backward from the stored pre-activations and the gradient at the output: dh = [dg | du], bf16.
extern "C" __global__ void swiglu_bwd(const bf16_t* __restrict__ h, const bf16_t* __restrict__ da,
                                      bf16_t* __restrict__ dh, int rows, int inter, float alpha, float clamp_limit) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * inter) return;
    int r = (int)(i / inter), c = (int)(i % inter);
    long long base = (long long)r * 2 * inter;
    float g = bf16_to_f32(h[base + c]), u = bf16_to_f32(h[base + inter + c]);
    float d = bf16_to_f32(da[i]);
    float dg, du;
    if (clamp_limit < 0.0f) {
        float s = 1.0f / (1.0f + expf(-g));
        dg = d * u * (s * (1.0f + g * (1.0f - s)));
        du = d * (g * s);
    } else {
        float gc = fminf(g, clamp_limit);
        float uc = fminf(fmaxf(u, -clamp_limit), clamp_limit);
        float s = 1.0f / (1.0f + expf(-alpha * gc));
        dg = g > clamp_limit ? 0.0f : d * (uc + 1.0f) * (s * (1.0f + alpha * gc * (1.0f - s)));
        du = fabsf(u) > clamp_limit ? 0.0f : d * (gc * s);
    }
    dh[base + c] = f32_to_bf16(dg);
    dh[base + inter + c] = f32_to_bf16(du);
}
