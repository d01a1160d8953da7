// Routed FP4 experts at decode (M <= 16 tokens, release numerics) on sm_90+: weights streamed into shared memory by
// bulk asynchronous copies, FP4 turned into e4m3 by bit moves, products by mma.sync e4m3 (native FP8 tensor cores on
// sm_89 / sm_120; on sm_90 ptxas lowers it to f16 HMMA plus e4m3 -> f16 unpacks, which caps this kernel's arithmetic
// at ~55% of the copy bandwidth: docs/perf.md, "sm_90 has no FP8 mma.sync"; wgmma is the sm_90 way).
// Why: the f16 GEMV kernels (moe_gemv.cu) reach 29-35% of the copy bandwidth: per-thread loads keep too few bytes
// in flight, and widening FP4 to f16 plus per-32 scales costs many instructions per weight. A probe
// (scripts/probes/stream_probe.cu, docs/perf.md) measured bulk copies alone at ~100% of the copy bandwidth on 1 GB,
// and a conversion + mma loop at 48-62% with four to eight warps per SM.
// Design:
//   - Persistent CTAs (two per SM, 8 warps each: 16 warps per SM, 128 registers per thread); every warp owns a ring
//     of 3 stages and streams its own work items: item = (active expert, 16 rows of w1 and the same rows of w3) for
//     the up-projection, (active expert, 32 rows of w2) for the down-projection, dealt round robin (neighbouring
//     warps of a CTA mostly share an expert, so its activation rows stay in L1). A stage = 32 weight rows x 128
//     bytes (256 FP4 weights), filled by 8 16-byte cp.async per lane completing on one mbarrier, refilled 2 stages
//     ahead across item boundaries, so the copy engine does not drain between items. E8M0 scales (8 bytes per row
//     and stage) come through ordinary loads issued with the activation loads (bulk copies need 16 bytes).
//   - FP4 -> e4m3: nibble s.e1.e0.m moved to byte bits 7 and 4..2 is the e4m3 code of value * 2^-6 (subnormal
//     0.5 included), 7 integer ops per 8 weights; even nibbles form A registers a0/a1, odd ones a2/a3, so the
//     logical k order of an mma is phys 8t + {0,2,4,6} then 8t + {1,3,5,7}; B is gathered in the same order.
//   - One mma.sync m16n8k32 e4m3 covers exactly one FP4 scale group per row: partial sums are scaled by the weight
//     scale (x 2^6) per k-block and by the activation's power-of-two scale per 128 columns, in fp32; the activation
//     is the prepared one (e4m3 codes as f16), turned back into e4m3 bytes with cvt (exact).
//   - Shared-memory rows are padded by 16 bytes: the 4-byte fragment reads of lanes (g, t) hit 32 distinct banks.
// Measured (H200, docs/perf.md): MoE micro-benchmark up+down at M=16 (76 experts, 1 GB) 628 us = 38% of the copy
// bandwidth (moe_gemv 678 us; streaming alone 88%, arithmetic alone 55%); at M=1 slower than moe_gemv (93 vs 66 us),
// hence kMinTokens (the preference floor). Variant bulk_experts of the expert catalogue.
// Numerics are those of moe_gemv (exact products, fp32 sums, bf16 rounding of w1/w3 outputs before SwiGLU), up to
// summation order.
#include "cuda/moe/moe_bulk.cuh"
#include "cuda/moe/moe_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/gemv_mma.cuh"
#include "cuda/gemm/swiglu_element.cuh"
#include "cuda/moe/moe_gemv.cuh"

namespace flashseek::cuda::bulk_experts {
namespace {

constexpr int kWarps = 8;
constexpr int kCtasPerSm = 2;                  // 16 warps per SM: the per-warp chains are latency-bound
constexpr int kStages = 3;
constexpr int kRowBytes = 128;                 // weight bytes per row per stage (256 FP4 weights)
constexpr int kStride = kRowBytes + 16;        // padded shared row
constexpr int kStageBytes = 32 * kStride;
[[maybe_unused]] constexpr int kGroupsPerStage = kRowBytes / 16;  // mma k-blocks (32 weights, one E8M0 scale) per stage
// Fewer tokens than this keep moe_gemv: with few active experts most warps have no item, and one warp streaming a
// whole 16-row tile is slower than moe_gemv's four warps per tile (measured, H200, MoE micro-benchmark up+down:
// M=1 93 vs 66 us; M=8 382 vs 415; M=16 631 vs 681).
constexpr int64_t kMinTokens = 8;
constexpr size_t kSmemBytes = bulk::ring_smem_bytes(kWarps, kStages, kStageBytes);

struct Args {
    const void* const* w_a;  // w1 (up) or w2 (down), per expert
    const void* const* s_a;
    const void* const* w_b;  // w3 (up only)
    const void* const* s_b;
    int64_t N, K;            // rows per expert, weights per row
    const uint16_t* x;       // prepared activation values (FP4 layout, e4m3 codes as f16)
    const float* xs;         // its per-128 scales
    int64_t x_ld, xs_ld;
    const int32_t* active;
    const int32_t* n_active;
    const int32_t* count;
    const int32_t* offset;
    const int32_t* slot_token;  // up: activation row of a slot; down: null (row = slot)
    const float* slot_weight;
    int max_experts;         // grid was sized for this many active experts
    float limit;
    uint16_t* h;             // up: bf16 [slots, h_ld]
    int64_t h_ld;
    float* y;                // down: fp32 [slots, N]
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace bulk;

// Prepared FP4-layout activation, 8 values of k-block phys [8t, 8t+8) stored x0 x4 x1 x5 x2 x6 x3 x7 ->
// b0 = [x0 x2 x4 x6], b1 = [x1 x3 x5 x7] (e4m3 bytes, the order of fp4x8_to_e4m3's lo / hi).
__device__ __forceinline__ void act_fragment(const uint4& v, uint32_t& b0, uint32_t& b1) {
    const uint32_t p = f16x2_to_e4m3x2(v.x) | (f16x2_to_e4m3x2(v.y) << 16);  // x0 x4 x1 x5
    const uint32_t q = f16x2_to_e4m3x2(v.z) | (f16x2_to_e4m3x2(v.w) << 16);  // x2 x6 x3 x7
    b0 = __byte_perm(p, q, 0x5140);
    b1 = __byte_perm(p, q, 0x7362);
}

// Byte j of w as an E8M0 scale times 2^6 (FP4 read as e4m3 is value * 2^-6): one byte permute + one integer
// multiply-add ((b + 6) << 23 as fp32 bits; b = 0 gives 2^-121, as e8m0_to_f32_scaled).
__device__ __forceinline__ float e8m0_byte_times_64(uint32_t w, int j) {
    return __uint_as_float(__byte_perm(w, 0u, 0x4440u | uint32_t(j)) * (1u << 23) + (6u << 23));
}
#endif

// One stage x one token tile J: B fragments of the stage's k-blocks, the activation scales and the weight scales
// (8 E8M0 bytes per row, plain loads: bulk copies of 8 bytes are not allowed) are loaded first (one round trip,
// overlapping the weights' mbarrier wait), then one mma per k-block and weight m-tile; partial sums are scaled by the
// weight scale per k-block and by the activation scale once per 128 columns. Rows of tokens past the expert's count
// are clamped to a valid row: their C columns are never stored.
template <int J>
__device__ __forceinline__ void stage_tile(float (&acc)[2][2][4], const unsigned char* sw, const uint16_t* x,
                                           const float* xs, int x_ld, int xs_ld, int s_ld, int xrow,
                                           int srow_lo, int srow_hi, const uint8_t* s_a, const uint8_t* s_b,
                                           int srow0, int chunk, uint64_t* bar, uint32_t parity, bool wait, int g,
                                           int t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kBlocks = kGroupsPerStage / 4;  // 128-column activation blocks per stage
    const int k0 = chunk * (2 * kRowBytes);
    const uint16_t* xr = x + int64_t(xrow) * x_ld;
    const float* xs_lo = xs + int64_t(srow_lo) * xs_ld;
    const float* xs_hi = xs + int64_t(srow_hi) * xs_ld;
    uint4 braw[4];  // one 128-column block (registers: 16 warps per SM leave 128 per thread)
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) braw[kq] = __ldg(reinterpret_cast<const uint4*>(xr + k0 + 32 * kq + 8 * t));
    float as_lo = __ldg(xs_lo + k0 / 128), as_hi = __ldg(xs_hi + k0 / 128);
    // Weight scales of stage rows 16i + g + 8h: up: w1 (i = 0) / w3 (i = 1) row srow0 + 8h; down: w2 row
    // srow0 + 16i + 8h.
    uint2 wsc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint8_t* base = i == 1 && s_b ? s_b : s_a;
            const int row = srow0 + 8 * h + (s_b ? 0 : 16 * i);
            wsc[i][h] = __ldg(reinterpret_cast<const uint2*>(base + int64_t(row) * s_ld + chunk * kGroupsPerStage));
        }
    if (wait) mbar_wait(bar, parity);
#pragma unroll 1
    for (int b = 0; b < kBlocks; ++b) {
        if (b > 0) {
#pragma unroll
            for (int kq = 0; kq < 4; ++kq)
                braw[kq] = __ldg(reinterpret_cast<const uint4*>(xr + k0 + 128 * b + 32 * kq + 8 * t));
            as_lo = __ldg(xs_lo + k0 / 128 + b);
            as_hi = __ldg(xs_hi + k0 / 128 + b);
        }
        float part[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        // This block's 4 scale bytes per row (one per k-block), picked once per block.
        uint32_t wq[2][2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) wq[i][h] = b == 0 ? wsc[i][h].x : wsc[i][h].y;
#pragma unroll
        for (int kq = 0; kq < 4; ++kq) {
            const int kb = 4 * b + kq;
            uint32_t b0, b1;
            act_fragment(braw[kq], b0, b1);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r_lo = 16 * i + g, r_hi = r_lo + 8;
                const uint32_t x_lo = *reinterpret_cast<const uint32_t*>(sw + r_lo * kStride + kb * 16 + 4 * t);
                const uint32_t x_hi = *reinterpret_cast<const uint32_t*>(sw + r_hi * kStride + kb * 16 + 4 * t);
                uint32_t af[4];
                fp4x8_to_e4m3(x_lo, af[0], af[2]);
                fp4x8_to_e4m3(x_hi, af[1], af[3]);
                const float ws_lo = e8m0_byte_times_64(wq[i][0], kq), ws_hi = e8m0_byte_times_64(wq[i][1], kq);
                float d[4];
                mma_e4m3(d, af, b0, b1);
                part[i][0] = fmaf(d[0], ws_lo, part[i][0]);
                part[i][1] = fmaf(d[1], ws_lo, part[i][1]);
                part[i][2] = fmaf(d[2], ws_hi, part[i][2]);
                part[i][3] = fmaf(d[3], ws_hi, part[i][3]);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            acc[i][J][0] = fmaf(part[i][0], as_lo, acc[i][J][0]);
            acc[i][J][1] = fmaf(part[i][1], as_hi, acc[i][J][1]);
            acc[i][J][2] = fmaf(part[i][2], as_lo, acc[i][J][2]);
            acc[i][J][3] = fmaf(part[i][3], as_hi, acc[i][J][3]);
        }
    }
#endif
}

template <bool UP>
__global__ void __launch_bounds__(kWarps * 32, kCtasPerSm) bulk_expert_kernel(const Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    pdl_trigger();
    const WarpRing wr = warp_ring<kWarps, kStages, kStageBytes>(smem, warp, lane);
    unsigned char* const ring = wr.slots;
    uint64_t* const bars = wr.bars;
    pdl_wait();

    constexpr int kTileRows = UP ? 16 : 32;  // output rows per item
    const int64_t tiles = a.N / kTileRows;
    const int64_t n_items = int64_t(min(*a.n_active, a.max_experts)) * tiles;
    const int64_t gw = int64_t(blockIdx.x) * kWarps + warp, nw = int64_t(gridDim.x) * kWarps;
    const int64_t my_items = gw < n_items ? (n_items - gw + nw - 1) / nw : 0;
    const int64_t row_bytes = a.K / 2;
    const int chunks = int(row_bytes / kRowBytes);
    const int64_t total = my_items * chunks;

    // Fill cursor: lane l copies 16 bytes (piece l % 8) of stage rows 4i + l / 8, i = 0..7 (up: w1 rows 0-15 for
    // i < 4, then w3 rows 0-15; down: w2 rows 0-31); the row pointers are looked up once per item.
    int64_t f_item = gw - nw;
    int f_chunk = chunks;
    const uint8_t* f_w = nullptr;  // row l / 8 of the item (w1 when up), at piece l % 8
    const uint8_t* f_w3 = nullptr;  // up: the same row of w3
    auto fill = [&](int64_t q) {
        if (++f_chunk >= chunks) {
            f_chunk = 0;
            f_item += nw;
            const int e = a.active[int(f_item / tiles)];
            const int64_t row0 = (f_item % tiles) * kTileRows;
            const int64_t piece = (row0 + lane / 8) * row_bytes + (lane % 8) * 16;
            f_w = static_cast<const uint8_t*>(a.w_a[e]) + piece;
            if constexpr (UP) f_w3 = static_cast<const uint8_t*>(a.w_b[e]) + piece;
        }
        const int st = int(q % kStages);
        unsigned char* dst = ring + st * kStageBytes + (lane / 8) * kStride + (lane % 8) * 16;
        const int64_t col = int64_t(f_chunk) * kRowBytes;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint8_t* src = UP && i >= 4 ? f_w3 + int64_t(4 * (i - 4)) * row_bytes
                                              : f_w + int64_t(4 * i) * row_bytes;
            cp_async_16(dst + 4 * i * kStride, src + col);
        }
        cp_async_mbar_arrive(&bars[st]);
    };
    for (int64_t q = 0; q < kStages - 1 && q < total; ++q) fill(q);

    float acc[2][2][4];  // [m-tile (up: w1 / w3; down: rows 0-15 / 16-31)][token tile][fragment]
    int64_t item = gw - nw;
    int chunk = chunks - 1;
    int e = 0, count = 0, offset = 0;
    int64_t row0 = 0;
    int xrow[2] = {0, 0};                     // activation row of B column g, per token tile
    int srow_lo[2] = {0, 0}, srow_hi[2] = {0, 0};  // activation rows of C columns 2t, 2t+1
    const uint8_t* s_a = nullptr;             // weight scales (up: w1, w3; down: w2, s_b null)
    const uint8_t* s_b = nullptr;
    for (int64_t q = 0; q < total; ++q) {
        if (++chunk == chunks) {
            chunk = 0;
            item += nw;
            e = a.active[int(item / tiles)];
            count = a.count[e];
            offset = a.offset[e];
            row0 = (item % tiles) * kTileRows;
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
            auto row_of = [&](int c) -> int {
                c = min(c, count - 1);
                return a.slot_token ? a.slot_token[offset + c] : offset + c;
            };
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                xrow[j] = row_of(8 * j + g);
                srow_lo[j] = row_of(8 * j + 2 * t);
                srow_hi[j] = row_of(8 * j + 2 * t + 1);
            }
            s_a = static_cast<const uint8_t*>(a.s_a[e]);
            s_b = UP ? static_cast<const uint8_t*>(a.s_b[e]) : nullptr;
        }
        if (q + kStages - 1 < total) {
            __syncwarp();  // every lane is done reading the stage refilled now (consumed at q - 1)
            fence_proxy_async();
            fill(q + kStages - 1);
        }
        const int st = int(q % kStages);
        const unsigned char* sw = ring + st * kStageBytes;
        const uint32_t parity = uint32_t((q / kStages) & 1);
        const int srow0 = int(row0) + g;
        const int x_ld = int(a.x_ld), xs_ld = int(a.xs_ld), s_ld = int(a.K / 32);
        stage_tile<0>(acc, sw, a.x, a.xs, x_ld, xs_ld, s_ld, xrow[0], srow_lo[0], srow_hi[0], s_a, s_b, srow0, chunk, &bars[st], parity, true, g, t);
        if (count > 8)
            stage_tile<1>(acc, sw, a.x, a.xs, x_ld, xs_ld, s_ld, xrow[1], srow_lo[1], srow_hi[1], s_a, s_b, srow0, chunk, &bars[st], parity, false,
                          g, t);
        if (chunk == chunks - 1) {  // item done: epilogue
#pragma unroll
            for (int j = 0; j < 2; ++j) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int c = 8 * j + 2 * t + (r & 1);
                    if (c >= count) continue;
                    const int64_t slot = offset + c;
                    const int64_t row = row0 + g + ((r & 2) ? 8 : 0);
                    if constexpr (UP) {
                        a.h[slot * a.h_ld + row] =
                            swiglu_bf16(acc[0][j][r], acc[1][j][r], a.slot_weight[slot], a.limit);
                    } else {
                        a.y[slot * a.N + row] = acc[0][j][r];
                        a.y[slot * a.N + row + 16] = acc[1][j][r];
                    }
                }
            }
        }
    }
#else
    __trap();
#endif
}

template <bool UP>
void launch(const Args& a, const MoeGrouping& g, int64_t M, int top_k, cudaStream_t stream) {
    Args args = a;
    args.max_experts = int(std::min<int64_t>(g.E, M * top_k));
    const int64_t tiles = a.N / (UP ? 16 : 32);
    const int64_t items = tiles * args.max_experts;
    const int64_t ctas = std::min<int64_t>(int64_t(current_arch().sm_count) * kCtasPerSm, (items + kWarps - 1) / kWarps);
    auto kernel = bulk_expert_kernel<UP>;
    allow_dynamic_smem(kernel, kSmemBytes);
    launch_pdl(UP ? "moe_bulk expert_kernel<up>" : "moe_bulk expert_kernel<down>", kernel, dim3(unsigned(ctas)),
               dim3(kWarps * 32), kSmemBytes, stream, args);
}

Args base_args(const PreparedActivation& x, const MoeGrouping& g) {
    Args a{};
    a.x = x.values;
    a.xs = x.scales;
    a.x_ld = x.k_pad;
    a.xs_ld = x.k_pad / 128;
    a.active = g.active;
    a.n_active = g.n_active;
    a.count = g.expert_count;
    a.offset = g.expert_offset;
    a.slot_weight = g.slot_weight;
    return a;
}

}  // namespace

// Routed FP4 experts with E8M0 scales 16-byte aligned, hidden and inter multiples of 512, 1-16 tokens, a prepared
// release-numerics input (e4m3 codes) and (up) h in release numerics, on compute capability >= 9.0 (bulk copies).
bool supports(const ExpertCall& c) {
    const ExpertTable& t = c.t;
    if (current_arch().cc < 90 || c.grouping == nullptr || (c.up && c.h_numerics != ActNumerics::FP8_BLOCK128))
        return false;
    return t.kind == WeightKind::FP4_BLOCK32 && t.scale_kind == ScaleKind::E8M0 && t.scales_aligned16 &&
           c.M >= 1 && c.M <= kGemvMaxTokens && t.hidden % 512 == 0 && t.inter % 512 == 0 && !c.x.raw &&
           c.x.numerics == ActNumerics::FP8_BLOCK128 && c.x.layout == t.kind && aligned16(c.x.values);
}

bool preferred(const ExpertCall& c, const KernelPolicy& policy) {
    return c.M >= kMinTokens && c.M <= policy.gemv_max_tokens;
}

void up(const ExpertCall& c, const KernelPolicy&, float swiglu_limit, PreparedActivation& h, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    const MoeGrouping& grouping = *c.grouping;
    Args a = base_args(c.x, grouping);
    set_projection(a, t, true);
    a.slot_token = grouping.slot_token;
    a.limit = swiglu_limit;
    a.h = h.values;
    a.h_ld = h.k_pad;
    launch<true>(a, grouping, c.M, c.top_k, stream);
    gemv_experts::quantize_h(h, t, &grouping, ActNumerics::FP8_BLOCK128, stream);
}

void down(const ExpertCall& c, const KernelPolicy&, float* y, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    const MoeGrouping& grouping = *c.grouping;
    Args a = base_args(c.x, grouping);
    set_projection(a, t, false);
    a.slot_token = nullptr;
    a.y = y;
    launch<false>(a, grouping, c.M, c.top_k, stream);
}

}  // namespace flashseek::cuda::bulk_experts
