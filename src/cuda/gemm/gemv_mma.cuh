// Device core of the decode GEMV kernels (gemm/gemv.cu for linear layers, moe/moe_gemv.cu for experts): one warp
// streams a 16-row weight tile (rows g and g+8 of lane 4g+t) over a range of 128-column steps and multiplies it by
// a few tokens on the f16 tensor cores (mma.sync m16n8k16, fp32 accumulation), weights as the A operand.
// Why tensor cores for 1-16 tokens: the SIMT GEMV spent ~4.5 instructions per FP4 weight (widen, f16->f32, one
// FMA per token, shared reads), i.e. it was issue-bound well below DRAM speed and grew linearly with tokens. Here
// a weight costs its widening (~1.4 integer ops for FP4, ~1.75 for FP8) and 1/16 of an mma per token group.
// Layout per step, lane = 4g + t:
//   FP4 : lane loads bytes [16t, 16t+16) of rows g and g+8 = scale group t (32 nibbles). An mma sums over the
//         quad's 4 lanes, i.e. over 4 different groups, so the tokens are arranged block-diagonally: B column
//         n = 2j + u is token u of the pair with group j's activations (zero elsewhere), hence C column 2t + u of
//         lane t holds group t's partial for token u: scaled per group and step in fp32 (exact power-of-two scales),
//         summed over the quad at the end. 2 tokens per mma ("pair").
//   FP8 : lane loads bytes [16t, +16) and [64+16t, +16) of rows g and g+8 (one 128x128 block scale per step):
//         plain mma, B column n = token n of an 8-token tile.
// Widening gives f16 = value * 2^-14 (FP4, pairs (n0,n4),(n1,n5),(n2,n6),(n3,n7) per word) or * 2^-8 (FP8, pairs
// (b0,b2),(b1,b3)): the prepared-activation orders of linear.cu, so a staged activation feeds B with 16-byte
// shared loads. Activations are staged per warp (its own K range, chunk by chunk, __syncwarp only) either from a
// prepared activation or from raw bf16 rows with prepare_activation's exact math (act_quant per 128 columns).
// Weights are prefetched PF steps ahead in registers together with their scales (no second dependent round trip).
// Measured on the H200 (docs/perf.md): the per-byte rate is latency/occupancy-bound (25-35% of the copy bandwidth,
// nearly independent of the token count), so these kernels serve 2-16 tokens (dense) and the experts, where the
// token count no longer costs time; M = 1 dense linears keep the SIMT GEMV (gemv_simt.cu), faster per byte there.
// Numerics: exact products (f16 x f16 in fp32), fp32 sums, power-of-two scales: the mma path's, up to summation order.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/kernel_policy.h"
#include "cuda/common/smem.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/gemm/linear.cuh"
#include "cuda/gemm/mma_core.cuh"
#include "util/env.h"

namespace flashseek::cuda::gmma {

// Where a warp's activations come from.
struct ActSrc {
    const void* x = nullptr;   // prepared f16 values (layout order) or raw bf16 rows
    const float* xs = nullptr; // prepared per-128 scales (prepared only)
    int64_t ld = 0;            // elements per row of x
    int64_t xs_ld = 0;
    int raw = 0;               // 1: raw bf16 rows, prepared here with `numerics`
    int numerics = 0;          // ActNumerics (raw only)
};

// Tokens per token group: an FP4 pair (block-diagonal B) or an FP8 8-token tile.
template <WeightKind WK>
constexpr int group_tokens() { return WK == WeightKind::FP4_BLOCK32 ? 2 : 8; }

// Staged activation of one warp: [tokens][cols + 8] f16 (16-byte pad: conflict-free B loads), then
// [tokens][cols / 128] fp32 scales.
__host__ __device__ constexpr int staged_row_halves(int cols) { return cols + 8; }
__host__ __device__ constexpr int staged_bytes(int tokens, int cols) {  // rounded up to 16 (next warp's region)
    return (tokens * staged_row_halves(cols) * 2 + tokens * (cols / 128) * 4 + 15) / 16 * 16;
}
// Warps per 16-row tile (each a contiguous share of the tile's K range): 4 (default) = the CTA splits K four ways and
// sums in shared memory; 1 = one long-lived warp streams the whole range (KernelPolicy::gemv_kw = 1, bench). Measured
// on the H200 (docs/perf.md): 4 wins end to end (C=1 TPOT 6.37 vs 7.75 ms: with one warp per tile the shared
// expert at M=1 has only 128 warps) and on every dense shape; 1 is ~2% faster only on the routed MoE at M=16.
inline int warps_per_tile(const KernelPolicy& policy) { return policy.gemv_kw ? policy.gemv_kw : 4; }

// Largest chunk (multiple of 128 columns, >= 128, <= cap) whose staging fits `budget` bytes.
inline int staged_chunk_cols(int tokens, int64_t cap, int budget) {
    int c = 128;
    while (int64_t(c) + 128 <= cap && staged_bytes(tokens, c + 128) <= budget) c += 128;
    return c;
}

// ---- weight widening --------------------------------------------------------------------------------------
// Eight e2m1 nibbles -> four f16x2 (value * 2^-14): out[0] = (n0,n4), out[1] = (n1,n5), out[2] = (n2,n6),
// out[3] = (n3,n7). Same values and pairing as numeric.cuh's e2m1x8_to_f16x2x4_scaled in 11 instead of 16 ops:
// the f16 high bytes of the even nibbles (sign at bit 7, e1 e0 m at bits 1..3) are built for all four at once,
// likewise the odd ones, and each output picks two bytes (low bytes are zero).
__device__ __forceinline__ void fp4x8_to_f16(uint32_t w, uint32_t out[4]) {
    const uint32_t ev = ((w << 1) & 0x0e0e0e0eu) | ((w << 4) & 0x80808080u);  // byte k: nibble 2k
    const uint32_t od = ((w >> 3) & 0x0e0e0e0eu) | (w & 0x80808080u);         // byte k: nibble 2k+1
    out[0] = __byte_perm(ev, 0u, 0x2404);  // bytes (0, ev.b0, 0, ev.b2)
    out[1] = __byte_perm(od, 0u, 0x2404);
    out[2] = ev & 0xff00ff00u;
    out[3] = od & 0xff00ff00u;
}

// ---- per-step weight registers ------------------------------------------------------------------------------
template <WeightKind WK>
struct RowRaw;  // one row's bytes of one step for this lane
template <>
struct RowRaw<WeightKind::FP4_BLOCK32> { uint4 v; };
template <>
struct RowRaw<WeightKind::FP8_BLOCK128> { uint4 v[2]; };

// One matrix of a warp: rows g and g+8 (clamped to the matrix), their scale addressing.
struct MatRows {
    const uint8_t* w_lo;  // row g, column 0
    const uint8_t* w_hi;  // row g + 8
    const void* scale;
    int64_t s_lo, s_hi;   // FP4: scale index of the row's first group; FP8: index of the row block's first scale
};

template <WeightKind WK, int NM>
struct Stage {
    RowRaw<WK> lo[NM], hi[NM];
    uint32_t s_lo[NM], s_hi[NM];  // raw scale words (E8M0 byte or f32 bits)
};

__device__ __forceinline__ uint32_t load_scale_raw(const void* s, int kind, int64_t idx) {
    if (kind == int(ScaleKind::F32)) return __float_as_uint(__ldg(reinterpret_cast<const float*>(s) + idx));
    return __ldg(reinterpret_cast<const uint8_t*>(s) + idx);
}
__device__ __forceinline__ float scale_value(uint32_t raw, int kind) {
    return kind == int(ScaleKind::F32) ? __uint_as_float(raw) : e8m0_to_f32(uint8_t(raw));
}

// Prefetch depth (steps) per weight kind and matrices per warp: ~60 registers of weights in flight per lane.
template <WeightKind WK, int NM>
constexpr int prefetch_steps() { return WK == WeightKind::FP4_BLOCK32 ? (NM == 1 ? 6 : 3) : (NM == 1 ? 4 : 2); }

// This lane's bytes of rows g and g+8 for one step (FP4: [16t, +16) of the step's 64 bytes; FP8: [16t, +16) and
// [64+16t, +16) of its 128 bytes), and the step's scales, issued together (one round trip).
template <WeightKind WK, int NM>
__device__ __forceinline__ void load_stage(Stage<WK, NM>& st, const MatRows (&m)[NM], int scale_kind, int64_t step,
                                           int t) {
#pragma unroll
    for (int i = 0; i < NM; ++i) {
        if constexpr (WK == WeightKind::FP4_BLOCK32) {
            const int64_t off = step * 64 + 16 * t;
            st.lo[i].v = mma::ld_stream(m[i].w_lo + off);
            st.hi[i].v = mma::ld_stream(m[i].w_hi + off);
            st.s_lo[i] = load_scale_raw(m[i].scale, scale_kind, m[i].s_lo + step * 4 + t);
            st.s_hi[i] = load_scale_raw(m[i].scale, scale_kind, m[i].s_hi + step * 4 + t);
        } else {
            const int64_t off = step * 128 + 16 * t;
            st.lo[i].v[0] = mma::ld_stream(m[i].w_lo + off);
            st.lo[i].v[1] = mma::ld_stream(m[i].w_lo + off + 64);
            st.hi[i].v[0] = mma::ld_stream(m[i].w_hi + off);
            st.hi[i].v[1] = mma::ld_stream(m[i].w_hi + off + 64);
            st.s_lo[i] = load_scale_raw(m[i].scale, scale_kind, m[i].s_lo + step);
            st.s_hi[i] = st.s_lo[i];
        }
    }
}

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    mma::mma_f16(c, a[0], a[1], a[2], a[3], b0, b1);
}

// acc[i][p][r] += this step's products of matrix i and token group p. `xb` points at the warp's staged
// activation values for this step (column 0 of the step, token 0), `xsb` at token 0's scale of this step;
// `ngroups` = token groups present in this pass (uniform).
template <WeightKind WK, int NM, int NG>
__device__ __forceinline__ void compute_stage(float (&acc)[NM][NG][4], const Stage<WK, NM>& st, int scale_kind,
                                              const __half* xb, int row_halves, const float* xsb, int steps_staged,
                                              int ngroups, int g, int t) {
    constexpr int GT = group_tokens<WK>();
    float ws_lo[NM], ws_hi[NM];
    constexpr float kWiden = WK == WeightKind::FP8_BLOCK128 ? 256.f : 16384.f;
#pragma unroll
    for (int i = 0; i < NM; ++i) {
        ws_lo[i] = scale_value(st.s_lo[i], scale_kind) * kWiden;
        ws_hi[i] = scale_value(st.s_hi[i], scale_kind) * kWiden;
    }
    if constexpr (WK == WeightKind::FP4_BLOCK32) {
        // Lane (g, t) feeds B column g = token (g & 1) of the pair, group g >> 1: nonzero only when that is t.
        const bool feeds = (g >> 1) == t;
        const int u = g & 1;
        float tmp[NM][NG][4];
#pragma unroll
        for (int i = 0; i < NM; ++i)
#pragma unroll
            for (int p = 0; p < NG; ++p) tmp[i][p][0] = tmp[i][p][1] = tmp[i][p][2] = tmp[i][p][3] = 0.f;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            uint32_t alo[NM][4], ahi[NM][4];
#pragma unroll
            for (int i = 0; i < NM; ++i) {
                const uint32_t lw[4] = {st.lo[i].v.x, st.lo[i].v.y, st.lo[i].v.z, st.lo[i].v.w};
                const uint32_t hw[4] = {st.hi[i].v.x, st.hi[i].v.y, st.hi[i].v.z, st.hi[i].v.w};
                fp4x8_to_f16(lw[q], alo[i]);
                fp4x8_to_f16(hw[q], ahi[i]);
            }
#pragma unroll
            for (int p = 0; p < NG; ++p) {
                if (p >= ngroups) break;
                uint4 b = make_uint4(0u, 0u, 0u, 0u);
                if (feeds)
                    b = *reinterpret_cast<const uint4*>(xb + (GT * p + u) * row_halves + 32 * t + 8 * q);
#pragma unroll
                for (int i = 0; i < NM; ++i) {
                    const uint32_t a0[4] = {alo[i][0], ahi[i][0], alo[i][1], ahi[i][1]};
                    const uint32_t a1[4] = {alo[i][2], ahi[i][2], alo[i][3], ahi[i][3]};
                    mma16816(tmp[i][p], a0, b.x, b.y);
                    mma16816(tmp[i][p], a1, b.z, b.w);
                }
            }
        }
        // C columns 2t, 2t+1 = group t, tokens 2p, 2p+1.
#pragma unroll
        for (int p = 0; p < NG; ++p) {
            if (p >= ngroups) break;
            const float x0 = xsb[(GT * p) * steps_staged], x1 = xsb[(GT * p + 1) * steps_staged];
#pragma unroll
            for (int i = 0; i < NM; ++i) {
                acc[i][p][0] = fmaf(tmp[i][p][0], ws_lo[i] * x0, acc[i][p][0]);
                acc[i][p][1] = fmaf(tmp[i][p][1], ws_lo[i] * x1, acc[i][p][1]);
                acc[i][p][2] = fmaf(tmp[i][p][2], ws_hi[i] * x0, acc[i][p][2]);
                acc[i][p][3] = fmaf(tmp[i][p][3], ws_hi[i] * x1, acc[i][p][3]);
            }
        }
    } else {
        float tmp[NM][NG][4];
#pragma unroll
        for (int i = 0; i < NM; ++i)
#pragma unroll
            for (int p = 0; p < NG; ++p) tmp[i][p][0] = tmp[i][p][1] = tmp[i][p][2] = tmp[i][p][3] = 0.f;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
#pragma unroll
            for (int qq = 0; qq < 2; ++qq) {  // two words per 16-byte B load
                uint32_t alo[NM][2][2], ahi[NM][2][2];
#pragma unroll
                for (int i = 0; i < NM; ++i) {
                    const uint4 lv = st.lo[i].v[c], hv = st.hi[i].v[c];
                    const uint32_t lw[4] = {lv.x, lv.y, lv.z, lv.w};
                    const uint32_t hw[4] = {hv.x, hv.y, hv.z, hv.w};
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        e4m3x4_to_f16x2x2_scaled(lw[2 * qq + h], alo[i][h][0], alo[i][h][1]);
                        e4m3x4_to_f16x2x2_scaled(hw[2 * qq + h], ahi[i][h][0], ahi[i][h][1]);
                    }
                }
#pragma unroll
                for (int p = 0; p < NG; ++p) {
                    if (p >= ngroups) break;
                    const uint4 b =
                        *reinterpret_cast<const uint4*>(xb + (GT * p + g) * row_halves + 64 * c + 16 * t + 8 * qq);
#pragma unroll
                    for (int i = 0; i < NM; ++i) {
                        const uint32_t a0[4] = {alo[i][0][0], ahi[i][0][0], alo[i][0][1], ahi[i][0][1]};
                        const uint32_t a1[4] = {alo[i][1][0], ahi[i][1][0], alo[i][1][1], ahi[i][1][1]};
                        mma16816(tmp[i][p], a0, b.x, b.y);
                        mma16816(tmp[i][p], a1, b.z, b.w);
                    }
                }
            }
        }
        // C columns 2t, 2t+1 = tokens 2t, 2t+1 of the tile; one block scale for both rows.
#pragma unroll
        for (int p = 0; p < NG; ++p) {
            if (p >= ngroups) break;
            const float x0 = xsb[(GT * p + 2 * t) * steps_staged], x1 = xsb[(GT * p + 2 * t + 1) * steps_staged];
#pragma unroll
            for (int i = 0; i < NM; ++i) {
                acc[i][p][0] = fmaf(tmp[i][p][0], ws_lo[i] * x0, acc[i][p][0]);
                acc[i][p][1] = fmaf(tmp[i][p][1], ws_lo[i] * x1, acc[i][p][1]);
                acc[i][p][2] = fmaf(tmp[i][p][2], ws_hi[i] * x0, acc[i][p][2]);
                acc[i][p][3] = fmaf(tmp[i][p][3], ws_hi[i] * x1, acc[i][p][3]);
            }
        }
    }
}

// ---- activation staging (one warp, its own region) -----------------------------------------------------------
__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
    return uint32_t(__half_as_ushort(__float2half_rn(a))) | (uint32_t(__half_as_ushort(__float2half_rn(b))) << 16);
}

// prepare_activation's quantization of one value with block scale s (release: e4m3 code; exact: v / s).
__device__ __forceinline__ float quant_value(float v, float s, int numerics) {
    if (numerics == int(ActNumerics::FP8_BLOCK128)) return round_e4m3(fminf(fmaxf(v / s, -448.f), 448.f));
    return v / s;
}

// Stage tokens [0, ntok) (row_of(t) = activation row, < 0 = zeros) over columns [col0, col0 + cols) of the
// activation (cols a multiple of 128) into xsm ([ntok][cols + 8] f16) and xss ([ntok][cols/128] fp32), in the
// prepared order of WK. The caller __syncwarp()s before (region free) and after.
template <WeightKind WK, class RowOf>
__device__ __forceinline__ void stage_warp(__half* xsm, float* xss, const ActSrc& src, int64_t col0, int cols,
                                           int ntok, RowOf row_of, int lane) {
    const int rh = staged_row_halves(cols), nblk = cols / 128;
    if (!src.raw) {
        const int per_row = cols / 8;
        for (int i = lane; i < ntok * per_row; i += 32) {
            const int tk = i / per_row, c = (i % per_row) * 8;
            const int64_t r = row_of(tk);
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r >= 0) v = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src.x) + r * src.ld + col0 + c));
            *reinterpret_cast<uint4*>(xsm + tk * rh + c) = v;
        }
        for (int i = lane; i < ntok * nblk; i += 32) {
            const int tk = i / nblk, b = i % nblk;
            const int64_t r = row_of(tk);
            xss[tk * nblk + b] = r >= 0 ? __ldg(src.xs + r * src.xs_ld + col0 / 128 + b) : 0.f;
        }
        return;
    }
    // Raw bf16: a half-warp per (token, 128-block), 8 columns per lane; amax over the half-warp. Both halves run
    // the same number of iterations (full-warp shuffles).
    const int hl = lane & 15, half = lane >> 4;
    for (int i0 = 0; i0 < ntok * nblk; i0 += 2) {
        const int i = i0 + half;
        const bool valid = i < ntok * nblk;
        const int tk = i / nblk, b = i % nblk;
        const int64_t r = valid ? row_of(tk) : -1;
        float v[8];
        if (r >= 0) {
            const uint4 raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src.x) + r * src.ld +
                                                                   col0 + 128 * b + 8 * hl));
            const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[2 * j] = __uint_as_float(w[j] << 16);
                v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = 0.f;
        }
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        float s = 1.f;
        if (src.numerics == int(ActNumerics::FP8_BLOCK128))
            s = exp2i(max(-126, min(127, ceil_log2(fmaxf(amax, 1e-4f) / 448.f))));
        else if (amax > 0.f)
            s = exp2i(max(-126, min(127, ceil_log2(amax) - 14)));
        float q[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = r >= 0 ? quant_value(v[j], s, src.numerics) : 0.f;
        uint4 o;
        if constexpr (WK == WeightKind::FP4_BLOCK32) {  // stored order x0 x4 x1 x5 x2 x6 x3 x7
            o = make_uint4(pack_h2(q[0], q[4]), pack_h2(q[1], q[5]), pack_h2(q[2], q[6]), pack_h2(q[3], q[7]));
        } else {  // FP8: x0 x2 x1 x3 | x4 x6 x5 x7
            o = make_uint4(pack_h2(q[0], q[2]), pack_h2(q[1], q[3]), pack_h2(q[4], q[6]), pack_h2(q[5], q[7]));
        }
        if (!valid) continue;
        *reinterpret_cast<uint4*>(xsm + tk * rh + 128 * b + 8 * hl) = o;
        if (hl == 0) xss[tk * nblk + b] = r >= 0 ? s : 0.f;
    }
}

// ---- one warp's K range ----------------------------------------------------------------------------------------
// acc[i][p][*] (see compute_stage) += the warp's 16 rows of NM matrices over steps [s_begin, s_end) x the pass's
// tokens (row_of(tk) for tk < ntok; groups of group_tokens<WK>()). Step s covers activation columns
// x_col0 + 128 * s. Staging region: xsm/xss sized for `chunk_steps` steps and NG * group_tokens tokens.
template <WeightKind WK, int NM, int NG, class RowOf>
__device__ __forceinline__ void warp_range(float (&acc)[NM][NG][4], const MatRows (&m)[NM], int scale_kind,
                                           int64_t s_begin, int64_t s_end, const ActSrc& src, int64_t x_col0,
                                           int ntok, RowOf row_of, __half* xsm, float* xss, int chunk_steps,
                                           int lane) {
    constexpr int PF = prefetch_steps<WK, NM>();
    constexpr int GT = group_tokens<WK>();
    const int g = lane >> 2, t = lane & 3;
    const int ngroups = (ntok + GT - 1) / GT;
    const int stage_tok = ngroups * GT;
    Stage<WK, NM> st[PF];
#pragma unroll
    for (int j = 0; j < PF; ++j)
        if (s_begin + j < s_end) load_stage<WK, NM>(st[j], m, scale_kind, s_begin + j, t);
    int64_t chunk0 = s_begin;
    int rh = 0, staged = 0;
    for (int64_t s0 = s_begin; s0 < s_end; s0 += PF) {
#pragma unroll
        for (int j = 0; j < PF; ++j) {
            const int64_t s = s0 + j;
            if (s < s_end) {
                if (s == chunk0 + staged || s == s_begin) {  // stage the next chunk of activations
                    chunk0 = s;
                    staged = int(min(int64_t(chunk_steps), s_end - s));
                    rh = staged_row_halves(128 * staged);
                    __syncwarp();
                    stage_warp<WK>(xsm, xss, src, x_col0 + 128 * s, 128 * staged, stage_tok, row_of, lane);
                    __syncwarp();
                }
                const int ls = int(s - chunk0);
                compute_stage<WK, NM, NG>(acc, st[j], scale_kind, xsm + 128 * ls, rh, xss + ls, staged, ngroups, g,
                                          t);
                if (s + PF < s_end) load_stage<WK, NM>(st[j], m, scale_kind, s + PF, t);
            }
        }
    }
}

// FP4: lane t's values are group partials; sum the quad so that every lane holds the rows' totals.
template <WeightKind WK, int NM, int NG>
__device__ __forceinline__ void finish_quad(float (&acc)[NM][NG][4]) {
    if constexpr (WK == WeightKind::FP4_BLOCK32) {
#pragma unroll
        for (int i = 0; i < NM; ++i)
#pragma unroll
            for (int p = 0; p < NG; ++p)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    float v = acc[i][p][r];
                    v += __shfl_xor_sync(0xffffffffu, v, 1);
                    v += __shfl_xor_sync(0xffffffffu, v, 2);
                    acc[i][p][r] = v;
                }
    }
}

// Token (within the pass) and row offset (0 or 8) of accumulator element r of group p for lane (g, t); FP4 values
// are complete after finish_quad in every lane, lanes t == 0 own them.
template <WeightKind WK>
__device__ __forceinline__ bool acc_owner(int t) { return WK == WeightKind::FP4_BLOCK32 ? t == 0 : true; }
template <WeightKind WK>
__device__ __forceinline__ int acc_token(int p, int r, int t) {
    return WK == WeightKind::FP4_BLOCK32 ? 2 * p + (r & 1) : 8 * p + 2 * t + (r & 1);
}
__device__ __forceinline__ int acc_row(int r, int g) { return g + 8 * (r >> 1); }

}  // namespace flashseek::cuda::gmma
