// Routing to rows: counts per expert, offsets, and the expert-major row order (expert, then token, then
// slot) with -1 slots left out. One thread per expert walks the slots in token order, so the order is the
// reference's by construction and needs no atomics. Simple first; ids are validated on the host.

extern "C" __global__ void expert_counts(const int* __restrict__ topk_ids, int slots, int experts,
                                         int* __restrict__ counts) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= experts) return;
    int c = 0;
    for (int i = 0; i < slots; ++i) c += topk_ids[i] == e;
    counts[e] = c;
}

// offsets[0] = 0, offsets[e + 1] = offsets[e] + counts[e]  (one thread: E is small)
extern "C" __global__ void expert_offsets(const int* __restrict__ counts, int experts, int* __restrict__ offsets) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    int acc = 0;
    offsets[0] = 0;
    for (int e = 0; e < experts; ++e) {
        acc += counts[e];
        offsets[e + 1] = acc;
    }
}

extern "C" __global__ void fill_rows(const int* __restrict__ topk_ids, int tokens, int top_k, int experts,
                                     const int* __restrict__ offsets, int* __restrict__ row_token,
                                     int* __restrict__ row_slot, int* __restrict__ row_expert,
                                     int* __restrict__ slot_row) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= experts) return;
    int r = offsets[e];
    for (int t = 0; t < tokens; ++t)
        for (int j = 0; j < top_k; ++j) {
            int i = t * top_k + j;
            if (topk_ids[i] == e) {
                row_token[r] = t;
                row_slot[r] = j;
                row_expert[r] = e;
                slot_row[i] = r;
                ++r;
            }
        }
}

// -1 slots get row -1 (run before fill_rows, which writes the used ones).
extern "C" __global__ void clear_slot_rows(int* __restrict__ slot_row, int slots) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < slots) slot_row[i] = -1;
}
