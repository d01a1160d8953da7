// Indexer kernels.
//  * prepare_q: one warp per head vector, head_dim/32 consecutive elements per lane; the Hadamard butterflies run
//    in registers (in-lane stages) and through xor shuffles (cross-lane stages), in the CPU op's exact order. A CTA
//    takes 8 or more heads of one token where they divide evenly (its rope angles evaluated once), as many as keep
//    the grid over all SMs.
//  * scores: CTA per (query, tile of entries); q (all heads, fp32, dim-major) and the key tile (bf16) live in
//    shared memory; score = sum over 4 head groups (in group order) of each group's chain of w_h ReLU(q_h . k) (in
//    head order). Form 0: tiles of 64, thread (entry, head group) runs its group's products and chain. Form 1: the
//    staging shortened, and tiles of 16-64 entries sized to fill the GPU, the products spread one (entry, 4 heads)
//    item per thread before the chains: the same values.
//  * top-k (also the second half of indexer_select_prefill, per chunk of rows): CTA per query; 4-pass 8-bit radix
//    select of the k-th largest order-preserving key, then two block scans place the selected indices in ascending
//    order (ties to the lower index), matching cpu::topk_indices. Form 1 keeps a row's keys in shared memory, finds
//    each pass's bin with one warp instead of one thread, clears the next pass's histogram while filling this one's,
//    stops once the threshold bin is taken whole, and places the indices with one scan of both counts.
//  Why two forms: at decode both kernels are latency-bound (at an 8k context, one query: 56 us per layer for the
//  two, events, run 212 of docs/perf-log/2026-12-04_expert-stage-scales.md); form 1 removes their serial
//  round trips (docs/perf-log/2026-12-04_indexer-staging-and-named-refills.md) and becomes the only one once the
//  device has run it.
#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/attn_helpers.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/indexer/indexer.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

// This lane's E consecutive bf16 of a row (one 2E-byte load where `vec`), and their store.
template <int E>
__device__ __forceinline__ void load_lane(const bf16* p, bool vec, float (&x)[E]) {
    if constexpr (E == 4 || E == 8) {
        if (vec) {
            uint32_t w[E / 2];
            if constexpr (E == 4) *reinterpret_cast<uint2*>(w) = *reinterpret_cast<const uint2*>(p);
            else *reinterpret_cast<uint4*>(w) = *reinterpret_cast<const uint4*>(p);
#pragma unroll
            for (int i = 0; i < E / 2; ++i) {
                x[2 * i] = __uint_as_float(w[i] << 16);
                x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
            }
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < E; ++i) x[i] = __bfloat162float(p[i]);
}
template <int E>
__device__ __forceinline__ void store_lane(bf16* p, bool vec, const float (&x)[E]) {
    if constexpr (E == 4 || E == 8) {
        if (vec) {
            uint32_t w[E / 2];
#pragma unroll
            for (int i = 0; i < E / 2; ++i) {
                const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
                w[i] = *reinterpret_cast<const uint32_t*>(&h);
            }
            if constexpr (E == 4) *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(w);
            else *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(w);
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < E; ++i) p[i] = __float2bfloat16_rn(x[i]);
}

// One head vector (row = token * n_heads + head) by one warp: RoPE, Hadamard, the FP4 simulation.
template <int E>  // elements per lane: head_dim / 32
__device__ __forceinline__ void prepare_q_row(bf16* q, int64_t stride, int row, int n_heads, const int32_t* positions,
                                              const RopeTable& rope, const float2* cos_sin, bool quant_sim,
                                              bool vec) {
    constexpr int D = 32 * E;
    const int lane = threadIdx.x & 31;
    const int t = row / n_heads, h = row % n_heads;
    bf16* v = q + t * stride + int64_t(h) * D + lane * E;
    float x[E];
    load_lane<E>(v, vec, x);
    const int rope_first = D - 2 * rope.n_pairs;
    const int64_t pos = positions[t];
#pragma unroll
    for (int i = 0; i < E; i += 2) {
        const int d = lane * E + i;
        if (E >= 2 && d >= rope_first) {
            float c, s;
            rope_pair_cos_sin(cos_sin, pos, rope.inv_freq, (d - rope_first) / 2, c, s);
            rope_rotate(x[i], x[i + 1], c, s, false);
            x[i] = round_bf16(x[i]);
            x[i + 1] = round_bf16(x[i + 1]);
        }
    }
    if constexpr (E == 1) {  // pairs straddle lanes
        const float other = __shfl_xor_sync(0xffffffffu, x[0], 1);
        const int d = lane;
        if (d >= rope_first) {
            float c, s;
            rope_pair_cos_sin(cos_sin, pos, rope.inv_freq, (d - rope_first) / 2, c, s);
            float x0 = (lane & 1) ? other : x[0], x1 = (lane & 1) ? x[0] : other;
            rope_rotate(x0, x1, c, s, false);
            x[0] = round_bf16((lane & 1) ? x1 : x0);
        }
    }
    if (!quant_sim) {  // reference configuration: the roped bf16 query, no Hadamard / FP4 (CPU exact numerics)
        store_lane<E>(v, vec, x);
        return;
    }
    // Hadamard: stage h pairs element j with j + h (j's bit h clear): low = a + b, high = a - b.
#pragma unroll
    for (int hs = 1; hs < E; hs *= 2) {
#pragma unroll
        for (int i = 0; i < E; ++i) {
            if ((i & hs) == 0) {
                const float a = x[i], b = x[i + hs];
                x[i] = a + b;
                x[i + hs] = a - b;
            }
        }
    }
#pragma unroll
    for (int lh = 1; lh < 32; lh *= 2) {
        const bool high = (lane & lh) != 0;
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const float other = __shfl_xor_sync(0xffffffffu, x[i], lh);
            x[i] = high ? other - x[i] : x[i] + other;
        }
    }
    const float scale = 1.f / sqrtf(float(D));
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
        x[i] = round_bf16(x[i] * scale);
        amax = fmaxf(amax, fabsf(x[i]));
    }
    constexpr int kLanesPerBlock = 32 / E;  // FP4 block of 32 elements
#pragma unroll
    for (int o = 1; o < kLanesPerBlock; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    // s is a power of two in [2^-126, 2^126]: x * (1 / s) is x / s exactly
    const float s = pow2_ceil(fmaxf(amax, 6.f * 1.17549435e-38f) / 6.f), inv_s = 1.f / s;
#pragma unroll
    for (int i = 0; i < E; ++i) x[i] = from_e2m1(to_e2m1(x[i] * inv_s)) * s;
    store_lane<E>(v, vec, x);
}

// CTA of 8 warps over 8 * rows_per_warp consecutive rows, warp w taking rows w, w + 8, ... of them. rope_per_cta
// (the host's choice: the CTA's rows are heads of one token): the token's angles once per CTA. With 64 index heads
// a CTA holds one token (8 rows per warp): the angles (a double sincos per pair) once per token, not per 8 rows.
template <int E>
__global__ void prepare_q_kernel(bf16* q, int64_t stride, int n_tokens, int n_heads, const int32_t* positions,
                                 RopeTable rope, bool quant_sim, bool rope_per_cta, int rows_per_warp, bool vec) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int warps = blockDim.x / 32, warp = threadIdx.x >> 5;
    const int first = blockIdx.x * warps * rows_per_warp, rows = n_tokens * n_heads;
    __shared__ float2 cos_sin_s[kMaxRopePairs];
    if (rope_per_cta) cta_rope_table(positions[first / n_heads], rope.inv_freq, rope.n_pairs, cos_sin_s);
    const float2* const cos_sin = rope_per_cta ? cos_sin_s : nullptr;
    for (int i = 0; i < rows_per_warp; ++i) {
        const int row = first + i * warps + warp;
        if (row >= rows) return;
        prepare_q_row<E>(q, stride, row, n_heads, positions, rope, cos_sin, quant_sim, vec);
    }
}

constexpr int kScoreTile = 64;  // form 0's entries per CTA, and form 1's largest tile
constexpr int kScoreThreads = 256;
// The score's summation groups: head group g's ReLU terms are chained in head order, then the groups' sums are added
// in group order. A numerics constant of both forms, whatever the thread layout.
constexpr int kHeadGroups = 4;
static_assert(kScoreThreads == kHeadGroups * kScoreTile, "form 0 gives a thread one (entry, head group)");
constexpr int kMinScoreTile = 16;

// Entries visible to a query at pos; clamped to the workspace row (max_entries is a host-side contract, the clamp
// only keeps a violated contract from writing out of bounds).
__device__ __forceinline__ int visible_entries(int64_t pos, int ratio, int max_entries) {
    return min(int((pos + 1) / ratio), max_entries);
}

// Heads padded to a multiple of 16 (zero q, zero weight) so each of the 4 head groups reads its heads' q values
// for one dim as float4 broadcasts from the dim-major q tile.
__host__ __device__ inline int padded_heads(int h) { return (h + 15) / 16 * 16; }

// Form 1's q staging: a thread takes 8 consecutive dims of one head (one 16-byte load where aligned) and the lanes
// of a warp consecutive heads, so its dim-major stores hit consecutive banks. Form 0 (below) gives a warp 32
// consecutive dims of one head: every store of the warp lands in one bank (32 ways, ~8 K shared-memory wavefronts
// for 64 heads x 128 dims before the first product).
// A thread's pieces are loaded together, then stored: V4's 64 x 128 q is four pieces per thread, one round trip to
// L2 instead of four in a row.
__device__ __forceinline__ void stage_q_by_head(const bf16* qt, int H, int Hp, int D, float* qs) {
    const bool vec = (reinterpret_cast<uintptr_t>(qt) & 15) == 0;  // D is a multiple of 32: every piece aligned
    constexpr int kBatch = 4;
    const int n = Hp * (D / 8), stride = int(blockDim.x);
    for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * stride) {
        float x[kBatch][8];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int i = i0 + b * stride, h = i % Hp, d0 = (i / Hp) * 8;
            if (i < n && h < H) {
                load_lane<8>(qt + int64_t(h) * D + d0, vec, x[b]);
            } else {
#pragma unroll
                for (int k = 0; k < 8; ++k) x[b][k] = 0.f;
            }
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int i = i0 + b * stride, h = i % Hp, d0 = (i / Hp) * 8;
            if (i >= n) break;
#pragma unroll
            for (int k = 0; k < 8; ++k) qs[(d0 + k) * Hp + h] = x[b][k];
        }
    }
}

// N consecutive 32-bit words from b: word loads where `aligned`, else each assembled from four byte loads.
template <int N>
__device__ __forceinline__ void load_words(const uint8_t* b, bool aligned, uint32_t (&w)[N]) {
#pragma unroll
    for (int k = 0; k < N; ++k)
        w[k] = aligned ? reinterpret_cast<const uint32_t*>(b)[k]
                       : uint32_t(b[4 * k]) | uint32_t(b[4 * k + 1]) << 8 | uint32_t(b[4 * k + 2]) << 16 |
                             uint32_t(b[4 * k + 3]) << 24;
}

// Form 1's key staging: a thread takes one 32-dim block of one entry (the FP4 format's scale block): one block-table
// lookup, then every load of the block issued together (4-byte words where the pool's layout allows it). Form 0
// gives a thread one dim pair per iteration, a table lookup and a dependent byte load each: sixteen round trips to
// L2 per thread in a row. The values are the same: FP4 code x E8M0 scale (or the bf16 itself) rounded to bf16.
__device__ __forceinline__ void stage_keys_by_block(const PagedEntries& keys, IndexFormat fmt, int slot, int j0,
                                                    int n_vis, int D, int kd, int tile, bf16* ks) {
    const bool words = ((reinterpret_cast<uintptr_t>(keys.base) | uintptr_t(keys.block_bytes) |
                         uintptr_t(keys.offset) | uintptr_t(keys.entry_bytes)) & 3) == 0;
    const int blocks = D / 32;
    for (int i = threadIdx.x; i < tile * blocks; i += blockDim.x) {
        const int e = i / blocks, c = i % blocks;
        __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(ks + e * kd) + 16 * c;  // dim pairs 16c .. 16c + 15
        if (j0 + e >= n_vis) {
#pragma unroll
            for (int k = 0; k < 16; ++k) dst[k] = __floats2bfloat162_rn(0.f, 0.f);
            continue;
        }
        const uint8_t* src = paged_entry(keys, slot, j0 + e);
        if (fmt == IndexFormat::BF16) {  // 64 bytes: the block's 32 bf16 as they are stored
            uint32_t w[16];
            load_words(src + 64 * c, words, w);
#pragma unroll
            for (int k = 0; k < 16; ++k) reinterpret_cast<uint32_t*>(dst)[k] = w[k];
        } else {  // 16 code bytes (two dims each) and the block's scale byte
            uint32_t w[4];
            load_words(src + 16 * c, words, w);
            const float s = e8m0_value(src[D / 2 + c]);
#pragma unroll
            for (int k = 0; k < 16; ++k) {
                const uint8_t code = uint8_t(w[k / 4] >> (8 * (k % 4)));
                dst[k] = __floats2bfloat162_rn(from_e2m1(code & 0xf) * s, from_e2m1(code >> 4) * s);
            }
        }
    }
}

// The products q_h . k of heads h4 .. h4 + 3 with one key row, over the dims in pairs in order (an fmaf chain per
// head from 0): both forms' arithmetic, so both give the same bits.
__device__ __forceinline__ void head_quad_products(const __nv_bfloat162* krow, const float* qs, int Hp, int h4, int D,
                                                   float (&dot)[4]) {
    dot[0] = dot[1] = dot[2] = dot[3] = 0.f;
    for (int d2 = 0; d2 < D / 2; ++d2) {
        const float2 kk = __bfloat1622float2(krow[d2]);
        const float4 q0 = *reinterpret_cast<const float4*>(qs + (2 * d2) * Hp + h4);
        const float4 q1 = *reinterpret_cast<const float4*>(qs + (2 * d2 + 1) * Hp + h4);
        dot[0] = fmaf(q1.x, kk.y, fmaf(q0.x, kk.x, dot[0]));
        dot[1] = fmaf(q1.y, kk.y, fmaf(q0.y, kk.x, dot[1]));
        dot[2] = fmaf(q1.z, kk.y, fmaf(q0.z, kk.x, dot[2]));
        dot[3] = fmaf(q1.w, kk.y, fmaf(q0.w, kk.x, dot[3]));
    }
}

// The scoring CTA's first entry j0 and its query's visible entries n_vis; false where it has nothing to score (every
// visible entry is selected anyway, or its tile lies past them).
__device__ __forceinline__ bool score_tile_origin(const IndexerSelectParams& p, int tile, int& n_vis, int& j0) {
    n_vis = visible_entries(p.batch.token_pos[blockIdx.x], p.ratio, p.max_entries);
    j0 = int(blockIdx.y) * tile;
    return n_vis > p.topk && j0 < n_vis;
}

// Query t's per-head weights (times weights_scale) into ws[Hp], zero in the padding heads.
__device__ __forceinline__ void stage_head_weights(const IndexerSelectParams& p, int t, int H, int Hp, float* ws) {
    for (int h = threadIdx.x; h < Hp; h += blockDim.x)
        ws[h] = h < H ? __bfloat162float(p.weights[t * p.weights_stride + h]) * p.weights_scale : 0.f;
}

// Form 0 (IndexerSelectParams::form): CTA per (query, tile of kScoreTile entries), thread (entry, head group) runs
// its group's products and chain. Form 1 (scores_tile_kernel below) computes the same values.
__global__ void __launch_bounds__(kScoreThreads) scores_kernel(IndexerSelectParams p, float* __restrict__ scores) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int t = blockIdx.x;
    int n_vis = 0, j0 = 0;
    if (!score_tile_origin(p, kScoreTile, n_vis, j0)) return;
    const int H = p.n_heads, Hp = padded_heads(H), D = p.head_dim, kd = D + 2;  // key rows padded by one word
    float* qs = reinterpret_cast<float*>(smem_raw);         // [D][Hp] dim-major
    float* ws = qs + D * Hp;                                // [Hp]
    float* part = ws + Hp;                                  // [kHeadGroups][kScoreTile]
    bf16* ks = reinterpret_cast<bf16*>(part + kHeadGroups * kScoreTile);  // [kScoreTile][kd]
    const bf16* qt = p.q + t * p.q_stride;
    const int slot = p.batch.seq_slot[p.batch.token_seq[t]];
    const IndexFormat fmt = IndexFormat(p.keys.format);
    for (int i = threadIdx.x; i < Hp * D; i += blockDim.x) {
        const int h = i / D, d = i % D;
        qs[d * Hp + h] = h < H ? __bfloat162float(qt[i]) : 0.f;
    }
    stage_head_weights(p, t, H, Hp, ws);
    for (int i = threadIdx.x; i < kScoreTile * (D / 2); i += blockDim.x) {
        const int e = i / (D / 2), d = 2 * (i % (D / 2));
        float2 val = make_float2(0.f, 0.f);
        if (j0 + e < n_vis) {
            const uint8_t* src = paged_entry(p.keys, slot, j0 + e);
            if (fmt == IndexFormat::BF16) {
                val = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(src)[d / 2]);
            } else {
                const uint8_t b = src[d / 2];
                const float s = e8m0_value(src[D / 2 + d / 32]);
                val = make_float2(from_e2m1(b & 0xf) * s, from_e2m1(b >> 4) * s);
            }
        }
        reinterpret_cast<__nv_bfloat162*>(ks + e * kd)[d / 2] = __floats2bfloat162_rn(val.x, val.y);
    }
    __syncthreads();
    const int e = threadIdx.x % kScoreTile, g = threadIdx.x / kScoreTile;
    const int hpg = Hp / kHeadGroups;  // a multiple of 4
    const __nv_bfloat162* krow = reinterpret_cast<const __nv_bfloat162*>(ks + e * kd);
    float acc = 0.f;
    for (int h4 = g * hpg; h4 < (g + 1) * hpg; h4 += 4) {
        float dot[4];
        head_quad_products(krow, qs, Hp, h4, D, dot);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc = fmaf(ws[h4 + i], fmaxf(dot[i], 0.f), acc);
    }
    part[g * kScoreTile + e] = acc;
    __syncthreads();
    if (threadIdx.x < kScoreTile && j0 + threadIdx.x < n_vis) {
        float s = 0.f;
        for (int gg = 0; gg < kHeadGroups; ++gg) s += part[gg * kScoreTile + threadIdx.x];
        scores[int64_t(t) * p.max_entries + j0 + threadIdx.x] = s;
    }
}

// Form 1's shared memory for a tile of `tile` entries: q [D][Hp] dim-major, the weights [Hp], the head products
// [tile][Hp + 4] (rows padded so a warp's float4 stores spread over the banks), the keys [tile][D + 2] bf16.
__host__ __device__ inline int score_dots_ld(int Hp) { return Hp + 4; }
__host__ __device__ inline size_t scores_tile_smem(int Hp, int D, int tile) {
    return size_t(D) * Hp * 4 + size_t(Hp) * 4 + size_t(tile) * score_dots_ld(Hp) * 4 + size_t(tile) * (D + 2) * 2;
}

// Form 1: CTA per (query, tile of `tile` entries: 16, 32 or 64, chosen by the host to fill the GPU), in three
// phases. (1) Each item (entry, four heads) takes the four heads' products q_h . k over the dims in form 0's order
// (the same fmaf chain per head) into shared memory; a tile of 16 gives one item per thread at V4's 64 heads,
// where form 0's thread ran 16 heads' products in a row (at one token and an 8k context 33 CTAs did the whole
// scoring; 130 do it now). (2) Thread (entry, head group) chains its group's terms w_h * ReLU(dot_h) in head order
// from 0, as form 0's thread did. (3) The entry's four lanes add the group sums in group order from 0, as form 0's
// final loop did. So every score is form 0's bit for bit (CudaIndexer.SelectFormsAgree compares every tile).
__global__ void __launch_bounds__(kScoreThreads) scores_tile_kernel(IndexerSelectParams p, int tile,
                                                                    float* __restrict__ scores) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int t = blockIdx.x;
    int n_vis = 0, j0 = 0;
    if (!score_tile_origin(p, tile, n_vis, j0)) return;
    const int H = p.n_heads, Hp = padded_heads(H), D = p.head_dim, kd = D + 2;  // key rows padded by one word
    const int dld = score_dots_ld(Hp);
    float* qs = reinterpret_cast<float*>(smem_raw);  // [D][Hp] dim-major
    float* ws = qs + D * Hp;                         // [Hp]
    float* dots = ws + Hp;                           // [tile][dld]
    bf16* ks = reinterpret_cast<bf16*>(dots + tile * dld);  // [tile][kd]
    const int slot = p.batch.seq_slot[p.batch.token_seq[t]];
    stage_keys_by_block(p.keys, IndexFormat(p.keys.format), slot, j0, n_vis, D, kd, tile, ks);  // longest wait first
    stage_q_by_head(p.q + t * p.q_stride, H, Hp, D, qs);
    stage_head_weights(p, t, H, Hp, ws);
    __syncthreads();
    // (1) Items (entry e, heads 4c .. 4c + 3), entries fastest: a warp's lanes read different key rows (padded:
    // distinct banks) and broadcast one or two q vectors.
    const int quads = Hp / 4;
    for (int item = threadIdx.x; item < tile * quads; item += blockDim.x) {
        const int e = item % tile, h4 = 4 * (item / tile);
        const __nv_bfloat162* krow = reinterpret_cast<const __nv_bfloat162*>(ks + e * kd);
        float dot[4];
        head_quad_products(krow, qs, Hp, h4, D, dot);
        *reinterpret_cast<float4*>(dots + e * dld + h4) = make_float4(dot[0], dot[1], dot[2], dot[3]);
    }
    __syncthreads();
    // (2) + (3): thread 4e + g, the entry's four groups on four neighbouring lanes (tile * 4 <= kScoreThreads).
    const int e = int(threadIdx.x) / kHeadGroups, g = int(threadIdx.x) % kHeadGroups;
    if (e >= tile) return;  // whole warps: tile * kHeadGroups is a multiple of 32
    const int hpg = Hp / kHeadGroups;  // a multiple of 4
    float acc = 0.f;
    for (int h4 = g * hpg; h4 < (g + 1) * hpg; h4 += 4) {
        const float4 d = *reinterpret_cast<const float4*>(dots + e * dld + h4);
        acc = fmaf(ws[h4], fmaxf(d.x, 0.f), acc);
        acc = fmaf(ws[h4 + 1], fmaxf(d.y, 0.f), acc);
        acc = fmaf(ws[h4 + 2], fmaxf(d.z, 0.f), acc);
        acc = fmaf(ws[h4 + 3], fmaxf(d.w, 0.f), acc);
    }
    const int lane = int(threadIdx.x) & 31, first = lane & ~(kHeadGroups - 1);
    float s = 0.f;
#pragma unroll
    for (int gg = 0; gg < kHeadGroups; ++gg) s += __shfl_sync(0xffffffffu, acc, first + gg);
    if (g == 0 && j0 + e < n_vis) scores[int64_t(t) * p.max_entries + j0 + e] = s;
}

constexpr int kTopkThreads = 1024;

__device__ __forceinline__ uint32_t order_key(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive block scan of v (kTopkThreads threads); returns the prefix, *total gets the sum.
__device__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < kTopkThreads / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            const int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        warp_sums[lane] = w;  // inclusive
    }
    __syncthreads();
    *total = warp_sums[kTopkThreads / 32 - 1];
    return (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
}

// Inclusive scans of x and of y over the warp's lanes, side by side.
__device__ __forceinline__ void warp_inclusive_scan2(int& x, int& y, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
        const int xa = __shfl_up_sync(0xffffffffu, x, o), yb = __shfl_up_sync(0xffffffffu, y, o);
        if (lane >= o) {
            x += xa;
            y += yb;
        }
    }
}

// Two exclusive block scans in one (kTopkThreads threads): the prefixes of a and of b, their totals in *total_a and
// *total_b; the same sums as two block_exclusive_scan calls, with one set of barriers. warp_sums: 2 x 32 ints.
__device__ int2 block_exclusive_scan2(int a, int b, int* warp_sums, int* total_a, int* total_b) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = a, y = b;
    warp_inclusive_scan2(x, y, lane);
    __syncthreads();
    if (lane == 31) {
        warp_sums[warp] = x;
        warp_sums[32 + warp] = y;
    }
    __syncthreads();
    if (warp == 0) {
        constexpr int kWarpsOfBlock = kTopkThreads / 32;
        int wa = lane < kWarpsOfBlock ? warp_sums[lane] : 0, wb = lane < kWarpsOfBlock ? warp_sums[32 + lane] : 0;
        warp_inclusive_scan2(wa, wb, lane);
        warp_sums[lane] = wa;  // inclusive
        warp_sums[32 + lane] = wb;
    }
    __syncthreads();
    *total_a = warp_sums[kTopkThreads / 32 - 1];
    *total_b = warp_sums[32 + kTopkThreads / 32 - 1];
    return make_int2((warp > 0 ? warp_sums[warp - 1] : 0) + x - a, (warp > 0 ? warp_sums[32 + warp - 1] : 0) + y - b);
}

// The radix select's bin of one pass: the largest b whose bins b .. 255 hold at least `need` keys (0 if none), and
// in *above the keys of bins b + 1 .. 255 -- what a walk from bin 255 down finds. One warp: lane L sums bins
// 8L .. 8L + 7, a suffix scan over the lanes and a ballot name the lane holding the bin, which walks its eight.
// Every lane gets the result. Form 0 walks the 256 bins on one thread (a dependent shared-memory load per bin).
__device__ __forceinline__ int radix_bin_from_top(const int* hist, int need, int lane, int* above) {
    int v[8], own = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        v[j] = hist[8 * lane + j];
        own += v[j];
    }
    int suffix = own;  // keys of the bins of lanes lane .. 31
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
        const int y = __shfl_down_sync(0xffffffffu, suffix, o);
        if (lane + o < 32) suffix += y;
    }
    const uint32_t reach = __ballot_sync(0xffffffffu, suffix >= need);  // lanes 0 .. owner (suffix never grows)
    const int owner = reach ? 31 - __clz(int(reach)) : 0;
    int bin = 8 * lane + 7, run = suffix - own;
#pragma unroll
    for (int j = 7; j > 0; --j) {
        if (run + v[j] >= need) break;
        run += v[j];
        --bin;
    }
    *above = __shfl_sync(0xffffffffu, run, owner);
    return __shfl_sync(0xffffffffu, bin, owner);
}

// A row of at most this many scores is read from global memory once (form 1): its order keys stay in shared memory
// for the four passes and the final selection (form 0 reads the row six times). Form 1 also counts a warp's keys
// per distinct bin (__match_any_sync) with one atomic each.
constexpr int kTopkCachedKeys = 8192;

// Rows t = row_begin + blockIdx.x; the scores of row t start at scores + (t - row_begin) * row_stride. FORM: as for
// scores_kernel (1: the cached keys and radix_bin_from_top; 0: the first form); the same selection.
template <int FORM>
__global__ void __launch_bounds__(kTopkThreads) topk_kernel(IndexerSelectParams p, const float* __restrict__ scores,
                                                            int row_begin, int64_t row_stride) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    // Form 1 keeps two histograms: the next pass's is cleared while this one's is filled (a barrier fewer a pass).
    __shared__ int hist[FORM == 1 ? 2 : 1][256];
    __shared__ int warp_sums[64];
    __shared__ uint32_t sh_prefix;
    __shared__ int sh_remaining, sh_stop;
    __shared__ uint32_t cached[FORM == 1 ? kTopkCachedKeys : 1];
    const int t = row_begin + int(blockIdx.x);
    const int n = visible_entries(p.batch.token_pos[t], p.ratio, p.max_entries);
    int32_t* out = p.selected + int64_t(t) * p.topk;
    if (n <= p.topk) {
        for (int i = threadIdx.x; i < p.topk; i += blockDim.x) out[i] = i < n ? i : -1;
        return;
    }
    const float* row = scores + int64_t(t - row_begin) * row_stride;
    const bool use_cache = FORM == 1 && n <= kTopkCachedKeys;
    if (use_cache)  // visible to every thread after the first pass's barrier
        for (int i = threadIdx.x; i < n; i += blockDim.x) cached[i] = order_key(row[i]);
    auto key = [&](int i) { return use_cache ? cached[i] : order_key(row[i]); };
    uint32_t prefix = 0, mask = 0;
    int remaining = p.topk;
    if constexpr (FORM == 1) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[0][i] = 0;
        __syncthreads();
    }
    for (int pass = 0, shift = 24; shift >= 0; ++pass, shift -= 8) {
        int* h = hist[FORM == 1 ? (pass & 1) : 0];
        if constexpr (FORM == 1) {
            // The next pass's histogram: its last reader (the previous pass's bin walk) finished before the barrier.
            for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[(pass + 1) & 1][i] = 0;
            // One atomic per distinct bin of a warp (its lanes' count): the first pass puts most scores in a few
            // bins (their exponents), where per-lane atomics serialize on one address.
            for (int base = 0; base < n; base += blockDim.x) {
                const int i = base + int(threadIdx.x);
                int bin = -1;
                if (i < n) {
                    const uint32_t k = key(i);
                    if ((k & mask) == prefix) bin = int((k >> shift) & 255);
                }
                const uint32_t peers = __match_any_sync(0xffffffffu, bin);
                if (bin >= 0 && int(threadIdx.x & 31) == __ffs(int(peers)) - 1) atomicAdd(&h[bin], __popc(peers));
            }
        } else {
            for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
            __syncthreads();
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const uint32_t k = key(i);
                if ((k & mask) == prefix) atomicAdd(&h[(k >> shift) & 255], 1);
            }
        }
        __syncthreads();
        if constexpr (FORM == 1) {
            if (threadIdx.x < 32) {
                int above;
                const int b = radix_bin_from_top(h, remaining, int(threadIdx.x), &above);
                if (threadIdx.x == 0) {
                    sh_prefix = prefix | (uint32_t(b) << shift);
                    sh_remaining = remaining - above;
                    // Every key of the threshold's bin is taken: the selection is decided (no tie to break inside
                    // the bin), whatever the lower bits.
                    sh_stop = h[b] == remaining - above;
                }
            }
        } else if (threadIdx.x == 0) {
            int above = 0, b = 255;
            for (; b > 0; --b) {
                if (above + h[b] >= remaining) break;
                above += h[b];
            }
            sh_prefix = prefix | (uint32_t(b) << shift);
            sh_remaining = remaining - above;
        }
        __syncthreads();
        prefix = sh_prefix;
        remaining = sh_remaining;
        mask |= 255u << shift;
        if (FORM == 1 && sh_stop) break;
    }
    // The keys whose bits under `mask` exceed prefix are taken, and `remaining` of those equal to it under the mask,
    // lowest indices first. After all four passes mask is every bit (prefix is the k-th largest key); a form-1 row
    // that stopped early takes its whole threshold bin (remaining = every key in it): the same set.
    const int chunk = (n + blockDim.x - 1) / blockDim.x;
    const int i0 = threadIdx.x * chunk, i1 = min(n, i0 + chunk);
    int ties = 0, greater = 0;
    for (int i = i0; i < i1; ++i) {
        const uint32_t k = key(i) & mask;
        ties += k == prefix;
        greater += k > prefix;
    }
    int total, out_pos, take_ties;
    if constexpr (FORM == 1) {
        // One scan for both prefixes: the ties taken before this thread are min(its tie rank, remaining).
        int total_greater, total_ties;
        const int2 pre = block_exclusive_scan2(greater, ties, warp_sums, &total_greater, &total_ties);
        take_ties = max(0, min(ties, remaining - pre.y));
        out_pos = pre.x + min(pre.y, remaining);
        total = total_greater + min(total_ties, remaining);
    } else {
        const int tie_rank = block_exclusive_scan(ties, warp_sums, &total);
        take_ties = max(0, min(ties, remaining - tie_rank));
        out_pos = block_exclusive_scan(greater + take_ties, warp_sums, &total);
    }
    int taken_ties = 0;
    for (int i = i0; i < i1; ++i) {
        const uint32_t k = key(i) & mask;
        bool take = k > prefix;
        if (k == prefix && taken_ties < take_ties) {
            take = true;
            ++taken_ties;
        }
        if (take) out[out_pos++] = i;
    }
    for (int i = total + threadIdx.x; i < p.topk; i += blockDim.x) out[i] = -1;
}

}  // namespace

void indexer_prepare_q(bf16* q, int64_t stride, int n_tokens, int n_heads, int head_dim, const int32_t* positions,
                       const RopeTable& rope, cudaStream_t stream, bool quant_sim) {
    FS_ATTN_REQUIRE(2 * rope.n_pairs <= head_dim, "indexer: rope_dim {} exceeds index_head_dim {}", 2 * rope.n_pairs,
                    head_dim);
    if (n_tokens <= 0 || n_heads <= 0) return;
    const int rows = n_tokens * n_heads, warps = 8;
    auto* kernel = head_dim == 32    ? prepare_q_kernel<1>
                   : head_dim == 64  ? prepare_q_kernel<2>
                   : head_dim == 128 ? prepare_q_kernel<4>
                   : head_dim == 256 ? prepare_q_kernel<8>
                                     : nullptr;
    if (!kernel) fail_rt("indexer: index_head_dim must be 32, 64, 128 or 256, got {}", head_dim);
    // The rope angles once per CTA where a CTA's rows are heads of one token: with 64 index heads a CTA takes a
    // whole token (8 rows per warp) where the grid still covers the SMs, else fewer heads (down to 8 of one token, a
    // row per warp). A warp's rows run one after another, each a round trip to memory: at decode (1-16 tokens) eight
    // rows per warp put a token's 64 heads on 8 warps of one SM (17 us per call at one token, run 212); a row per
    // warp spreads them over 8 CTAs. The angles and every row's arithmetic are the same either way (the op test
    // compares per-row angles bit for bit).
    const bool rope_per_cta = rope.n_pairs > 0 && n_heads % warps == 0;
    int rows_per_warp = 1;
    if (rope_per_cta)
        for (int r = 8; r > 1; r /= 2)
            if (n_heads % (warps * r) == 0 && int64_t(rows) / (warps * r) >= current_arch().sm_count) {
                rows_per_warp = r;
                break;
            }
    const int per_lane = head_dim / 32;
    const bool vec = reinterpret_cast<uintptr_t>(q) % (2 * per_lane) == 0 && stride % per_lane == 0;
    const int blocks = (rows + warps * rows_per_warp - 1) / (warps * rows_per_warp);
    launch_pdl("prepare_q_kernel", kernel, dim3(blocks), dim3(warps * 32), 0, stream, q, stride, n_tokens, n_heads,
               positions, rope, quant_sim, rope_per_cta, rows_per_warp, vec);
    CUDA_CHECK_LAUNCH("prepare_q_kernel");
}

int indexer_score_tile(int n_tokens, int max_entries, int sm_count) {
    int tile = kScoreTile;
    const int64_t want = std::max(sm_count, 1);
    while (tile > kMinScoreTile && int64_t(n_tokens) * ((max_entries + tile - 1) / tile) < want) tile /= 2;
    return tile;
}

size_t indexer_select_workspace_bytes(int n_tokens, int max_entries) {
    return size_t(std::max(n_tokens, 1)) * size_t(std::max(max_entries, 1)) * sizeof(float);
}

bool indexer_check_select(const IndexerSelectParams& p) {
    FS_ATTN_REQUIRE(p.form == 0 || p.form == 1, "indexer: form must be 0 or 1, got {}", p.form);
    FS_ATTN_REQUIRE(p.topk > 0, "indexer: index_topk must be positive, got {}", p.topk);
    FS_ATTN_REQUIRE(p.ratio >= 1, "indexer: ratio must be >= 1, got {}", p.ratio);
    FS_ATTN_REQUIRE(p.selected != nullptr, "indexer: the selected output is required");
    return p.batch.n_tokens > 0;
}

void indexer_select(const IndexerSelectParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (!indexer_check_select(p)) return;
    const int n_tokens = p.batch.n_tokens;
    if (p.max_entries > p.topk) {  // some query has more entries than index_topk: score them
        FS_ATTN_REQUIRE(p.head_dim % 32 == 0 && p.n_heads > 0, "indexer: index_head_dim {} must be a multiple of 32",
                        p.head_dim);
        FS_ATTN_REQUIRE(p.keys.entry_bytes == index_entry_bytes(IndexFormat(p.keys.format), p.head_dim),
                        "indexer: key entry_bytes {} does not match the key format", p.keys.entry_bytes);
        // Form 0's scorer reads bf16 keys two at a time (4-byte loads); form 1 reads any layout.
        const uintptr_t layout = reinterpret_cast<uintptr_t>(p.keys.base) | uintptr_t(p.keys.block_bytes) |
                                 uintptr_t(p.keys.offset) | uintptr_t(p.keys.entry_bytes);
        FS_ATTN_REQUIRE(p.form == 1 || IndexFormat(p.keys.format) != IndexFormat::BF16 || layout % 4 == 0,
                        "indexer: bf16 keys at offset {}, {} bytes per entry and {} per block are not 4-byte aligned, "
                        "which the scorer's form 0 needs", p.keys.offset, p.keys.entry_bytes, p.keys.block_bytes);
        const size_t need = indexer_select_workspace_bytes(n_tokens, p.max_entries);
        FS_ATTN_REQUIRE(workspace && workspace_bytes >= need,
                        "indexer: workspace of {} bytes is smaller than the {} needed", workspace_bytes, need);
        const int Hp = padded_heads(p.n_heads);
        float* out = static_cast<float*>(workspace);
        if (p.form == 1) {
            const int tile = p.score_tile > 0 ? p.score_tile : indexer_score_tile(n_tokens, p.max_entries,
                                                                                  current_arch().sm_count);
            FS_ATTN_REQUIRE(tile == 16 || tile == 32 || tile == 64, "indexer: score tile must be 16, 32 or 64, got {}",
                            tile);
            const size_t smem = scores_tile_smem(Hp, p.head_dim, tile);
            allow_dynamic_smem(scores_tile_kernel, smem);
            const dim3 grid(n_tokens, (p.max_entries + tile - 1) / tile);
            launch_pdl("scores_tile_kernel", scores_tile_kernel, grid, dim3(kScoreThreads), smem, stream, p, tile, out);
            CUDA_CHECK_LAUNCH("scores_tile_kernel");
        } else {
            const size_t smem = size_t(Hp) * p.head_dim * 4 + size_t(Hp) * 4 + size_t(kHeadGroups) * kScoreTile * 4 +
                                size_t(kScoreTile) * (p.head_dim + 2) * 2;
            allow_dynamic_smem(scores_kernel, smem);
            const dim3 grid(n_tokens, (p.max_entries + kScoreTile - 1) / kScoreTile);
            launch_pdl("scores_kernel", scores_kernel, grid, dim3(kScoreThreads), smem, stream, p, out);
            CUDA_CHECK_LAUNCH("scores_kernel");
        }
    }
    indexer_topk_rows(p, static_cast<const float*>(workspace), 0, n_tokens, p.max_entries, stream);
}

void indexer_topk_rows(const IndexerSelectParams& p, const float* scores, int row_begin, int n_rows,
                       int64_t row_stride, cudaStream_t stream) {
    FS_ATTN_REQUIRE(p.topk > 0 && p.selected != nullptr,
                    "indexer: index_topk ({}) and the selected output are required", p.topk);
    FS_ATTN_REQUIRE(row_begin >= 0 && n_rows >= 0 && row_begin + n_rows <= p.batch.n_tokens,
                    "indexer: rows [{}, {}) outside the step's {} rows", row_begin, row_begin + n_rows,
                    p.batch.n_tokens);
    if (n_rows <= 0) return;
    launch_pdl("topk_kernel", p.form == 1 ? topk_kernel<1> : topk_kernel<0>, dim3(n_rows), dim3(kTopkThreads), 0, stream, p, scores, row_begin,
               row_stride);
    CUDA_CHECK_LAUNCH("topk_kernel");
}

}  // namespace flashseek::cuda
