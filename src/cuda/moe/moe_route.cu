// Routing and grouping at decode and prefill (see moe.cuh): the sqrt-softplus biased top-k router and the
// token-id hash router (one warp per token), the grouping of (token, expert) pairs by expert in one CTA (counts,
// block-wide scans for offsets and the active list, slots), and both in one CTA for up to 16 tokens (decode: one
// launch instead of two on the critical path), or for up to 8 tokens inside the router's own launch
// (moe_router_route_and_group: bf16_gemv_kernel with the routing as its tail).
// Latency of route + group at one token (one CTA, the decode critical path). The serial chain was: the logits and the
// bias loads -> top_k selection rounds, each a lane-local maximum and a five-round butterfly argmax -> the picks
// stored to global memory -> barrier -> the counts zeroed -> barrier -> the picks read back from global memory ->
// counts -> barrier -> the scan with two serial loops over the warps' sums and three barriers per pass -> the picks
// read back again -> slots. Now the bias (a weight) is read before pdl_wait, each selection round's argmax is two
// warp reductions (warp_argmax_redux: same order, same winner), the picks also go to shared memory, from which the
// grouping reads them, the counts are zeroed before the routing, the scan costs one barrier per pass, and a lane's
// logits (and a hash layer's table entries) are requested together instead of one after each score.
#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/warp_reduce.cuh"
#include "cuda/gemm/bf16_gemv_kernel.cuh"
#include "cuda/gemm/linear_catalogue.h"
#include "cuda/moe/moe.cuh"

namespace flashseek::cuda {
namespace {

// ---- router ------------------------------------------------------------------------------------------------
constexpr int kMaxRouteE = 1024, kMaxTopK = 32;

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// The router's bias for the experts a lane holds in route_select (lane, lane + 32, ...); 0 without a bias.
template <int kPer>
__device__ __forceinline__ void load_route_bias(const float* __restrict__ bias, int E, float (&bias_e)[kPer]) {
    const int lane = threadIdx.x & 31;
    const int per = (E + 31) / 32;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int e = lane + 32 * i;
        bias_e[i] = i < per && e < E && bias ? __ldg(bias + e) : 0.f;
    }
}

// Token m's routing by one warp; lane holds experts lane, lane+32, ... (kPer per lane: E <= 32 * kPer). The
// selection rounds are a dependent chain on the decode critical path: kPer = 8 serves V4's 256 experts with a
// quarter of the per-lane work of the general 32. bias_e: load_route_bias's values. The logits are read through L2
// (ld.global.cg): the router's fused form (RouterRouteTail) reads them in the launch that wrote them.
// idx_sh / w_sh (optional, shared memory): a copy of the token's picks for the grouping in the same CTA, which then
// needs no read back from global memory.
template <int kPer>
__device__ __forceinline__ void route_select(int64_t m, const float* logits, int E, int64_t ld,
                                             const float (&bias_e)[kPer], const int64_t* __restrict__ tid2eid,
                                             const int32_t* __restrict__ token_ids, int64_t vocab, int top_k,
                                             float route_scale, int32_t* __restrict__ idx_out,
                                             float* __restrict__ w_out, int32_t* idx_sh, float* w_sh) {
    const int lane = threadIdx.x & 31;
    const int per = (E + 31) / 32;
    // Every logit requested before any is used: sqrtf's slow path is a call, and a load written after one waited
    // for it (the SASS had kPer dependent L2 round trips).
    float logit[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int e = lane + 32 * i;
        logit[i] = i < per && e < E ? __ldcg(logits + m * ld + e) : 0.f;
    }
    float score[kPer], sel[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int e = lane + 32 * i;
        score[i] = 0.f;
        sel[i] = -INFINITY;
        if (i < per && e < E) {
            score[i] = sqrtf(softplus_f(logit[i]));
            sel[i] = score[i] + bias_e[i];
        }
    }
    int my_e = -1;  // lane j keeps the j-th choice (top_k <= 32): registers, not a local array
    float my_s = 0.f;
    float sum = 0.f;
    if (tid2eid) {
        // The token's top_k table entries read at once (lane j: entry j), then handed out by shuffles in pick order.
        const int64_t tok = token_ids[m];
        const bool tok_ok = tok >= 0 && tok < vocab;
        const int64_t v_lane = tok_ok && lane < top_k ? tid2eid[tok * top_k + lane] : -1;
        for (int j = 0; j < top_k; ++j) {
            int e = -1;
            if (tok_ok) {
                const int64_t v = __shfl_sync(0xffffffffu, v_lane, j);
                e = (v >= 0 && v < E) ? int(v) : -1;
            }
            float s = 0.f;
            if (e >= 0) {
                const int owner = e % 32, slot = e / 32;
                float mine = 0.f;
#pragma unroll
                for (int i = 0; i < kPer; ++i)
                    if (i == slot) mine = score[i];
                s = __shfl_sync(0xffffffffu, mine, owner);
            }
            if (lane == j) my_e = e, my_s = s;
            sum += s;
        }
    } else {
        for (int j = 0; j < top_k; ++j) {
            float best = -INFINITY;
            int best_e = E;
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                const int e = lane + 32 * i;
                if (sel[i] > best || (sel[i] == best && e < best_e)) {
                    best = sel[i];
                    best_e = e;
                }
            }
            warp_argmax_redux(best, best_e);
            float s = 0.f;
            if (best_e < E) {
                const int owner = best_e % 32, slot = best_e / 32;
                float mine = 0.f;
#pragma unroll
                for (int i = 0; i < kPer; ++i)
                    if (i == slot && lane == owner) {
                        mine = score[i];
                        sel[i] = -INFINITY;  // taken
                    }
                s = __shfl_sync(0xffffffffu, mine, owner);
            } else {
                best_e = -1;
            }
            if (lane == j) my_e = best_e, my_s = s;
            sum += s;
        }
    }
    if (lane < top_k) {
        const float wt = sum > 0.f ? my_s / sum * route_scale : 0.f;
        idx_out[m * top_k + lane] = my_e;
        w_out[m * top_k + lane] = wt;
        if (idx_sh) {
            idx_sh[m * top_k + lane] = my_e;
            w_sh[m * top_k + lane] = wt;
        }
    }
}

// Token m's routing by one warp in a kernel of its own: the bias (a weight: no earlier kernel writes it) is read
// before pdl_wait, which this function calls (common/pdl.cuh contract: before the logits, an earlier kernel's
// output).
template <int kPer>
__device__ void route_token(int64_t m, const float* __restrict__ logits, int E, int64_t ld, const float* __restrict__ bias,
                            const int64_t* __restrict__ tid2eid, const int32_t* __restrict__ token_ids, int64_t vocab,
                            int top_k, float route_scale, int32_t* __restrict__ idx_out, float* __restrict__ w_out,
                            int32_t* idx_sh = nullptr, float* w_sh = nullptr) {
    float bias_e[kPer];
    load_route_bias(bias, E, bias_e);
    pdl_wait_after_prefetch();
    pdl_trigger();
    route_select(m, logits, E, ld, bias_e, tid2eid, token_ids, vocab, top_k, route_scale, idx_out, w_out, idx_sh,
                 w_sh);
}

// route_token with the per-lane array sized for E.
__device__ __forceinline__ void route_token_sized(int64_t m, const float* __restrict__ logits, int E, int64_t ld,
                                                  const float* __restrict__ bias, const int64_t* __restrict__ tid2eid,
                                                  const int32_t* __restrict__ token_ids, int64_t vocab, int top_k,
                                                  float route_scale, int32_t* __restrict__ idx_out,
                                                  float* __restrict__ w_out, int32_t* idx_sh = nullptr,
                                                  float* w_sh = nullptr) {
    if (E <= 256)
        route_token<8>(m, logits, E, ld, bias, tid2eid, token_ids, vocab, top_k, route_scale, idx_out, w_out, idx_sh,
                       w_sh);
    else
        route_token<kMaxRouteE / 32>(m, logits, E, ld, bias, tid2eid, token_ids, vocab, top_k, route_scale, idx_out,
                                     w_out, idx_sh, w_sh);
}

// One warp per token.
__global__ void route_kernel(const float* __restrict__ logits, int64_t M, int E, int64_t ld, const float* __restrict__ bias,
                             const int64_t* __restrict__ tid2eid, const int32_t* __restrict__ token_ids, int64_t vocab,
                             int top_k, float route_scale, int32_t* __restrict__ idx_out, float* __restrict__ w_out) {
    const int64_t m = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (m >= M) {  // no token: nothing read or written, but the contract's wait all the same
        pdl_wait();
        pdl_trigger();
        return;
    }
    route_token_sized(m, logits, E, ld, bias, tid2eid, token_ids, vocab, top_k, route_scale, idx_out, w_out);
}

// ---- grouping: one CTA ----------------------------------------------------------------------------------------
// Counts per expert (shared atomics), then offsets, the ascending active list and (act tiles attached) the list of
// 16-token tiles by a block-wide exclusive scan over the experts (one expert per thread and pass; was a serial loop
// in thread 0: ~256 dependent global stores per MoE layer on the decode critical path), then slots in pair order
// per expert (atomic cursor: slot order inside an expert does not affect any result).
// Latency: the scan's cross-warp step was a serial loop over the lower warps' sums (up to 31 dependent shared
// loads per thread), then a barrier, thread 0's serial carry loop and another barrier per pass. Now each lane
// reads one warp's sum and one warp reduction (__reduce_add_sync) gives both the thread's prefix and the pass
// total, which every thread adds to its own carry; the warp sums are double-buffered by pass parity, so one
// barrier per pass remains. Integer sums: the order does not change any result.
// group_zero_counts(), a barrier, then group_block(). `sh` holds 2 * E int32.
__device__ __forceinline__ void group_zero_counts(int E, int32_t* sh) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) sh[e] = 0;
}

// Pair p's local expert, or -1 (no expert, or one outside this shard's range).
__device__ __forceinline__ int local_expert(const int32_t* idx, int64_t p, const MoeGrouping& g) {
    const int e = idx[p] - g.expert_begin;
    return idx[p] >= 0 && e >= 0 && e < g.E ? e : -1;
}

// Counts pairs [p0, p1) per local expert into `count` (shared memory, zeroed).
__device__ __forceinline__ void group_count(const int32_t* idx, int64_t p0, int64_t p1, const MoeGrouping& g,
                                            int32_t* count) {
    for (int64_t p = p0 + threadIdx.x; p < p1; p += blockDim.x) {
        const int e = local_expert(idx, p, g);
        if (e >= 0) atomicAdd(&count[e], 1);
    }
}

// From the per-expert counts (shared memory, complete): expert_count, expert_offset, the active list, n_active and
// the wgmma tile list in global memory, and cursor[e] = expert_offset[e] (shared). Ends with a barrier.
__device__ void group_scan(const MoeGrouping& g, const int32_t* count, int32_t* cursor) {
    __shared__ int32_t warp_sums[2][3][32];  // [pass parity][count, active, 16-token tiles][warp]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    // Offsets, active entries and 16-token tiles before this pass (the same in every thread).
    int carry_c = 0, carry_a = 0, carry_t = 0;
    for (int base = 0, pass = 0; base < g.E; base += blockDim.x, pass ^= 1) {  // exclusive scans
        const int e = base + threadIdx.x;
        const int c = e < g.E ? count[e] : 0, a = c > 0 ? 1 : 0, tl = (c + 15) / 16;
        int ic = c, ia = a, it = tl;  // inclusive within the warp
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int vc = __shfl_up_sync(0xffffffffu, ic, o), va = __shfl_up_sync(0xffffffffu, ia, o);
            const int vt = __shfl_up_sync(0xffffffffu, it, o);
            if (lane >= o) {
                ic += vc;
                ia += va;
                it += vt;
            }
        }
        if (lane == 31) {
            warp_sums[pass][0][warp] = ic;
            warp_sums[pass][1][warp] = ia;
            warp_sums[pass][2][warp] = it;
        }
        __syncthreads();  // (a pass's buffer is rewritten two passes later, after this barrier of the next pass)
        const int wc = lane < n_warps ? warp_sums[pass][0][lane] : 0, wa = lane < n_warps ? warp_sums[pass][1][lane] : 0;
        const int wt = lane < n_warps ? warp_sums[pass][2][lane] : 0;
        const int pc = carry_c + __reduce_add_sync(0xffffffffu, lane < warp ? wc : 0);
        const int pa = carry_a + __reduce_add_sync(0xffffffffu, lane < warp ? wa : 0);
        const int pt = carry_t + __reduce_add_sync(0xffffffffu, lane < warp ? wt : 0);
        carry_c += __reduce_add_sync(0xffffffffu, wc);
        carry_a += __reduce_add_sync(0xffffffffu, wa);
        carry_t += __reduce_add_sync(0xffffffffu, wt);
        if (e < g.E) {
            const int off = pc + ic - c;
            g.expert_offset[e] = off;
            g.expert_count[e] = c;
            cursor[e] = off;
            if (a) g.active[pa + ia - 1] = e;
            if (g.tile_expert) {  // the wgmma experts' tile list (entries past its capacity are never read)
                for (int j = 0, u = pt + it - tl; j < tl && u < g.act_tile_count; ++j, ++u) {
                    g.tile_expert[u] = e;
                    g.tile_col[u] = 16 * j;
                }
            }
        }
    }
    if (threadIdx.x == 0) {
        g.expert_offset[g.E] = carry_c;
        *g.n_active = carry_a;
        if (g.n_tiles) *g.n_tiles = carry_t;
    }
    __syncthreads();  // every expert's cursor set
}

// Pairs [p0, p1) into their experts' slots from the cursors (shared memory; slots within an expert in arrival
// order: every consumer treats a slot by itself, so the order never changes a result).
__device__ __forceinline__ void group_scatter(const int32_t* idx, const float* wts, int64_t p0, int64_t p1, int top_k,
                                              const MoeGrouping& g, int32_t* cursor) {
    for (int64_t p = p0 + threadIdx.x; p < p1; p += blockDim.x) {
        const int e = local_expert(idx, p, g);
        if (e >= 0) {
            const int32_t slot = atomicAdd(&cursor[e], 1);
            g.slot_token[slot] = int32_t(p / top_k);
            g.slot_weight[slot] = wts[p];
            g.pair_slot[p] = slot;
        } else {
            g.pair_slot[p] = -1;
        }
    }
}

__device__ void group_block(const int32_t* idx, const float* wts, int64_t n_pairs, int top_k, const MoeGrouping& g,
                            int32_t* sh) {
    int32_t* count = sh;           // [E]
    int32_t* cursor = sh + g.E;    // [E]
    group_count(idx, 0, n_pairs, g, count);
    __syncthreads();
    group_scan(g, count, cursor);
    group_scatter(idx, wts, 0, n_pairs, top_k, g, cursor);
}

__global__ void group_kernel(const int32_t* __restrict__ idx, const float* __restrict__ wts, int64_t n_pairs, int top_k,
                             MoeGrouping g) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    extern __shared__ int32_t sh[];
    group_zero_counts(g.E, sh);
    __syncthreads();
    group_block(idx, wts, n_pairs, top_k, g, sh);
}

// Passes of more than kGroupOneCtaPairs pairs: one CTA per kGroupPairsPerCta pairs counts its pairs per expert
// (block_counts[b]), one CTA scans (expert totals, offsets, and each CTA's first slot per expert, written back
// into block_counts), then every CTA places its pairs from its own cursors. One CTA over 24,576 pairs (4,096
// tokens) took 65 us, four times the routing before it.
constexpr int kGroupThreads = 256;

__global__ void __launch_bounds__(kGroupThreads) group_count_kernel(const int32_t* __restrict__ idx, int64_t n_pairs,
                                                                    MoeGrouping g) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    extern __shared__ int32_t count[];  // [E]
    group_zero_counts(g.E, count);
    __syncthreads();
    const int64_t p0 = int64_t(blockIdx.x) * kGroupPairsPerCta, p1 = min(n_pairs, p0 + kGroupPairsPerCta);
    group_count(idx, p0, p1, g, count);
    __syncthreads();
    int32_t* out = g.block_counts + int64_t(blockIdx.x) * g.E;
    for (int e = threadIdx.x; e < g.E; e += blockDim.x) out[e] = count[e];
}

__global__ void __launch_bounds__(1024) group_offsets_kernel(int n_blocks, MoeGrouping g) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    extern __shared__ int32_t sh[];
    int32_t* count = sh;         // [E]
    int32_t* cursor = sh + g.E;  // [E]
    for (int e = threadIdx.x; e < g.E; e += blockDim.x) {
        int32_t total = 0;
        for (int b = 0; b < n_blocks; ++b) total += g.block_counts[int64_t(b) * g.E + e];
        count[e] = total;
    }
    __syncthreads();
    group_scan(g, count, cursor);
    for (int e = threadIdx.x; e < g.E; e += blockDim.x) {  // CTA b's first slot of expert e
        int32_t next = cursor[e];
        for (int b = 0; b < n_blocks; ++b) {
            int32_t* c = g.block_counts + int64_t(b) * g.E + e;
            const int32_t n = *c;
            *c = next;
            next += n;
        }
    }
}

__global__ void __launch_bounds__(kGroupThreads) group_place_kernel(const int32_t* __restrict__ idx,
                                                                    const float* __restrict__ wts, int64_t n_pairs,
                                                                    int top_k, MoeGrouping g) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    extern __shared__ int32_t cursor[];  // [E]
    const int32_t* first = g.block_counts + int64_t(blockIdx.x) * g.E;
    for (int e = threadIdx.x; e < g.E; e += blockDim.x) cursor[e] = first[e];
    __syncthreads();
    const int64_t p0 = int64_t(blockIdx.x) * kGroupPairsPerCta, p1 = min(n_pairs, p0 + kGroupPairsPerCta);
    group_scatter(idx, wts, p0, p1, top_k, g, cursor);
}

// Decode (M <= the CTA's 16 warps): routing and grouping in one launch, one CTA; warp m routes token m (its picks
// also into shared memory), then the block groups from shared memory. The counts are zeroed before the routing, so
// the barrier after it serves both.
// 512 threads: routing's per-lane score arrays need more than the 64 registers a 1024-thread CTA leaves.
constexpr int kRouteGroupThreads = 512;
__global__ void __launch_bounds__(kRouteGroupThreads)
    route_group_kernel(const float* __restrict__ logits, int64_t M, int E, int64_t ld,
                                   const float* __restrict__ bias, const int64_t* __restrict__ tid2eid,
                                   const int32_t* __restrict__ token_ids, int64_t vocab, int top_k, float route_scale,
                                   int32_t* __restrict__ idx_out, float* __restrict__ w_out, MoeGrouping g) {
    extern __shared__ int32_t sh[];
    __shared__ int32_t idx_sh[kRouteGroupThreads / 32 * kMaxTopK];
    __shared__ float w_sh[kRouteGroupThreads / 32 * kMaxTopK];
    group_zero_counts(g.E, sh);  // shared memory only: before the wait is fine
    const int64_t m = threadIdx.x / 32;
    if (m < M) {
        route_token_sized(m, logits, E, ld, bias, tid2eid, token_ids, vocab, top_k, route_scale, idx_out, w_out,
                          idx_sh, w_sh);  // it waits (PDL) after reading the bias
    } else {
        pdl_wait();  // PDL contract (common/pdl.cuh): before the grouping's global writes
        pdl_trigger();
    }
    __syncthreads();
    group_block(idx_sh, w_sh, M * top_k, top_k, g, sh);
}

// The router's GEMV with the routing and grouping of decode as its tail (bf16_gemv_kernel.cuh): the CTA that
// completes the logits last routes every token (warp w: tokens w, w + 4, ...) and groups the picks, as
// route_group_kernel does from the same logits, so the same picks, weights and grouping. Why: route_group_kernel
// waited for the router's grid to complete and its writes to be released (PDL) before reading the logits, one more
// kernel boundary on the decode step's critical path per MoE layer. Measured (one H100, 16 layers, run 501 of
// docs/perf-log/2026-12-06_routing-in-the-router.md): 2 / 4 / 8 sequences 1.6 / 0.7 / 0.7% faster, one sequence
// unchanged (the tail's routing and grouping take as long after the GEMV as the separate kernel did, boundary
// included), 16 sequences 0.5% slower (each of the four warps routes four tokens in series where
// route_group_kernel has a warp per token): hence up to 8 tokens. E <= 256 (kPer = 8 fits bf16_gemv's registers).
constexpr int kRouterTailMaxE = 256, kRouterTailMaxTokens = 8;
struct RouterRouteTail {
    static constexpr bool kActive = true;
    const float* logits;  // the GEMV's output (fp32 [M, E], row stride ld)
    int64_t M;
    int E;
    int64_t ld;
    const float* bias;
    const int64_t* tid2eid;
    const int32_t* token_ids;
    int64_t vocab;
    int top_k;
    float route_scale;
    int32_t* idx_out;
    float* w_out;
    MoeGrouping g;

    // The bias (a weight) requested into L2 while the router streams: the tail's bias and logit reads are then one
    // L2 round trip together.
    __device__ __forceinline__ void prefetch() const {
        if (bias && int(threadIdx.x) * 32 < E) asm volatile("prefetch.global.L2 [%0];" ::"l"(bias + threadIdx.x * 32));
    }
    __device__ __forceinline__ void run() const {
        __shared__ int32_t idx_sh[kRouterTailMaxTokens * kMaxTopK];
        __shared__ float w_sh[kRouterTailMaxTokens * kMaxTopK];
        __shared__ int32_t sh[2 * kRouterTailMaxE];  // the grouping's counts and cursors
        group_zero_counts(g.E, sh);
        float bias_e[8];  // once per warp: a warp routes two tokens at 5-8
        load_route_bias(bias, E, bias_e);
        for (int64_t m = threadIdx.x / 32; m < M; m += blockDim.x / 32) {
            route_select(m, logits, E, ld, bias_e, tid2eid, token_ids, vocab, top_k, route_scale, idx_out, w_out,
                         idx_sh, w_sh);
        }
        __syncthreads();
        group_block(idx_sh, w_sh, M * top_k, top_k, g, sh);
    }
};

}  // namespace

void moe_route(const float* logits, int64_t M, int E, int64_t ld_logits, const float* bias, const int64_t* tid2eid,
               const int32_t* token_ids, int64_t vocab, int top_k, float route_scale, int32_t* expert_idx,
               float* expert_weight, cudaStream_t stream) {
    FS_REQUIRE(E > 0 && E <= kMaxRouteE, "moe_route: n_routed_experts ", E, " must be in [1, ", kMaxRouteE, "]");
    FS_REQUIRE(top_k > 0 && top_k <= kMaxTopK && top_k <= E, "moe_route: top_k ", top_k, " must be in [1, min(",
               kMaxTopK, ", E)]");
    FS_REQUIRE(M > 0 && ld_logits >= E, "moe_route: M ", M, " / logits stride ", ld_logits, " invalid");
    FS_REQUIRE(!tid2eid || token_ids, "moe_route: hash routing needs token ids");
    const int warps = 4;
    launch_pdl("route_kernel", route_kernel, dim3(unsigned((M + warps - 1) / warps)), dim3(32 * warps), 0, stream, logits,
               M, E, ld_logits, bias, tid2eid, token_ids, vocab, top_k, route_scale, expert_idx, expert_weight);
}

size_t moe_grouping_bytes(int E, int64_t max_pairs) {
    return size_t(4) * (size_t(E) * 3 + 2 + size_t(max_pairs) * 3 + size_t(moe_group_blocks(max_pairs)) * E) + 64;
}

MoeGrouping moe_grouping_view(void* memory, int E, int64_t max_pairs) {
    MoeGrouping g;
    g.E = E;
    g.max_pairs = max_pairs;
    int32_t* p = static_cast<int32_t*>(memory);
    g.expert_count = p;
    p += E;
    g.expert_offset = p;
    p += E + 1;
    g.active = p;
    p += E;
    g.n_active = p;
    p += 1;
    g.slot_token = p;
    p += max_pairs;
    g.slot_weight = reinterpret_cast<float*>(p);
    p += max_pairs;
    g.pair_slot = p;
    p += max_pairs;
    g.block_counts = p;
    return g;
}

void moe_group(const int32_t* expert_idx, const float* expert_weight, int64_t M, int top_k, const MoeGrouping& g,
               cudaStream_t stream) {
    FS_REQUIRE(g.E > 0 && g.E <= 4096, "moe_group: expert count ", g.E, " out of range");
    FS_REQUIRE(M * top_k <= g.max_pairs, "moe_group: ", M, " tokens x top_k ", top_k, " exceed the grouping capacity ",
               g.max_pairs);
    const int64_t n_pairs = M * top_k;
    if (n_pairs > kGroupOneCtaPairs && g.block_counts) {
        const unsigned blocks = unsigned(moe_group_blocks(n_pairs));
        launch_pdl("group_count_kernel", group_count_kernel, dim3(blocks), dim3(kGroupThreads), size_t(g.E) * 4, stream,
                   expert_idx, n_pairs, g);
        launch_pdl("group_offsets_kernel", group_offsets_kernel, dim3(1), dim3(1024), size_t(g.E) * 8, stream,
                   int(blocks), g);
        launch_pdl("group_place_kernel", group_place_kernel, dim3(blocks), dim3(kGroupThreads), size_t(g.E) * 4, stream,
                   expert_idx, expert_weight, n_pairs, top_k, g);
        return;
    }
    launch_pdl("group_kernel", group_kernel, dim3(1), dim3(1024), size_t(g.E) * 8, stream, expert_idx, expert_weight,
               n_pairs, top_k, g);
}

void moe_route_and_group(const float* logits, int64_t M, int E, int64_t ld_logits, const float* bias,
                         const int64_t* tid2eid, const int32_t* token_ids, int64_t vocab, int top_k, float route_scale,
                         int32_t* expert_idx, float* expert_weight, const MoeGrouping& g, cudaStream_t stream) {
    if (M > kRouteGroupThreads / 32) {  // more tokens than the CTA has warps: two launches
        moe_route(logits, M, E, ld_logits, bias, tid2eid, token_ids, vocab, top_k, route_scale, expert_idx,
                  expert_weight, stream);
        moe_group(expert_idx, expert_weight, M, top_k, g, stream);
        return;
    }
    FS_REQUIRE(E > 0 && E <= kMaxRouteE && g.expert_begin >= 0 && g.expert_begin + g.E <= E,
               "moe_route_and_group: n_routed_experts ", E, " must be in [1, ", kMaxRouteE,
               "] and hold the grouping's experts [", g.expert_begin, ", ", g.expert_begin + g.E, ")");
    FS_REQUIRE(top_k > 0 && top_k <= kMaxTopK && top_k <= E, "moe_route_and_group: top_k ", top_k,
               " must be in [1, min(", kMaxTopK, ", E)]");
    FS_REQUIRE(M > 0 && ld_logits >= E, "moe_route_and_group: M ", M, " / logits stride ", ld_logits, " invalid");
    FS_REQUIRE(!tid2eid || token_ids, "moe_route_and_group: hash routing needs token ids");
    FS_REQUIRE(M * top_k <= g.max_pairs, "moe_route_and_group: ", M, " tokens x top_k ", top_k,
               " exceed the grouping capacity ", g.max_pairs);
    launch_pdl("route_group_kernel", route_group_kernel, dim3(1), dim3(kRouteGroupThreads), size_t(g.E) * 8, stream, logits,
               M, E, ld_logits, bias, tid2eid, token_ids, vocab, top_k, route_scale, expert_idx, expert_weight, g);
}

namespace {

// The plan of the router's linear where the fused form applies (plan.variant empty otherwise).
LinearPlan router_route_plan(const PreparedActivation& x, const DeviceLinear& gate, int top_k, const MoeGrouping& g,
                             const GemmWorkspace* ws, const KernelPolicy& policy) {
    const int64_t E = gate.out, M = x.m;
    if (policy.is_disabled("route_in_router") || M < 1 || M > kRouterTailMaxTokens || E > kRouterTailMaxE ||
        top_k < 1 || top_k > kMaxTopK || top_k > E || !ws || !ws->counters || g.expert_begin < 0 ||
        g.expert_begin + g.E > E || M * top_k > g.max_pairs)
        return {};
    LinearPlan plan = plan_linear(x, gate, 1, ws, policy);
    // bf16_gemv as linear() would run it, and the tail's counter after the row tiles' split counters.
    if (plan.variant != "bf16_gemv" || gate.out / bf16_gemv::kRows + 1 > ws->n_counters) return {};
    return plan;
}

}  // namespace

bool moe_router_routes(const PreparedActivation& x, const DeviceLinear& gate, int top_k, const MoeGrouping& g,
                       const GemmWorkspace* ws, const KernelPolicy& policy) {
    return !router_route_plan(x, gate, top_k, g, ws, policy).variant.empty();
}

void moe_router_route_and_group(const PreparedActivation& x, const DeviceLinear& gate, float* logits, const float* bias,
                                const int64_t* tid2eid, const int32_t* token_ids, int64_t vocab, int top_k,
                                float route_scale, int32_t* expert_idx, float* expert_weight, const MoeGrouping& g,
                                const GemmWorkspace* ws, cudaStream_t stream, const KernelPolicy& policy) {
    const LinearPlan plan = router_route_plan(x, gate, top_k, g, ws, policy);
    FS_REQUIRE(!plan.variant.empty(), "moe_router_route_and_group: not applicable to ", x.m, " tokens, ", gate.out,
               " experts, top_k ", top_k, " (moe_router_routes says where it is)");
    FS_REQUIRE(!tid2eid || token_ids, "moe_router_route_and_group: hash routing needs token ids");
    const int E = int(gate.out);
    const RouterRouteTail tail{logits, x.m, E, E, bias, tid2eid, token_ids, vocab, top_k, route_scale, expert_idx,
                               expert_weight, g};
    launch_pdl("bf16_gemv_route_kernel", bf16_gemv::bf16_gemv_kernel<1, RouterRouteTail>,
               bf16_gemv::launch_grid(gate, plan.k_splits), dim3(bf16_gemv::kThreads), 0, stream,
               bf16_gemv::launch_args(LinearCall{x, gate, 1, ws}, plan.k_splits, LinearOut{logits, OutKind::F32, E}),
               tail);
}

}  // namespace flashseek::cuda
