// Routing to rows for the fast path, deterministic and parallel: the slots are cut into chunks of FR_CHUNK;
// (1) each chunk counts its slots per expert, (2) one block turns the counts into expert offsets, each
// (chunk, expert)'s first row, and the GEMM tile list, (3) each chunk writes its rows. A row's position is
// fixed by (expert, token, slot) order, as in the reference, so no atomics are needed anywhere.
// Ids are validated on the host (-1 or an expert, no repeats within a token).
#define FR_CHUNK 256
#define FR_TILE_M 128

extern "C" __global__ void fr_count(const int* __restrict__ ids, int slots, int experts, int* __restrict__ counts) {
    __shared__ int s_ids[FR_CHUNK];
    int c = blockIdx.x, first = c * FR_CHUNK;
    int n = min(FR_CHUNK, slots - first);
    for (int i = threadIdx.x; i < n; i += blockDim.x) s_ids[i] = ids[first + i];
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int k = 0;
        for (int i = 0; i < n; ++i) k += s_ids[i] == e;
        counts[(long long)c * experts + e] = k;
    }
}

// One block. counts [chunks][E] becomes each chunk's first row per expert (in place); offsets [E + 1];
// tiles [i] = (expert, first row, end row) of 128-row tiles, expert by expert; tile_count; and tiles2 /
// tile_count2 the same with each expert's tiles padded to an even count by an empty tile (end, end), for the
// persistent GEMMs run by clusters of two blocks (a cluster's two row tiles are then always one expert's).
// The chunks of each expert are cut into P parts, one thread each (P = threads / E), so that the block's
// threads all load: first each part's total, then each part's rows from the totals of the parts before it
// (integer sums: exact in any order). Dynamic shared memory: 3 E + max(threads, E) ints.
#define FR_SCAN_BATCH 8
extern "C" __global__ void fr_scan(int* __restrict__ counts, int chunks, int experts, int* __restrict__ offsets,
                                   int* __restrict__ tiles, int* __restrict__ tile_count, int* __restrict__ tiles2,
                                   int* __restrict__ tile_count2) {
    extern __shared__ int s_tot[];  // [3 * E]: totals, tile starts, padded tile starts; then [P][E] part totals
    int* s_part = s_tot + 3 * experts;
    const int parts = max(1, min((int)blockDim.x / max(experts, 1), chunks)), per = (chunks + parts - 1) / parts;
    for (int i = threadIdx.x; i < parts * experts; i += blockDim.x) {
        const int e = i % experts, part = i / experts, c1 = min(chunks, (part + 1) * per);
        int run = 0;
#pragma unroll FR_SCAN_BATCH
        for (int c = part * per; c < c1; ++c) run += counts[(long long)c * experts + e];
        s_part[part * experts + e] = run;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < parts * experts; i += blockDim.x) {
        const int e = i % experts, part = i / experts, c1 = min(chunks, (part + 1) * per);
        int run = 0;
        for (int q = 0; q < part; ++q) run += s_part[q * experts + e];
        for (int c = part * per; c < c1; c += FR_SCAN_BATCH) {  // a batch of loads in flight, then its stores
            int k[FR_SCAN_BATCH];
#pragma unroll
            for (int j = 0; j < FR_SCAN_BATCH; ++j) k[j] = c + j < c1 ? counts[(long long)(c + j) * experts + e] : 0;
#pragma unroll
            for (int j = 0; j < FR_SCAN_BATCH; ++j) {
                if (c + j < c1) counts[(long long)(c + j) * experts + e] = run;
                run += k[j];
            }
        }
        if (part == parts - 1) s_tot[e] = run;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int off = 0, t = 0, t2 = 0;
        for (int e = 0; e < experts; ++e) {
            int k = s_tot[e], n = (k + FR_TILE_M - 1) / FR_TILE_M;
            offsets[e] = off;
            s_tot[experts + e] = t;
            s_tot[2 * experts + e] = t2;
            off += k;
            t += n;
            t2 += n + (n & 1);
        }
        offsets[experts] = off;
        *tile_count = t;
        *tile_count2 = t2;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int start = offsets[e], end = start + s_tot[e], t = s_tot[experts + e];
        int t2 = s_tot[2 * experts + e];
        for (int r = start; r < end; r += FR_TILE_M, ++t, ++t2) {
            tiles[3 * t] = tiles2[3 * t2] = e;
            tiles[3 * t + 1] = tiles2[3 * t2 + 1] = r;
            tiles[3 * t + 2] = tiles2[3 * t2 + 2] = min(r + FR_TILE_M, end);
        }
        if ((t2 - s_tot[2 * experts + e]) & 1) {  // the pad: an empty tile of the same expert
            tiles2[3 * t2] = e;
            tiles2[3 * t2 + 1] = end;
            tiles2[3 * t2 + 2] = end;
        }
    }
}

extern "C" __global__ void fr_fill(const int* __restrict__ ids, const float* __restrict__ weights, int slots,
                                   int top_k, int experts, const int* __restrict__ chunk_base,
                                   const int* __restrict__ offsets, int* __restrict__ row_token,
                                   int* __restrict__ row_slot, float* __restrict__ row_w, int* __restrict__ slot_row) {
    __shared__ int s_ids[FR_CHUNK];
    int c = blockIdx.x, first = c * FR_CHUNK;
    int n = min(FR_CHUNK, slots - first);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int id = ids[first + i];
        s_ids[i] = id;
        if (id < 0) slot_row[first + i] = -1;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int r = offsets[e] + chunk_base[(long long)c * experts + e];
        for (int i = 0; i < n; ++i) {
            if (s_ids[i] != e) continue;
            int s = first + i;
            row_token[r] = s / top_k;
            row_slot[r] = s % top_k;
            row_w[r] = weights[s];
            slot_row[s] = r;
            ++r;
        }
    }
}
