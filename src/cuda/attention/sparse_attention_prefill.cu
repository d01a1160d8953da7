// Prefill sparse attention kernels (see sparse_attention_prefill.cuh for the design and the bit-identity rules).
//
// Workspace rows (bf16, head_dim each), so that every address is known without a prefix sum over sequences:
//   [0, n_tokens)                                  the step's own positions: row of token t = t
//   [n_tokens, n_tokens + n_seqs*(W-1))            window history of sequence s: W-1 rows, position start_s-W+1+i
//   [.., + n_seqs * max_entries)                   compressed entries of sequence s: entry w at s*max_entries + w
//
// Attention CTA (one query, G row groups of 16 heads, 2 warps per group), per candidate tile:
//  1. cp.async of the tile's 32 rows (zero-filled when masked) S-1 tiles ahead of the compute (the V4
//     instantiation: one tile ahead, its third buffer holds the tile whose PV product groups 2-3 run late), through
//     a ring of stage buffers with a `full` and an `empty` mbarrier each: no CTA barrier per tile (or, with the
//     tuning's cta_release, one CTA barrier per tile before the refill instead of the `empty` mbarriers);
//  2. QK: warp (group, half) runs the k16 mma chain of its head_dim half for all 4 n-tiles (16 heads x 32
//     candidates); the two halves are exchanged through shared memory (named barrier per group) and summed
//     half0 + half1, each warp then holding the group's full 16 x 32 scores;
//  3. softmax per (head, tile) in registers: row max over the quad, the decode kernel's butterfly sum order,
//     P rounded to bf16 straight into the PV A fragments (the accumulator layout of QK is the A layout of PV);
//  4. PV: the warp's head_dim half, V fragments through ldmatrix.trans, accumulators scaled around the product.
#include <algorithm>
#include <sstream>
#include <string>

#include "cuda/attention/attn_tile.cuh"
#include "cuda/attention/sparse_attention_prefill.cuh"
#include "cuda/common/arch.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kGroupHeads = 16;    // heads of one row group (an m16 tile)
constexpr int kGroupThreads = 64;  // two warps per group: the head_dim halves
constexpr int kMaxGroups = 4;
constexpr int kMaxThreads = kMaxGroups * kGroupThreads;
constexpr int kMaxStages = 3;
constexpr int kMaxDim = 512;
constexpr int kMaxNt = kMaxDim / 16;  // PV n-tiles of one warp (half of head_dim, 8 dims each)
constexpr int kMaxTopkWidth = 8192;
// The shape of the instantiation with compile-time sizes (prefill_attention_kernel): V4's head_dim, its 64 heads in
// one CTA and three stage buffers (one tile ahead, one for the deferred PV products), 181 KiB of shared memory with a
// 512-wide top-k row: sm_90 / sm_100 (227 KB per block); smaller parts take the runtime-sized kernel.
constexpr int kV4HeadDim = 512, kV4Stages = 3, kV4Groups = 4;
constexpr int kGatherWarps = 8;
constexpr int kGatherThreads = kGatherWarps * 32;

// Where the gathered rows live (see the file comment).
struct GatherLayout {
    const bf16* rows = nullptr;
    int64_t history_row0 = 0;  // = n_tokens
    int64_t comp_row0 = 0;     // = n_tokens + n_seqs * (window - 1)
    int max_entries = 0;
};

// Row of position pos of sequence seq (start = its first new position, first_row = its first token row), or -1
// when the position is not in the gathered range.
__device__ __forceinline__ int64_t window_row(const GatherLayout& g, int window, int seq, int start, int first_row,
                                              int64_t pos) {
    if (pos >= start) return first_row + (pos - start);
    const int64_t i = pos - (int64_t(start) - (window - 1));
    return i >= 0 ? g.history_row0 + int64_t(seq) * (window - 1) + i : -1;
}

__global__ void __launch_bounds__(kGatherThreads) gather_kernel(SparseAttentionParams p, GatherLayout g, bf16* rows) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int seq = blockIdx.y, lane = threadIdx.x & 31;
    const int item = blockIdx.x * kGatherWarps + (threadIdx.x >> 5);
    const int start = p.batch.seq_start_pos[seq], n = p.batch.seq_n_tokens[seq];
    const int state_slot = p.batch.seq_slot[seq];
    const int window_items = p.window - 1 + p.batch.max_seq_tokens;
    const uint8_t* src;
    KvFormat fmt;
    int64_t dst_row;
    if (item < window_items) {  // positions start-W+1 .. start+n-1
        const int64_t pos = int64_t(start) - (p.window - 1) + item;
        if (pos < 0 || pos >= int64_t(start) + n) return;
        src = ring_entry(p.ring, state_slot, pos);
        fmt = p.ring.format;
        dst_row = window_row(g, p.window, seq, start, p.batch.seq_first_row[seq], pos);
    } else {
        const int w = item - window_items;
        if (p.ratio <= 0 || w >= g.max_entries || w >= (start + n) / p.ratio) return;
        src = paged_entry(p.comp, state_slot, w);
        fmt = KvFormat(p.comp.format);
        dst_row = g.comp_row0 + int64_t(seq) * g.max_entries + w;
    }
    bf16* dst = rows + dst_row * p.head_dim;
    // A lane's chunks (two at head_dim 512) all requested before the first is converted (attn_tile.cuh)
    constexpr int kLaneChunks = 4;
    for (int c0 = lane; c0 < p.head_dim / 8; c0 += 32 * kLaneChunks) {
        RawChunk8 raw[kLaneChunks];
#pragma unroll
        for (int k = 0; k < kLaneChunks; ++k) {
            const int c = c0 + 32 * k;
            raw[k] = load_chunk8_raw(c < p.head_dim / 8 ? src : nullptr, fmt, p.head_dim, p.rope_dim, c * 8);
        }
#pragma unroll
        for (int k = 0; k < kLaneChunks; ++k) {
            const int c = c0 + 32 * k;
            if (c < p.head_dim / 8) *reinterpret_cast<uint4*>(dst + c * 8) = convert_chunk8(raw[k]);
        }
    }
}

// Barrier of the two warps of row group `group` (ids 1..kMaxGroups; 0 is __syncthreads). Immediate ids, so that
// the kernel reserves 5 hardware barriers rather than all 16.
__device__ __forceinline__ void group_barrier(int group) {
    switch (group) {
        case 0: asm volatile("bar.sync 1, 64;\n" ::: "memory"); break;
        case 1: asm volatile("bar.sync 2, 64;\n" ::: "memory"); break;
        case 2: asm volatile("bar.sync 3, 64;\n" ::: "memory"); break;
        default: asm volatile("bar.sync 4, 64;\n" ::: "memory"); break;
    }
}
static_assert(kMaxGroups == 4 && kGroupThreads == 64, "group_barrier's ids and thread count");

// Shared memory of the attention kernel; the same function sizes it on the host (raw = nullptr).
struct PrefillSmem {
    bf16* q;     // [G*16][D + pad]
    bf16* kv;    // [stages][kTile][D + pad]
    float* xch;       // [2 tile parities][G][2 halves][16 values][32 lanes] QK partial scores
    int* topk;        // [topk_width] the query's top-k row
    uint64_t* full;   // [stages] mbarriers: the stage's rows landed (every thread's copies)
    uint64_t* empty;  // [stages] mbarriers: every warp is done with the stage
};
__host__ __device__ inline size_t prefill_smem_layout(int D, int groups, int stages, int topk_width, PrefillSmem& s,
                                                      unsigned char* raw) {
    SmemCarver c{raw};
    s.q = c.take<bf16>(size_t(groups) * kGroupHeads * (D + kMmaPad));
    s.kv = c.take<bf16>(size_t(stages) * kTile * (D + kMmaPad));
    s.xch = c.take<float>(size_t(2) * groups * 2 * 16 * 32);
    s.topk = c.take<int>(size_t(topk_width));
    s.full = c.take<uint64_t>(size_t(stages));
    s.empty = c.take<uint64_t>(size_t(stages));
    return c.size;
}

// The candidates of one query (the decode kernel's list: window oldest first, then the compressed slots).
struct QueryCandidates {
    int64_t pos;
    int seq, start, first_row;
    int n_win, n_vis, n_cand;
    bool has_topk;
};

// Gathered row of candidate i, or -1 when it is masked (beyond the list, an empty top-k slot, not visible, or
// beyond the host bound max_entries).
__device__ __forceinline__ int64_t candidate_row(const SparseAttentionParams& p, const GatherLayout& g,
                                                 const QueryCandidates& c, const int* topk_s, int i) {
    if (i >= c.n_cand) return -1;
    if (i < c.n_win) return window_row(g, p.window, c.seq, c.start, c.first_row, c.pos - c.n_win + 1 + i);
    const int j = i - c.n_win;
    const int w = c.has_topk ? topk_s[j] : j;
    if (w < 0 || w >= c.n_vis || w >= g.max_entries) return -1;
    return g.comp_row0 + int64_t(c.seq) * g.max_entries + w;
}

// kD, kStages, kGroups: the shape as compile-time constants (0: taken at run time from p, the argument and
// blockDim). One instantiation is fixed to V4's shape (head_dim 512, 4 row groups, 3 stage buffers, kDefer): with
// the sizes known its loops unroll and its index math folds (Nsight Compute on the runtime form, run 54 of the mHC
// tiled log: ~1,540 instructions per warp and 32-candidate tile for 128 HMMA, 700 of them integer and branch work),
// and half its row groups run their PV products one tile late (kDefer, at the tile loop). Every form runs the same
// floating-point operations in the same order per row group, so they give the same bits.
template <int kD, int kStages, int kGroups, bool kDefer>
__global__ void __launch_bounds__(kMaxThreads, 1)
    prefill_attention_kernel(SparseAttentionParams p, GatherLayout g, int stages_arg, bool cta_release) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int D = kD > 0 ? kD : p.head_dim, DP = D + kMmaPad, H = p.n_heads;
    const int stages = kStages > 0 ? kStages : stages_arg;
    const int groups = kGroups > 0 ? kGroups : int(blockDim.x) / kGroupThreads;
    const int n_threads = groups * kGroupThreads;
    const int topk_width = p.topk ? p.topk_width : 0;
    PrefillSmem sm;
    prefill_smem_layout(D, groups, stages, topk_width, sm, smem_raw);
    // Last rows first: a prompt's later rows have the longer candidate lists, and the short ones fill the tail.
    const int t = int(gridDim.x) - 1 - int(blockIdx.x), h_cta = blockIdx.y * groups * kGroupHeads;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int grp = warp >> 1, half = warp & 1;

    QueryCandidates c;
    c.seq = p.batch.token_seq[t];
    c.pos = p.batch.token_pos[t];
    c.start = p.batch.seq_start_pos[c.seq];
    c.first_row = p.batch.seq_first_row[c.seq];
    c.n_win = c.pos + 1 < p.window ? int(c.pos + 1) : p.window;
    c.n_vis = p.ratio > 0 ? int((c.pos + 1) / p.ratio) : 0;
    c.has_topk = p.topk != nullptr;
    c.n_cand = c.n_win + (p.ratio > 0 ? (c.has_topk ? topk_width : c.n_vis) : 0);
    const int n_tiles = (c.n_cand + kTile - 1) / kTile;

    for (int i = tid; i < topk_width; i += n_threads) sm.topk[i] = p.topk[int64_t(t) * p.topk_stride + i];
    if (tid < stages) {
        mbar::mbar_init_count(sm.full + tid, uint32_t(n_threads));        // per phase: every thread's copies landed
        mbar::mbar_init_count(sm.empty + tid, uint32_t(n_threads / 32));  // per phase: every warp released it
    }
    __syncthreads();  // the top-k row is read by every loader below; the ring's barriers are initialized
    // q rows of the CTA's heads (zero past n_heads), covered by the first tile's `full` phase. Issued after the
    // barrier above rather than before the initialization: racecheck paired these copies with the mbarrier
    // initializations (7 reports, every launch shape), and a CTA barrier between them is an order it follows.
    const int chunks = D / 8;
    for (int i = tid; i < groups * kGroupHeads * chunks; i += n_threads) {
        const int r = i / chunks, d = (i % chunks) * 8, h = h_cta + r;
        const bf16* src = h < H ? p.q + int64_t(t) * p.q_stride + int64_t(h) * D + d : p.q;
        cp_async16(smem_u32(sm.q + r * DP + d), src, h < H ? 16 : 0);
    }

    // Tile loader: blockDim = 32 rows x (2 * groups) threads per row; each thread resolves its row once per tile and
    // copies every (2 * groups)-th 16-byte chunk of it (a warp covers 16 / groups rows, whole 128-byte lines).
    const int row_threads = n_threads / kTile, load_row = tid / row_threads, load_chunk0 = tid % row_threads;
    // This thread's first 16-byte chunk in stage 0; a stage is kTile * DP bf16 further. A masked row copies nothing
    // (src-size 0 zero-fills) from an address inside the workspace's first row, so the source needs no select per
    // chunk and the copies take immediate offsets.
    const uint32_t load_dst0 = smem_u32(sm.kv + load_row * DP) + uint32_t(load_chunk0) * 16;
    const uint32_t stage_bytes = uint32_t(kTile * DP) * 2;
    auto load_tile = [&](int tile, int stage) {
        const int64_t row = candidate_row(p, g, c, sm.topk, tile * kTile + load_row);
        const bf16* src = g.rows + (row >= 0 ? row * D : 0) + load_chunk0 * 8;
        const uint32_t dst = load_dst0 + uint32_t(stage) * stage_bytes;
        const int bytes = row >= 0 ? 16 : 0;
        const int full = chunks / row_threads;  // chunks every loader thread copies (the rest: the first ones)
#pragma unroll
        for (int k = 0; k < full; ++k) cp_async16(dst + k * row_threads * 16, src + k * row_threads * 8, bytes);
        if (full * row_threads + load_chunk0 < chunks)
            cp_async16(dst + full * row_threads * 16, src + full * row_threads * 8, bytes);
    };
    // The stage ring: tile a goes to stage a % stages once every warp has released tile a - stages there (empty),
    // and is read once every thread's copies of it have landed (full; its first phase also covers q). Warps are
    // coupled only through the ring and their row group's exchange, not by CTA barriers around each tile (two per
    // tile before: every row group then ran QK, softmax and PV in step with the others), so a row group can run a
    // tile's QK / softmax while another runs its PV product, about one tile apart at most.
    // cta_release (a kernel argument, uniform): the refill of tile a waits at a CTA barrier instead, at the top of
    // iteration a - lookahead, which every warp reaches only once done with tile a - stages (a non-deferred warp
    // released it in iteration a - stages, a deferred one in a - stages + 1); the `empty` mbarriers go unused. One
    // barrier per tile, so a row group can still run a tile's QK / softmax while another runs its PV product. Why:
    // compute-sanitizer's racecheck does not follow mbarrier phases and reports every refill of the default form as
    // a hazard; a CTA barrier it follows. A named barrier over all of the CTA's threads with some warps only
    // arriving (bar.arrive) was tried first: racecheck then misplaced the CTA barriers after it and reported hazards
    // across the epilogue's __syncthreads (run 231, docs/perf-log/2026-12-05_query-chain-and-prefill-releases.md).
    // Same bits either way: only the timing moves.
    // Tiles are requested `lookahead` ahead of the compute. With kDefer the upper half of the row groups runs each
    // tile's PV one tile late (below), so the stage of tile t - 1 is still read while tile t computes: one more
    // buffer than the lookahead needs.
    const int lookahead = kDefer ? stages - 2 : stages - 1;
    // Called by every thread with the same a (uniform: cta_release's barrier).
    auto issue_tile = [&](int a) {
        const int st = a % stages;
        if (a >= stages) {
            if (cta_release)
                __syncthreads();  // every warp is done with tile a - stages (see above)
            else
                mbar::mbar_wait(sm.empty + st, uint32_t((a / stages - 1) & 1));
        }
        load_tile(a, st);
        mbar::cp_async_mbar_arrive(sm.full + st);
    };
    auto release_stage = [&](int tile) {
        if (cta_release) return;
        __syncwarp();  // every lane has read the stage
        if (lane == 0) mbar::mbar_arrive(sm.empty + tile % stages);
    };
    for (int a = 0; a < lookahead && a < n_tiles; ++a) issue_tile(a);

    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // rows lane/4 and lane/4 + 8 of the group
    float acc[kMaxNt][4];
#pragma unroll
    for (int j = 0; j < kMaxNt; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const int nt_count = D / 16;  // PV n-tiles of this warp's half
    const int k_begin = half * (D / 2);
    // This warp's head_dim half is folded into the bases once, so that the k steps below add compile-time offsets
    // (which ptxas folds into the ldmatrix addresses) rather than OR-ing k_begin in at every step.
    const uint32_t a_base = smem_u32(sm.q + (grp * kGroupHeads + lane % 16) * DP + (lane / 16) * 8 + k_begin);
    const uint32_t b_lane = uint32_t(((lane / 16) * 8 + lane % 8) * DP + ((lane / 8) % 2) * 8 + k_begin) * 2;
    // The exchange buffer has a part per tile parity: a warp writes tile t + 1's half while its partner may still
    // read tile t's (it cannot get further: the group barrier of tile t + 1 waits for the partner).
    float4* const xch_mine0 = reinterpret_cast<float4*>(sm.xch) + (grp * 2 + half) * 4 * 32;
    const float4* const xch_other0 = reinterpret_cast<const float4*>(sm.xch) + (grp * 2 + (half ^ 1)) * 4 * 32;
    const int xch_parity_step = groups * 2 * 4 * 32;  // float4s from the even tiles' part to the odd ones'

    // QK of one tile, the exchange of the halves and the online softmax: m_run and l_run advance, st and pa are
    // what the tile's PV product needs.
    auto scores_and_softmax = [&](const bf16* kv, int parity, uint32_t valid_mask, TileStep (&st)[2],
                                  uint32_t (&pa)[2][4]) {
        float4* const xch_mine = xch_mine0 + parity * xch_parity_step;
        const float4* const xch_other = xch_other0 + parity * xch_parity_step;
        // QK: the k16 chain of this warp's head_dim half, 4 n-tiles of 8 candidates
        float sc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
        {
            const uint32_t b_base = smem_u32(kv) + b_lane;
            const uint32_t b_hi = uint32_t(16 * DP * 2);  // n-tiles 2, 3
#pragma unroll
            for (int k = 0; k < D / 2; k += 16) {
                uint32_t a0, a1, a2, a3, b0, b1, b2, b3, b4, b5, b6, b7;
                ldsm_x4(a_base + k * 2, a0, a1, a2, a3);
                ldsm_x4(b_base + k * 2, b0, b1, b2, b3);
                ldsm_x4(b_base + b_hi + k * 2, b4, b5, b6, b7);
                mma_16816(sc[0], a0, a1, a2, a3, b0, b1);
                mma_16816(sc[1], a0, a1, a2, a3, b2, b3);
                mma_16816(sc[2], a0, a1, a2, a3, b4, b5);
                mma_16816(sc[3], a0, a1, a2, a3, b6, b7);
            }
        }
        // exchange the halves (one 16-byte word per n-tile and lane); s = half0 + half1, scaled, masked
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) xch_mine[nt * 32 + lane] = make_float4(sc[nt][0], sc[nt][1], sc[nt][2], sc[nt][3]);
        group_barrier(grp);
        float s[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            const float4 o = xch_other[nt * 32 + lane];
            const float other[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float sum = sc[nt][e] + other[e];  // half0 + half1 (commutative)
                const int col = nt * 8 + 2 * (lane % 4) + (e % 2);
                s[nt][e] = (valid_mask >> col) & 1u ? sum * p.softmax_scale : -INFINITY;
            }
        }

        // online softmax per row (r = 0: head lane/4 of the group, elements 0, 1; r = 1: lane/4 + 8, elements 2, 3)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            st[r] = tile_step(m_run[r], mx);
            float pe[4][2];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int b = 0; b < 2; ++b) pe[nt][b] = tile_prob(st[r], s[nt][2 * r + b]);
            // The decode kernel sums a row with the warp butterfly over candidates e (lane = e): xor 16, 8, 4, 2, 1.
            // Candidate e = 8 nt + 2 (lane % 4) + b here, so 16 and 8 pair n-tiles within the thread, 4 and 2 are
            // the quad's lanes xor 2 and xor 1, and 1 pairs b; each butterfly node is one commutative add, so
            // the same tree gives the same bits.
            float z[2];
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                float x = (pe[0][b] + pe[2][b]) + (pe[1][b] + pe[3][b]);
                x += __shfl_xor_sync(0xffffffffu, x, 2);
                x += __shfl_xor_sync(0xffffffffu, x, 1);
                z[b] = x;
            }
            l_run[r] = tile_denominator(st[r], l_run[r], z[0] + z[1]);
            m_run[r] = st[r].m_new;
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {
                const __nv_bfloat162 lo = __floats2bfloat162_rn(pe[2 * ks][0], pe[2 * ks][1]);
                const __nv_bfloat162 hi = __floats2bfloat162_rn(pe[2 * ks + 1][0], pe[2 * ks + 1][1]);
                pa[ks][r] = *reinterpret_cast<const uint32_t*>(&lo);      // a0 (row lane/4) / a1 (row lane/4 + 8)
                pa[ks][2 + r] = *reinterpret_cast<const uint32_t*>(&hi);  // a2 / a3: candidates + 8
            }
        }
    };

    // PV of one tile over this warp's head_dim half. The accumulator factors are skipped where they cannot change
    // a bit: before the first tile the accumulators are +0 (the factor is 0), and a factor of exactly 1 is an
    // identity.
    auto pv_product = [&](const bf16* kv, bool first_tile, const TileStep (&st)[2], const uint32_t (&pa)[2][4]) {
        if (!first_tile && __any_sync(0xffffffffu, st[0].acc_before != 1.f || st[1].acc_before != 1.f))
            scale_rows(acc, st[0].acc_before, st[1].acc_before);
        const int n_base = half * (D / 2);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            const int v_row = ks * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
            const uint32_t v_base = smem_u32(kv + v_row * DP + n_base + (lane / 16) * 8);
#pragma unroll
            for (int j = 0; j < kMaxNt; j += 2) {
                if (j >= nt_count) break;
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(v_base + j * 16, b0, b1, b2, b3);
                mma_16816(acc[j], pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], b0, b1);
                mma_16816(acc[j + 1], pa[ks][0], pa[ks][1], pa[ks][2], pa[ks][3], b2, b3);
            }
        }
        if (__any_sync(0xffffffffu, st[0].acc_after != 1.f || st[1].acc_after != 1.f))
            scale_rows(acc, st[0].acc_after, st[1].acc_after);
    };

    // kDefer: row groups groups/2.. compute tile t's PV during tile t + 1, while groups 0.. run QK and
    // softmax. Warp w runs on scheduler w % 4, so each scheduler holds one warp of either half and one of them has
    // HMMA work while the other waits on softmax latency. Only the timing moves: every row group runs the same
    // operations in the same order.
    const bool defer = kDefer && grp >= groups / 2;
    bool pending = false;  // a deferred PV product is waiting (its tile's stage is still intact)
    int pending_tile = 0;
    TileStep pending_st[2] = {};
    uint32_t pending_pa[2][4] = {};
    auto run_pending = [&]() {
        if (!pending) return;
        pv_product(sm.kv + size_t(pending_tile % stages) * kTile * DP, pending_tile == 0, pending_st, pending_pa);
        release_stage(pending_tile);
        pending = false;
    };

    for (int tile = 0; tile < n_tiles; ++tile) {
        if (tile + lookahead < n_tiles) issue_tile(tile + lookahead);
        const int stage = tile % stages;
        mbar::mbar_wait(sm.full + stage, uint32_t((tile / stages) & 1));  // this tile's rows (and, at tile 0, q)
        if (defer) run_pending();
        const bf16* kv = sm.kv + size_t(stage) * kTile * DP;
        // bit e: candidate e of the tile is valid (the loaders' rule, evaluated by each warp)
        const uint32_t valid_mask =
            __ballot_sync(0xffffffffu, candidate_row(p, g, c, sm.topk, tile * kTile + lane) >= 0);
        // A tile without a valid candidate leaves m, l and the accumulators as they are (its max is -inf: factors
        // 1, probabilities 0 against zero-filled rows), so it is skipped; top-k lists shorter than topk_width end in
        // such tiles. The decision is the same in every warp.
        if (valid_mask == 0) {
            release_stage(tile);
            continue;
        }
        TileStep st[2];
        uint32_t pa[2][4];  // P as the PV A fragments, [k-step][register]
        scores_and_softmax(kv, tile & 1, valid_mask, st, pa);
        if (defer) {
            pending = true;
            pending_tile = tile;
#pragma unroll
            for (int r = 0; r < 2; ++r) pending_st[r] = st[r];
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
#pragma unroll
                for (int i = 0; i < 4; ++i) pending_pa[ks][i] = pa[ks][i];
        } else {
            pv_product(kv, tile == 0, st, pa);
            release_stage(tile);
        }
    }
    if (defer) run_pending();
    // Every copy has landed (each tile's full phase was waited for). No warp may still read q or the exchange
    // buffer, both rewritten below. The wait_all costs nothing then, but it is the completion compute-sanitizer's
    // racecheck knows: without it, the copies stay in flight in its model (their completion is only signalled
    // through the `full` mbarriers) and it reports them against writes of later CTAs on the same SM.
    cp_async_wait_all();
    __syncthreads();

    // Epilogue: normalized rows rounded to bf16 into shared memory (the q tile is free now), then coalesced 16-byte
    // stores with the rope pairs de-rotated; cos / sin once per pair (a function of pos and the pair only).
    bf16* staged = sm.q;
    float* cos_s = sm.xch;  // [n_pairs], the exchange buffer is free too
    float* sin_s = sm.xch + kMaxRopePairs;
    const int n_base = half * (D / 2);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = grp * kGroupHeads + lane / 4 + 8 * r, h = h_cta + row;
        const float f = h < H ? output_factor(m_run[r], l_run[r], p.sink[h]) : 0.f;
#pragma unroll
        for (int j = 0; j < kMaxNt; ++j) {
            if (j >= nt_count) break;
            const int dim = n_base + j * 8 + 2 * (lane % 4);
            *reinterpret_cast<__nv_bfloat162*>(staged + row * DP + dim) =
                __floats2bfloat162_rn(acc[j][2 * r] * f, acc[j][2 * r + 1] * f);
        }
    }
    const int rope_first_pair = D / 2 - p.rope.n_pairs;
    for (int i = tid; i < p.rope.n_pairs; i += n_threads) rope_cos_sin(c.pos, p.rope.inv_freq[i], cos_s[i], sin_s[i]);
    __syncthreads();
    const int rows_here = min(groups * kGroupHeads, H - h_cta);
    for (int i = tid; i < rows_here * chunks; i += n_threads) {
        const int row = i / chunks, d = (i % chunks) * 8;
        uint4 v = *reinterpret_cast<const uint4*>(staged + row * DP + d);
        __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int pair = d / 2 + k - rope_first_pair;
            if (pair < 0) continue;
            float2 x = __bfloat1622float2(pairs[k]);
            derotate_pair(x.x, x.y, cos_s[pair], sin_s[pair]);
            pairs[k] = __floats2bfloat162_rn(x.x, x.y);
        }
        *reinterpret_cast<uint4*>(p.out + int64_t(t) * p.out_stride + int64_t(h_cta + row) * D + d) = v;
    }
}

int64_t gathered_rows(int n_tokens, int n_seqs, int window, int max_entries) {
    return int64_t(n_tokens) + int64_t(n_seqs) * (window - 1) + int64_t(n_seqs) * max_entries;
}

}  // namespace

size_t sparse_attention_prefill_workspace_bytes(int max_tokens, int max_seqs, int window, int max_entries,
                                                int head_dim) {
    return size_t(gathered_rows(std::max(max_tokens, 1), std::max(max_seqs, 1), std::max(window, 1),
                                std::max(max_entries, 0))) *
           size_t(head_dim) * sizeof(bf16);
}

namespace {

// Launch shape: as many row groups as the heads need (up to 4), then the deepest pipeline that fits the device's
// shared memory (2 by default; sm_89 / sm_120 parts with ~100 KB per block get fewer groups / stages).
struct PrefillShape {
    int groups = 1, stages = 1;
    size_t smem = 0;
    bool v4 = false;  // the instantiation with V4's sizes (groups kV4Groups, stages kV4Stages)
};
PrefillShape plan_shape(const SparseAttentionParams& p, const PrefillAttentionTuning& tuning) {
    const int topk_width = p.topk ? p.topk_width : 0;
    const size_t max_smem = size_t(current_arch().max_smem_per_block_optin);
    auto smem_of = [&](int gr, int st) {
        PrefillSmem unused;
        return prefill_smem_layout(p.head_dim, gr, st, topk_width, unused, nullptr);
    };
    PrefillShape s;
    if (tuning.allow_fixed_shape && !tuning.head_groups && !tuning.stages && p.head_dim == kV4HeadDim &&
        p.n_heads > (kV4Groups - 1) * kGroupHeads && smem_of(kV4Groups, kV4Stages) <= max_smem) {
        s.groups = kV4Groups;
        s.stages = kV4Stages;
        s.smem = smem_of(s.groups, s.stages);
        s.v4 = true;
        return s;
    }
    s.groups =
        tuning.head_groups ? tuning.head_groups : std::min(kMaxGroups, (p.n_heads + kGroupHeads - 1) / kGroupHeads);
    s.stages = tuning.stages ? tuning.stages : 2;
    if (!tuning.stages)
        while (s.stages > 1 && smem_of(s.groups, s.stages) > max_smem) --s.stages;
    if (!tuning.head_groups)
        while (s.groups > 1 && smem_of(s.groups, s.stages) > max_smem) --s.groups;
    s.smem = smem_of(s.groups, s.stages);
    return s;
}

// Why p cannot run (empty when it can): the single list of requirements behind both the supports query and the
// errors of a call.
std::string problem_of(const SparseAttentionParams& p, int max_entries, const PrefillAttentionTuning& tuning) {
    std::ostringstream os;
    auto say = [&](const char* f, auto... args) {
        format_into(os, f, args...);
        return os.str();
    };
    const int D = p.head_dim;
    if (D < 32 || D % 32 != 0 || D > kMaxDim)
        return say("head_dim must be a multiple of 32 in [32, {}], got {}", kMaxDim, D);
    if (p.n_heads <= 0 || !p.q || !p.out || !p.sink) return say("n_heads, q, out and attn_sink are required");
    if (p.q_stride % 8 != 0 || reinterpret_cast<uintptr_t>(p.q) % 16 != 0)
        return say("q must be 16-byte aligned with q_stride % 8 == 0, got q_stride {}", p.q_stride);
    if (p.out_stride % 8 != 0 || reinterpret_cast<uintptr_t>(p.out) % 16 != 0)
        return say("out must be 16-byte aligned with out_stride % 8 == 0, got out_stride {}", p.out_stride);
    if (p.window < 1 || !p.ring.base) return say("window {} and the ring are required", p.window);
    if (p.ring.ring_entries < p.window - 1 + p.batch.max_seq_tokens)
        return say("the ring ({} entries) must hold window - 1 + max_seq_tokens = {}", p.ring.ring_entries,
                   p.window - 1 + p.batch.max_seq_tokens);
    if (2 * p.rope.n_pairs > D || p.rope_dim < 0 || p.rope_dim >= D)
        return say("rope_dim {} (table {}) must be below head_dim {}", p.rope_dim, 2 * p.rope.n_pairs, D);
    if (p.ring.format != KvFormat::BF16 && (D - p.rope_dim) % 64 != 0)
        return say("FP8 entries need head_dim - rope_dim to be a multiple of 64, got {}", D - p.rope_dim);
    if (p.ratio < 0 || (p.ratio > 0 && !p.comp.base))
        return say("compressed entries are required when ratio ({}) > 0", p.ratio);
    if (max_entries < 0) return say("max_entries must be >= 0, got {}", max_entries);
    if (p.topk && (p.topk_width < 0 || p.topk_width > kMaxTopkWidth))
        return say("topk_width must be in [0, {}], got {}", kMaxTopkWidth, p.topk_width);
    if (p.batch.n_seqs > 65535) return say("at most 65535 sequences per step, got {}", p.batch.n_seqs);
    if (tuning.head_groups < 0 || tuning.head_groups > kMaxGroups || tuning.stages < 0 || tuning.stages > kMaxStages)
        return say("tuning head_groups {} (0..{}) / stages {} (0..{}) out of range", tuning.head_groups, kMaxGroups,
                   tuning.stages, kMaxStages);
    const PrefillShape shape = plan_shape(p, tuning);
    const int max_smem = current_arch().max_smem_per_block_optin;
    if (shape.smem > size_t(max_smem))
        return say(
            "{} bytes of shared memory (head_dim {}, {} head groups, {} stages, top-k width {}) exceed the "
            "device's {}",
            shape.smem, D, shape.groups, shape.stages, p.topk ? p.topk_width : 0, max_smem);
    return {};
}

}  // namespace

bool sparse_attention_prefill_supports(const SparseAttentionParams& p, int max_entries) {
    return problem_of(p, max_entries, {}).empty();
}

void sparse_attention_prefill(const SparseAttentionParams& p, int max_entries, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream, const PrefillAttentionTuning& tuning) {
    const std::string problem = problem_of(p, max_entries, tuning);
    if (!problem.empty()) fail_rt("sparse_attention_prefill: {}", problem);
    if (p.batch.n_tokens <= 0 || p.batch.n_seqs <= 0) return;
    const int D = p.head_dim;
    const int entries = p.ratio > 0 ? max_entries : 0;
    const size_t need =
        sparse_attention_prefill_workspace_bytes(p.batch.n_tokens, p.batch.n_seqs, p.window, entries, D);
    FS_ATTN_REQUIRE(workspace && workspace_bytes >= need,
                    "sparse_attention_prefill: workspace of {} bytes is smaller than the {} needed", workspace_bytes,
                    need);
    const PrefillShape shape = plan_shape(p, tuning);
    auto* const kernel = shape.v4 ? prefill_attention_kernel<kV4HeadDim, kV4Stages, kV4Groups, true>
                                  : prefill_attention_kernel<0, 0, 0, false>;
    allow_dynamic_smem(kernel, shape.smem);

    GatherLayout g;
    g.rows = static_cast<const bf16*>(workspace);
    g.history_row0 = p.batch.n_tokens;
    g.comp_row0 = int64_t(p.batch.n_tokens) + int64_t(p.batch.n_seqs) * (p.window - 1);
    g.max_entries = entries;
    const int items = p.window - 1 + p.batch.max_seq_tokens + entries;
    launch_pdl("prefill_gather_kernel", gather_kernel, dim3((items + kGatherWarps - 1) / kGatherWarps, p.batch.n_seqs),
               dim3(kGatherThreads), 0, stream, p, g, static_cast<bf16*>(workspace));
    CUDA_CHECK_LAUNCH("prefill_gather_kernel");
    const int head_blocks = ((p.n_heads + kGroupHeads - 1) / kGroupHeads + shape.groups - 1) / shape.groups;
    launch_pdl("prefill_attention_kernel", kernel, dim3(p.batch.n_tokens, head_blocks),
               dim3(shape.groups * kGroupThreads), shape.smem, stream, p, g, shape.stages, tuning.cta_release);
    CUDA_CHECK_LAUNCH("prefill_attention_kernel");
}

}  // namespace flashseek::cuda
