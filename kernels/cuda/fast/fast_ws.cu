// Persistent, warp-specialised wgmma GEMMs (sm_90a): the same tiles and k-steps as fast_wgmma.cu, fed and
// scheduled differently, and epilogues that store the same values: a warpgroup's 64 rows, when whole, go out
// through shared memory by TMA (WsOut; bf16 by cvt.rn.bf16x2 + stmatrix), partial ones directly.
//
//   384 threads: warpgroup 0 is the producer (registers given back with setmaxnreg), warpgroups 1 and 2 are the
//   consumers (wgmma on 64 rows each of the 128 x 256 tile, then the epilogue). Full/empty mbarriers per stage
//   replace the block-wide __syncthreads of the plain kernels, so the producer runs up to four k-tiles ahead
//   (the plain kernels: two) and keeps loading the next tile's first stages while the consumers run the
//   epilogue of the current one.
//
//   Row GEMMs: the weight tile (B) comes by TMA (one thread, a 3-D tensor map [E][rows][cols] whose bounds
//   zero-fill the edges), and so does A when its rows are not gathered (A's rows past the tile's end belong to
//   another expert but only feed output rows that are never stored). Gathered A rows come by cp.async from all
//   128 producer threads. GEMM1's weight tile is [128 gate rows; 128 up rows] (EPI_SWIGLU_FWD_SPLIT).
//   Weight gradients (k lines = the expert's rows): the operand in row order by TMA except on the expert's
//   partial last k-tile, the gathered one by cp.async with its row indices staged in shared memory a k-tile
//   ahead (WsWgrad).
//
//   The grid is one block per SM; block b takes tiles b, b + gridDim.x, ... of a fixed order (row tile, then
//   column tile; for weight gradients expert, row tile, column tile). Each output tile is computed by one block
//   with the k order of the plain kernels, so results are bitwise identical to them and run to run (for
//   finite values: the hardware conversion makes every NaN the canonical one).
//
// Needs everything of fast_wgmma.cu (same translation unit).

#define WS_THREADS 384
#define WS_PRODUCER_REGS 72
#define WS_CONSUMER_REGS 216

// Experiment WS_EXP_CLOCKS: where the consumer warpgroups of blocks 0 and 77 spend their cycles, written here by
// each persistent GEMM and printed by ws_clk_dump (launched by the host after each GEMM when the switch is set):
// a kernel's own printf would serialise its wgmma.
// ws_span: every block's first consumer warpgroup's start and end (%globaltimer, ns) and its cycles, to tell a
// lower SM clock (cycles / ns) from a slower tail of blocks.
__device__ long long ws_clk[4][10];
__device__ long long ws_span[1024][3];
extern "C" __global__ void ws_clk_dump() {
#ifdef WS_EXP_CLOCKS
    for (int i = 0; i < 4; ++i) {
        long long* r = ws_clk[i];
        if (r[9])
            printf("wsclk epi_kind %lld blk %d wg %d tiles %lld total %lld main %lld full %lld full0 %lld epi %lld sync %lld issue %lld\n", r[0], i < 2 ? 0 : 77,
                   i & 1, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]);
        r[9] = 0;
    }
    long long t0 = 0, t1 = 0, e_min = 0, cyc = 0, ns = 0;
    int n = 0;
    for (int b = 0; b < 1024; ++b) {
        if (ws_span[b][1] == 0) continue;
        if (n == 0 || ws_span[b][0] < t0) t0 = ws_span[b][0];
        if (n == 0 || ws_span[b][1] > t1) t1 = ws_span[b][1];
        if (n == 0 || ws_span[b][1] < e_min) e_min = ws_span[b][1];
        cyc += ws_span[b][2];
        ns += ws_span[b][1] - ws_span[b][0];
        ++n;
        ws_span[b][1] = 0;
    }
    if (n) printf("wsspan blocks %d first start -> last end %lld ns, first end at %lld ns, mean cycles/ns %.3f\n", n, t1 - t0, e_min - t0, (double)cyc / (double)ns);
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrive on bar once all of this thread's earlier cp.async copies have landed (counted in the barrier's
// expected arrivals: .noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Wait until the phase of parity `parity` has completed (a fresh barrier counts its phase "-1", parity 1, as done).
// CLUSTER: with acquire at cluster scope, for a barrier that the partner block of a cluster arrives on with
// release at cluster scope (the cluster-wide tile queue: what the partner wrote before is then visible here).
// sleep_ns: a sleep between polls (0: none, the default). WS_WAIT_BACKOFF=NS (experiment, session 23) gives
// every wait one, to test whether racecheck's stall on the padding skips' GEMM1 is the cost of recording a spinning
// warpgroup's polls; WS_SKIP_WAIT_BACKOFF (below) gives one to the skipping warpgroup's waits only.
#ifndef WS_WAIT_BACKOFF
#define WS_WAIT_BACKOFF 0
#endif
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity, unsigned sleep_ns = WS_WAIT_BACKOFF) {
    unsigned done = 0;
    while (!done) {
        if (CLUSTER)
            asm volatile(
                "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                : "=r"(done)
                : "r"(bar), "r"(parity)
                : "memory");
        else
            asm volatile(
                "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                : "=r"(done)
                : "r"(bar), "r"(parity)
                : "memory");
        if (!done && sleep_ns) __nanosleep(sleep_ns);
    }
}

// Clusters of WS_CLUSTER blocks (1 or 2; the host launches with the same cluster dimension, see
// FastKernels::cluster): the blocks of a cluster take tiles with the same expert, column tile and k range and
// adjacent row tiles, in lockstep, and each loads only its share of the B tile, multicast into the shared memory
// of both (the B tile then crosses from L2 once per cluster instead of once per block: 32 KiB of the 48 KiB
// per block and k-tile become 16). A stage may be refilled only when the consumers of both blocks have read
// it, so each consumer warp arrives on the empty barriers of both blocks.
#ifndef WS_CLUSTER
#define WS_CLUSTER 1
#endif
static_assert(WS_CLUSTER == 1 || WS_CLUSTER == 2, "WS_CLUSTER is 1 or 2");
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// every thread of every block of the cluster (release: this block's earlier writes and barrier inits, acquire: the others')
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Arrive with count n on the barrier at shared-memory offset bar of this block (mbar_arrive_n) or of cluster
// block cta (mbar_arrive_cta_n, this block's own too).
__device__ __forceinline__ void mbar_arrive_n(unsigned bar, unsigned n) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_arrive_cta_n(unsigned bar, unsigned cta, unsigned n) {
// The default .release.cta semantics, as CUTLASS's ClusterBarrier::arrive: with .release.cluster (session 8,
// WS_CLUSTER_ARRIVE_RELEASE_CLUSTER) the clustered 30b fwd+bwd took 12.3 ms against 8.3 (both measured while
// ptxas still serialised the clustered wgmma, session 9).
#ifdef WS_CLUSTER_ARRIVE_RELEASE_CLUSTER
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra], %2;\n}\n" ::"r"(bar), "r"(cta), "r"(n)
                 : "memory");
#else
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [ra], %2;\n}\n" ::"r"(bar), "r"(cta), "r"(n) : "memory");
#endif
}
// The cluster-wide tile queue (dynamic scheduler with clusters): block 0 of the cluster writes the int v into
// the partner block `cta`'s copy of the shared variable at offset addr, then arrives on the partner's barrier
// bar with release at cluster scope, so that the partner, waiting with mbar_wait<true>, sees v. The partner's
// readers arrive back on block 0's barrier the same way before block 0 may write that slot again.
__device__ __forceinline__ void st_shared_remote(unsigned addr, int v, unsigned cta) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nst.shared::cluster.u32 [ra], %2;\n}\n" ::"r"(addr), "r"(cta), "r"(v) : "memory");
}
__device__ __forceinline__ void mbar_arrive_remote_release(unsigned bar, unsigned cta) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(cta)
                 : "memory");
}
// Clustered GEMMs (session 9, measured in NOTES.md): WS_EXP_CLUSTER_NO_MC (experiment): clusters launched and
//   scheduled as usual, but each block loads all of B itself and releases its own barriers only (no multicast,
//   no remote arrival; correct results).
#if WS_CLUSTER > 1 && defined(WS_EXP_CLUSTER_NO_MC)
#define WS_RELEASE_BLOCKS 1
#define WS_B_SHARE 1
#else
#define WS_RELEASE_BLOCKS WS_CLUSTER
#define WS_B_SHARE WS_CLUSTER
#endif
// A consumer warp's release of a stage (after its wgmma.wait_group): a stage's empty barrier counts 32 per
// consumer warp of every block of the cluster (WS_WARP_ARRIVALS). Lane 0 arrives for its whole warp with a
// count of 32, on its own block's barrier and (clusters) the partner's. Where every lane of the warp has read
// the stage with its own shared loads (dA_raw's side tiles, ws_copy_box: `all_lanes`), every lane arrives for
// itself with a count of 1: an arrival releases only the arriving thread's own accesses. (Lane 0 arriving
// after a __syncwarp, session 20's fix, left compute-sanitizer racecheck reporting write-after-read hazards of
// those loads against the producer's refill; lane arrivals report none: session 22, s22a.) (Session 9's
// experiments with one arrival per warpgroup, WS_WG_RELEASE, and with lanes 0..1 arriving on the two blocks,
// WS_RELEASE_LANES, measured no faster and were removed with the side tiles' lane arrivals, session 22.)
#define WS_WARP_ARRIVALS 32
__device__ __forceinline__ void ws_release(unsigned bar, int lane, bool all_lanes) {
    if (!all_lanes && lane != 0) return;
    const unsigned n = all_lanes ? 1u : WS_WARP_ARRIVALS;
#if WS_RELEASE_BLOCKS == 1
    mbar_arrive_n(bar, n);
#else
#pragma unroll
    for (unsigned c = 0; c < WS_CLUSTER; ++c) mbar_arrive_cta_n(bar, c, n);
#endif
}

// One output tile of the schedule: expert, rows [m0, m_end) (weight gradients: m0 only), columns from n0, the
// contraction range [k_begin, k_begin + 64 * nk), and (row GEMMs) the column tile's index and count.
struct WsTile {
    int e, m0, m_end, n0, k_begin, k_end, nk, n_tile, n_tiles;
};

// Row GEMMs: tile t of (*tile_count row tiles) x (column tiles), column tile fastest (the row tile's gathered
// rows stay in L2 across its column tiles; consecutive row tiles share the expert's weights; WS_RASTER_M below).
template <int EPI>
__device__ __forceinline__ int ws_rows_n_tiles(const FastGemmParams& p) {
    const int n_cols = (EPI == EPI_SWIGLU_FWD || EPI == EPI_SWIGLU_FWD_SPLIT) ? 2 * p.inter : p.n_dim;
    return (n_cols + WG_BN - 1) / WG_BN;
}
// With clusters, t counts the clusters' units (row-tile pair, column tile), the tile list has each expert's row
// tiles padded to an even count (fr_scan's second list: the pad is an empty tile, m0 = m_end), and block `rank`
// of the cluster takes row tile 2 (t / n_tiles) + rank.
template <int EPI>
__device__ __forceinline__ int ws_rows_count(const FastGemmParams& p) {
    return *p.tile_count / WS_CLUSTER * ws_rows_n_tiles<EPI>(p);
}
// p.raster_m = G > 0: tiles in groups of G row tiles (units) by all column tiles, row tile fastest inside a
// group, so that the G tiles reading one column tile of the weights start together and an expert's weights are
// read from DRAM about once. The host sets it where an expert's weights are large against L2 (235b's W13,
// 25 MB: session 16, ncu on 235b's dX: L2 hit rate 71% -> 73%, dX 5% faster; 30b's 6 MB experts lost 1%).
// p.raster_m < 0: the same with each expert's row tiles as one group (not with clusters: there it means 0).
template <int EPI>
__device__ __forceinline__ WsTile ws_rows_tile(const FastGemmParams& p, int t, int rank) {
    WsTile w;
    w.n_tiles = ws_rows_n_tiles<EPI>(p);
    int mp;
    if (WS_CLUSTER == 1 && p.raster_m < 0) {
        // groups of one expert's row tiles (all of them) by all column tiles, row tile fastest: expert e's tiles
        // are t in [first_e, first_e + rows_e) x n_tiles, so row tile t / n_tiles is one of e's, and its m0 says
        // which of e's it is (rows start at offsets[e] + 128 j). Why: fixed groups of G straddle experts, and the
        // expert split between two groups has its weights read from DRAM twice, a wave apart (235b's dX and
        // GEMM1 read ~7.5 GB where their operands are ~4.0 GB once: session 18's ncu counts). By expert they read
        // 4.4 / 4.7 GB, and run no faster (session 19): an option, not the host's default.
        const int* t0 = p.tiles + 3 * (t / w.n_tiles);
        const int e = t0[0], start = p.offsets[e];
        const int first = t / w.n_tiles - (t0[1] - start) / WG_BM, rows = (p.offsets[e + 1] - start + WG_BM - 1) / WG_BM;
        const int local = t - first * w.n_tiles;
        w.n_tile = local / rows;
        mp = first + (local - w.n_tile * rows);
    } else if (p.raster_m > 0) {
        const int group = t / (p.raster_m * w.n_tiles);
        const int in_group = min(p.raster_m, *p.tile_count / WS_CLUSTER - group * p.raster_m);  // the last may be short
        const int local = t - group * p.raster_m * w.n_tiles;
        w.n_tile = local / in_group;
        mp = group * p.raster_m + (local - w.n_tile * in_group);
    } else {
        mp = t / w.n_tiles;
        w.n_tile = t - mp * w.n_tiles;
    }
    const int mt = mp * WS_CLUSTER + rank;
    const int* tl = p.tiles + 3 * mt;
    w.e = tl[0];
    w.m0 = tl[1];
    w.m_end = tl[2];
    w.n0 = w.n_tile * WG_BN;
    w.k_begin = 0;
    w.k_end = p.k_dim;
    w.nk = (p.k_dim + WG_BK - 1) / WG_BK;
    return w;
}
// Weight gradients: tile t of E x (row tiles of m_dim) x (column tiles of n_dim), k over the expert's rows
// (clusters: E x row-tile pairs x column tiles; a row tile past m_dim has nothing to compute).
__device__ __forceinline__ int ws_wgrad_m_tiles(const FastGemmParams& p) { return (p.m_dim + WG_BM * WS_CLUSTER - 1) / (WG_BM * WS_CLUSTER); }
__device__ __forceinline__ int ws_wgrad_n_tiles(const FastGemmParams& p) { return (p.n_dim + WG_BN - 1) / WG_BN; }
__device__ __forceinline__ int ws_wgrad_count(const FastGemmParams& p, int experts) {
    return experts * ws_wgrad_m_tiles(p) * ws_wgrad_n_tiles(p);
}
__device__ __forceinline__ WsTile ws_wgrad_tile(const FastGemmParams& p, int t, int rank) {
    const int mts = ws_wgrad_m_tiles(p), nts = ws_wgrad_n_tiles(p);
    WsTile w;
    w.e = t / (mts * nts);
    const int rem = t - w.e * mts * nts;
    const int mp = rem / nts;
    w.n_tile = rem - mp * nts;
    w.n_tiles = nts;
    w.m0 = (mp * WS_CLUSTER + rank) * WG_BM;
    w.m_end = p.m_dim;
    w.n0 = w.n_tile * WG_BN;
    w.k_begin = p.offsets[w.e];
    w.k_end = p.offsets[w.e + 1];
    w.nk = (w.k_end - w.k_begin + WG_BK - 1) / WG_BK;
    return w;
}

// A CUtensorMap (128 bytes, 64-byte aligned), passed by value as a __grid_constant__ kernel parameter.
struct __align__(64) TmaDesc {
    unsigned long long v[16];
};

__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes) : "memory");
}
// TMA: the box of `desc` at (c0, c1, c2) into shared memory at dst; its bytes complete on barrier `bar`
// (announced there by mbar_expect_tx).
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TmaDesc* desc, int c0, int c1, int c2, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"((unsigned long long)desc), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* desc, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((unsigned long long)desc), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
// ... the same box into the shared memory of every block in `mask` (same offsets; the bytes complete on each
// block's barrier at offset bar)
__device__ __forceinline__ void tma_load_3d_mc(unsigned dst, const TmaDesc* desc, int c0, int c1, int c2, unsigned bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
        "l"((unsigned long long)desc), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
        : "memory");
}
__device__ __forceinline__ void tma_load_2d_mc(unsigned dst, const TmaDesc* desc, int c0, int c1, unsigned bar, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                 "l"((unsigned long long)desc), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}
// A box of B: into this block only, or (clusters) multicast to the whole cluster.
__device__ __forceinline__ void tma_b_3d(unsigned dst, const TmaDesc* desc, int c0, int c1, int c2, unsigned bar) {
#if WS_B_SHARE > 1
    tma_load_3d_mc(dst, desc, c0, c1, c2, bar, (1u << WS_CLUSTER) - 1);
#else
    tma_load_3d(dst, desc, c0, c1, c2, bar);
#endif
}
__device__ __forceinline__ void tma_b_2d(unsigned dst, const TmaDesc* desc, int c0, int c1, unsigned bar, bool mc) {
#if WS_B_SHARE > 1
    if (mc) {
        tma_load_2d_mc(dst, desc, c0, c1, bar, (1u << WS_CLUSTER) - 1);
        return;
    }
#endif
    tma_load_2d(dst, desc, c0, c1, bar);
}

__device__ __forceinline__ void producer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
// Named barrier of consumer warpgroup wg (ids 2 and 3; 0 is __syncthreads, 1 the producer's).
__device__ __forceinline__ void consumer_sync(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory"); }

// TMA stores: the box of `desc` at (c0, c1, c2) from shared memory at src, in this thread's bulk async-group.
__device__ __forceinline__ void tma_store_3d(const TmaDesc* desc, unsigned src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"((unsigned long long)desc), "r"(src), "r"(c0),
                 "r"(c1), "r"(c2)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// ... and have completed
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Pipeline stages of the persistent GEMMs and bytes of each consumer warpgroup's staging buffer for TMA
// stores (a ring of 8 KiB slots, one output box of 64 rows x 128 bytes each). Both can be set at compile time
// (MOE_FAST_DEFINES) as long as the block's shared memory stays inside the host's WS_SMEM (230,400 bytes).
// The dynamic tile scheduler (WS_DYNAMIC, compiled in by default; used by a launch whose p.tile_ctr is not
// null): blocks take their tiles from a global counter as they finish the previous one (the first from
// blockIdx.x), instead of the fixed b, b + gridDim.x, ...; which block computes a tile does not change its
// bits. Why: on qwen3-235b-a22b the fixed order left some blocks 20-30% longer than others (WS_EXP_CLOCKS,
// session 13: blocks whose column tiles waited longer for their stages), and the GEMM lasts as long as its
// slowest block; session 14 measured 235b's gemm1 -15%, gemm2 -21%, dX -28%, but dA_raw +9% and the weight
// gradients +3-4% (their blocks are even already, and the queue costs a little), so the host turns it on per
// kernel (MOE_FAST_DYNAMIC).
// With clusters the queue is cluster-wide: the two blocks must take the same units in the same order, so block
// 0's producer claims each unit and writes it into both blocks' queue slots (the partner's through DSMEM,
// st_shared_remote + a remote arrival on its tfull); the partner's producer and consumer warps arrive back on
// block 0's tempty (8 consumer warps of each block + the partner's producer: 17 arrivals) so that block 0
// refills a slot only when both blocks have read it.
// The counters live in the layer (FastGemmParams::tile_ctr), one pair, used by one launch at a time (the
// layer's launches are ordered on its stream).
#ifndef WS_DYNAMIC
#define WS_DYNAMIC 1
#endif
#define WS_TQ 4  // tile ids in flight between the producer and the consumers

// WS_SKIP_EMPTY_WG: a consumer warpgroup whose 64 rows of a tile all lie past the rows to compute (the last row
//   tile of an expert with at most 64 rows left: ~6% of the row tiles under a balanced top-8 of 128) issues no
//   wgmma for that tile; the other warpgroup's wgmma then have the SM's tensor cores alone. It still waits for
//   and releases every stage, so the producer's schedule does not change, and it stores nothing.
//   2: everywhere but dX (ws_rows_bmn with A by TMA, which the skip made 1-6% slower in session 21); with
//   WS_SKIP_EMPTY_K, forward+backward B/A (B with both) 0.991 on 30b (10 of 10 rounds), 0.997 on 235b (7 of 8),
//   session 22. Off by default: compute-sanitizer racecheck stalled (no case finished in 40 s, nor in 300 s)
//   on the build with both skips, twice, though each of its kernels is PTX-identical to a build with one skip
//   whose racecheck finishes in seconds (session 22; gpu_fast and memcheck pass). Session 23: the stall is GEMM1's
//   (`--kernel-name kne=ws_gemm1_swiglu` alone stalls, every other kernel alone finishes clean) and it comes and
//   goes (one run of the whole build finished case 10 clean in 8.6 s); suspect: racecheck recording the polls of
//   GEMM1's skipping warpgroup. Session 24: with WS_SKIP_WAIT_BACKOFF=64 GEMM1 alone finished case 10 clean in
//   21 s (without it: no verdict in 40 s), and the whole build finished cases 10, 11, 12, 14 clean in 8.5 + 37 s,
//   but one earlier run of the same four on the same machine gave no verdict in 90 s: the stall is rarer, not
//   gone, so the skips stay off (B/A 0.996 on both presets, bitwise, gpu_fast, synccheck, initcheck clean).
//   Session 25: with the launches drained, the stalled runs (2 of 5 with the backoff) stopped in GEMM2 (ws_rows):
//   any row GEMM's skip, not GEMM1's alone. Session 26 (s25c.sh) ruled out both candidate causes: lanes of the
//   skipping warp drifting apart (a warp-uniform poll, `__all_sync` after every try_wait: 2 of 4 runs stalled)
//   and racecheck merely slowed by recording the polls (a 1000 ns backoff: 2 of 4 stalled; the 64 ns build given
//   130 s: 2 of 3 stalled, where a clean run takes 7-27 s). It is a hang of the instrumented run, cause unknown;
//   the skips stay off (the warp-uniform poll was removed).
#ifndef WS_SKIP_EMPTY_WG
#define WS_SKIP_EMPTY_WG 0
#endif
// WS_SKIP_WAIT_BACKOFF=NS: the skipping warpgroup sleeps NS between its polls of a stage's full barrier, while the
//   other warpgroup, the one on the critical path, polls as before (session 23; session 24: it makes racecheck's
//   GEMM1 stall rarer, not gone; see above).
#ifndef WS_SKIP_WAIT_BACKOFF
#define WS_SKIP_WAIT_BACKOFF 0
#endif
// WS_SKIP_EMPTY_K: the weight gradients' last k-tile of each expert issues the wgmma of its 16-row slices that
//   hold rows only (the others are zero-filled: ~3% of the weight gradients' MMA work at ~1024 rows an expert).
#ifndef WS_SKIP_EMPTY_K
#define WS_SKIP_EMPTY_K 0
#endif
#ifndef WS_STAGES
#define WS_STAGES WG_STAGES
#endif
#ifndef WS_STAGE_OUT_BYTES
#define WS_STAGE_OUT_BYTES 16384
#endif
#define WS_OUT_SLOTS (WS_STAGE_OUT_BYTES / 8192)
#ifndef WS_GEMM1_TMA  // GEMM1's SwiGLU epilogue by TMA stores (1) or direct from registers (0)
#define WS_GEMM1_TMA 1
#endif
static_assert(WS_OUT_SLOTS >= 2 && WS_STAGE_OUT_BYTES % 8192 == 0, "the staging ring needs two or more 8 KiB slots");
static_assert(WS_STAGES >= 2 && WS_STAGES * WG_STAGE_BYTES + 1024 + 2 * WS_STAGE_OUT_BYTES <= 230400, "shared memory beyond WS_SMEM");

// All but this thread's N newest bulk groups have read their shared-memory source (N is the instruction's
// immediate, so any ring size gets its exact wait).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Shared-memory offset of byte b of row r in the 128-byte-swizzle layout of a 64 x 128-byte box.
__device__ __forceinline__ unsigned swz128(int r, int b) { return r * 128 + ((((b >> 4) ^ r) & 7) << 4) + (b & 15); }

// A consumer warpgroup's TMA-store epilogue: output boxes of 64 rows x 128 bytes go out one by one through a
// ring of WS_OUT_SLOTS slots in its staging buffer. For each box, all 128 threads write their values into the
// next slot in the 128-byte-swizzle layout (16-byte chunk XOR row % 8: a warp's 8 rows hit 8 different chunks,
// so the shared stores are free of bank conflicts) and fence them for the async proxy; one named barrier; then
// the warpgroup's first thread (`leader`) issues the box's TMA store (the map clips what lies outside the
// output). Before that barrier the leader waits until the box sent WS_OUT_SLOTS - 1 boxes earlier has been
// read out of shared memory, so the slot the next box goes to is free: the waits overlap the writing of
// boxes, and no box waits for the one just sent. The ring position runs on across tiles; the global writes
// drain while the consumers go on to the next tile's wgmma.
struct WsOut {
    unsigned st;  // the staging buffer
    unsigned n;   // boxes sent so far
    int wg;
    bool leader;
#ifdef WS_EXP_CLOCKS
    long long c_issue = 0, c_sync = 0;  // cycles in the store issue / at the box's named barrier (leader)
#endif
    // by_threads (WS_PARTIAL_STAGED): `store` runs on every thread after the barrier (the copy-out of a partial
    // box, ws_copy_box) and commits no bulk group; every thread has finished it before the next barrier, so
    // the ring's reuse rule holds for such boxes too
    template <class Fill, class Store>
    __device__ __forceinline__ void box(Fill fill, Store store, bool by_threads = false) {
        const unsigned slot = st + (n % WS_OUT_SLOTS) * 8192;
#ifndef WS_EXP_NO_FILL  // experiment: the boxes stored as the slot holds them, unfilled (results wrong)
        fill(slot);
#endif
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, visible to the TMA unit
#ifndef WS_EXP_NO_READ_WAIT  // experiment: time the epilogue without its waits (races: results wrong)
        if (leader) bulk_wait_read<WS_OUT_SLOTS - 2>();
#endif
#ifdef WS_EXP_CLOCKS
        const long long c0 = clock64();
#endif
#ifndef WS_EXP_NO_BOX_SYNC  // experiment: no barrier between the box's fill and its store (races: results wrong)
        consumer_sync(wg);
#endif
#ifdef WS_EXP_CLOCKS
        const long long c1 = clock64();
        c_sync += c1 - c0;
#endif
        if (by_threads) {
            store(slot);
        } else if (leader) {
#ifndef WS_EXP_NO_TMA_ISSUE  // experiment: everything but the global writes (results wrong)
            store(slot);
#endif
            bulk_commit();
#ifdef WS_EXP_CLOCKS
            c_issue += clock64() - c1;
#endif
        }
        ++n;
    }
};

// One warp's 16 rows x 16 columns of bf16 pairs into a box slot by one stmatrix: r[0..3] are this lane's pairs
// of (row lane/4, column group 2 jp), (row + 8, group 2 jp), (row, group 2 jp + 1), (row + 8, group 2 jp + 1)
// of the wgmma accumulator layout (rows wq * 16.., groups of 8 columns within the box); each lane gives the
// address of one 16-byte matrix row: lanes 8 i .. 8 i + 7 the rows of matrix i.
__device__ __forceinline__ void stsm_box(unsigned slot, int wq, int lane, int jp, const unsigned (&r)[4]) {
    const int row = wq * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), grp = 2 * jp + (lane >> 4);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(slot + swz128(row, 16 * grp)), "r"(r[0]), "r"(r[1]), "r"(r[2]),
                 "r"(r[3])
                 : "memory");
}

// WS_PARTIAL_STAGED=1: a warpgroup whose 64 rows run past the tile's m_end
// (rows that belong to the next expert's tile), or GEMM1's boxes when I % 128 != 0, go through the same
// staging boxes as the TMA stores and are copied out by the warpgroup's threads, only the rows before m_end
// and the columns inside the output, by 16-byte stores, instead of the direct epilogue from registers
// (wg_epilogue_rows: 4-byte stores, and ~4,000 of GEMM1's 11,016 SASS instructions). Same values: the boxes
// hold what the direct epilogue stores.
// WS_PARTIAL_STAGED=2, the default: only the bf16 row GEMMs' partial groups (GEMM2, dX), not GEMM1's (session 16,
// H100, bitwise A/Bs: with 1, gemm1 ran 4.7% slower and gemm2 and dX 2% faster; with 2, forward+backward B/A
// 0.995 on 30b, 0.999 on 235b). 0: every partial group by the direct epilogue.
#ifndef WS_PARTIAL_STAGED
#define WS_PARTIAL_STAGED 2
#endif
#define WS_PARTIAL_STAGED_ROWS (WS_PARTIAL_STAGED == 1 || WS_PARTIAL_STAGED == 2)
#define WS_PARTIAL_STAGED_GEMM1 (WS_PARTIAL_STAGED == 1)
// Where a copied-out box goes: rows row0.. of `base` (ld elements apart), the first `rows` of them; columns
// before col_end (a multiple of 8) exist.
struct WsCopyOut {
    bf16_t* base;
    long long ld;
    int rows, col_end;
};
// A box (64 rows x 128 bytes, 128-byte swizzle) from shared memory to global by the warpgroup's 128 threads:
// thread t copies 16-byte chunk t % 8 of rows t / 8 + 16 i (a quarter warp reads one row's 8 chunks: no bank
// conflicts).
__device__ __forceinline__ void ws_copy_box(unsigned slot, const WsCopyOut& o, int row0, int col0, int t) {
    const int ch = t & 7;
    if (col0 + 8 * ch >= o.col_end) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = (t >> 3) + 16 * i;
        if (r >= o.rows) break;
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(slot + swz128(r, 16 * ch)));
        *(uint4*)(o.base + (long long)(row0 + r) * o.ld + col0 + 8 * ch) = v;
    }
}

// EPI_STORE (bf16: 4 boxes of 64 columns, by stmatrix): a warpgroup's 64 rows (from row0 of expert z in the
// tensor map tc, [z][rows][columns]; columns from n0). The accumulator layout: d[4j + 2hf + c] is row
// 16 wq + lane/4 + 8 hf, column 8j + 2 (lane % 4) + c; the values are the ones the direct epilogue stores.
// (An f32 variant, 8 boxes of 32 columns, stored dA_raw until session 17.)
// With o.rows < 64 (WS_PARTIAL_STAGED) the boxes are copied out instead (ws_copy_box).
__device__ __forceinline__ void ws_store_tma(const float* d, WsOut& out, const TmaDesc* tc, int n0, int row0, int z, int wq, int lane, const WsCopyOut& o) {
    constexpr int BOXES = 4, J = 8, BOX = 64;  // J column groups of 8 per box
    const bool copy = o.rows < 64;
#pragma unroll
    for (int bx = 0; bx < BOXES; ++bx) {
        out.box(
            [&](unsigned slot) {
#pragma unroll
                for (int jp = 0; jp < J / 2; ++jp) {
                    const float* q = d + 4 * (J * bx + 2 * jp);
                    const unsigned r[4] = {pack_bf16x2(q[0], q[1]), pack_bf16x2(q[2], q[3]), pack_bf16x2(q[4], q[5]), pack_bf16x2(q[6], q[7])};
                    stsm_box(slot, wq, lane, jp, r);
                }
            },
            [&](unsigned slot) {
                if (copy)
                    ws_copy_box(slot, o, row0, n0 + BOX * bx, wq * 32 + lane);
                else
                    tma_store_3d(tc, slot, n0 + BOX * bx, row0, z);
            },
            copy);
    }
}

// The stmatrix fragments r[jp][i] of box bx (see ws_store_swiglu_tma): f(gate pair, up pair) -> the box's pair
// (the gate's, the up's, or A's), each a bf16x2 of the fragment's two elements.
template <class F>
__device__ __forceinline__ void ws_a_fragments(const float* d, int bx, unsigned (&r)[4][4], F f) {
#pragma unroll
    for (int jp = 0; jp < 4; ++jp)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = 4 * (8 * bx + 2 * jp + (i >> 1)) + 2 * (i & 1);
            r[jp][i] = f(pack_bf16x2(d[e], d[e + 1]), pack_bf16x2(d[e + 64], d[e + 65]));
        }
}
// ... by swiglu_f_c with the activation fixed at compile time, so that a box is one branch-free block.
template <bool CLAMPED>
__device__ __forceinline__ void ws_swiglu_box(const float* d, int bx, float alpha, float limit, unsigned (&r)[4][4]) {
    ws_a_fragments(d, bx, r, [&](unsigned g, unsigned u) {
        return pack_bf16x2(swiglu_f_c(bf16_lo(g), bf16_lo(u), alpha, limit, CLAMPED), swiglu_f_c(bf16_hi(g), bf16_hi(u), alpha, limit, CLAMPED));
    });
}

// GEMM1's SwiGLU epilogue by TMA (EPI_SWIGLU_FWD_SPLIT, I a multiple of 128 so that every box lies inside its
// half of H): 6 boxes of 64 intermediate columns from q0 = n0 / 2: H's gate columns (tc, [rows][2I]), its up
// columns (I + q), and A (td, [rows][I]). d holds gate column group jp at d[4 jp + ...], up at d[4 (jp + 16) + ...];
// the values are wg_epilogue_rows' (A from the bf16-rounded gate and up).
// copy (WS_PARTIAL_STAGED): the boxes copied out by the threads, rows before m_end and columns before I in each
// part (for a partial row group, or I % 128 != 0), instead of by TMA.
__device__ __forceinline__ void ws_store_swiglu_tma(const FastGemmParams& p, const float* d, WsOut& out, const TmaDesc* tc, const TmaDesc* td, int q0, int row0, int wq, int lane,
                                                    bool copy = false, int m_end = 0) {
#pragma unroll
#ifdef WS_EXP_NO_A_STORE  // experiment: H's boxes alone, no A written (GEMM2's input wrong): A's share of the epilogue
    for (int part = 0; part < 2; ++part) {
#else
    for (int part = 0; part < 3; ++part) {  // gate, up, A
#endif
#pragma unroll
        for (int bx = 0; bx < 2; ++bx) {
            out.box(
                [&](unsigned slot) {
                    unsigned r[4][4];  // [jp][i]: the box's stmatrix fragments
                    if (part < 2) {
                        ws_a_fragments(d, bx, r, [&](unsigned g, unsigned u) { return part == 0 ? g : u; });
#ifdef WS_EXP_NO_A_MATH  // experiment: A's boxes written without the SwiGLU (A wrong): the math's share
                    } else if (true) {
                        ws_a_fragments(d, bx, r, [&](unsigned g, unsigned u) { return g ^ u; });
#endif
                    } else if (p.clamp_limit < 0.0f) {
                        ws_swiglu_box<false>(d, bx, p.alpha, p.clamp_limit, r);
                    } else {
                        ws_swiglu_box<true>(d, bx, p.alpha, p.clamp_limit, r);
                    }
#pragma unroll
                    for (int jp = 0; jp < 4; ++jp) stsm_box(slot, wq, lane, jp, r[jp]);
                },
                [&](unsigned slot) {
                    const int col0 = (part == 1 ? p.inter : 0) + q0 + 64 * bx;  // in H (gate, up) or A
                    if (copy) {
                        const WsCopyOut o{part == 2 ? p.c2 : p.c, part == 2 ? (long long)p.inter : p.ldc, min(64, m_end - row0), (part == 1 ? 2 : 1) * p.inter};
                        ws_copy_box(slot, o, row0, col0, wq * 32 + lane);
                    } else {
                        tma_store_3d(part == 2 ? td : tc, slot, col0, row0, 0);
                    }
                },
                copy);
        }
    }
}

// Row GEMMs, gathered A: thread tid (0..127) loads chunk tid & 7 of lines (tid >> 3) + 16 i of every k-tile
// of a tile; the source row pointers are found once per tile.
// Few instructions per copy on purpose: the producer warp shares each SM sub-partition's dispatch with two
// consumer warps, and its instructions delay theirs (ncu, session 18: the gathering GEMM1's consumers showed
// 3x the dispatch stalls of the TMA-fed one, its producer 75 instructions per k-tile). A row past the tile's
// end points at A's base and copies 0 bytes (its chunk is zero-filled), so a whole k-tile needs one 64-bit
// add and one cp.async per row, and only a k-tile that crosses K's end takes the checked path.
struct WsGatherA {
    const char* arow[8];  // this thread's chunk of line i at k = 0 (A's base for a line past the tile's rows)
    unsigned live;        // bit i: line i is one of the tile's rows
    __device__ __forceinline__ void setup(const FastGemmParams& p, const WsTile& w, int tid) {
        live = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int m = w.m0 + (tid >> 3) + 16 * i;
            const bool ok = m < w.m_end;
            arow[i] = (const char*)(p.a + (ok ? (long long)p.a_idx[m] * p.lda + (tid & 7) * 8 : 0));
            live |= (unsigned)ok << i;
        }
    }
    __device__ __forceinline__ void load(const FastGemmParams& p, unsigned sA, int k0, int tid) const {
        const int ch = tid & 7;
        const unsigned dst = sA + (tid >> 3) * 128 + ((ch ^ ((tid >> 3) & 7)) << 4);
        if (k0 + WG_BK <= p.k_dim) {  // the whole k-tile inside K (uniform)
            const unsigned kb = 2u * (unsigned)k0;
#pragma unroll
            for (int i = 0; i < 8; ++i) cp_async16(dst + i * 2048, arow[i] + kb, (live >> i) & 1);
        } else {
            const bool k_ok = k0 + ch * 8 < p.k_dim;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const bool ok = k_ok && ((live >> i) & 1);
                cp_async16(dst + i * 2048, ok ? arow[i] + 2ll * k0 : (const char*)p.a, ok);
            }
        }
    }
};

// Row GEMMs: the weight tile by TMA. KIND 0: K-major [E][n rows][K] (GEMM1: a gate and an up box of 128 rows;
// clusters: boxes of 128 rows too); KIND 1: as stored, [E][K][N], four boxes of 64 columns x 64 k lines (the
// MN-major blocks). With clusters, block `rank` loads its share of the boxes for both blocks.
template <int EPI, int KIND>
__device__ __forceinline__ void ws_tma_b(const TmaDesc* tb, const FastGemmParams& p, const WsTile& w, unsigned sB, int k0, unsigned bar, int rank) {
    constexpr int PER = 4 / WS_B_SHARE;  // KIND 1: boxes per block
    if (WS_B_SHARE == 1) rank = 0;
    if (KIND == 1) {
#pragma unroll
        for (int j = rank * PER; j < rank * PER + PER; ++j) tma_b_3d(sB + j * 8192, tb, w.n0 + 64 * j, k0, w.e, bar);
    } else if (EPI == EPI_SWIGLU_FWD_SPLIT) {
        if (WS_B_SHARE == 1 || rank == 0) tma_b_3d(sB, tb, k0, w.n0 >> 1, w.e, bar);
        if (WS_B_SHARE == 1 || rank == 1) tma_b_3d(sB + 128 * 128, tb, k0, p.inter + (w.n0 >> 1), w.e, bar);
    } else if (WS_B_SHARE > 1) {
        tma_b_3d(sB + rank * 128 * 128, tb, k0, w.n0 + 128 * rank, w.e, bar);
    } else {
        tma_load_3d(sB, tb, k0, w.n0, w.e, bar);
    }
}

// Weight gradients: A (128 m) and B (256 n) MN-major from the expert's rows k0..k_end. An operand whose rows
// are gathered (p.a_idx / p.b_idx; at most one index array, the same for both) comes by cp.async; one whose
// rows are in order comes by TMA (boxes of 64 columns x 64 k lines, thread 0) on every k-tile that lies
// inside the expert's rows, and by cp.async on its last, partial one (a box would read the next expert's
// rows: 0 x Inf there would poison the sum). cp.async: thread tid loads A chunk tid & 15 of k lines
// (tid >> 4) + 8 i and B chunk tid & 31 of k lines (tid >> 5) + 4 i; the k-tile's 64 row indices are read
// from shared memory (sidx, see the producer loop).
struct WsWgrad {
    const char* a;  // this thread's A column (m0 + 8 (tid & 15)) in line 0; A's base past m_dim
    const char* b;  // this thread's B column (n0 + 8 (tid & 31)) in line 0; B's base past n_dim
    bool a_live, b_live;
    __device__ __forceinline__ void setup(const FastGemmParams& p, const WsTile& w, int tid) {
        const int m = w.m0 + (tid & 15) * 8, n = w.n0 + (tid & 31) * 8;
        a_live = m < p.m_dim;
        b_live = n < p.n_dim;
        a = (const char*)(p.a + (a_live ? m : 0));
        b = (const char*)(p.b + (b_live ? n : 0));
    }
    // cp.async of A (unless a_tma) and B (unless b_tma). A k-tile inside the expert's rows (every one but the
    // last) costs one shared load (the gathered row's index), one 32 x 32 -> 64-bit multiply-add and one
    // cp.async per line (was ~12 instructions: ~10% faster gathering, session 18; still 1.33x (grad_w2) and
    // 1.65x (grad_w13) the time of reading copied rows, whose producer waits on its cp.async groups: the
    // gathers' latency, not the instruction count, bounds it now). 2 lda and 2 ldb fit 32 bits (FastLayer::new
    // bounds the dims far below).
    __device__ __forceinline__ void load(const FastGemmParams& p, unsigned sA, unsigned sB, int k0, int k_end, const int* sidx, int tid, bool a_tma, bool b_tma) const {
        if (k0 + WG_BK <= k_end)  // every line one of the expert's rows (uniform)
            load_ab<true>(p, sA, sB, k0, k_end, sidx, tid, a_tma, b_tma);
        else
            load_ab<false>(p, sA, sB, k0, k_end, sidx, tid, a_tma, b_tma);
    }
    template <bool INSIDE>
    __device__ __forceinline__ void load_ab(const FastGemmParams& p, unsigned sA, unsigned sB, int k0, int k_end, const int* sidx, int tid, bool a_tma, bool b_tma) const {
        if (!a_tma) load_lines<8, 4, INSIDE>(sA, a, a_live, 2u * (unsigned)p.lda, p.a_idx ? sidx : nullptr, k0, k_end, tid);
        if (!b_tma) load_lines<16, 5, INSIDE>(sB, b, b_live, 2u * (unsigned)p.ldb, p.b_idx ? sidx : nullptr, k0, k_end, tid);
    }
    // N lines of one operand, thread tid copying chunk tid & (2^SH - 1) of lines (tid >> SH) + (128 >> SH) i;
    // line l's row is sidx[l] (gathered) or k0 + l. Two loops rather than a choice per line: the gathered and
    // the in-order loads compiled to a branch around every copy otherwise.
    // INSIDE: the whole k-tile lies before k_end (no check per line).
    template <int N, int SH, bool INSIDE>
    __device__ __forceinline__ static void load_lines(unsigned s0, const char* col, bool live, unsigned ld, const int* sidx, int k0, int k_end, int tid) {
        const int c = tid & ((1 << SH) - 1);
        const unsigned d0 = s0 + (c >> 3) * 8192;
        if (sidx) {
#pragma unroll
            for (int i = 0; i < N; ++i) {
                const int line = (tid >> SH) + (128 >> SH) * i;
                const bool ok = live && (INSIDE || k0 + line < k_end);  // a line past k_end has index 0
                cp_async16(d0 + 2 * swz<8>(line, c & 7), col + (unsigned long long)(unsigned)sidx[line] * ld, ok);
            }
        } else {
#pragma unroll
            for (int i = 0; i < N; ++i) {
                const int line = (tid >> SH) + (128 >> SH) * i, k = k0 + line;
                const bool ok = live && (INSIDE || k < k_end);
                cp_async16(d0 + 2 * swz<8>(line, c & 7), col + (unsigned long long)(unsigned)(ok ? k : 0) * ld, ok);
            }
        }
    }
};

// KIND: 0 row GEMMs with B K-major, 1 row GEMMs with B as stored (MN-major), 2 weight gradients.
// ta / tb: tensor maps of A (row GEMMs with a_idx null) and B (row GEMMs).
// tc: tensor map of the output C for the TMA-store epilogue (EPI_STORE): [1][rows][n_dim] for
// row GEMMs, [E][m_dim][n_dim] for weight gradients; GEMM1: H, [1][rows][2I]; td: GEMM1's A, [1][rows][I];
// boxes of 64 rows x 128 bytes.
template <int EPI, int KIND>
__device__ __forceinline__ void ws_gemm(const FastGemmParams& p, const TmaDesc* ta, const TmaDesc* tb, const TmaDesc* tc, const TmaDesc* td) {
    const unsigned sbase = wg_smem_base();
    __shared__ __align__(8) unsigned long long bars[2 * WS_STAGES];  // full[s], then empty[s]
    __shared__ int sidx[4][64];                                     // weight gradients: the k-tiles' row indices
    const unsigned full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[WS_STAGES]);
#if WS_DYNAMIC
    // the tile queue: producer thread 0 writes tile j's index into stile[j % WS_TQ] and arrives on its tfull;
    // lane 0 of each consumer warp arrives on its tempty once the warp has read it
    __shared__ int stile[WS_TQ];
    __shared__ __align__(8) unsigned long long tbars[2 * WS_TQ];
    const unsigned tfull0 = smem_u32(&tbars[0]), tempty0 = smem_u32(&tbars[WS_TQ]);
#endif
    const int tid = threadIdx.x, warp = tid >> 5, role = warp >> 2;
    // who arrives on a full barrier: the TMA thread (expect_tx), and every producer thread whose cp.async
    // copies fill part of the stage
    // (weight gradients: always both, the TMA thread arriving without bytes on k-tiles it does not load)
    const bool a_tma = p.a_idx == nullptr, b_tma = KIND != 2 || p.b_idx == nullptr;
    const unsigned full_count = (KIND == 2) ? 129 : (a_tma ? 1 : 129);
    const unsigned tx_bytes = (a_tma ? WG_A_BYTES : 0) + (b_tma ? WG_B_BYTES : 0);
    if (tid == 0) {
        for (int s = 0; s < WS_STAGES; ++s) {
            mbar_init(full0 + 8 * s, full_count);
            // every consumer warp (8 a block) of every block of the cluster, when its wgmma have read the stage,
            // for a count of 32 (ws_release)
            mbar_init(empty0 + 8 * s, 2 * 4 * WS_RELEASE_BLOCKS * WS_WARP_ARRIVALS);
        }
#if WS_DYNAMIC
        for (int q = 0; q < WS_TQ; ++q) {
            mbar_init(tfull0 + 8 * q, 1);
            mbar_init(tempty0 + 8 * q, 8 * WS_CLUSTER + (WS_CLUSTER - 1));  // (clusters: only block 0's is used)
        }
#endif
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
#if WS_CLUSTER > 1
    cluster_sync();  // the partner's barriers are initialised before anything arrives on them
    const int rank = (int)cluster_rank();
#else
    const int rank = 0;
#endif
    // this block's (cluster's) units: first, first + stride, ...
    const int first = blockIdx.x / WS_CLUSTER, stride = gridDim.x / WS_CLUSTER;
    const int count = (KIND == 2) ? ws_wgrad_count(p, p.k_dim) : ws_rows_count<EPI>(p);
    const bool dyn = WS_DYNAMIC && p.tile_ctr != nullptr;  // tiles from the global counter (uniform)

    if (role == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WS_PRODUCER_REGS));
        unsigned it = 0;
        WsGatherA gather;
        WsWgrad wgrad;
        const int* gidx = (KIND == 2) ? (p.a_idx ? p.a_idx : p.b_idx) : nullptr;
        for (int j = 0;; ++j) {
            int t = first + j * stride;
#if WS_DYNAMIC
            if (dyn) {
                const unsigned q = j % WS_TQ;
#if WS_CLUSTER > 1
                if (rank != 0) {  // the partner: block 0 claims the unit and writes it here
                    if (tid == 0) mbar_wait<true>(tfull0 + 8 * q, (j / WS_TQ) & 1);
                    producer_sync();
                    t = *(volatile int*)&stile[q];
                    producer_sync();  // every producer thread has read the slot: block 0 may refill it
                    if (tid == 0) mbar_arrive_remote_release(tempty0 + 8 * q, 0);
                } else
#endif
                {
                    if (tid == 0) {
                        // the consumers (clusters: and the partner's readers) have read slot q's last tile
                        mbar_wait<(WS_CLUSTER > 1)>(tempty0 + 8 * q, ((j / WS_TQ) & 1) ^ 1);
                        // (claiming the next tile one tile earlier, so that the atomic's round trip overlaps a
                        // tile's loads, measured no faster: session 15, BENCHMARKS.md)
                        int next = j == 0 ? first : stride + atomicAdd(p.tile_ctr, 1);
                        next = next < count ? next : count;
                        *(volatile int*)&stile[q] = next;
#if WS_CLUSTER > 1
                        st_shared_remote(smem_u32(&stile[q]), next, 1);
                        mbar_arrive_remote_release(tfull0 + 8 * q, 1);
#endif
                        mbar_arrive(tfull0 + 8 * q);
                    }
                    producer_sync();  // every producer thread reads the slot before thread 0 can come back to it
                    t = *(volatile int*)&stile[q];
                }
            }
#endif
            if (t >= count) break;
            const WsTile w = (KIND == 2) ? ws_wgrad_tile(p, t, rank) : ws_rows_tile<EPI>(p, t, rank);
            if (KIND == 2)
                wgrad.setup(p, w, tid);
            else if (!a_tma)
                gather.setup(p, w, tid);
            // weight gradients: the gathered rows' indices of k-tile kt sit in sidx[kt % 4], copied there by
            // threads 0..63 (4-byte cp.async, one commit group per k-tile) three k-tiles ahead: a k-tile takes
            // about as long as one memory round trip. (Plain loads two k-tiles ahead instead, which keep the
            // indices out of the data's commit groups but wait for a tile's first indices at its start, measured
            // slower: grad_w2 gathered 0.898 -> 1.126 ms, session 18.)
            // No copy for k-tiles past the tile's last (an empty group keeps the count): such a copy could land
            // after the next tile's copy into the same slot.
            const auto fetch = [&](int kt) {
                const int k = w.k_begin + kt * WG_BK + tid;
                if (tid < 64 && kt < w.nk) cp_async4(smem_u32(&sidx[kt & 3][tid]), gidx + (k < w.k_end ? k : 0), k < w.k_end);
                cp_async_commit();
            };
            if (KIND == 2 && gidx) {
                producer_sync();  // every producer thread is done with the previous tile's indices
#pragma unroll
                for (int j = 0; j < 3; ++j) fetch(j);
            }
            for (int kt = 0; kt < w.nk; ++kt, ++it) {
                const unsigned s = it % WS_STAGES, phase = (it / WS_STAGES) & 1;
                const unsigned full = full0 + 8 * s;
                const int k0 = w.k_begin + kt * WG_BK;
                if (KIND == 2 && gidx) {
                    cp_async_wait<2>();  // this thread's copy for k-tile kt has landed (kt + 1, kt + 2 may not)
                    producer_sync();     // ... and every thread's; sidx[(kt + 3) % 4] is read by nobody now
                    fetch(kt + 3);
                }
                mbar_wait(empty0 + 8 * s, phase ^ 1);
                const unsigned sA = sbase + s * WG_STAGE_BYTES, sB = sA + WG_A_BYTES;
                if (KIND == 2) {
                    const bool inside = k0 + WG_BK <= w.k_end;  // the k-tile's rows are all the expert's
                    if (tid == 0) {
                        if (inside && tx_bytes > 0) {
                            mbar_expect_tx(full, tx_bytes);
                            if (a_tma)
                                for (int j = 0; j < 2; ++j) tma_load_2d(sA + j * 8192, ta, w.m0 + 64 * j, k0, full);
                            // B, the same for the cluster's blocks: each loads its share for all (the
                            // partner's share arrives on this block's barrier)
                            if (b_tma)
                                for (int j = (WS_B_SHARE > 1 ? rank : 0) * (4 / WS_B_SHARE); j < (WS_B_SHARE > 1 ? rank + 1 : 1) * (4 / WS_B_SHARE); ++j)
                                    tma_b_2d(sB + j * 8192, tb, w.n0 + 64 * j, k0, full, true);
                        } else {
                            mbar_arrive(full);
                        }
                    }
                    wgrad.load(p, sA, sB, k0, w.k_end, sidx[kt & 3], tid, a_tma && inside, b_tma && inside);
                    mbar_arrive_cp_async(full);
                } else {
                    if (tid == 0) {
                        mbar_expect_tx(full, tx_bytes);
                        if (a_tma) tma_load_2d(sA, ta, k0, w.m0, full);
                        ws_tma_b<EPI, KIND>(tb, p, w, sB, k0, full, rank);
                    }
                    if (!a_tma) {
                        gather.load(p, sA, k0, tid);
                        mbar_arrive_cp_async(full);
                    }
                }
            }
        }
        cp_async_commit();  // every copy of this thread into a group, then all landed before it exits
        cp_async_wait<0>();
#if WS_DYNAMIC
        if (dyn && tid == 0 && rank == 0) {
            // the last block (clusters: block 0 of the last cluster) to finish taking tiles puts the counters
            // back to zero for the next launch
            __threadfence();
            if (atomicAdd(p.tile_ctr + 1, 1) == (int)gridDim.x / WS_CLUSTER - 1) {
                atomicExch(p.tile_ctr, 0);
                atomicExch(p.tile_ctr + 1, 0);
            }
        }
#endif
    } else {  // consumers: warpgroup role - 1 owns rows 64 * (role - 1) .. + 64 of each tile
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WS_CONSUMER_REGS));
        const int wg = role - 1, lane = tid & 31, wq = warp & 3;
        const bool leader = (tid & 127) == 0;  // issues and waits for this warpgroup's TMA stores
        WsOut out{sbase + WS_STAGES * WG_STAGE_BYTES + wg * WS_STAGE_OUT_BYTES, 0u, wg, leader};
        const int r_in = wg * 64 + wq * 16 + (lane >> 2), c_in = (lane & 3) * 2;
        unsigned it = 0;
        const auto tile = [&](int t) { return (KIND == 2) ? ws_wgrad_tile(p, t, rank) : ws_rows_tile<EPI>(p, t, rank); };
#ifdef WS_EXP_CLOCKS  // experiment: where a consumer warpgroup's cycles go (printed by blocks 0 and 77)
        long long g_start;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_start));
        const long long c_start = clock64();
        long long c_main = 0, c_full = 0, c_full0 = 0, c_epi = 0;
        int n_tiles_done = 0;
#endif
        // fixed order: the next tile's description is loaded during the current tile's last wgmma
        WsTile next = tile(first < count ? first : 0);
        for (int j = 0;; ++j) {
            int t = first + j * stride;
#if WS_DYNAMIC
            if (dyn) {
                const unsigned q = j % WS_TQ;
                mbar_wait<(WS_CLUSTER > 1)>(tfull0 + 8 * q, (j / WS_TQ) & 1);
                t = *(volatile int*)&stile[q];
                __syncwarp();
#if WS_CLUSTER > 1
                if (lane == 0 && rank != 0) mbar_arrive_remote_release(tempty0 + 8 * q, 0);
                if (lane == 0 && rank == 0) mbar_arrive(tempty0 + 8 * q);
#else
                if (lane == 0) mbar_arrive(tempty0 + 8 * q);
#endif
            }
#endif
            if (t >= count) break;
            const WsTile w = dyn ? tile(t) : next;
            // (clusters) a row tile with no rows: the padding of an expert's odd tile count, or past m_dim. Its
            // block still takes part in the loads and the releases of every stage, and stores nothing.
            const bool idle = WS_CLUSTER > 1 && w.m0 >= ((KIND == 2) ? p.m_dim : w.m_end);
            // (dA_raw) this tile's gathered rows also go to p.a_rows: the tiles of column 0 write them
            const bool side = KIND == 1 && !a_tma && p.a_rows != nullptr && w.n0 == 0 && !idle;
#if WS_SKIP_EMPTY_WG
            // uniform across the warp by construction; the shuffle lets the compiler see that it is, so that the
            // wgmma under the branch below is not serialised (C7520)
            // (row GEMMs only: the weight gradients' row tiles of m_dim are whole for every model shape)
            // (WS_SKIP_EMPTY_WG=2: not in dX, ws_rows_bmn with A by TMA, which the skip made 1-6% slower in
            // session 21 while every other GEMM gained; why is not known)
            const bool skip = KIND != 2 && !(WS_SKIP_EMPTY_WG == 2 && KIND == 1 && a_tma) &&
                              __shfl_sync(0xffffffffu, (int)(w.m0 + 64 * wg >= w.m_end), 0) != 0;
#endif
            float d[128];
#pragma unroll
            for (int i = 0; i < 128; ++i) d[i] = 0.0f;
#ifdef WS_EXP_CLOCKS
            const long long c_tile = clock64();
#endif
            for (int kt = 0; kt < w.nk; ++kt, ++it) {
                const unsigned s = it % WS_STAGES, phase = (it / WS_STAGES) & 1;
#ifdef WS_EXP_CLOCKS
                const long long cw = clock64();
                mbar_wait(full0 + 8 * s, phase);
                c_full += clock64() - cw;
                if (kt == 0) c_full0 += clock64() - cw;
#elif WS_SKIP_EMPTY_WG && WS_SKIP_WAIT_BACKOFF
                mbar_wait(full0 + 8 * s, phase, skip ? WS_SKIP_WAIT_BACKOFF : WS_WAIT_BACKOFF);
#else
                mbar_wait(full0 + 8 * s, phase);
#endif
                // cp.async wrote (part of) the stage through the generic proxy; wgmma reads it through the async proxy
                // (skipping it on stages TMA alone filled measured no faster: session 18)
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                const unsigned sA = sbase + s * WG_STAGE_BYTES, sB = sA + WG_A_BYTES;
                wg_fence_acc(d);
#if WS_SKIP_EMPTY_K
                // rows of the expert in this k-tile, in 16-row slices (uniform: the shuffle says so to the compiler)
                const int live = KIND != 2 ? 4 : __shfl_sync(0xffffffffu, min(4, (w.k_end - w.k_begin - kt * WG_BK + 15) >> 4), 0);
                if (live == 3)
                    wg_mma_slices_tt<3>(d, sA + wg * 8192, sB);
                else if (live == 2)
                    wg_mma_slices_tt<2>(d, sA + wg * 8192, sB);
                else if (live == 1)
                    wg_mma_slices_tt<1>(d, sA + wg * 8192, sB);
                else
#endif
#if WS_SKIP_EMPTY_WG
                if (!skip) {
#else
                {
#endif
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#ifndef WS_EXP_NO_MMA  // experiment: time the feeding alone (results wrong)
                // (an idle tile multiplies too, and its products are dropped: a wgmma under a branch on `idle`
                // is serialised by ptxas, C7520 "WG.AR in divergent path", which cost the clustered main loops
                // ~40% of their cycles per k-tile)
                if (KIND == 2)
                    wg_mma_ktile<2>(d, sA + wg * 8192, sB);
                else
                    wg_mma_ktile<KIND>(d, sA + wg * (64 * 128), sB);
#endif
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                }
                // (dA_raw, column-0 tiles) this warpgroup's 64 rows of the gathered A stage written on to p.a_rows
                // in the GEMM's row order while the wgmma runs. The full barrier's phase made the stage's
                // cp.async writes visible; the stage is released only after the next k-tile's wgmma, so it is
                // still intact. (The producer storing its own chunks 3 k-tiles behind its loads, after
                // cp.async.wait_group, measured the same: session 18.) Rows past m_end: o.rows <= 0, none copied.
                if (side) {
                    const int row0 = w.m0 + 64 * wg;
                    ws_copy_box(sA + wg * 8192, WsCopyOut{p.a_rows, p.lda, w.m_end - row0, p.k_dim}, row0, w.k_begin + kt * WG_BK, tid & 127);
                }
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                wg_fence_acc(d);
                // the k-tile before this one has been read by this warpgroup's wgmma: hand its stage back
                // (dA_raw's side tiles: every lane also read it, ws_copy_box, and arrives for itself)
                if (kt > 0) ws_release(empty0 + 8 * ((it - 1) % WS_STAGES), lane, side);
            }
            // the next tile's description (global loads) in flight during the last wgmma and the epilogue
            if (!dyn && t + stride < count) next = tile(t + stride);
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            wg_fence_acc(d);
            if (w.nk > 0) ws_release(empty0 + 8 * ((it - 1) % WS_STAGES), lane, side);
            if (idle) continue;
#ifdef WS_EXP_NO_STORE  // experiment: time the main loops alone (no output written)
            if (d[0] != 12345.0f) continue;  // (kept data-dependent so the wgmma results stay live)
#endif
#ifdef WS_EXP_CLOCKS
            const long long c_epi0 = clock64();
            c_main += c_epi0 - c_tile;
            ++n_tiles_done;
#endif
            constexpr bool TMA_OUT = EPI == EPI_STORE;
            const int row0 = w.m0 + 64 * wg;  // this warpgroup's first row
            const WsCopyOut full{nullptr, 0, 64, 0};
            if (TMA_OUT && KIND == 2) {
                // the map's row bound is the expert's m_dim: a warpgroup past it has nothing to store
                if (row0 < p.m_dim) ws_store_tma(d, out, tc, w.n0, row0, w.e, wq, lane, full);
            } else if (TMA_OUT && row0 + 64 <= w.m_end) {
                // rows past m_end belong to the next expert's tile: only whole 64-row groups go by TMA
                ws_store_tma(d, out, tc, w.n0, row0, 0, wq, lane, full);
            } else if (EPI == EPI_STORE && WS_PARTIAL_STAGED_ROWS) {
                if (row0 < w.m_end) ws_store_tma(d, out, tc, w.n0, row0, 0, wq, lane, WsCopyOut{p.c, p.ldc, w.m_end - row0, p.n_dim});
            } else if (EPI == EPI_SWIGLU_FWD_SPLIT && WS_GEMM1_TMA && (WS_PARTIAL_STAGED_GEMM1 ? row0 < w.m_end : p.inter % 128 == 0 && row0 + 64 <= w.m_end)) {
                const bool copy = WS_PARTIAL_STAGED_GEMM1 && !(p.inter % 128 == 0 && row0 + 64 <= w.m_end);
                ws_store_swiglu_tma(p, d, out, tc, td, w.n0 >> 1, row0, wq, lane, copy, w.m_end);
            } else if (KIND == 2) {
                wg_epilogue_wgrad(p, d, w.e, w.m0, w.n0, r_in, c_in);
            } else if (!(EPI == EPI_SWIGLU_FWD_SPLIT && WS_GEMM1_TMA && WS_PARTIAL_STAGED_GEMM1)) {  // (there: no rows left)
                wg_epilogue_rows<EPI>(p, d, w.m0, w.m_end, w.n0, r_in, c_in, lane, w.n_tile, w.n_tiles);
            }
#ifdef WS_EXP_CLOCKS
            c_epi += clock64() - c_epi0;
#endif
        }
        if (leader) bulk_wait_all();  // the last stores have landed before the block ends
#ifdef WS_EXP_CLOCKS
        if (leader && wg == 0 && blockIdx.x < 1024) {
            long long g_end;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_end));
            ws_span[blockIdx.x][0] = g_start;
            ws_span[blockIdx.x][2] = clock64() - c_start;
            ws_span[blockIdx.x][1] = g_end;
        }
        if (leader && (blockIdx.x == 0 || blockIdx.x == 77)) {
            long long* r = ws_clk[2 * (blockIdx.x != 0) + wg];
            const long long v[10] = {EPI * 10 + KIND, n_tiles_done, clock64() - c_start, c_main, c_full, c_full0, c_epi, out.c_sync, out.c_issue, 1};
            for (int i = 0; i < 10; ++i) r[i] = v[i];
        }
#endif
    }
#if WS_CLUSTER > 1
    // no block leaves while its partner may still arrive on its barriers or multicast into its shared memory
    cluster_sync();
#endif
}
#define WS_BODY(E, K) ws_gemm<E, K>(p, &ta, &tb, &tc, &td);
#else
struct __align__(64) TmaDesc {
    unsigned long long v[16];
};
#define WS_BODY(E, K) __trap();
#endif

// Launched with gridDim.x = min(SMs, tiles), WS_THREADS threads and WS_SMEM bytes of dynamic shared memory
// (WG_SMEM plus the consumers' staging buffers), with the tensor maps of A (used when p.a_idx is null), B (row
// GEMMs; weight gradients: when p.b_idx is null) and the outputs C (EPI_STORE kernels; GEMM1:
// H) and D (GEMM1: A).
// ws_wgrad takes the expert count in p.k_dim (its k ranges come from p.offsets).
#define WS_PARAMS const FastGemmParams p, const __grid_constant__ TmaDesc ta, const __grid_constant__ TmaDesc tb, const __grid_constant__ TmaDesc tc, \
                  const __grid_constant__ TmaDesc td
extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) ws_gemm1_swiglu(WS_PARAMS) { WS_BODY(EPI_SWIGLU_FWD_SPLIT, 0) }
extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) ws_rows(WS_PARAMS) { WS_BODY(EPI_STORE, 0) }
extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) ws_rows_bmn(WS_PARAMS) { WS_BODY(EPI_STORE, 1) }
extern "C" __global__ void __launch_bounds__(WS_THREADS, 1) ws_wgrad(WS_PARAMS) { WS_BODY(EPI_STORE, 2) }
