// RMSNorm and the fused per-head norm + RoPE: one warp per row. Fast path (dim % 8 == 0, 16-byte aligned rows,
// dim <= 2048, the decode shapes): the row is loaded once into registers with 16-byte loads issued together (one
// memory round trip instead of a dependent chain of 4-byte loads), reduced, scaled and stored from registers; a
// lane's 8 elements hold 4 whole RoPE pairs. General path: the row walked as bf16 pairs, read twice (sum of
// squares, then scale; it stays in L1). Both scale each element in the same order (x * r * w), in place allowed.
//
// Latency of few rows (q_norm at one token: one row of 1024, its prepared FP8 copy for wq_b): the fast path's one
// warp per row ran, after the load and the reduction, V = dim / 256 dependent rounds of scale + store + block
// quantization (a half-warp amax butterfly, the power-of-two scale, 8 conversions and stores per lane), and then
// the last row's warp alone wrote every padding row of the prepared copy (up to 7 rows x V chunks, serially). With
// one CTA of which one warp worked, that chain was the kernel. Now, for up to kSlicedRows rows, a row has V warps
// ("slices"): each loads the whole row and computes the row's sum of squares exactly as before (same lanes, same
// order, so the same 1 / rms bit for bit), then finishes only its own 16-byte chunk per lane: the quantization
// rounds run side by side. The padding rows get warps of their own, which write zeros without loading anything,
// in parallel with the real rows. The norm weight (never written by an earlier kernel) is requested before
// pdl_wait. Many rows keep one warp per row (the redundant loads would cost bandwidth there).
#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/attn_helpers.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/select_pick.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/norm/rms_row.cuh"
#include "cuda/norm/rmsnorm.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kWarpsPerBlock = 8;
// Up to this many rows the vector path gives a row V warps (latency-bound: one token's q_norm, up to 4 tokens' head
// norm); beyond it one warp per row, as the loads would be repeated V times for no latency gain.
constexpr int kSlicedRows = 256;

// Optional prepared copy of the output (rmsnorm's `prepared`): values null = none. Only on the vector path with
// dim % 128 == 0 and one row per token, where a half warp holds one 128-block.
struct PrepOut {
    uint16_t* values = nullptr;
    float* scales = nullptr;
    int layout = 0, numerics = 0;
    int m_pad = 0;  // rows up to m_pad are written; those past `rows` as zeros
    // The FP8_ROWS form instead (act_quant.cuh, natural order): values hold the codes, rows codes_ld bytes apart,
    // scales [dim / 128, scales_ld]; no padding rows (m_pad = rows).
    bool fp8_rows = false;
    int64_t codes_ld = 0, scales_ld = 0;
};

// The tail of RMSNorm (+ RoPE) for pair k of a row (dims 2k, 2k+1), in the reference's order: times the row's
// 1 / rms r, times the weight pair (weight_pair(), read only when with_weight), and for a rope pair
// (k >= rope_first_pair) rounded to bf16 (the reference stores the normed vector in bf16 before rotating it) and
// rotated to pos.
// cos_sin: the CTA's table of the token's rope pairs (cta_rope_table), or nullptr to evaluate the pair's own.
template <typename WeightPair>
__device__ __forceinline__ float2 norm_rope_pair(float2 v, float r, bool with_weight, WeightPair weight_pair, int k,
                                                 int rope_first_pair, const RopeTable& rope, int64_t pos,
                                                 const float2* cos_sin = nullptr) {
    const float2 w = with_weight ? weight_pair() : make_float2(1.f, 1.f);
    v.x = rms_row::normed(v.x, r, with_weight, w.x);
    v.y = rms_row::normed(v.y, r, with_weight, w.y);
    if (k >= rope_first_pair) {
        v.x = attn_detail::round_bf16(v.x);
        v.y = attn_detail::round_bf16(v.y);
        float c, s;
        rope_pair_cos_sin(cos_sin, pos, rope.inv_freq, k - rope_first_pair, c, s);
        rope_rotate(v.x, v.y, c, s, false);
    }
    return v;
}

__global__ void rmsnorm_rope_kernel(const bf16* in, int64_t in_stride, bf16* out, int64_t out_stride,
                                    const bf16* weight, int rows, int heads_per_token, int dim, float eps,
                                    const int32_t* positions, RopeTable rope) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int token = row / heads_per_token, head = row % heads_per_token;
    const __nv_bfloat162* src =
        reinterpret_cast<const __nv_bfloat162*>(in + token * in_stride + int64_t(head) * dim);
    __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + token * out_stride + int64_t(head) * dim);
    const int pairs = dim / 2;
    float ss = 0.f;
    for (int k = lane; k < pairs; k += 32) {
        const float2 v = __bfloat1622float2(src[k]);
        ss += v.x * v.x + v.y * v.y;
    }
    ss = warp_sum(ss);
    const float r = rsqrtf(ss / float(dim) + eps);
    const int rope_first_pair = pairs - rope.n_pairs;
    const int64_t pos = rope.n_pairs ? positions[token] : 0;
    for (int k = lane; k < pairs; k += 32) {
        auto weight_pair = [&] {
            return make_float2(__bfloat162float(weight[2 * k]), __bfloat162float(weight[2 * k + 1]));
        };
        const float2 v = norm_rope_pair(__bfloat1622float2(src[k]), r, weight != nullptr, weight_pair, k,
                                        rope_first_pair, rope, pos);
        dst[k] = __floats2bfloat162_rn(v.x, v.y);
    }
}

// Barrier of the `slices` consecutive warps that serve one row (named barrier 1 + their group inside the CTA; the
// padding rows' warps, which return early, are never in a group with a real row's).
__device__ __forceinline__ void sync_row_slices(int slices) {
    const int group = int(threadIdx.x >> 5) / slices;
    asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(32 * slices) : "memory");
}

// V = 16-byte chunks per lane (dim <= 256 * V). Warp `gw` of the grid serves row gw / slices and, of the row's
// chunks lane + 32 v, those with v % slices == gw % slices (slices 1 or V). Rows from `rows` up to po.m_pad are the
// prepared copy's padding rows: zeros, nothing loaded.
template <int V>
__global__ void rmsnorm_rope_vec_kernel(const bf16* in, int64_t in_stride, bf16* out, int64_t out_stride,
                                        const bf16* weight, int rows, int heads_per_token, int dim, float eps,
                                        const int32_t* positions, RopeTable rope, PrepOut po, int slices,
                                        bool rope_per_cta) {
    const int gw = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    const int row = gw / slices, slice = gw % slices;
    const int lane = threadIdx.x & 31;
    const int n8 = dim / 8;
    auto mine = [&](int v) { return lane + 32 * v < n8 && v % slices == slice; };
    uint4 raw[V], wraw[V];
#pragma unroll
    for (int v = 0; v < V; ++v) wraw[v] = make_uint4(0, 0, 0, 0);
    if (weight && row < rows) {  // a weight: no earlier kernel writes it, so it is requested before the wait
#pragma unroll
        for (int v = 0; v < V; ++v)
            if (mine(v)) wraw[v] = reinterpret_cast<const uint4*>(weight)[lane + 32 * v];
    }
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int token = row / heads_per_token, head = row % heads_per_token;
    const uint4* src = reinterpret_cast<const uint4*>(in + token * in_stride + int64_t(head) * dim);
    uint4* dst = reinterpret_cast<uint4*>(out + token * out_stride + int64_t(head) * dim);
    // The row is requested before the rope angles are evaluated, so its latency overlaps theirs (a double sincos
    // per pair and a barrier: the rows' loads waited behind them, 209 us per 4,096-token call of the q head norm).
    if (row < rows) {
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const int c = lane + 32 * v;
            if (c < n8) raw[v] = src[c];
        }
    }
    // One token's rope angles for the whole CTA when its rows share the token (the host's rope_per_cta; before any
    // early return: a barrier follows).
    __shared__ float2 cos_sin_s[kMaxRopePairs];
    const float2* cos_sin = nullptr;
    if (rope_per_cta) {
        cos_sin = cos_sin_s;
        cta_rope_table(positions[(blockIdx.x * kWarpsPerBlock / slices) / heads_per_token], rope.inv_freq, rope.n_pairs,
                       cos_sin_s);
    }
    if (row >= rows) {
        if (!po.values || row >= po.m_pad) return;
        const float none[8] = {};  // a padding row of the prepared copy: zeros, as prepare_activation writes them
#pragma unroll 1
        for (int v = 0; v < V; ++v)
            if (mine(v))
                store_prepared_features_x8(po.values, po.scales, dim, row, lane + 32 * v, po.layout, po.numerics, none,
                                           lane, /*zero=*/true);
        return;
    }
    const int64_t pos = rope.n_pairs ? positions[token] : 0;
    float ss = 0.f;
#pragma unroll
    for (int v = 0; v < V; ++v)
        if (lane + 32 * v < n8) ss = rms_row::add_chunk_squares(raw[v], ss);
    const float r = rms_row::inverse_rms(ss, dim, eps);
    const int rope_first_pair = dim / 2 - rope.n_pairs;
    // In place (out == in, as q_norm and the head norm run), a slice's stores would race with another slice's
    // loads of the same row: the row's slices (consecutive warps of this CTA, slices dividing kWarpsPerBlock) meet
    // first; each has its whole row in registers once its sum is done.
    if (slices > 1) sync_row_slices(slices);
    // The chunks this warp finishes (mine(v)) in a loop that is not unrolled, over the chunk picked from the
    // registers: one copy of the finishing code. Unrolled, its V copies (each with the rope pairs' evaluation and the
    // prepared copy's quantization and stores) made the kernel 7,376 instructions at V = 4 for one token's q_norm,
    // whose warps each run one copy once per layer and fetched the code cold; the kernel took 12.7 us in the step
    // (docs/perf-log/2026-12-07_attention-fusions.md).
#pragma unroll 1
    for (int v = slice; v < V; v += slices) {
        const int c = lane + 32 * v;
        if (c >= n8) continue;
        uint4 x = pick(raw, v);
        const uint4 wx = pick(wraw, v);
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&x);
        const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(&wx);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int k = 4 * c + j;  // pair index
            const float2 f = norm_rope_pair(__bfloat1622float2(h[j]), r, weight != nullptr,
                                            [&] { return __bfloat1622float2(w[j]); }, k, rope_first_pair, rope, pos,
                                            cos_sin);
            h[j] = __floats2bfloat162_rn(f.x, f.y);
        }
        dst[c] = x;
        if (po.values) {  // the bf16 values just stored, prepared for the next linear (dim % 128 == 0: whole halves)
            float y[8];
            bf16x8_to_float(x, y);
            if (po.fp8_rows)
                store_fp8_rows_features_x8(reinterpret_cast<uint8_t*>(po.values), po.codes_ld, po.scales,
                                           po.scales_ld, row, c, y, lane);
            else
                store_prepared_features_x8(po.values, po.scales, dim, row, c, po.layout, po.numerics, y, lane);
        }
    }
}

void launch(const bf16* in, int64_t in_stride, bf16* out, int64_t out_stride, const bf16* weight, int rows,
            int heads, int dim, float eps, const int32_t* positions, const RopeTable& rope, cudaStream_t stream,
            PreparedActivation* prepared = nullptr) {
    FS_ATTN_REQUIRE(dim > 0 && dim % 2 == 0, "rmsnorm: dim must be positive and even, got {}", dim);
    FS_ATTN_REQUIRE(2 * rope.n_pairs <= dim, "rmsnorm: rope_dim {} exceeds dim {}", 2 * rope.n_pairs, dim);
    FS_ATTN_REQUIRE(rope.n_pairs == 0 || positions != nullptr, "rmsnorm: RoPE needs positions");
    if (rows <= 0) return;
    const bool vec = dim % 8 == 0 && dim <= 2048 && aligned16(in) && aligned16(out) &&
                     (!weight || aligned16(weight)) && (in_stride * 2) % 16 == 0 && (out_stride * 2) % 16 == 0;
    PrepOut po;
    if (prepared) {
        FS_ATTN_REQUIRE(heads == 1 && prepared->values && prepared->scales &&
                            (prepared->layout == WeightKind::FP8_BLOCK128 || prepared->layout == WeightKind::FP4_BLOCK32),
                        "rmsnorm: a prepared copy needs one row per token, storage and an FP8 / FP4 layout");
        FS_ATTN_REQUIRE(prepared->format != ActFormat::FP8_ROWS || (prepared->layout == WeightKind::FP8_BLOCK128 &&
                                                                     prepared->numerics == ActNumerics::FP8_BLOCK128),
                        "rmsnorm: an FP8_ROWS copy is act_quant for FP8 weights (release numerics)");
        if (vec && dim % 128 == 0 && aligned16(prepared->values)) {
            po.values = prepared->values;
            po.scales = prepared->scales;
            po.layout = int(prepared->layout);
            po.numerics = int(prepared->numerics);
            po.m_pad = (rows + 7) / 8 * 8;
            if (prepared->format == ActFormat::FP8_ROWS) {
                po.fp8_rows = true;
                po.codes_ld = fp8_codes_ld(dim);
                po.scales_ld = fp8_scales_ld(rows);
                po.m_pad = rows;
            }
        }
    }
    if (vec) {
        const int V = dim <= 256 ? 1 : dim <= 512 ? 2 : dim <= 1024 ? 4 : 8;
        auto* k = V == 1 ? rmsnorm_rope_vec_kernel<1>
                  : V == 2 ? rmsnorm_rope_vec_kernel<2>
                  : V == 4 ? rmsnorm_rope_vec_kernel<4>
                           : rmsnorm_rope_vec_kernel<8>;
        const int slices = rows <= kSlicedRows ? V : 1;
        // Rows of one CTA share a token when the token's heads fill whole CTAs (the per-head norm: 64 heads): the
        // token's rope angles are then evaluated once per CTA instead of by the rope lanes of every row (a double
        // sincos each, in a warp of which only the rope lanes work).
        const bool rope_per_cta = rope.n_pairs > 0 && !po.values && heads % (kWarpsPerBlock / slices) == 0;
        const int64_t warps = int64_t(po.values ? po.m_pad : rows) * slices;
        const int blocks = int((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
        launch_pdl("rmsnorm_rope_vec_kernel", k, dim3(blocks), dim3(kWarpsPerBlock * 32), 0, stream, in, in_stride,
                   out, out_stride, weight, rows, heads, dim, eps, positions, rope, po, slices, rope_per_cta);
        CUDA_CHECK_LAUNCH("rmsnorm_rope_vec_kernel");
    } else {
        const int blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
        launch_pdl("rmsnorm_rope_kernel", rmsnorm_rope_kernel, dim3(blocks), dim3(kWarpsPerBlock * 32), 0, stream, in,
                   in_stride, out, out_stride, weight, rows, heads, dim, eps, positions, rope);
        CUDA_CHECK_LAUNCH("rmsnorm_rope_kernel");
    }
    if (prepared && prepared->format == ActFormat::FP8_ROWS) {
        if (po.values) {
            describe_fp8_rows(*prepared, rows, dim);
        } else {  // off the fused path: one preparation launch
            prepare_activation_rows(reinterpret_cast<const uint16_t*>(out), rows, dim, out_stride,
                                    ActNumerics::FP8_BLOCK128, *prepared, stream);
        }
    } else if (prepared && !po.values) {  // off the fused path: one preparation launch
        prepare_activation(out, false, rows, dim, out_stride, prepared->layout, prepared->numerics, *prepared, stream);
    } else if (prepared) {
        describe_prepared(*prepared, prepared->layout, prepared->numerics, rows, dim);
    }
}

}  // namespace

void rmsnorm(const bf16* in, int64_t in_stride, bf16* out, int64_t out_stride, const bf16* weight, int rows, int dim,
             float eps, cudaStream_t stream, PreparedActivation* prepared) {
    launch(in, in_stride, out, out_stride, weight, rows, 1, dim, eps, nullptr, RopeTable{}, stream, prepared);
}

void head_rmsnorm_rope(bf16* x, int64_t token_stride, int n_tokens, int n_heads, int head_dim, const bf16* weight,
                       float eps, const int32_t* positions, const RopeTable& rope, cudaStream_t stream) {
    launch(x, token_stride, x, token_stride, weight, n_tokens * n_heads, n_heads, head_dim, eps, positions, rope,
           stream);
}

}  // namespace flashseek::cuda
