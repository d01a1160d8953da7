// Grouped FP4 expert GEMMs on sm_90a (moe_gemm.cuh): the dense FP8 GEMM design of gemm/gemm_sm90.cu (TMA,
// warp specialization, wgmma m64n128k32, per-128-K fp32 promotion, persistent CTAs) over the per-expert slot groups
// of a MoeGrouping, with the FP4 weights expanded to e4m3 in shared memory. Our own kernel (not CUTLASS) for the
// reasons given in gemm_sm90.cu, and because the weight expansion with per-32 scale folding and the SwiGLU /
// routing-weight epilogue are specific to this checkpoint format.
// Design:
//   - Tiles: (expert e, 128 slot rows of e, 128 weight rows). Up-projection: weight rows 0..63 of the tile are w1
//     rows i0..i0+63, rows 64..127 the same rows of w3, so one tile yields h columns i0..i0+63 with gate and up in
//     the same thread (accumulator columns j and j + 64). Down-projection: 128 rows of w2. Each CTA derives the
//     tile list from the device counts (a prefix over experts of their 128-row blocks, in shared memory), so the
//     launch is sized on the host by the SM count alone and is graph-capturable; tile t: expert-major, M block
//     fastest within an expert (the CTAs in flight share the expert's weight tiles in L2).
//   - Producer warpgroup (128 threads, 40 registers): thread 0 loads the A tile (gathered act_quant codes of the
//     tile's slots, TMA, 128-byte swizzle) and its 128 scales (TMA) with expect_tx; every producer thread copies its
//     weight row's 64 FP4 bytes of the stage with four 16-byte cp.async (weights live in per-expert allocations: no
//     tensor map per expert), arriving on the stage's full barrier (count 1 + 128).
//   - Math warpgroups (2 x 128 threads, 232 registers), per stage: each thread expands half a weight row (two
//     32-groups: 32 packed bytes -> 64 e4m3 bytes) into a 128-byte-swizzled B tile (two such tiles alternate),
//     writes the row's promotion scale, fence.proxy.async, named barrier of the 256 math threads, then four wgmma
//     m64n128k32 (each warpgroup 64 slot rows), wait, free the stage, fp32 promotion acc * sa[row] * sc[column].
//   - Expansion: per (row, 128-K block) reference exponent r = max of the four E8M0 bytes; a group with exponent s
//     becomes e4m3 codes of value x 2^(6 + s - r) through an 8-entry magnitude table (built with exact fp32 ->
//     e4m3 conversions, 4 cvt per group) and one byte_perm per 4 values, signs moved by bit operations; the column
//     scale is 2^(r - 127 - 6).
//   - Epilogue: up: h = bf16(silu(min(bf16 g, L)) * clamp(bf16 u) * weight[slot]), bf16 pairs; down: fp32 pairs.
//     Rows past the expert's count are not stored (the A rows there belong to the next expert or are zeros).
#include "cuda/moe/moe_gemm.cuh"

#include <cuda.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/tensor_map.h"
#include "cuda/gemm/tma.cuh"
#include "cuda/gemm/wgmma_ss.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kThreads = 384;
constexpr int kBM = 128, kBN = 128;
constexpr int kStages = 6;
constexpr int kATile = kBM * 128;       // e4m3 codes, 128 K per stage
constexpr int kRawTile = kBN * 64;      // packed FP4, 128 K per stage
constexpr int kScaleBytes = kBM * 4;
constexpr int kBTile = kBN * 128;       // expanded e4m3
constexpr int kMaxExperts = 4096;
constexpr size_t kRawOffset = size_t(kStages) * kATile;
constexpr size_t kSaOffset = kRawOffset + size_t(kStages) * kRawTile;
constexpr size_t kBOffset = kSaOffset + size_t(kStages) * kScaleBytes;       // 2 expanded B tiles
constexpr size_t kColScaleOffset = kBOffset + 2 * size_t(kBTile);            // 2 x 128 floats
constexpr size_t kBarrierOffset = kColScaleOffset + 2 * kBN * 4;
constexpr size_t kPrefixOffset = kBarrierOffset + 2 * kStages * 8;           // (E + 1) ints
constexpr size_t kSmemBytes = kPrefixOffset + (kMaxExperts + 1) * 4 + 1024;  // + alignment slack
static_assert(kATile % 1024 == 0 && kBOffset % 1024 == 0 && kRawOffset % 1024 == 0, "swizzled tiles 1024-aligned");
static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");

struct GroupedParams {
    CUtensorMap map_a, map_sa;
    const void* const* w_a;  // up: w1, down: w2
    const void* const* s_a;
    const void* const* w_b;  // up: w3, down: unused
    const void* const* s_b;
    const int32_t* count;
    const int32_t* offset;
    int E;
    int K;         // weights per row (hidden for up, inter for down)
    int n_blocks;  // tiles along the weight rows: inter / 64 (up) or hidden / 128 (down)
    const float* slot_weight;
    float limit;
    uint16_t* h;   // up: bf16 [slots, ldo]
    float* y;      // down: fp32 [slots, ldo]
    int64_t ldo;
};

#if FS_WGMMA_AVAILABLE
constexpr int kMathThreads = 256;

using bulk::cp_async_16;
using bulk::cp_async_mbar_arrive;
using bulk::fence_proxy_async;
using bulk::mbar_expect_tx;
using bulk::mbar_init_count;
using bulk::mbar_init_fence;
using bulk::mbar_wait;
using bulk::smem_u32;

// Expert, 128-row block and weight-row block of tile t (prefix[e] = 128-row blocks of experts before e).
__device__ __forceinline__ void grouped_tile(int t, const int* prefix, int E, int n_blocks, int& e, int& mb, int& nb) {
    int lo = 0, hi = E - 1;  // the last expert whose first tile is <= t (never an empty one, see moe_gemm.cuh notes)
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (prefix[mid] * n_blocks <= t) lo = mid;
        else hi = mid - 1;
    }
    e = lo;
    const int blocks = prefix[e + 1] - prefix[e];
    const int local = t - prefix[e] * n_blocks;
    mb = local % blocks;
    nb = local / blocks;
}

// e4m3 codes of four e2m1 values (nibbles in the low 16 bits of w, element j at bits 4j..4j+3) through the magnitude
// table (lut_lo: magnitudes 0..3, lut_hi: 4..7); each nibble's sign bit becomes its byte's bit 7.
__device__ __forceinline__ uint32_t fp4x4_to_codes(uint32_t w, uint32_t lut_lo, uint32_t lut_hi) {
    const uint32_t mag = __byte_perm(lut_lo, lut_hi, w & 0x7777u);
    const uint32_t x = __byte_perm(w, 0u, 0x1100u);  // bytes [b0, b0, b1, b1] of w
    return mag | ((x << 4) & 0x00800080u) | (x & 0x80008000u);
}

// The magnitude table of a group whose values are stored x 2^(6 + d), d = its exponent - the block's reference
// (<= 0): e4m3 codes of {0, 0.5, 1, 1.5, 2, 3, 4, 6} x 2^(6 + d) (exact for d >= -14, rounded below).
__device__ __forceinline__ void magnitude_table(int d, uint32_t& lut_lo, uint32_t& lut_hi) {
    const float s = exp2i(max(d, -60) + 6);
    const uint32_t c01 = __nv_cvt_float2_to_fp8x2(make_float2(0.f, 0.5f * s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t c23 = __nv_cvt_float2_to_fp8x2(make_float2(s, 1.5f * s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t c45 = __nv_cvt_float2_to_fp8x2(make_float2(2.f * s, 3.f * s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t c67 = __nv_cvt_float2_to_fp8x2(make_float2(4.f * s, 6.f * s), __NV_SATFINITE, __NV_E4M3);
    lut_lo = c01 | c23 << 16;
    lut_hi = c45 | c67 << 16;
}

// Expands groups 2*half and 2*half + 1 of one weight row for one stage: 32 packed bytes from `raw` -> 64 e4m3 bytes
// at chunks 4*half .. 4*half + 3 of the row in the swizzled tile `b_row` (row index `row`).
__device__ __forceinline__ void expand_half_row(const unsigned char* raw, unsigned char* tile, int row, int half,
                                                uint32_t scales4, int ref) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const int group = 2 * half + q;
        const int s = int((scales4 >> (8 * group)) & 0xffu);
        uint32_t lut_lo, lut_hi;
        magnitude_table(s - ref, lut_lo, lut_hi);
        const uint4 v = *reinterpret_cast<const uint4*>(raw + 16 * group);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        uint32_t c[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c[2 * i] = fp4x4_to_codes(w[i] & 0xffffu, lut_lo, lut_hi);
            c[2 * i + 1] = fp4x4_to_codes(w[i] >> 16, lut_lo, lut_hi);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int chunk = 2 * group + j;
            *reinterpret_cast<uint4*>(tile + row * 128 + ((chunk ^ (row & 7)) << 4)) =
                make_uint4(c[4 * j], c[4 * j + 1], c[4 * j + 2], c[4 * j + 3]);
        }
    }
}

__device__ __forceinline__ void named_barrier_math() { asm volatile("bar.sync 1, %0;" ::"n"(kMathThreads) : "memory"); }
#endif

template <bool UP>
__global__ void __launch_bounds__(kThreads, 1) grouped_fp4_kernel(const __grid_constant__ GroupedParams p) {
#if FS_WGMMA_AVAILABLE
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* const a_tiles = smem;
    unsigned char* const raw_tiles = smem + kRawOffset;
    float* const a_scales = reinterpret_cast<float*>(smem + kSaOffset);
    unsigned char* const b_tiles = smem + kBOffset;
    float* const col_scales = reinterpret_cast<float*>(smem + kColScaleOffset);
    uint64_t* const full = reinterpret_cast<uint64_t*>(smem + kBarrierOffset);
    uint64_t* const empty = full + kStages;
    int* const prefix = reinterpret_cast<int*>(smem + kPrefixOffset);

    const int tid = threadIdx.x, lane = tid & 31;
    if (tid == 0) {
        tma::prefetch_map(&p.map_a);
        tma::prefetch_map(&p.map_sa);
#pragma unroll 1
        for (int s = 0; s < kStages; ++s) {
            mbar_init_count(&full[s], 1 + 128);  // thread 0's expect_tx + every producer thread's cp.async
            mbar_init_count(&empty[s], kMathThreads / 32);
        }
        mbar_init_fence();
    }
    pdl_wait();  // the counts come from the grouping kernel, A from act_quant
    pdl_trigger();
    if (tid < 32) {  // prefix of 128-row blocks over the experts: each lane a contiguous chunk, then a warp scan
        const int per = (p.E + 31) / 32, e0 = lane * per, e1 = min(p.E, e0 + per);
        int sum = 0;
        for (int e = e0; e < e1; ++e) sum += (p.count[e] + kBM - 1) / kBM;
        int incl = sum;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        int run = incl - sum;
        for (int e = e0; e < e1; ++e) {
            prefix[e] = run;
            run += (p.count[e] + kBM - 1) / kBM;
        }
        if (lane == 31) prefix[p.E] = incl;
    }
    __syncthreads();
    const int tiles = prefix[p.E] * p.n_blocks;

    if (tid < 128) {  // producer warpgroup
        tma::release_registers<40>();
        int s = 0;
        uint32_t phase = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int e, mb, nb;
            grouped_tile(t, prefix, p.E, p.n_blocks, e, mb, nb);
            const int row0 = p.offset[e] + mb * kBM;  // first slot row of the tile
            // This thread's weight row: up: w1 (tid < 64) or w3 row nb * 64 + tid % 64; down: w2 row nb * 128 + tid.
            const int wrow = UP ? nb * 64 + (tid & 63) : nb * kBN + tid;
            const unsigned char* src = static_cast<const unsigned char*>(UP && tid >= 64 ? p.w_b[e] : p.w_a[e]) +
                                       int64_t(wrow) * (p.K / 2);
            for (int kb = 0; kb < p.K / 128; ++kb) {
                mbar_wait(&empty[s], phase ^ 1);
                if (tid == 0) {
                    mbar_expect_tx(&full[s], kATile + kScaleBytes);
                    tma::load_2d(a_tiles + size_t(s) * kATile, &p.map_a, kb * 128, row0, &full[s]);
                    tma::load_2d(a_scales + s * kBM, &p.map_sa, row0, kb, &full[s]);
                }
                unsigned char* dst = raw_tiles + size_t(s) * kRawTile + tid * 64;
#pragma unroll
                for (int c = 0; c < 4; ++c) cp_async_16(dst + 16 * c, src + kb * 64 + 16 * c);
                cp_async_mbar_arrive(&full[s]);
                if (++s == kStages) {
                    s = 0;
                    phase ^= 1;
                }
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");  // no thread leaves with copies in flight
        return;
    }

    tma::claim_registers<232>();
    const int m_tid = tid - 128;                 // 0..255
    const int mw = m_tid / 128;                  // math warpgroup: slot rows 64 * mw ..
    const int warp = (m_tid / 32) & 3, g = lane >> 2, t4 = lane & 3;
    const int r0 = 64 * mw + 16 * warp + g;      // this thread's rows r0, r0 + 8 of the tile
    const int x_row = m_tid >> 1, x_half = m_tid & 1;  // the weight half-row this thread expands
    float acc[64], fin[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    int s = 0;
    uint32_t phase = 0, it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int e, mb, nb;
        grouped_tile(t, prefix, p.E, p.n_blocks, e, mb, nb);
        const int count = p.count[e], first = p.offset[e] + mb * kBM;
        const int wrow = UP ? nb * 64 + (x_row & 63) : nb * kBN + x_row;
        const uint8_t* srow = static_cast<const uint8_t*>(UP && x_row >= 64 ? p.s_b[e] : p.s_a[e]) +
                              int64_t(wrow) * (p.K / 32);
#pragma unroll
        for (int i = 0; i < 64; ++i) fin[i] = 0.f;
        for (int kb = 0; kb < p.K / 128; ++kb, ++it) {
            const uint32_t scales4 = uint32_t(__ldg(srow + 4 * kb)) | uint32_t(__ldg(srow + 4 * kb + 1)) << 8 |
                                     uint32_t(__ldg(srow + 4 * kb + 2)) << 16 | uint32_t(__ldg(srow + 4 * kb + 3)) << 24;
            const int ref = max(max(int(scales4 & 0xff), int((scales4 >> 8) & 0xff)),
                                max(int((scales4 >> 16) & 0xff), int(scales4 >> 24)));
            mbar_wait(&full[s], phase);
            unsigned char* btile = b_tiles + size_t(it & 1) * kBTile;
            float* csc = col_scales + (it & 1) * kBN;
            expand_half_row(raw_tiles + size_t(s) * kRawTile + x_row * 64, btile, x_row, x_half, scales4, ref);
            if (x_half == 0) csc[x_row] = exp2i(max(ref - 127 - 6, -126));
            const float sa0 = a_scales[s * kBM + r0], sa1 = a_scales[s * kBM + r0 + 8];
            fence_proxy_async();  // the expanded tile (generic stores) is read by wgmma (async proxy)
            named_barrier_math();
            const uint32_t a_addr = smem_u32(a_tiles + size_t(s) * kATile + 64 * mw * 128);
            const uint32_t b_addr = smem_u32(btile);
#pragma unroll
            for (int i = 0; i < 64; ++i) wgmma::fence_operand(acc[i]);
            wgmma::fence();
#pragma unroll
            for (int k = 0; k < 4; ++k)
                wgmma::mma_e4m3_n128(acc, tma::sw128_descriptor(a_addr + 32 * k), tma::sw128_descriptor(b_addr + 32 * k),
                                     k > 0 ? 1u : 0u);
            wgmma::commit();
#pragma unroll
            for (int i = 0; i < 64; ++i) wgmma::fence_operand(acc[i]);
            wgmma::wait<0>();
            if (lane == 0) tma::mbar_arrive(&empty[s]);
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const float2 c = *reinterpret_cast<const float2*>(csc + 8 * i + 2 * t4);
                fin[4 * i + 0] = fmaf(acc[4 * i + 0], sa0 * c.x, fin[4 * i + 0]);
                fin[4 * i + 1] = fmaf(acc[4 * i + 1], sa0 * c.y, fin[4 * i + 1]);
                fin[4 * i + 2] = fmaf(acc[4 * i + 2], sa1 * c.x, fin[4 * i + 2]);
                fin[4 * i + 3] = fmaf(acc[4 * i + 3], sa1 * c.y, fin[4 * i + 3]);
            }
            if (++s == kStages) {
                s = 0;
                phase ^= 1;
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int local = mb * kBM + r0 + 8 * h;
            if (local >= count) continue;
            const int64_t slot = first + r0 + 8 * h;
            if constexpr (UP) {
                const float wt = p.slot_weight[slot];
                uint16_t* out = p.h + slot * p.ldo + nb * 64 + 2 * t4;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    uint32_t packed = 0;
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const float gate = fminf(round_bf16(fin[4 * i + 2 * h + j]), p.limit);
                        const float up = fminf(fmaxf(round_bf16(fin[4 * (i + 8) + 2 * h + j]), -p.limit), p.limit);
                        const float silu = gate / (1.f + expf(-gate));
                        packed |= uint32_t(f32_to_bf16_bits(silu * up * wt)) << (16 * j);
                    }
                    *reinterpret_cast<uint32_t*>(out + 8 * i) = packed;
                }
            } else {
                float* out = p.y + slot * p.ldo + nb * kBN + 2 * t4;
#pragma unroll
                for (int i = 0; i < 16; ++i)
                    *reinterpret_cast<float2*>(out + 8 * i) = make_float2(fin[4 * i + 2 * h], fin[4 * i + 2 * h + 1]);
            }
        }
    }
#else
    __trap();
#endif
}

template <bool UP>
void launch_grouped(const Fp8Activation& a, const ExpertTable& t, const MoeGrouping& g, GroupedParams p,
                    cudaStream_t stream) {
    p.map_a = tma::make_2d(a.codes, tma::Element::U8, uint64_t(a.m), uint64_t(a.k), uint64_t(a.codes_ld), kBM, 128,
                           tma::Swizzle::B128, "grouped expert GEMM activation");
    p.map_sa = tma::make_2d(a.scales, tma::Element::F32, uint64_t((a.k + 127) / 128), uint64_t(a.m),
                            uint64_t(a.scales_ld) * 4, 1, kBM, tma::Swizzle::NONE, "grouped expert GEMM activation scales");
    p.count = g.expert_count;
    p.offset = g.expert_offset;
    p.E = g.E;
    p.slot_weight = g.slot_weight;
    auto kernel = grouped_fp4_kernel<UP>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    (void)t;
    launch_pdl(UP ? "grouped_fp4_kernel<up>" : "grouped_fp4_kernel<down>", kernel,
               dim3(unsigned(current_arch().sm_count)), dim3(kThreads), kSmemBytes, stream, p);
}

size_t align16(size_t b) { return (b + 15) / 16 * 16; }

}  // namespace

size_t moe_gemm_workspace_bytes(int64_t slots, int64_t hidden, int64_t inter) {
    return align16(fp8_activation_codes_bytes(slots, hidden)) + align16(fp8_activation_scales_bytes(slots, hidden)) +
           align16(size_t(slots * inter) * 2) + align16(fp8_activation_codes_bytes(slots, inter)) +
           align16(fp8_activation_scales_bytes(slots, inter));
}

MoeGemmWorkspace moe_gemm_workspace_view(void* memory, int64_t slots, int64_t hidden, int64_t inter) {
    unsigned char* p = static_cast<unsigned char*>(memory);
    MoeGemmWorkspace w;
    unsigned char* codes = p;
    p += align16(fp8_activation_codes_bytes(slots, hidden));
    w.x = fp8_activation_view(codes, p, slots, hidden);
    p += align16(fp8_activation_scales_bytes(slots, hidden));
    w.h = reinterpret_cast<uint16_t*>(p);
    p += align16(size_t(slots * inter) * 2);
    codes = p;
    p += align16(fp8_activation_codes_bytes(slots, inter));
    w.h_q = fp8_activation_view(codes, p, slots, inter);
    return w;
}

bool moe_gemm_supported() { return wgmma_usable(); }

bool moe_gemm_eligible(const ExpertTable& t, const MoeGrouping& g, int64_t M, int top_k) {
    return moe_gemm_supported() && t.kind == WeightKind::FP4_BLOCK32 && t.scale_kind == ScaleKind::E8M0 &&
           t.hidden % 128 == 0 && t.inter % 128 == 0 && t.hidden > 0 && t.inter > 0 && g.E > 0 && g.E <= kMaxExperts &&
           M > 0 && top_k > 0 && M * top_k <= g.max_pairs && M * top_k < (int64_t(1) << 31);
}

void moe_gemm_up(const uint16_t* x, int64_t ld_x, int64_t M, int top_k, const ExpertTable& t, const MoeGrouping& g,
                 float swiglu_limit, const MoeGemmWorkspace& ws, cudaStream_t stream) {
    FS_REQUIRE(moe_gemm_eligible(t, g, M, top_k), "moe_gemm_up: not eligible (sm_90a, FP4 + E8M0 experts with hidden ",
               t.hidden, " and inter ", t.inter, " multiples of 128, E = ", g.E, " <= 4096, ", M, " x ", top_k,
               " slots within the grouping's ", g.max_pairs, ")");
    const int64_t slots = M * top_k;
    FS_REQUIRE(ws.x.m >= slots && ws.x.k == t.hidden && ws.h_q.m >= slots && ws.h_q.k == t.inter && ws.h != nullptr,
               "moe_gemm_up: the workspace was not made for ", slots, " slots, hidden ", t.hidden, ", inter ", t.inter);
    Fp8Activation xa = ws.x;
    xa.m = slots;
    quantize_fp8_activation(x, M, ld_x, g.slot_token, xa, stream);
    GroupedParams p{};
    p.w_a = t.w1;
    p.s_a = t.w1_scale;
    p.w_b = t.w3;
    p.s_b = t.w3_scale;
    p.K = int(t.hidden);
    p.n_blocks = int(t.inter / 64);
    p.limit = swiglu_limit;
    p.h = ws.h;
    p.ldo = t.inter;
    launch_grouped<true>(xa, t, g, p, stream);
    Fp8Activation hq = ws.h_q;
    hq.m = slots;
    quantize_fp8_activation(ws.h, slots, t.inter, nullptr, hq, stream);
}

void moe_gemm_down(int64_t M, int top_k, const ExpertTable& t, const MoeGrouping& g, const MoeGemmWorkspace& ws,
                   float* y, cudaStream_t stream) {
    FS_REQUIRE(moe_gemm_eligible(t, g, M, top_k), "moe_gemm_down: not eligible (see moe_gemm_up)");
    const int64_t slots = M * top_k;
    FS_REQUIRE(ws.h_q.m >= slots && ws.h_q.k == t.inter && y != nullptr && reinterpret_cast<uintptr_t>(y) % 8 == 0,
               "moe_gemm_down: workspace missing or output null / not 8-byte aligned");
    Fp8Activation hq = ws.h_q;
    hq.m = slots;
    GroupedParams p{};
    p.w_a = t.w2;
    p.s_a = t.w2_scale;
    p.K = int(t.inter);
    p.n_blocks = int(t.hidden / kBN);
    p.y = y;
    p.ldo = t.hidden;
    launch_grouped<false>(hq, t, g, p, stream);
}

}  // namespace flashseek::cuda
