// Probe (session 17): can the TMA gather rows by index on Hopper, one box of 1 row x 64 bf16 (128 bytes) per
// row, into wgmma's 128-byte-swizzle layout, and how fast is that against one 128-row box and against the
// cp.async gather GEMM1 uses now? Hopper's TMA has no gather mode (Blackwell's gather4 is the real thing); if
// one-row boxes land swizzled by their shared-memory address and the TMA unit keeps up with 128 of them per
// k-tile, the backward's row copies (gather_dy, gather_x) and GEMM1's cp.async gather could go.
// Build and run on the GPU machine (carry the repository; HOPPER.md: the -gencode form for sm_90a):
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o /tmp/probe kernels/tools/probes/tma_row_gather.cu -lcuda && /tmp/probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

constexpr int T = 16384, H = 2048;      // X: 16384 tokens x 2048 bf16 (qwen3-30b-a3b at T = 16384)
constexpr int ROWS = 128, BK = 64;      // one k-tile of a GEMM1 A tile: 128 gathered rows x 64 k
constexpr int STAGE = ROWS * BK * 2;    // 16 KiB
constexpr int STAGES = 4;

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned b, unsigned n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(n)); }
__device__ __forceinline__ void mbar_expect(unsigned b, unsigned bytes) {
    asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.expect_tx.shared::cta.b64 s, [%0], %1;\n}" ::"r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned b) { asm volatile("{\n.reg .b64 s;\nmbarrier.arrive.shared::cta.b64 s, [%0];\n}" ::"r"(b) : "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned b, unsigned ph) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(b), "r"(ph) : "memory");
}
__device__ __forceinline__ void tma2d(unsigned dst, const CUtensorMap* m, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((unsigned long long)m), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void cp16(unsigned dst, const void* src) { asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory"); }
__device__ __forceinline__ void cp_arrive(unsigned bar) { asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory"); }

// 1. correctness: 64 rows idx[L] (columns k0..k0+63) into lines L of a 1024-aligned buffer, one box per row;
// each element must sit where wgmma's 128-byte swizzle expects it: 16-byte chunk c of line L at c ^ (L % 8).
__global__ void check_rows(const __grid_constant__ CUtensorMap map, const int* idx, int k0, int* bad) {
    __shared__ __align__(1024) unsigned short raw[64 * 64 + 512];  // (aligned by hand too: 1024 is the swizzle atom)
    __shared__ __align__(8) unsigned long long bar;
    const unsigned b = smem_u32(&bar), base = (smem_u32(raw) + 1023) & ~1023u;
    const unsigned short* buf = raw + (base - smem_u32(raw)) / 2;
    if (threadIdx.x == 0) { mbar_init(b, 1); asm volatile("fence.mbarrier_init.release.cluster;"); }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_expect(b, 64 * 128);
        for (int L = 0; L < 64; ++L) tma2d(base + L * 128, &map, k0, idx[L], b);
    }
    mbar_wait(b, 0);
    for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
        const int L = i / 64, c = i % 64;
        const int off = L * 128 + ((((c * 2) >> 4) ^ (L & 7)) << 4) + (c * 2) % 16;  // bytes
        const unsigned short want = (unsigned short)(((long long)idx[L] * H + k0 + c) & 0xffff);  // x's fill below
        if (buf[off / 2] != want) atomicAdd(bad, 1);
    }
}

// 2. throughput: every block streams `tiles` tiles of H / 64 k-tiles; a tile's 128 rows are rows[t * 128 ..].
// mode 0: one TMA box per row (128 per k-tile, one per producer thread); mode 1: one 128-row box of consecutive
// rows (what TMA of kept rows costs); mode 2: cp.async, 8 x 16 bytes per producer thread (GEMM1 today).
// Warps 0-3 produce, warp 4 consumes (waits for each stage and hands it back; no math).
__global__ void __launch_bounds__(160, 1) stream_rows(const __grid_constant__ CUtensorMap row_map, const __grid_constant__ CUtensorMap box_map,
                                                      const unsigned short* x, const int* rows, int tiles, int mode) {
    extern __shared__ __align__(1024) unsigned char sm[];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];
    const unsigned base = (smem_u32(sm) + 1023) & ~1023u, full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[STAGES]);
    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) { mbar_init(full0 + 8 * s, mode == 2 ? 128 : 1); mbar_init(empty0 + 8 * s, 1); }
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    const int nk = H / BK;
    if (tid < 128) {
        unsigned it = 0;
        for (int t = 0; t < tiles; ++t) {
            const int tile = blockIdx.x * tiles + t;
            const int my_row = rows[tile * ROWS + tid];
            const unsigned short* src[8];  // mode 2: this thread's lines (tid >> 3) + 16 i, chunk tid & 7
            for (int i = 0; i < 8; ++i) src[i] = x + (long long)rows[tile * ROWS + (tid >> 3) + 16 * i] * H + (tid & 7) * 8;
            for (int kt = 0; kt < nk; ++kt, ++it) {
                const unsigned s = it % STAGES, ph = (it / STAGES) & 1, full = full0 + 8 * s, dst = base + s * STAGE;
                mbar_wait(empty0 + 8 * s, ph ^ 1);
                if (mode == 0) {
                    // (a box may complete before thread 0's expect_tx: the phase still waits for that arrival)
                    if (tid == 0) mbar_expect(full, STAGE);
                    tma2d(dst + tid * 128, &row_map, kt * BK, my_row, full);
                } else if (mode == 3) {  // the same boxes, all issued by one thread
                    if (tid == 0) {
                        mbar_expect(full, STAGE);
                        for (int r = 0; r < ROWS; ++r) tma2d(dst + r * 128, &row_map, kt * BK, rows[tile * ROWS + r], full);
                    }
                } else if (mode == 1) {
                    if (tid == 0) { mbar_expect(full, STAGE); tma2d(dst, &box_map, kt * BK, (tile * ROWS) % (T - ROWS), full); }
                } else {
                    const int ch = tid & 7;
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const int line = (tid >> 3) + 16 * i;
                        cp16(dst + line * 128 + ((ch ^ (line & 7)) << 4), src[i] + kt * BK);
                    }
                    cp_arrive(full);
                }
            }
        }
    } else if (tid == 128) {
        unsigned it = 0;
        for (int t = 0; t < tiles; ++t)
            for (int kt = 0; kt < nk; ++kt, ++it) {
                const unsigned s = it % STAGES, ph = (it / STAGES) & 1;
                mbar_wait(full0 + 8 * s, ph);
                mbar_arrive(empty0 + 8 * s);
            }
    }
}

static CUtensorMap make_map(void* p, unsigned box_rows) {
    CUtensorMap m;
    cuuint64_t dims[2] = {H, T}, strides[1] = {H * 2};
    cuuint32_t box[2] = {64, box_rows}, es[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled failed %d\n", (int)r); exit(1); }
    return m;
}

int main() {
    CK(cudaFree(0));
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    std::vector<unsigned short> hx((size_t)T * H);
    for (size_t i = 0; i < hx.size(); ++i) hx[i] = (unsigned short)(i & 0xffff);  // element (r, c) = (r * 2048 + c) & 0xffff
    unsigned short* x; CK(cudaMalloc(&x, hx.size() * 2)); CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CUtensorMap row_map = make_map(x, 1), box_map = make_map(x, ROWS);
    // correctness, for a few k0 and index sets
    int *didx, *dbad; CK(cudaMalloc(&didx, 64 * 4)); CK(cudaMalloc(&dbad, 4));
    int total_bad = 0;
    for (int trial = 0; trial < 4; ++trial) {
        std::vector<int> idx(64);
        for (int L = 0; L < 64; ++L) idx[L] = (int)(((long long)L * 7919 + trial * 104729) % T);
        CK(cudaMemcpy(didx, idx.data(), 64 * 4, cudaMemcpyHostToDevice)); CK(cudaMemset(dbad, 0, 4));
        check_rows<<<1, 256>>>(row_map, didx, 64 * trial, dbad);
        CK(cudaDeviceSynchronize());
        int bad; CK(cudaMemcpy(&bad, dbad, 4, cudaMemcpyDeviceToHost));
        total_bad += bad;
    }
    printf("correctness: %d of %d elements misplaced (0 = one-row boxes land in the 128-byte-swizzle layout)\n", total_bad, 4 * 64 * 64);
    // throughput
    const int tiles = 48;  // per block: about one GEMM1 pass's share on 132 SMs (30b: ~6,500 tiles)
    std::vector<int> hrows((size_t)sms * tiles * ROWS);
    srand(7);
    for (auto& r : hrows) r = rand() % T;
    int* drows; CK(cudaMalloc(&drows, hrows.size() * 4)); CK(cudaMemcpy(drows, hrows.data(), hrows.size() * 4, cudaMemcpyHostToDevice));
    const int smem = STAGES * STAGE + 1024;
    CK(cudaFuncSetAttribute(stream_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const char* names[4] = {"one TMA box per gathered row, 128 threads issuing", "one 128-row TMA box (kept rows)", "cp.async 16 B x 8 per producer thread (GEMM1 now)",
                            "one TMA box per gathered row, one thread issuing"};
    cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    for (int rep = 0; rep < 2; ++rep)
        for (int mode = 0; mode < 4; ++mode) {
            stream_rows<<<sms, 160, smem>>>(row_map, box_map, x, drows, tiles, mode);  // warm-up
            CK(cudaEventRecord(a));
            stream_rows<<<sms, 160, smem>>>(row_map, box_map, x, drows, tiles, mode);
            CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b)); CK(cudaGetLastError());
            float ms; CK(cudaEventElapsedTime(&ms, a, b));
            const double bytes = (double)sms * tiles * (H / BK) * STAGE;
            printf("round %d, %-52s %.3f ms, %.0f GB/s into shared memory (%.1f KiB per SM per us)\n", rep, names[mode], ms, bytes / ms / 1e6, bytes / sms / 1024 / (ms * 1e3));
        }
    return total_bad ? 1 : 0;
}
