// Pieces shared by the streaming decode GEMVs (FP8 weights: bulk_gemv.cu, mma.sync; wgmma_gemv.cu, wgmma e4m3;
// wgmma_f16_gemv.cu, wgmma f16; BF16 weights: bf16_gemv.cu, mma.sync bf16): the argument block, the split-K plan and
// a split's stage range, the weight-scale read, the output store, the wgmma D-tile epilogue, the split-K election and
// the deterministic sum of the split-K partials. Internal to src/cuda/gemm.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/linear.cuh"
#include "cuda/gemm/split_sum.cuh"

namespace flashseek::cuda::stream_gemv {

struct Args {
    const uint8_t* w;
    const void* scale;
    int scale_f32;           // 1: fp32 scales, 0: E8M0 bytes
    int64_t N, K;            // rows (all groups), columns per row
    int64_t scale_ld;        // ceil(K / 128)
    const uint16_t* x;       // prepared activation (FP8 layout: e4m3 codes as f16; BF16 layout: bf16 rows)
    const float* xs;
    int64_t x_ld, xs_ld;
    int M;
    int64_t rows_per_group, x_group_cols;
    int splits, stages_per_split;
    void* y;
    int y_f32;
    int64_t ld_y;
    float* partials;
    uint32_t* counters;
};

// K splits for `tiles` row tiles of `stages` stages each: about two work items per one of `units` (warps or CTAs
// streaming in parallel), no split when the K range is shorter than min_stages_to_split, at least
// min_stages_per_split stages per split, partials within the workspace (none: 1).
inline int plan_splits(int64_t tiles, int64_t stages, int64_t units, int64_t min_stages_to_split,
                       int64_t min_stages_per_split, int64_t M, int64_t out, const GemmWorkspace* ws) {
    if (!ws || !ws->partials || !ws->counters || tiles > ws->n_counters || stages < min_stages_to_split) return 1;
    int64_t splits = std::min<int64_t>((2 * units + tiles - 1) / tiles, stages / min_stages_per_split);
    splits = std::min<int64_t>(splits, int64_t(ws->partial_bytes / (size_t(M) * size_t(out) * 4)));
    splits = std::max<int64_t>(splits, 1);
    const int64_t per = (stages + splits - 1) / splits;
    return int((stages + per - 1) / per);
}

// y = x W^T arguments (grouped as grouped_linear when groups > 1) for stages of stage_cols columns.
inline Args make_args(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y, OutKind y_kind,
                      int64_t ld_y, const GemmWorkspace* ws, int splits, int64_t stage_cols) {
    const int64_t stages = w.in / stage_cols;
    Args a{};
    a.w = static_cast<const uint8_t*>(w.weight);
    a.scale = w.scale;
    a.scale_f32 = w.scale_kind == ScaleKind::F32 ? 1 : 0;
    a.N = w.out;
    a.K = w.in;
    a.scale_ld = (w.in + 127) / 128;
    a.x = x.values;
    a.xs = x.scales;
    a.x_ld = x.k_pad;
    a.xs_ld = x.k_pad / 128;
    a.M = int(x.m);
    a.rows_per_group = groups > 1 ? w.out / groups : w.out;
    a.x_group_cols = groups > 1 ? w.in : 0;
    a.splits = splits;
    a.stages_per_split = int((stages + splits - 1) / splits);
    a.y = y;
    a.y_f32 = y_kind == OutKind::F32;
    a.ld_y = ld_y;
    a.partials = ws ? ws->partials : nullptr;
    a.counters = ws ? ws->counters : nullptr;
    return a;
}

// The stages [begin, end) of a K of `total` stages that split `split` sums (the copy side and the consumer of a
// kernel walk the same range).
struct StageRange {
    int begin, end;
};
__device__ __forceinline__ StageRange split_stages(const Args& a, int total, int split) {
    const int begin = min(total, split * a.stages_per_split);
    return StageRange{begin, min(total, begin + a.stages_per_split)};
}

__device__ __forceinline__ float weight_scale(const Args& a, int64_t idx) {
    return a.scale_f32 ? __ldg(static_cast<const float*>(a.scale) + idx)
                       : __uint_as_float(uint32_t(__ldg(static_cast<const uint8_t*>(a.scale) + idx)) << 23);
}

__device__ __forceinline__ void store(const Args& a, int64_t row, int tok, float v) {
    if (a.y_f32)
        reinterpret_cast<float*>(a.y)[tok * a.ld_y + row] = v;
    else
        reinterpret_cast<uint16_t*>(a.y)[tok * a.ld_y + row] = f32_to_bf16_bits(v);
}

// Output element (row, tok) of K split `split`: the output itself when K is not split, else the split's partial.
__device__ __forceinline__ void store_or_partial(const Args& a, int64_t row, int tok, int split, float v) {
    if (a.splits == 1)
        store(a, row, tok, v);
    else
        a.partials[(int64_t(split) * a.M + tok) * a.N + row] = v;
}

// The epilogue of a 64-row warpgroup tile held in the wgmma D layout (warp w: rows 16w + g and 16w + g + 8, value j at
// column (j >> 2) * 8 + 2t + (j & 1)): column c is token tok0 + c; written to the output when K is not split, else
// to the split's partials.
template <int ND>
__device__ __forceinline__ void store_d_tile(const Args& a, const float (&acc)[ND], int64_t row0, int tok0, int split,
                                             int warp, int g, int t) {
#pragma unroll
    for (int j = 0; j < ND; ++j) {
        const int tok = tok0 + (j >> 2) * 8 + 2 * t + (j & 1);
        const int64_t row = row0 + 16 * warp + g + ((j & 2) ? 8 : 0);
        if (tok >= a.M) continue;
        store_or_partial(a, row, tok, split, acc[j]);
    }
}

// Split-K: whether this CTA is the last of the a.splits that wrote their partials of work unit `counter` (then it
// sums them and resets the counter). Every thread of the CTA calls it; `flag` is a __shared__ word.
__device__ __forceinline__ bool last_split(const Args& a, int counter, uint32_t& flag, int tid) {
    return split_arrives_last(&a.counters[counter], a.splits, flag, tid == 0);
}

// Sums the split-K partials of rows [row0, row0 + kRows) x tokens [tok0, tok0 + kTokens) in split order and stores
// them; called by the kThreads threads (index `tid`) of the unit that arrived last at the tile's counter. Splits
// outer so that the elements of a split (and four splits) are loaded together, each load at a token clamped into
// [0, M) so that none sits behind a branch: a load behind a branch waited for the add before it (the split-K FP8
// GEMM's first sum cost ~0.1 us per value that way, docs/perf-log/2026-12-04_split-k-fp8-gemm.md).
template <int kRows, int kThreads, int kTokens = 16>
__device__ __forceinline__ void sum_partials(const Args& a, int64_t row0, int tid, int tok0 = 0) {
    constexpr int kPer = kRows * kTokens / kThreads;  // elements tid + kThreads * i
    static_assert(kPer * kThreads == kRows * kTokens, "whole elements per thread");
    float sum[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) sum[i] = 0.f;
#pragma unroll 4
    for (int sp = 0; sp < a.splits; ++sp) {
        const float* part = a.partials + int64_t(sp) * a.M * a.N + row0;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int e = tid + kThreads * i, tok = min(tok0 + e / kRows, a.M - 1);
            sum[i] += __ldcg(part + int64_t(tok) * a.N + e % kRows);
        }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int e = tid + kThreads * i, tok = tok0 + e / kRows;
        if (tok < a.M) store(a, row0 + e % kRows, tok, sum[i]);
    }
}
}  // namespace flashseek::cuda::stream_gemv
