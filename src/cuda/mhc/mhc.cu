// mHC kernels, shaped for decode latency (batch 1 to 64), where the work is tiny and every dependent step costs;
// from 256 tokens the partial sums come from the tiled kernel (mhc_partial_tiled.cu, the same bits).
// Partial (split-K): CTA = (tile of 8 tokens, K chunk of 128 = 4 elements per lane), so at V4 shapes (K = N*D =
// 16384) batch 1 already spreads fn over 128 CTAs and fn is read once per 8 tokens (twice at batch 16). Warp w owns
// mix rows w, w+8, w+16 and holds the tile's x chunk in registers; its 32 sums (3 rows + the sum of squares, x 8
// tokens) are reduced by one transpose-reduce butterfly (31 shuffles instead of 160), after which lane L owns sum L.
// Partials are stored [token][split][row] (mhc_chunk.cuh), a token's block contiguous for the finalize.
// Finalize: one CTA of 17 warps per token. The 16 collapse warps prefetch their 8-wide chunk of every stream (and
// of the norm weight) with 16-byte loads before anything else, so the x latency overlaps the partial reduction;
// then warp 0 runs post + the Sinkhorn (one lane per matrix element, compile-time N) while the others collapse the
// streams with pre, then the fused RMSNorm. Sums run in fixed orders, so results are deterministic.
// Its serial chain at one token was: the split-K sums in two rounds of loads (25 rows over 17 warps, the second
// round's loads issued after the first's reduction) -> barrier -> pre by 4 threads -> barrier -> collapse, while
// warp 0 ran the 20 Sinkhorn iterations (the longest dependent chain of the kernel) -> the norm's block_sum, whose
// barriers made the collapse warps wait for the Sinkhorn -> the normed y, its prepared copy. Now a warp reads both
// of its rows in one pass, the weights (norm weight, pre's base and scale) are requested before pdl_wait, every
// collapse thread computes pre itself (no second barrier), and the norm's sum runs over the collapse warps alone
// (named barrier, block_sum's order with warp 0's +0 term kept), so the Sinkhorn overlaps the whole collapse, norm
// and store path instead of preceding the norm. Same arithmetic, same bits.
// One launch at one token (MhcPreParams::one_launch_counter): the partial CTAs have the finalize's thread count, and
// the one that arrives last at a counter runs the finalize; the same device functions, so the same bits.
// Post: one thread per (token, 8 features): N + 1 16-byte loads, N 16-byte stores, in place allowed.
#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/attn_helpers.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/linear.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/gemm/split_sum.cuh"
#include "cuda/mhc/mhc.cuh"
#include "cuda/mhc/mhc_chunk.cuh"
#include "cuda/mhc/mhc_partial_tiled.cuh"

namespace flashseek::cuda {

using namespace attn_detail;
using namespace mhc_chunk;

namespace {

constexpr int kTok = 8;                // tokens per partial CTA (fn is read once per tile)
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kMixMax / kWarps;  // 3
constexpr int kSums = (kRowsPerWarp + 1) * kTok;  // per-lane values the butterfly reduces
static_assert(kSums == 32, "the transpose-reduce leaves exactly one sum per lane");
constexpr int kFinThreads = 32 + 512;  // warp 0: Sinkhorn; 512 collapse threads = D/8 at hidden 4096
constexpr int kPostThreads = 128;

// One step of the transpose-reduce over v[0, 2*OFF): keeps [0, OFF) (lane bit OFF clear) or [OFF, 2*OFF) (set),
// re-indexed to [0, OFF), plus the partner lane's copy. Compile-time OFF keeps v in registers.
template <int OFF>
__device__ __forceinline__ void butterfly_step(float* v, int lane) {
    const bool upper = lane & OFF;
#pragma unroll
    for (int i = 0; i < OFF; ++i) {
        const float lo = v[i], hi = v[i + OFF];
        const float send = upper ? lo : hi;
        const float keep = upper ? hi : lo;
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
    }
}

// ws layout: [n_tokens][n_splits][n_mix + 1] (ws_index; row n_mix holds the sums of squares).
// With `pin.o` (or the combine inputs that give o), x is first replaced in place by
// X'_k = post_k * o + sum_j comb[j, k] X_j (bf16), exactly as
// mhc_post_vec_kernel computes it: warp w mixes token w of the chunk into shared memory and, after the barrier (all
// old values read), stores it; every warp then takes the mixed chunk from shared memory.
// The partial sums of K chunk `split` (of n_splits) for token tile `tile`, by the first kThreads threads of the CTA.
// kExtraWarps: the CTA has warps beyond kWarps (the one-launch kernel's); they compute nothing, join the fused
// post's __syncthreads (one block-wide barrier at one call site: no named barrier of part of the CTA, which
// racecheck did not follow into the later block-wide barriers) and leave.
template <bool kExtraWarps>
__device__ __forceinline__ void partial_chunk(bf16* __restrict__ x, const float* __restrict__ fn, int n_tokens, int N,
                                              int64_t D, int n_mix, bool aligned, bool interleaved, const PostIn& pin,
                                              float* __restrict__ ws, int tile, int split, int n_splits) {
    const int64_t K = int64_t(N) * D;
    const int t0 = tile * kTok;
    const int nt = min(kTok, n_tokens - t0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool worker = !kExtraWarps || warp < kWarps;
    int stream = 0;
    const int64_t kb = chunk_origin(split, lane, N, D, interleaved, stream);  // this lane's first element
    const bool full = aligned && kb + kPerLane <= K;  // vector path (8-byte x, 16-byte fn)
    // fn first, before pdl_wait: its loads are the long pole, x rows follow while they are in flight
    float w[kRowsPerWarp][kPerLane];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int o = warp + kWarps * r;
        const bool row = worker && o < n_mix;
        const float* src = fn + int64_t(o) * K + kb;
        if (row && full) {
            *reinterpret_cast<float4*>(w[r]) = __ldg(reinterpret_cast<const float4*>(src));
        } else {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) w[r][i] = row && kb + i < K ? __ldg(src + i) : 0.f;
        }
    }
    // fn is a weight (no kernel writes it): its loads above are in flight while the previous kernel finishes.
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output (x, pin, ws)
    pdl_trigger();
    float xv[kTok][kPerLane];
    if (pin.o || combines_moe(pin)) {  // fused mhc_post (host-checked: interleaved, aligned): warp w mixes token w
        static_assert(kWarps == kTok, "one warp per token of the tile");
        __shared__ __align__(16) float mixed[kTok][kChunk];
        const int64_t d = kb - int64_t(stream) * D;
        const int64_t t = t0 + warp;
        float out[kPerLane];
        if (warp < nt) {
            fused_post_features(pin, x, t, N, D, stream, d, out);
            *reinterpret_cast<float4*>(&mixed[warp][lane * kPerLane]) = make_float4(out[0], out[1], out[2], out[3]);
        }
        // every warp has read the old streams of this chunk and published its token
        __syncthreads();
        if (!worker) return;
        if (warp < nt) {
            uint2 raw;
            __nv_bfloat162* h2 = reinterpret_cast<__nv_bfloat162*>(&raw);
            h2[0] = __floats2bfloat162_rn(out[0], out[1]);
            h2[1] = __floats2bfloat162_rn(out[2], out[3]);
            *reinterpret_cast<uint2*>(x + t * K + kb) = raw;
        }
#pragma unroll
        for (int tt = 0; tt < kTok; ++tt) {
            const float4 m = tt < nt ? *reinterpret_cast<const float4*>(&mixed[tt][lane * kPerLane])
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
            xv[tt][0] = m.x, xv[tt][1] = m.y, xv[tt][2] = m.z, xv[tt][3] = m.w;
        }
    } else if (worker) {  // (the extra warps read no streams: they leave below)
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
        const bool tok = tt < nt;
        const bf16* src = x + int64_t(t0 + tt) * K + kb;
        if (tok && full) {
            const uint2 raw = __ldg(reinterpret_cast<const uint2*>(src));
            const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
            const float2 a = __bfloat1622float2(h2[0]), b = __bfloat1622float2(h2[1]);
            xv[tt][0] = a.x;
            xv[tt][1] = a.y;
            xv[tt][2] = b.x;
            xv[tt][3] = b.y;
        } else {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) xv[tt][i] = tok && kb + i < K ? __bfloat162float(src[i]) : 0.f;
        }
    }
    }
    if (!worker) return;  // (without the fused post the extra warps have no barrier to join and loaded nothing)
    float v[kSums];  // v[r * kTok + tt]; r == kRowsPerWarp: sum of squares
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) v[r * kTok + tt] = slot_partial(w[r], xv[tt]);
        v[kRowsPerWarp * kTok + tt] = slot_partial(xv[tt], xv[tt]);
    }
    // Transpose-reduce: at each step a lane keeps the half of its array selected by its lane bit and adds the
    // partner's copy of that half, so after 5 steps lane L holds the warp-wide sum of value L.
    butterfly_step<16>(v, lane);
    butterfly_step<8>(v, lane);
    butterfly_step<4>(v, lane);
    butterfly_step<2>(v, lane);
    butterfly_step<1>(v, lane);
    const int r = lane / kTok, tt = lane % kTok;
    if (tt >= nt) return;
    const int row = r < kRowsPerWarp ? warp + kWarps * r : n_mix;
    if (r < kRowsPerWarp ? row >= n_mix : warp != 0) return;
    ws[ws_index(t0 + tt, split, row, n_splits, n_mix + 1)] = v[0];
}

__global__ void __launch_bounds__(kThreads) mhc_partial_kernel(bf16* __restrict__ x, const float* __restrict__ fn,
                                                               int n_tokens, int N, int64_t D, int n_mix,
                                                               bool aligned, bool interleaved, PostIn pin,
                                                               float* __restrict__ ws) {
    partial_chunk<false>(x, fn, n_tokens, N, D, n_mix, aligned, interleaved, pin, ws, int(blockIdx.x), int(blockIdx.y),
                         int(gridDim.y));
}

__device__ float sigmoid_acc(float v) { return 1.f / (1.f + expf(-v)); }

// Sinkhorn-Knopp of cpu::sinkhorn on warp 0, lane j*N + k holding C[j][k]; sums in the CPU op's order.
template <int N>
__device__ float sinkhorn_lane(float c, int lane, int iters, float eps) {
    const int j = lane / N, k = lane % N;
    // Sum of v over the N lanes first, first + step, ..., added in that order (the CPU op's).
    auto lanes_sum = [&](float v, int first, int step) {
        float t[N];
#pragma unroll
        for (int i = 0; i < N; ++i) t[i] = __shfl_sync(0xffffffffu, v, (first + i * step) & 31);
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < N; ++i) s += t[i];
        return s;
    };
    auto row_sum = [&](float v) { return lanes_sum(v, j * N, 1); };  // C[j][0..N)
    auto col_sum = [&](float v) { return lanes_sum(v, k, N); };      // C[0..N)[k]
    float m = -INFINITY;
#pragma unroll
    for (int kk = 0; kk < N; ++kk) m = fmaxf(m, __shfl_sync(0xffffffffu, c, (j * N + kk) & 31));
    const float e = expf(c - m);
    c = e / row_sum(e) + eps;  // row softmax + eps
    c = c / (col_sum(c) + eps);
    for (int it = 1; it < iters; ++it) {
        c = c / (row_sum(c) + eps);
        c = c / (col_sum(c) + eps);
    }
    return c;
}

// The post and comb rows' weights of a token's mix (not in head mode): lane j < N holds post row j's base, lane
// j * N + k < N * N comb row (j, k)'s. Loaded before pdl_wait (no earlier kernel writes them).
struct MixWeights {
    float scale_post = 0.f, scale_comb = 0.f, base_post = 0.f, base_comb = 0.f;
};
__device__ __forceinline__ MixWeights load_mix_weights(const MhcPreParams& p, int N, int lane) {
    MixWeights w;
    w.scale_post = __ldg(p.scale + 1);
    w.scale_comb = __ldg(p.scale + 2);
    w.base_post = lane < N ? __ldg(p.base + N + lane) : 0.f;
    w.base_comb = lane < N * N ? __ldg(p.base + 2 * N + lane) : 0.f;
    return w;
}

// 1 / RMS of the flattened streams from the sum of squares (row n_mix of the split-K sums).
__device__ __forceinline__ float streams_rho(const float* red, int n_mix, int64_t K, float rms_eps) {
    return 1.f / sqrtf(red[n_mix] / float(K) + rms_eps);
}

// One warp writes token t's post (2 sigmoid) and comb (the Sinkhorn) from the split-K sums red[]: the finalize's
// warp 0, or mhc_mix_kernel where the caller put them apart (MhcPreParams::mix_apart). One body for both: the same
// bits.
__device__ __forceinline__ void write_mix_rows(const MhcPreParams& p, const float* red, float rho, int N, int t,
                                               int lane, const MixWeights& w) {
    if (lane < N) p.post[int64_t(t) * N + lane] = 2.f * sigmoid_acc(red[N + lane] * rho * w.scale_post + w.base_post);
    const float c0 = lane < N * N ? red[2 * N + lane] * rho * w.scale_comb + w.base_comb : 0.f;
    float c = 0.f;
    switch (N) {
        case 1: c = sinkhorn_lane<1>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
        case 2: c = sinkhorn_lane<2>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
        case 3: c = sinkhorn_lane<3>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
        default: c = sinkhorn_lane<4>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
    }
    if (lane < N * N) p.comb[int64_t(t) * N * N + lane] = c;
}

// The streams' values: through the read-only path, or (kCoherent: written by other CTAs of the same kernel, which
// the one-launch kernel's fused post does) through L2 only.
template <bool kCoherent>
__device__ __forceinline__ uint4 load_x8(const bf16* p) {
    if constexpr (kCoherent)
        return __ldcg(reinterpret_cast<const uint4*>(p));
    else
        return __ldg(reinterpret_cast<const uint4*>(p));
}
template <bool kCoherent>
__device__ __forceinline__ float load_x1(const bf16* p) {
    if constexpr (kCoherent)
        return __bfloat162float(__ldcg(p));
    else
        return __bfloat162float(*p);
}

// Token t's finalize by a CTA of kFinThreads threads. vec: D % 8 == 0 and x, y, norm_weight 16-byte aligned
// (host-checked). NS: the stream count at compile time (V4's 4), 0 = p.n_streams. kCoherentX: see load_x8.
template <int NS, bool kCoherentX>
__device__ __forceinline__ void finalize_token(const MhcPreParams& p, const float* __restrict__ ws, int n_splits,
                                               bool vec, int t) {
    // ybuf [D]: each collapse thread reads back only what it wrote; after it, the token's partials [n_splits][n_out]
    // (mhc_chunk::ws_index), staged.
    extern __shared__ __align__(16) float ybuf[];
    __shared__ float red[kMixMax + 1];
    __shared__ float scratch[32];
    const int N = NS > 0 ? NS : p.n_streams, D = p.dim;
    const int64_t K = int64_t(N) * D;
    const int n_mix = n_mix_of(N, p.head_mode), n_out = n_mix + 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const bf16* xt = p.x + int64_t(t) * K;
    const int ct = int(threadIdx.x) - 32, n_ct = int(blockDim.x) - 32;  // collapse thread index / count
    const int n8 = vec ? D / 8 : 0;
    // Weights first (no earlier kernel writes them, common/pdl.cuh): the norm weight's chunk, the pre rows' base and
    // scale, and warp 0's post and comb rows (its Sinkhorn path), in flight during the wait.
    uint4 wr = make_uint4(0, 0, 0, 0);
    if (p.norm_weight && ct >= 0 && ct < n8) wr = __ldg(reinterpret_cast<const uint4*>(p.norm_weight) + ct);
    const float base_pre = lane < N ? __ldg(p.base + lane) : 0.f;  // lane j: stream j's (pre below)
    const float scale_pre = __ldg(p.scale);
    const bool mix_rows = warp == 0 && !p.head_mode && !p.mix_apart;
    const MixWeights mw = mix_rows ? load_mix_weights(p, N, lane) : MixWeights{};
    pdl_wait_after_prefetch();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    // prefetch of the first chunk, in flight during the reduction and the Sinkhorn
    uint4 xr[kMaxStreams];
    if (ct >= 0 && ct < n8) {
#pragma unroll
        for (int j = 0; j < kMaxStreams; ++j)
            if (j < N) xr[j] = load_x8<kCoherentX>(xt + int64_t(j) * D + 8 * ct);
    }
    // The token's partials (one contiguous block) into shared memory with 16-byte copies where the block allows,
    // then the split-K sums, one warp per row; a warp's two rows (n_out <= 2 * 17) in one pass (each row's lanes
    // still add in the same order). Read straight from global memory, a row's values lie n_out floats apart.
    static_assert(kMixMax + 1 <= 2 * (kFinThreads / 32), "two split-K rows per finalize warp at most");
    float* part = ybuf + (D + 3) / 4 * 4;
    {
        const int n_vals = n_splits * n_out;
        const float* blk = ws + int64_t(t) * n_vals;
        if (n_vals % 4 == 0 && reinterpret_cast<uintptr_t>(ws) % 16 == 0) {
            for (int i = int(threadIdx.x) * 4; i < n_vals; i += int(blockDim.x) * 4)
                cp_async_cg16_zfill(part + i, blk + i, 16);
        } else {
            for (int i = int(threadIdx.x); i < n_vals; i += int(blockDim.x)) cp_async_ca<4>(part + i, blk + i);
        }
        cp_async_wait_all();
    }
    __syncthreads();
    {
        const int o0 = warp, o1 = warp + n_warps;
        float s0 = 0.f, s1 = 0.f;
        if (o1 < n_out) {
#pragma unroll 4
            for (int i = lane; i < n_splits; i += 32) {
                s0 += part[i * n_out + o0];
                s1 += part[i * n_out + o1];
            }
        } else if (o0 < n_out) {
#pragma unroll 4
            for (int i = lane; i < n_splits; i += 32) s0 += part[i * n_out + o0];
        }
        s0 = warp_sum(s0);
        s1 = warp_sum(s1);
        if (lane == 0 && o0 < n_out) red[o0] = s0;
        if (lane == 0 && o1 < n_out) red[o1] = s1;
    }
    __syncthreads();  // the one block-wide barrier: after it warp 0 (Sinkhorn) and the collapse warps part ways
    const float rho = streams_rho(red, n_mix, K, p.rms_eps);
    if (warp == 0) {
        if (mix_rows) write_mix_rows(p, red, rho, N, t, lane, mw);
        return;  // the Sinkhorn is off the collapse warps' path: they never wait for it (the next kernel does)
    }
    // The collapse warps: pre (lane j of every warp computes pre_j, a shuffle hands it to the warp: no barrier to
    // share it, and a quarter of the sigmoids and divisions of every thread computing all N), y = sum_j pre_j X_j,
    // the norm.
    float pr[kMaxStreams];
    {
        const float mine = lane < N ? sigmoid_acc(red[lane] * rho * scale_pre + base_pre) + p.hc_eps : 0.f;
#pragma unroll
        for (int j = 0; j < kMaxStreams; ++j) pr[j] = j < N ? __shfl_sync(0xffffffffu, mine, j) : 0.f;
    }
    float ss = 0.f;
    for (int c = ct; c < n8; c += n_ct) {
        if (c != ct) {
#pragma unroll
            for (int j = 0; j < kMaxStreams; ++j)
                if (j < N) xr[j] = load_x8<kCoherentX>(xt + int64_t(j) * D + 8 * c);
        }
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < kMaxStreams; ++j) {
            if (j >= N) break;
            float xf[8];
            bf16x8_to_float(xr[j], xf);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] += pr[j] * xf[e];
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const float s = attn_detail::round_bf16(acc[e]);  // the reference returns y in bf16 before the norm
            ybuf[8 * c + e] = s;
            ss += s * s;
        }
    }
    for (int d = 8 * n8 + ct; d < D; d += n_ct) {  // scalar path (D % 8 != 0 or unaligned)
        float s = 0.f;
        for (int j = 0; j < N; ++j) s += pr[j] * load_x1<kCoherentX>(xt + int64_t(j) * D + d);
        s = attn_detail::round_bf16(s);
        ybuf[d] = s;
        ss += s * s;
    }
    float r = 1.f;
    if (p.norm_weight) {
        // The sum of squares over the collapse warps, in block_sum's order over all 17 warps: warp 0's term was
        // +0 there and is +0 here (lane 0), so the butterfly adds the same values in the same order.
        ss = warp_sum(ss);
        if (lane == 0) scratch[warp] = ss;
        asm volatile("bar.sync 1, %0;" ::"r"(n_ct) : "memory");  // the collapse warps only
        const float part = lane >= 1 && lane < n_warps ? scratch[lane] : 0.f;
        ss = warp_sum(part);
        r = 1.f / sqrtf(ss / float(D) + p.norm_eps);
    }
    bf16* yt = p.y + int64_t(t) * D;
    for (int c = ct; c < n8; c += n_ct) {
        float out[8];
        if (p.norm_weight) {
            if (c != ct) wr = __ldg(reinterpret_cast<const uint4*>(p.norm_weight) + c);
            float wf[8];
            bf16x8_to_float(wr, wf);
#pragma unroll
            for (int e = 0; e < 8; ++e) out[e] = wf[e] * (ybuf[8 * c + e] * r);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) out[e] = ybuf[8 * c + e];
        }
        const uint4 packed = float_to_bf16x8(out);
        reinterpret_cast<uint4*>(yt)[c] = packed;
        if (p.prepared_values) {  // vec path with dim % 128 == 0 (host-checked): a half warp holds one 128-block
            float yb[8];
            bf16x8_to_float(packed, yb);  // the bf16 values prepare_activation would read back
            store_prepared_features_x8(p.prepared_values, p.prepared_scales, D, int64_t(t), c, p.prepared_layout,
                                       p.prepared_numerics, yb, lane);
        }
        if (p.prepared_fp8.codes) {  // the same conditions (host-checked)
            float yb[8];
            bf16x8_to_float(packed, yb);  // the bf16 values quantize_fp8_activation would read back
            store_fp8_rows_features_x8(p.prepared_fp8.codes, p.prepared_fp8.codes_ld, p.prepared_fp8.scales,
                                       p.prepared_fp8.scales_ld, int64_t(t), c, yb, lane);
        }
    }
    if (p.prepared_values && t == p.n_tokens - 1) {  // the padding rows up to the next multiple of 8: zeros
        const float none[8] = {};
        for (int64_t row = p.n_tokens; row < (int64_t(p.n_tokens) + 7) / 8 * 8; ++row)
            for (int c = ct; c < n8; c += n_ct)
                store_prepared_features_x8(p.prepared_values, p.prepared_scales, D, row, c, p.prepared_layout,
                                           p.prepared_numerics, none, lane, /*zero=*/true);
    }
    for (int d = 8 * n8 + ct; d < D; d += n_ct)
        yt[d] = __float2bfloat16_rn(p.norm_weight ? __bfloat162float(p.norm_weight[d]) * (ybuf[d] * r) : ybuf[d]);
}

template <int NS>
__global__ void __launch_bounds__(kFinThreads) mhc_finalize_kernel(MhcPreParams p, const float* __restrict__ ws,
                                                                   int n_splits, bool vec) {
    finalize_token<NS, false>(p, ws, n_splits, vec, int(blockIdx.x));
}

// Token blockIdx.x's post and comb where mhc_pre left them apart (MhcPreParams::mix_apart): the split-K sums of
// rows N .. n_mix (post, comb, the sum of squares) reduced as the finalize reduces them (lane L adds splits L,
// L + 32, ... in order, then warp_sum), then write_mix_rows. Its own launch so that the caller can run it beside
// the finalize's successor: the Sinkhorn's 20 dependent iterations outlasted the finalize's collapse and norm.
constexpr int kMixThreads = 256;

template <int NS>
__global__ void __launch_bounds__(kMixThreads) mhc_mix_kernel(MhcPreParams p, const float* __restrict__ ws,
                                                              int n_splits) {
    __shared__ float red[kMixMax + 1];
    const int N = NS > 0 ? NS : p.n_streams;
    const int n_mix = n_mix_of(N, false), n_out = n_mix + 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = blockIdx.x;
    const MixWeights mw = warp == 0 ? load_mix_weights(p, N, lane) : MixWeights{};
    pdl_wait_after_prefetch();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const float* blk = ws + int64_t(t) * n_splits * n_out;
    for (int o = N + warp; o < n_out; o += kMixThreads / 32) {
        float s = 0.f;
#pragma unroll 4
        for (int i = lane; i < n_splits; i += 32) s += blk[i * n_out + o];
        s = warp_sum(s);
        if (lane == 0) red[o] = s;
    }
    __syncthreads();
    if (warp != 0) return;
    write_mix_rows(p, red, streams_rho(red, n_mix, int64_t(N) * p.dim, p.rms_eps), N, t, lane, mw);
}

// One token's mhc_pre in one launch: grid (1, n_splits) CTAs of kFinThreads threads; the first kThreads of each compute
// the K chunk's partial sums (the others only join its barrier) as mhc_partial_kernel does (the fused post included),
// and the CTA that arrives last at `counter` (split_arrives_last: every partial is visible to it) runs the finalize as
// mhc_finalize_kernel does, reading the streams through L2 (other CTAs rewrote them where the post is fused) and
// resetting the counter. Why: at one token the finalize waited for the partial grid's completion and its own launch's
// dependency wait, twice per layer on the step's critical path; the arithmetic and the bits are the two kernels'. The
// host takes it only on the vector paths (vec, aligned) with 16-byte copies of the partials, which go through L2 as
// well. x is p.x (not __restrict__: the finalize reads the streams through p.x after the partial phase rewrote them).
template <int NS>
__global__ void __launch_bounds__(kFinThreads) mhc_pre_one_launch_kernel(MhcPreParams p, bf16* x,
                                                                         int n_mix, bool aligned, bool interleaved,
                                                                         PostIn pin, float* __restrict__ ws,
                                                                         int n_splits, bool vec,
                                                                         uint32_t* __restrict__ counter) {
    partial_chunk<true>(x, p.fn, 1, NS > 0 ? NS : p.n_streams, int64_t(p.dim), n_mix, aligned, interleaved, pin, ws,
                        0, int(blockIdx.y), n_splits);
    __shared__ uint32_t last;
    if (!split_arrives_last(counter, n_splits, last, threadIdx.x == 0)) return;
    if (threadIdx.x == 0) *counter = 0;  // every CTA has arrived: ready for the next launch
    finalize_token<NS, true>(p, ws, n_splits, vec, 0);
}

// One thread per (token, 8 consecutive features). x may alias x_out: a thread reads all its x before it writes.
__global__ void __launch_bounds__(kPostThreads) mhc_post_vec_kernel(int n_tokens, int N, int D, const bf16* x,
                                                                    const bf16* __restrict__ o,
                                                                    const float* __restrict__ post,
                                                                    const float* __restrict__ comb, bf16* x_out) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int n8 = D / 8;
    const int64_t total = int64_t(n_tokens) * n8;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / n8, c = i % n8;
        const int64_t base = t * N * D + 8 * c;
        uint4 xr[kMaxStreams];
#pragma unroll
        for (int j = 0; j < kMaxStreams; ++j)
            if (j < N) xr[j] = *reinterpret_cast<const uint4*>(x + base + int64_t(j) * D);
        float of[8];
        bf16x8_to_float(__ldg(reinterpret_cast<const uint4*>(o + t * D + 8 * c)), of);
        float xf[kMaxStreams][8] = {};
#pragma unroll
        for (int j = 0; j < kMaxStreams; ++j)
            if (j < N) bf16x8_to_float(xr[j], xf[j]);
        const float* cm = comb + t * N * N;
#pragma unroll
        for (int k = 0; k < kMaxStreams; ++k) {
            if (k >= N) break;
            const float pk = __ldg(post + t * N + k);
            float ck[kMaxStreams];
#pragma unroll
            for (int j = 0; j < kMaxStreams; ++j) ck[j] = j < N ? __ldg(cm + j * N + k) : 0.f;
            float out[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float xj[kMaxStreams] = {xf[0][e], xf[1][e], xf[2][e], xf[3][e]};
                out[e] = post_mix(pk, of[e], ck, xj, N);
            }
            *reinterpret_cast<uint4*>(x_out + base + int64_t(k) * D) = float_to_bf16x8(out);
        }
    }
}

// Scalar fallback (D % 8 != 0 or unaligned pointers).
__global__ void mhc_post_kernel(int n_tokens, int N, int D, const bf16* x, const bf16* o, const float* post,
                                const float* comb, bf16* x_out) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t total = int64_t(n_tokens) * D;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / D, d = i % D;
        const bf16* xt = x + t * N * D;
        float xv[kMaxStreams] = {};
        for (int j = 0; j < N; ++j) xv[j] = __bfloat162float(xt[int64_t(j) * D + d]);
        const float ov = __bfloat162float(o[i]);
        const float* c = comb + t * N * N;
        float outv[kMaxStreams];
        for (int k = 0; k < N; ++k) {
            float ck[kMaxStreams] = {};
            for (int j = 0; j < N; ++j) ck[j] = c[j * N + k];
            outv[k] = post_mix(post[t * N + k], ov, ck, xv, N);
        }
        for (int k = 0; k < N; ++k) x_out[t * N * D + int64_t(k) * D + d] = __float2bfloat16_rn(outv[k]);
    }
}

}  // namespace

// The split kernel's short CTAs (8 tokens each) win or tie up to 128 tokens in the fused forms the backend runs, the
// tiled kernel's 64-token tiles win from 256 on (test_cuda_attention --perf --perf-filter mhc; docs/perf.md §2.1a).
int mhc_tiled_min_tokens() { return 256; }

bool mhc_pre_fuses_post(int n_streams, int dim) { return dim % 4 == 0 && interleaved_chunks(n_streams, dim); }

size_t mhc_pre_workspace_bytes(int max_tokens, int n_streams, int dim, bool head_mode) {
    return size_t(std::max(max_tokens, 1)) * n_splits_of(int64_t(n_streams) * dim) *
           (n_mix_of(n_streams, head_mode) + 1) * sizeof(float);
}

void mhc_pre(const MhcPreParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    FS_ATTN_REQUIRE(p.n_streams >= 1 && p.n_streams <= kMaxStreams, "mhc_pre: hc_mult must be in 1..{}, got {}", kMaxStreams,
             p.n_streams);
    FS_ATTN_REQUIRE(p.dim > 0, "mhc_pre: hidden_size must be positive, got {}", p.dim);
    FS_ATTN_REQUIRE(p.x && p.fn && p.base && p.scale && p.y, "mhc_pre: x, fn, base, scale and y are required");
    FS_ATTN_REQUIRE(p.head_mode || (p.post && p.comb), "mhc_pre: post and comb outputs are required outside head mode");
    FS_ATTN_REQUIRE(!(p.head_mode && p.mix_apart), "mhc_pre: mix_apart has no post or comb to leave apart in head mode");
    FS_ATTN_REQUIRE(p.sinkhorn_iters >= 1, "mhc_pre: hc_sinkhorn_iters must be >= 1, got {}", p.sinkhorn_iters);
    if (p.n_tokens <= 0) return;
    const size_t need = mhc_pre_workspace_bytes(p.n_tokens, p.n_streams, p.dim, p.head_mode);
    FS_ATTN_REQUIRE(workspace && workspace_bytes >= need, "mhc_pre: workspace of {} bytes is smaller than the {} needed",
             workspace_bytes, need);
    const int64_t K = int64_t(p.n_streams) * p.dim;
    const int splits = n_splits_of(K);
    FS_ATTN_REQUIRE(splits <= 65535, "mhc_pre: hc_mult * hidden_size {} too large", K);
    float* ws = static_cast<float*>(workspace);
    const dim3 grid((p.n_tokens + kTok - 1) / kTok, splits);
    const bool aligned = K % kPerLane == 0 && reinterpret_cast<uintptr_t>(p.x) % 8 == 0 && aligned16(p.fn);
    const bool interleaved = interleaved_chunks(p.n_streams, p.dim);
    PostIn pin{p.prev_o,        p.prev_post,          p.prev_comb,
               p.prev_y_routed, p.prev_pair_slot,     p.prev_y_shared,
               p.prev_top_k,    p.prev_round_terms ? 1 : 0, p.prev_y_shared_bf16,
               p.prev_y_routed_bf16};
    FS_ATTN_REQUIRE(!(p.prev_o && combines_moe(pin)), "mhc_pre: give prev_o or the combine inputs, not both");
    FS_ATTN_REQUIRE(!p.prev_y_shared_bf16 || (!p.prev_y_shared && p.prev_round_terms),
                    "mhc_pre: prev_y_shared_bf16 replaces prev_y_shared and needs prev_round_terms");
    FS_ATTN_REQUIRE(!p.prev_y_routed_bf16 || (!p.prev_y_routed && p.prev_round_terms),
                    "mhc_pre: prev_y_routed_bf16 replaces prev_y_routed and needs prev_round_terms");
    if (combines_moe(pin))
        FS_ATTN_REQUIRE(pin.pair_slot && p.prev_top_k >= 1 && reinterpret_cast<uintptr_t>(pin.y_routed) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(pin.y_routed_bf16) % 8 == 0 &&
                            reinterpret_cast<uintptr_t>(pin.y_shared) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(pin.y_shared_bf16) % 8 == 0,
                        "mhc_pre: the fused combine needs pair slots, top_k >= 1 and 16-byte aligned expert outputs "
                        "(8-byte for bf16 outputs)");
    if (pin.o || combines_moe(pin)) {
        FS_ATTN_REQUIRE(mhc_pre_fuses_post(p.n_streams, p.dim) && !p.head_mode,
                        "mhc_pre: the fused mhc_post needs hc_mult 1, 2 or 4 and hidden_size a multiple of 128 / "
                        "hc_mult (got {}, {}), outside head mode", p.n_streams, p.dim);
        FS_ATTN_REQUIRE(pin.post && pin.comb, "mhc_pre: the fused mhc_post needs prev_post and prev_comb");
        FS_ATTN_REQUIRE(aligned && reinterpret_cast<uintptr_t>(pin.o) % 8 == 0,
                        "mhc_pre: the fused mhc_post needs 8-byte aligned x and prev_o");
    }
    // (x is rewritten in place only with the previous sub-block's mhc_post fused: prev_o or the combine inputs.)
    const bool tiled = p.partial_kernel == MhcPartialKernel::TILED ||
                       (p.partial_kernel == MhcPartialKernel::AUTO && p.n_tokens >= mhc_tiled_min_tokens());
    const int n_mix = n_mix_of(p.n_streams, p.head_mode);
    const size_t smem = (size_t(p.dim + 3) / 4 * 4 + size_t(splits) * (n_mix + 1)) * sizeof(float);
    FS_ATTN_REQUIRE(smem <= 200 * 1024,
                    "mhc_pre: hc_mult {} x hidden_size {} exceeds the finalize kernel's shared memory", p.n_streams,
                    p.dim);
    const bool vec = p.dim % 8 == 0 && aligned16(p.x) && aligned16(p.y) && (!p.norm_weight || aligned16(p.norm_weight));
    MhcPreParams q = p;
    if (p.prepared_values) {
        FS_ATTN_REQUIRE(p.prepared_scales, "mhc_pre: prepared_values without prepared_scales");
        FS_ATTN_REQUIRE(p.prepared_layout == int(WeightKind::FP8_BLOCK128) || p.prepared_layout == int(WeightKind::FP4_BLOCK32),
                        "mhc_pre: the prepared copy of y is for FP8 or FP4 weights, got layout {}", p.prepared_layout);
        // The fused write needs whole 128-blocks on the vector path; otherwise one preparation launch after it.
        if (!(vec && p.dim % 128 == 0 && aligned16(p.prepared_values))) q.prepared_values = nullptr;
    }
    const Fp8Activation& f8 = p.prepared_fp8;
    if (f8.codes) {
        FS_ATTN_REQUIRE(!p.prepared_values, "mhc_pre: prepared_values and prepared_fp8 both given");
        FS_ATTN_REQUIRE(f8.scales && f8.m == p.n_tokens && f8.k == p.dim && f8.codes_ld >= fp8_codes_ld(p.dim) &&
                            f8.codes_ld % 128 == 0 && f8.scales_ld >= fp8_scales_ld(p.n_tokens) &&
                            f8.order == Fp8CodeOrder::NATURAL,
                        "mhc_pre: prepared_fp8 is not an FP8_ROWS activation of [{}, {}] in natural order",
                        p.n_tokens, p.dim);
        if (!(vec && p.dim % 128 == 0 && aligned16(f8.codes))) q.prepared_fp8.codes = nullptr;
    }
    // One launch at one token where the caller gives the counter, on the vector paths (the finalize then reads the
    // streams and the partials through L2 only: see mhc_pre_one_launch_kernel).
    const bool one_launch = p.one_launch_counter && p.n_tokens == 1 && !tiled && vec && aligned &&
                            (int64_t(splits) * (n_mix + 1)) % 4 == 0 && aligned16(ws);
    if (one_launch) {
        auto* kernel = p.n_streams == 4 ? mhc_pre_one_launch_kernel<4> : mhc_pre_one_launch_kernel<0>;
        allow_dynamic_smem(kernel, smem);
        launch_pdl("mhc_pre_one_launch_kernel", kernel, dim3(1, splits), dim3(kFinThreads), smem, stream, q,
                   const_cast<bf16*>(p.x), n_mix, aligned, interleaved, pin, ws, splits, vec, p.one_launch_counter);
        CUDA_CHECK_LAUNCH("mhc_pre_one_launch_kernel");
    } else {
        if (tiled) {
            MhcPartialArgs a;
            a.x = const_cast<bf16*>(p.x);
            a.fn = p.fn;
            a.n_tokens = p.n_tokens;
            a.n_streams = p.n_streams;
            a.dim = p.dim;
            a.n_mix = n_mix;
            a.aligned = aligned;
            a.interleaved = interleaved;
            a.pin = pin;
            a.ws = ws;
            a.splits = splits;
            a.stage16 = aligned16(pin.post) && aligned16(pin.comb) && aligned16(pin.pair_slot);
            mhc_partial_tiled(a, stream);
        } else {
            launch_pdl("mhc_partial_kernel", mhc_partial_kernel, dim3(grid), dim3(kThreads), 0, stream,
                       const_cast<bf16*>(p.x), p.fn, p.n_tokens, p.n_streams, int64_t(p.dim), n_mix, aligned,
                       interleaved, pin, ws);
            CUDA_CHECK_LAUNCH("mhc_partial_kernel");
        }
        auto* finalize = p.n_streams == 4 ? mhc_finalize_kernel<4> : mhc_finalize_kernel<0>;
        allow_dynamic_smem(finalize, smem);
        launch_pdl("mhc_finalize_kernel", finalize, dim3(p.n_tokens), dim3(kFinThreads), smem, stream, q, ws,
                   splits, vec);
        CUDA_CHECK_LAUNCH("mhc_finalize_kernel");
    }
    if (p.prepared_values && !q.prepared_values) {
        PreparedActivation out;
        out.values = p.prepared_values;
        out.scales = p.prepared_scales;
        prepare_activation(p.y, false, p.n_tokens, p.dim, p.dim, WeightKind(p.prepared_layout),
                           ActNumerics(p.prepared_numerics), out, stream);
    }
    if (f8.codes && !q.prepared_fp8.codes)
        quantize_fp8_activation(reinterpret_cast<const uint16_t*>(p.y), p.n_tokens, p.dim, nullptr, f8, stream);
}

void mhc_pre_mix(const MhcPreParams& p, const void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    FS_ATTN_REQUIRE(p.mix_apart && !p.head_mode,
                    "mhc_pre_mix: follows an mhc_pre call with mix_apart set, outside head mode");
    FS_ATTN_REQUIRE(p.n_streams >= 1 && p.n_streams <= kMaxStreams && p.dim > 0 && p.post && p.comb && p.base &&
                        p.scale && p.sinkhorn_iters >= 1,
                    "mhc_pre_mix: the parameters of its mhc_pre call are required (hc_mult {}, hidden_size {})",
                    p.n_streams, p.dim);
    if (p.n_tokens <= 0) return;
    const size_t need = mhc_pre_workspace_bytes(p.n_tokens, p.n_streams, p.dim, false);
    FS_ATTN_REQUIRE(workspace && workspace_bytes >= need,
                    "mhc_pre_mix: workspace of {} bytes is smaller than the {} its mhc_pre call filled",
                    workspace_bytes, need);
    const int splits = n_splits_of(int64_t(p.n_streams) * p.dim);
    auto* kernel = p.n_streams == 4 ? mhc_mix_kernel<4> : mhc_mix_kernel<0>;
    launch_pdl("mhc_mix_kernel", kernel, dim3(p.n_tokens), dim3(kMixThreads), 0, stream, p,
               static_cast<const float*>(workspace), splits);
    CUDA_CHECK_LAUNCH("mhc_mix_kernel");
}

void mhc_post(int n_tokens, int n_streams, int dim, const bf16* x, const bf16* o, const float* post, const float* comb,
              bf16* x_out, cudaStream_t stream) {
    FS_ATTN_REQUIRE(n_streams >= 1 && n_streams <= kMaxStreams, "mhc_post: hc_mult must be in 1..{}, got {}", kMaxStreams,
             n_streams);
    FS_ATTN_REQUIRE(dim > 0, "mhc_post: hidden_size must be positive, got {}", dim);
    if (n_tokens <= 0) return;
    if (dim % 8 == 0 && aligned16(x) && aligned16(o) && aligned16(x_out)) {
        const int64_t total = int64_t(n_tokens) * (dim / 8);
        const int blocks = int(std::min<int64_t>((total + kPostThreads - 1) / kPostThreads, 8192));
        launch_pdl("mhc_post_vec_kernel", mhc_post_vec_kernel, dim3(blocks), dim3(kPostThreads), 0, stream, n_tokens,
                   n_streams, dim, x, o, post, comb, x_out);
    } else {
        const int64_t total = int64_t(n_tokens) * dim;
        const int threads = 256;
        const int blocks = int(std::min<int64_t>((total + threads - 1) / threads, 8192));
        launch_pdl("mhc_post_kernel", mhc_post_kernel, dim3(blocks), dim3(threads), 0, stream, n_tokens, n_streams, dim,
                   x, o, post, comb, x_out);
    }
    CUDA_CHECK_LAUNCH("mhc_post");
}

}  // namespace flashseek::cuda
