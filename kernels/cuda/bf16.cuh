// bf16 as raw 16-bit patterns: the kernels need no CUDA headers (NVRTC compiles them as they are).
#pragma once
typedef unsigned short bf16_t;

__device__ __forceinline__ float bf16_to_f32(bf16_t b) { return __uint_as_float(((unsigned)b) << 16); }

// Round to nearest, ties to even; NaN stays a (quiet) NaN; overflow rounds to infinity.
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}
