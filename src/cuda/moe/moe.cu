// MoE kernels (see moe.cuh; routing and grouping are in moe_route.cu): the fused expert up-projection (w1 + w3 +
// SwiGLU clamp + routing weight + activation preparation for w2), the expert down-projection and the combine. The expert GEMMs reuse
// the weight-streaming mma.sync core of gemm/mma_core.cuh: one CTA streams a 128-row (up) or 64-row (down) slice
// of one expert's weights exactly once per 8 or 32 of its tokens, with tokens gathered through the grouping.
#include "cuda/moe/moe.cuh"

#include <algorithm>
#include <array>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/gemm/generic_values.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/gemm/tile_pipe.cuh"
#include "cuda/moe/moe_bulk.cuh"
#include "cuda/moe/moe_gemv.cuh"
#include "cuda/moe/moe_catalogue.h"
#include "cuda/moe/moe_wgmma.cuh"

namespace flashseek::cuda {
namespace {

// ---- expert GEMMs --------------------------------------------------------------------------------------------
struct ExpertArgs {
    const void* const* w_a;  // w1 (up) or w2 (down)
    const void* const* s_a;
    const void* const* w_b;  // w3 (up only)
    const void* const* s_b;
    int scale_kind;
    int64_t N, K;  // rows per expert, row length
    const uint16_t* x;
    const float* xs;
    int64_t x_ld, xs_ld;
    // grouping (null active => dense mode with `dense_m` tokens)
    const int32_t* active;
    const int32_t* n_active;
    const int32_t* count;
    const int32_t* offset;
    const int32_t* slot_token;
    const float* slot_weight;
    int64_t dense_m;
    bool gather_x;  // up: x row = token of slot; down: x row = slot
    // outputs
    float limit;
    int h_numerics;
    uint16_t* h;
    float* hs;
    int64_t h_ld, hs_ld;
    float* y;
};

template <WeightKind WK, int NT, bool GLU>
// The decode down kernel (4 warps, 8 tokens) is capped for 3 resident CTAs per SM; the fused up kernel keeps
// 8 warps and its registers (two matrices in flight).
__global__ void __launch_bounds__((GLU ? 8 : 4) * 32, (GLU || NT > 1) ? 1 : 3) expert_kernel(const ExpertArgs a) {
    constexpr int kW = GLU ? 8 : 4;
    constexpr int MATS = GLU ? 2 : 1;
    constexpr int U = mma::batch_steps<WK, MATS>();
    constexpr int CH = mma::chunk_steps<NT>();
    constexpr int XLD = CH * 128 + 8;
    __shared__ __align__(16) uint16_t xsm[NT * 8 * XLD];
    __shared__ float xss[NT * 8 * CH];
    __shared__ float col_max[kW][NT * 8];
    __shared__ int64_t srow[NT * 8];  // prepared-activation row of each token slot of the current chunk (-1: none)
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    int e = 0, count = 0, offset = 0;
    if (a.active) {
        if (int(blockIdx.y) >= *a.n_active) return;
        e = a.active[blockIdx.y];
        count = a.count[e];
        offset = a.offset[e];
    } else {
        count = int(a.dense_m);
    }
    const int64_t row0 = int64_t(blockIdx.x) * (16 * kW) + 16 * warp;
    const int64_t r_lo = row0 + g, r_hi = row0 + g + 8;
    constexpr int kStepBytes = mma::step_bytes<WK>();
    const int64_t row_bytes = int64_t(a.K) * kStepBytes / 128;
    const int64_t scale_ld = WK == WeightKind::FP8_BLOCK128 ? a.K / 128 : a.K / 32;
    const int n_steps = int(a.K / 128);
    mma::MatRows m[MATS];
#pragma unroll
    for (int mat = 0; mat < MATS; ++mat) {
        const uint8_t* w = reinterpret_cast<const uint8_t*>(mat == 0 ? a.w_a[e] : a.w_b[e]);
        m[mat].w_lo = w + r_lo * row_bytes;
        m[mat].w_hi = w + r_hi * row_bytes;
        m[mat].scale = mat == 0 ? a.s_a[e] : a.s_b[e];
        if (WK == WeightKind::FP8_BLOCK128) {
            m[mat].scale_lo = m[mat].scale_hi = (row0 / 128) * scale_ld;
        } else {
            m[mat].scale_lo = r_lo * scale_ld;
            m[mat].scale_hi = r_hi * scale_ld;
        }
    }
    bool scales_aligned = true;  // the u32 prefetch of 4 E8M0 group scales needs 4-byte aligned scale rows
#pragma unroll
    for (int mat = 0; mat < MATS; ++mat) scales_aligned &= (reinterpret_cast<uintptr_t>(m[mat].scale) & 3) == 0;
    const mma::PipeParams pp{a.K, scale_ld, a.scale_kind, a.scale_kind == int(ScaleKind::E8M0) && scales_aligned};

    for (int c0 = 0; c0 < count; c0 += NT * 8) {
        auto xrow = [&](int col) -> int64_t {
            if (col >= count) return -1;
            if (!a.active) return col;
            return a.gather_x ? int64_t(a.slot_token[offset + col]) : int64_t(offset + col);
        };
        int64_t crow0[NT], crow1[NT];
        int n_tiles = 0;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            crow0[j] = xrow(c0 + 8 * j + 2 * t);
            crow1[j] = xrow(c0 + 8 * j + 2 * t + 1);
            n_tiles += (c0 + 8 * j < count) ? 1 : 0;
        }
        // Gathered rows looked up once per token chunk (the staging loop then issues independent loads only).
        // Safe to overwrite here: every warp has passed the last staging barrier of the previous chunk.
        if (threadIdx.x < NT * 8) srow[threadIdx.x] = xrow(c0 + int(threadIdx.x));
        auto row_of = [&](int r) -> int64_t { return srow[r]; };
        float acc[MATS][NT][4];
#pragma unroll
        for (int mat = 0; mat < MATS; ++mat)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[mat][j][q] = 0.f;
        float(&acc_a)[NT][4] = acc[0];
        float(&acc_b)[NT][4] = acc[MATS - 1];
        mma::Batch<WK, MATS, U> bA, bB;
        mma::load_batch<WK, MATS, U, true>(bA, m, 0, n_steps, pp, t);
        int chunk_s0 = 0;
        for (int s0 = 0; s0 < n_steps; s0 += 2 * U) {
            if (s0 % CH == 0) {
                __syncthreads();
                mma::stage_x<NT, CH>(xsm, XLD, xss, a.x, a.x_ld, a.xs, a.xs_ld, 0, s0, n_steps, row_of);
                chunk_s0 = s0;
                __syncthreads();
            }
            mma::load_batch<WK, MATS, U, true>(bB, m, s0 + U, n_steps, pp, t);
            mma::compute_batch<WK, MATS, U, NT, CH>(bA, m, s0, n_steps, pp, xsm, XLD, xss, chunk_s0, n_tiles, acc, g, t);
            if (s0 + U < n_steps) {
                if ((s0 + U) % CH == 0) {
                    __syncthreads();
                    mma::stage_x<NT, CH>(xsm, XLD, xss, a.x, a.x_ld, a.xs, a.xs_ld, 0, s0 + U, n_steps, row_of);
                    chunk_s0 = s0 + U;
                    __syncthreads();
                }
                mma::load_batch<WK, MATS, U, true>(bA, m, s0 + 2 * U, n_steps, pp, t);
                mma::compute_batch<WK, MATS, U, NT, CH>(bB, m, s0 + U, n_steps, pp, xsm, XLD, xss, chunk_s0, n_tiles,
                                                        acc, g, t);
            }
        }
        (void)acc_b;
        if constexpr (!GLU) {
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int64_t rows[4] = {r_lo, r_lo, r_hi, r_hi};
                const int64_t outs[4] = {crow0[j], crow1[j], crow0[j], crow1[j]};
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (outs[q] >= 0) a.y[outs[q] * a.N + rows[q]] = acc_a[j][q];
            }
        } else {
            // SwiGLU with clamp, routing weight, bf16 rounding; then per-column amax over the CTA's 128 rows.
            float act[NT][4];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int col0 = c0 + 8 * j + 2 * t;
                const float w0 = crow0[j] < 0 ? 0.f : (a.active ? a.slot_weight[offset + col0] : 1.f);
                const float w1 = crow1[j] < 0 ? 0.f : (a.active ? a.slot_weight[offset + col0 + 1] : 1.f);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    // Release: w1/w3 outputs are bf16 in the reference (its GEMMs output bf16), then SwiGLU.
                    const bool rnd = a.h_numerics == int(ActNumerics::FP8_BLOCK128);
                    const float gate = fminf(rnd ? round_bf16(acc_a[j][q]) : acc_a[j][q], a.limit);
                    const float up = fminf(fmaxf(rnd ? round_bf16(acc_b[j][q]) : acc_b[j][q], -a.limit), a.limit);
                    const float silu = gate / (1.f + expf(-gate));
                    act[j][q] = round_bf16(silu * up * ((q & 1) ? w1 : w0));
                }
                float m0 = fmaxf(fabsf(act[j][0]), fabsf(act[j][2])), m1 = fmaxf(fabsf(act[j][1]), fabsf(act[j][3]));
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) {
                    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, o));
                    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, o));
                }
                if (g == 0) {
                    col_max[warp][8 * j + 2 * t] = m0;
                    col_max[warp][8 * j + 2 * t + 1] = m1;
                }
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                float sc[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float amax = 0.f;
#pragma unroll
                    for (int w = 0; w < kW; ++w) amax = fmaxf(amax, col_max[w][8 * j + 2 * t + h]);
                    float s = 1.f;
                    if (a.h_numerics == int(ActNumerics::FP8_BLOCK128))
                        s = exp2i(max(-126, min(127, ceil_log2(fmaxf(amax, 1e-4f) / 448.f))));
                    else if (amax > 0.f)
                        s = exp2i(max(-126, min(127, ceil_log2(amax) - 14)));
                    sc[h] = s;
                }
                const int64_t hrow[2] = {a.active ? int64_t(offset + c0 + 8 * j + 2 * t) : int64_t(c0 + 8 * j + 2 * t),
                                         0};
                const bool valid[2] = {crow0[j] >= 0, crow1[j] >= 0};
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int h = q & 1;
                    if (!valid[h]) continue;
                    float v = act[j][q] / sc[h];
                    if (a.h_numerics == int(ActNumerics::FP8_BLOCK128)) v = round_e4m3(fminf(fmaxf(v, -448.f), 448.f));
                    const int row_in_blk = 16 * warp + g + ((q & 2) ? 8 : 0);
                    const int64_t r = hrow[0] + h;
                    a.h[r * a.h_ld + int64_t(blockIdx.x) * 128 + mma::prepared_pos(WK, row_in_blk)] =
                        __half_as_ushort(__float2half_rn(v));
                }
                if (warp == 0 && g == 0) {
                    if (valid[0]) a.hs[hrow[0] * a.hs_ld + blockIdx.x] = sc[0];
                    if (valid[1]) a.hs[(hrow[0] + 1) * a.hs_ld + blockIdx.x] = sc[1];
                }
            }
            __syncthreads();  // col_max is reused by the next token chunk
        }
    }
}

using ExpertKernel = void (*)(ExpertArgs);
template <bool GLU>
ExpertKernel pick_expert(WeightKind k, int nt) {
    if (k == WeightKind::FP4_BLOCK32)
        return nt == 1 ? expert_kernel<WeightKind::FP4_BLOCK32, 1, GLU> : expert_kernel<WeightKind::FP4_BLOCK32, 4, GLU>;
    return nt == 1 ? expert_kernel<WeightKind::FP8_BLOCK128, 1, GLU> : expert_kernel<WeightKind::FP8_BLOCK128, 4, GLU>;
}

// ---- combine ------------------------------------------------------------------------------------------------
__global__ void combine_kernel(const float* __restrict__ y, const uint16_t* __restrict__ y_bf16,
                               const int32_t* __restrict__ pair_slot, const float* __restrict__ shared,
                               const uint16_t* __restrict__ shared_bf16, int64_t M, int top_k, int64_t D, void* out,
                               int out_f32, int64_t ld_out, int round_terms) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= M * D) return;
    const int64_t m = i / D, d = i % D;
    float sum = 0.f;
    if (y_bf16) {  // terms rounded already
        for (int j = 0; j < top_k; ++j) {
            const int32_t slot = pair_slot[m * top_k + j];
            if (slot >= 0) sum += bf16_bits_to_f32(y_bf16[int64_t(slot) * D + d]);
        }
    } else {
        for (int j = 0; j < top_k; ++j) {
            const int32_t slot = pair_slot[m * top_k + j];
            if (slot >= 0) sum += round_terms ? round_bf16(y[int64_t(slot) * D + d]) : y[int64_t(slot) * D + d];
        }
    }
    if (shared) sum += round_terms ? round_bf16(shared[m * D + d]) : shared[m * D + d];
    if (shared_bf16) sum += bf16_bits_to_f32(shared_bf16[m * D + d]);  // a term rounded already
    if (out_f32)
        static_cast<float*>(out)[m * ld_out + d] = sum;
    else
        static_cast<uint16_t*>(out)[m * ld_out + d] = f32_to_bf16_bits(sum);
}

// ---- shape-agnostic fallback (hidden or inter not a multiple of 128: tiny test configs) ------------------------
// Expert of grouped slot `slot`: the last expert whose offset is <= slot (empty experts share their successor's
// offset and come first).
__device__ __forceinline__ int expert_of_slot(const int32_t* offset, int E, int32_t slot) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (offset[mid] <= slot) lo = mid; else hi = mid - 1;
    }
    return lo;
}

struct GenericMoeArgs {
    WeightKind kind;
    int scale_kind;
    int64_t hidden, inter, rows;  // rows: M*top_k (routed) or M (dense)
    const void* const* w_a;
    const void* const* s_a;
    const void* const* w_b;
    const void* const* s_b;
    const int32_t* offset;  // null = dense
    int E;
    const int32_t* slot_token;
    const float* slot_weight;
    generic::PreparedView x;
    float limit;
    int h_numerics;
    uint16_t* h;
    float* hs;
    int64_t h_kpad;
    float* y;
};

// Resolves a row to (expert, activation row, routing weight); false when the slot does not exist.
__device__ __forceinline__ bool resolve_row(const GenericMoeArgs& a, int64_t r, int& e, int64_t& xrow, float& wgt) {
    if (!a.offset) {
        e = 0;
        xrow = r;
        wgt = 1.f;
        return true;
    }
    if (r >= a.offset[a.E]) return false;
    e = expert_of_slot(a.offset, a.E, int32_t(r));
    xrow = a.slot_token[r];
    wgt = a.slot_weight[r];
    return true;
}

// Warp per (row, j): gate/up dot products, SwiGLU clamp x routing weight, rounded to bf16 into h (natural order).
__global__ void generic_up_kernel(GenericMoeArgs a) {
    const int lane = threadIdx.x & 31;
    const int64_t idx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= a.rows * a.inter) return;
    const int64_t r = idx / a.inter, j = idx % a.inter;
    int e;
    int64_t xrow;
    float wgt;
    if (!resolve_row(a, r, e, xrow, wgt)) return;
    const generic::WeightView w1{a.kind, a.scale_kind, a.inter, a.hidden, static_cast<const uint8_t*>(a.w_a[e]), a.s_a[e]};
    const generic::WeightView w3{a.kind, a.scale_kind, a.inter, a.hidden, static_cast<const uint8_t*>(a.w_b[e]), a.s_b[e]};
    float gate = 0.f, up = 0.f;
    for (int64_t k = lane; k < a.hidden; k += 32) {
        const float xv = generic::prepared_value(a.x, xrow, k);
        gate += generic::weight_value(w1, j, k) * xv;
        up += generic::weight_value(w3, j, k) * xv;
    }
    gate = warp_sum(gate);
    up = warp_sum(up);
    if (a.h_numerics == int(ActNumerics::FP8_BLOCK128)) {  // release: the reference's w1/w3 outputs are bf16
        gate = round_bf16(gate);
        up = round_bf16(up);
    }
    gate = fminf(gate, a.limit);
    up = fminf(fmaxf(up, -a.limit), a.limit);
    if (lane == 0) a.h[r * a.h_kpad + j] = f32_to_bf16_bits(gate / (1.f + expf(-gate)) * up * wgt);
}

// Warp per (row, 128-block): in-place conversion of the bf16 row of h into the prepared layout of w2.
__global__ void generic_quant_kernel(GenericMoeArgs a) {
    const int lane = threadIdx.x & 31;
    const int64_t n_blk = a.h_kpad / 128;
    const int64_t idx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= a.rows * n_blk) return;
    const int64_t r = idx / n_blk, blk = idx % n_blk;
    int e;
    int64_t xrow;
    float wgt;
    if (!resolve_row(a, r, e, xrow, wgt)) return;
    uint16_t* row = a.h + r * a.h_kpad + blk * 128;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t col = blk * 128 + 4 * lane + i;
        v[i] = col < a.inter ? bf16_bits_to_f32(row[4 * lane + i]) : 0.f;
    }
    store_prepared_block(v, lane, a.kind, a.h_numerics, row, a.hs + r * n_blk + blk);
}

// Warp per (row, n): y[row, n] = sum_k W2[n, k] * h[row, k].
__global__ void generic_down_kernel(GenericMoeArgs a) {
    const int lane = threadIdx.x & 31;
    const int64_t idx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= a.rows * a.hidden) return;
    const int64_t r = idx / a.hidden, n = idx % a.hidden;
    int e;
    int64_t xrow;
    float wgt;
    if (!resolve_row(a, r, e, xrow, wgt)) return;
    const generic::WeightView w2{a.kind, a.scale_kind, a.hidden, a.inter, static_cast<const uint8_t*>(a.w_a[e]), a.s_a[e]};
    float acc = 0.f;
    for (int64_t k = lane; k < a.inter; k += 32) acc += generic::weight_value(w2, n, k) * generic::prepared_value(a.x, r, k);
    acc = warp_sum(acc);
    if (lane == 0) a.y[r * a.hidden + n] = acc;
}

unsigned warp_blocks(int64_t warps_needed) { return unsigned((warps_needed + 7) / 8); }

void check_table(const ExpertTable& t, const char* who) {
    FS_REQUIRE(t.kind == WeightKind::FP4_BLOCK32 || t.kind == WeightKind::FP8_BLOCK128, who,
               ": experts must be FP4_BLOCK32 or FP8_BLOCK128");
    FS_REQUIRE(t.scale_kind != ScaleKind::NONE, who, ": experts need scales");
    FS_REQUIRE(t.hidden > 0 && t.inter > 0, who, ": hidden (", t.hidden, ") and inter (", t.inter,
               ") must be positive");
    if (t.kind == WeightKind::FP4_BLOCK32)
        FS_REQUIRE(t.hidden % 32 == 0 && t.inter % 32 == 0, who, ": FP4 experts need hidden (", t.hidden,
                   ") and inter (", t.inter, ") to be multiples of 32");
}

// The tensor-core expert kernels need both sizes in whole 128-column steps; other shapes use the fallback.
bool tensor_core_shape(const ExpertTable& t) { return t.hidden % 128 == 0 && t.inter % 128 == 0; }

GenericMoeArgs generic_args(const ExpertTable& t, const MoeGrouping* g, int64_t rows) {
    GenericMoeArgs a{};
    a.kind = t.kind;
    a.scale_kind = int(t.scale_kind);
    a.hidden = t.hidden;
    a.inter = t.inter;
    a.rows = rows;
    if (g) {
        a.offset = g->expert_offset;
        a.E = g->E;
        a.slot_token = g->slot_token;
        a.slot_weight = g->slot_weight;
    }
    return a;
}

}  // namespace

namespace {
// Layout of the memory moe_act_tile_bytes sizes: tiles, tile scales, the tile list, split partials, split counters.
struct ActTileLayout {
    size_t tiles, scales, list, partials, counters, total;
    int64_t count;
    int slots;
};
ActTileLayout act_tile_layout(int E, int64_t max_pairs, int64_t max_k) {
    ActTileLayout l{};
    l.count = moe_act_tiles_needed(E, std::min(max_pairs, kActTileMaxPairs));
    l.slots = wgmma_experts::max_ctas() + 1;
    l.tiles = 0;
    l.scales = size_t(l.count) * size_t(max_k / 32) * wgmma::kStepBytes;
    l.list = l.scales + size_t(l.count) * size_t(max_k / 128) * 16 * 4;
    l.partials = l.list + (size_t(2 * l.count + 1) * 4 + 15) / 16 * 16;
    l.counters = l.partials + size_t(l.slots) * wgmma_experts::kSplitFloatsPerSlot * 4;
    l.total = l.counters + size_t(l.slots) * 4;
    return l;
}
}  // namespace

size_t moe_act_tile_bytes(int E, int64_t max_pairs, int64_t max_k) { return act_tile_layout(E, max_pairs, max_k).total; }

void moe_attach_act_tiles(MoeGrouping& g, void* memory, int64_t max_k) {
    FS_REQUIRE(memory && (reinterpret_cast<uintptr_t>(memory) & 15) == 0 && max_k > 0 && max_k % 128 == 0,
               "moe_attach_act_tiles: need 16-byte aligned memory and max_k a positive multiple of 128 (got ", max_k, ")");
    const ActTileLayout l = act_tile_layout(g.E, g.max_pairs, max_k);
    uint8_t* base = static_cast<uint8_t*>(memory);
    g.act_tiles = base + l.tiles;
    g.act_tile_scales = reinterpret_cast<float*>(base + l.scales);
    g.act_tile_k = max_k;
    g.act_tile_count = int(l.count);
    g.tile_expert = reinterpret_cast<int32_t*>(base + l.list);
    g.tile_col = g.tile_expert + l.count;
    g.n_tiles = g.tile_col + l.count;
    g.split_partials = reinterpret_cast<float*>(base + l.partials);
    g.split_counters = reinterpret_cast<uint32_t*>(base + l.counters);
    g.split_slots = l.slots;
    CUDA_CHECK(cudaMemset(g.split_counters, 0, size_t(l.slots) * 4));
}

// ---- variants of the expert catalogue defined here: generic_experts and tile_experts ---------------------------

namespace generic_experts {
bool supports(const ExpertCall& c) { return !tensor_core_shape(c.t) && !c.x.raw; }
bool preferred(const ExpertCall&, const KernelPolicy&) { return true; }
void up(const ExpertCall& c, const KernelPolicy&, float swiglu_limit, PreparedActivation& h, cudaStream_t stream) {
    const int64_t rows = c.grouping ? c.M * c.top_k : c.M;
    GenericMoeArgs g = generic_args(c.t, c.grouping, rows);
    g.w_a = c.t.w1;
    g.s_a = c.t.w1_scale;
    g.w_b = c.t.w3;
    g.s_b = c.t.w3_scale;
    g.x = generic::view_of(c.x);
    g.limit = swiglu_limit;
    g.h_numerics = int(c.h_numerics);
    g.h = h.values;
    g.hs = h.scales;
    g.h_kpad = h.k_pad;
    generic_up_kernel<<<warp_blocks(rows * c.t.inter), 256, 0, stream>>>(g);
    CUDA_CHECK_LAUNCH("generic_up_kernel");
    generic_quant_kernel<<<warp_blocks(rows * (h.k_pad / 128)), 256, 0, stream>>>(g);
    CUDA_CHECK_LAUNCH("generic_quant_kernel");
}
void down(const ExpertCall& c, const KernelPolicy&, float* y, cudaStream_t stream) {
    const int64_t rows = c.grouping ? c.M * c.top_k : c.M;
    GenericMoeArgs g = generic_args(c.t, c.grouping, rows);
    g.w_a = c.t.w2;
    g.s_a = c.t.w2_scale;
    g.x = generic::view_of(c.x);
    g.y = y;
    generic_down_kernel<<<warp_blocks(rows * c.t.hidden), 256, 0, stream>>>(g);
    CUDA_CHECK_LAUNCH("generic_down_kernel");
}
}  // namespace generic_experts

namespace tile_experts {
bool supports(const ExpertCall& c) { return tensor_core_shape(c.t) && !c.x.raw; }
bool preferred(const ExpertCall&, const KernelPolicy&) { return true; }
void up(const ExpertCall& c, const KernelPolicy&, float swiglu_limit, PreparedActivation& h, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    ExpertArgs a{};
    set_projection(a, t, true);
    a.scale_kind = int(t.scale_kind);
    a.x = c.x.values;
    a.xs = c.x.scales;
    a.x_ld = c.x.k_pad;
    a.xs_ld = c.x.k_pad / 128;
    set_grouping(a, c.grouping);
    a.dense_m = c.M;
    a.gather_x = true;
    a.limit = swiglu_limit;
    a.h_numerics = int(c.h_numerics);
    a.h = h.values;
    a.hs = h.scales;
    a.h_ld = h.k_pad;
    a.hs_ld = h.k_pad / 128;
    const int nt = c.M <= 16 ? 1 : 4;
    const int64_t experts = c.grouping ? std::min<int64_t>(c.grouping->E, c.M * c.top_k) : 1;
    dim3 grid(unsigned(t.inter / 128), unsigned(experts));
    pick_expert<true>(t.kind, nt)<<<grid, 256, 0, stream>>>(a);
    CUDA_CHECK_LAUNCH("expert_kernel<up>");
}
void down(const ExpertCall& c, const KernelPolicy&, float* y, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    ExpertArgs a{};
    set_projection(a, t, false);
    a.scale_kind = int(t.scale_kind);
    a.x = c.x.values;
    a.xs = c.x.scales;
    a.x_ld = c.x.k_pad;
    a.xs_ld = c.x.k_pad / 128;
    set_grouping(a, c.grouping);
    a.dense_m = c.M;
    a.gather_x = false;
    a.y = y;
    const int nt = c.M <= 16 ? 1 : 4;
    const int64_t experts = c.grouping ? std::min<int64_t>(c.grouping->E, c.M * c.top_k) : 1;
    dim3 grid(unsigned(t.hidden / 64), unsigned(experts));
    pick_expert<false>(t.kind, nt)<<<grid, 128, 0, stream>>>(a);
    CUDA_CHECK_LAUNCH("expert_kernel<down>");
}
}  // namespace tile_experts

namespace {
// The catalogue's supports(): the down-projection's input in the variant's format, then its own checks.
template <bool (*Supports)(const ExpertCall&), ActFormat F>
bool supports_in(const ExpertCall& c) {
    return c.x.format == (c.up ? ActFormat::MMA_F16 : F) && Supports(c);
}
// down_bf16: the variant's bf16 down-projection output, or nullptr.
#define FS_EXPERT_ROW_WITH(ns, archs, format, down_bf16)                                                         \
    ExpertVariant {                                                                                              \
        #ns, archs, format, &supports_in<&ns::supports, format>, &ns::preferred, &ns::up, &ns::down, down_bf16   \
    }
#define FS_EXPERT_ROW(ns, archs, format) FS_EXPERT_ROW_WITH(ns, archs, format, nullptr)
constexpr ActFormat kMmaF16 = ActFormat::MMA_F16, kFp8Rows = ActFormat::FP8_ROWS;
// Priority order: the first preferred variant that supports a projection runs it (docs/perf.md, kernel choice).
const std::array<ExpertVariant, 7> kExpertVariants = {
    FS_EXPERT_ROW(generic_experts, "sm_80+", kMmaF16),   // the only one for shapes off the 128 grid
    FS_EXPERT_ROW(wgmma_experts, "sm_90a", kMmaF16),     // routed FP4, 2-256 tokens
    FS_EXPERT_ROW(bulk_experts, "sm_90+", kMmaF16),      // routed FP4, 8-16 tokens
    FS_EXPERT_ROW(simt_experts, "sm_80+", kMmaF16),      // one token
    FS_EXPERT_ROW(gemv_experts, "sm_80+", kMmaF16),      // 1-16 tokens; routed up to routed_gemv_max_tokens
    FS_EXPERT_ROW_WITH(grouped_experts, "sm_80+", kFp8Rows,  // routed FP4, raw input, from
                       &grouped_experts::down_bf16),         // grouped_experts_min_tokens
    FS_EXPERT_ROW(tile_experts, "sm_80+", kMmaF16),      // any M
};
#undef FS_EXPERT_ROW
#undef FS_EXPERT_ROW_WITH
}  // namespace

std::span<const ExpertVariant> expert_variants() { return kExpertVariants; }

namespace {
// The catalogue's order of choice: the first forced variant that takes a call, else the first enabled one that
// takes it and prefers it. takes(v, forced) says whether v takes it (forced: preference aside).
template <class Takes>
const ExpertVariant* first_taking(const KernelPolicy& policy, Takes&& takes) {
    for (const ExpertVariant& v : kExpertVariants)
        if (policy.is_forced(v.name) && takes(v, true)) return &v;
    for (const ExpertVariant& v : kExpertVariants)
        if (!policy.is_disabled(v.name) && takes(v, false)) return &v;
    return nullptr;
}
// choose_experts' variant, or null where none takes the call.
const ExpertVariant* find_experts(const ExpertCall& c, const KernelPolicy& policy) {
    return first_taking(policy, [&](const ExpertVariant& u, bool forced) {
        return u.supports(c) && (forced || u.preferred(c, policy));
    });
}
}  // namespace

const ExpertVariant& choose_experts(const ExpertCall& c, const KernelPolicy& policy) {
    if (const ExpertVariant* v = find_experts(c, policy)) return *v;
    throw_error(fs_cat(c.up ? "moe_expert_up" : "moe_expert_down", ": no enabled kernel variant supports M = ", c.M,
                       c.x.raw ? " with a raw input" : "", " (hidden ", c.t.hidden, ", inter ", c.t.inter, ")"));
}

std::string_view moe_expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping* grouping,
                               int64_t M, int top_k, float swiglu_limit, ActNumerics h_numerics,
                               PreparedActivation& h, cudaStream_t stream, const KernelPolicy& policy) {
    check_table(t, "moe_expert_up");
    FS_REQUIRE(x.layout == t.kind && x.k == t.hidden && x.m >= M, "moe_expert_up: activation (", x.m, " x ", x.k,
               ") not prepared for these experts (hidden ", t.hidden, ")");
    FS_REQUIRE(h.values && h.scales, "moe_expert_up: output storage is null");
    const int64_t rows = grouping ? M * top_k : M;
    describe_prepared(h, t.kind, h_numerics, rows, t.inter);  // (gemv_experts hands h on as raw bf16 rows)
    const ExpertCall c{true, x, t, grouping, M, top_k, h_numerics};
    const ExpertVariant& v = choose_experts(c, policy);
    v.up(c, policy, swiglu_limit, h, stream);
    return v.name;
}

bool moe_expert_up_packs_ahead(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping* grouping,
                               int64_t M, int top_k, ActNumerics h_numerics, const KernelPolicy& policy) {
    if (M != 1 || grouping == nullptr || policy.is_disabled("moe_pack_ahead")) return false;
    const ExpertVariant* v = find_experts(ExpertCall{true, x, t, grouping, M, top_k, h_numerics}, policy);
    return v != nullptr && v->name == "wgmma_experts";
}

void moe_expert_up_pack_ahead(PreparedActivation& x, const ExpertTable& t, const MoeGrouping* grouping, int64_t M,
                              int top_k, ActNumerics h_numerics, cudaStream_t stream, const KernelPolicy& policy) {
    FS_REQUIRE(moe_expert_up_packs_ahead(x, t, grouping, M, top_k, h_numerics, policy),
               "moe_expert_up_pack_ahead: the call (M = ", M, ") does not take a tile packed ahead");
    wgmma_experts::pack_ahead(ExpertCall{true, x, t, grouping, M, top_k, h_numerics}, stream);
    x.packed_tiles = grouping->act_tiles;
}

bool moe_expert_up_takes_raw(const PreparedActivation& raw_x, const PreparedActivation& prepared_x,
                             const ExpertTable& t, const MoeGrouping* grouping, int64_t M, int top_k,
                             ActNumerics h_numerics, const KernelPolicy& policy) {
    const ExpertCall raw{true, raw_x, t, grouping, M, top_k, h_numerics};
    const ExpertCall prepared{true, prepared_x, t, grouping, M, top_k, h_numerics};
    // choose_experts' order over both inputs: the first variant that takes either decides, the prepared input where
    // it takes both.
    bool took_raw = false;
    first_taking(policy, [&](const ExpertVariant& v, bool forced) {
        auto takes = [&](const ExpertCall& c) { return v.supports(c) && (forced || v.preferred(c, policy)); };
        if (takes(prepared)) return true;
        took_raw = takes(raw);
        return took_raw;
    });
    return took_raw;
}

std::string_view moe_expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping* grouping,
                                 int64_t M, int top_k, float* y, cudaStream_t stream, const KernelPolicy& policy,
                                 uint16_t* y_bf16, bool* wrote_bf16) {
    check_table(t, "moe_expert_down");
    const int64_t rows = grouping ? M * top_k : M;
    FS_REQUIRE(h.layout == t.kind && h.k == t.inter && h.m >= rows, "moe_expert_down: intermediate (", h.m, " x ",
               h.k, ") does not match the experts (inter ", t.inter, ")");
    const ExpertCall c{false, h, t, grouping, M, top_k, h.numerics};
    const ExpertVariant& v = choose_experts(c, policy);
    const bool bf16 = y_bf16 != nullptr && v.down_bf16 != nullptr;
    if (wrote_bf16) *wrote_bf16 = bf16;
    if (bf16)
        v.down_bf16(c, policy, y_bf16, stream);
    else
        v.down(c, policy, y, stream);
    return v.name;
}

void moe_combine(const float* y_routed, const MoeGrouping& g, const float* y_shared, int64_t M, int top_k,
                 int64_t hidden, void* out, OutKind out_kind, int64_t ld_out, cudaStream_t stream, bool round_terms,
                 const uint16_t* y_shared_bf16, const uint16_t* y_routed_bf16) {
    FS_REQUIRE(ld_out >= hidden, "moe_combine: output stride ", ld_out, " < hidden ", hidden);
    FS_REQUIRE(!y_shared_bf16 || (!y_shared && round_terms),
               "moe_combine: y_shared_bf16 replaces y_shared and needs round_terms");
    FS_REQUIRE(!y_routed_bf16 || (!y_routed && round_terms),
               "moe_combine: y_routed_bf16 replaces y_routed and needs round_terms");
    FS_REQUIRE(y_routed || y_routed_bf16, "moe_combine: no routed outputs (y_routed or y_routed_bf16)");
    const int64_t n = M * hidden;
    launch_pdl("combine_kernel", combine_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, stream, y_routed,
               y_routed_bf16, g.pair_slot, y_shared, y_shared_bf16, M, top_k, hidden, out, out_kind == OutKind::F32,
               ld_out, int(round_terms));
}

}  // namespace flashseek::cuda
