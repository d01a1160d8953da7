// Compute-bound dense GEMMs for prefill and large batches (issue 15): FP8 block-scaled (release numerics: official
// fp8_gemm with act_quant activations) and BF16, D[m, n] = A[m, k] . W[n, k]^T with weights in their checkpoint
// layout ([n, k] row-major, k contiguous), output bf16 or fp32 with a row stride.
//   FP8:  A = fp8_activation (act_quant.cuh: e4m3 codes + per-(row, 128-block) power-of-two scales), W = e4m3 with
//         [ceil(n/128), ceil(k/128)] block scales (E8M0 bytes or fp32). D = sum over 128-K blocks, in K order, of
//         sa[row, kb] * sw[n / 128, kb] * (A_kb . W_kb), each block's tensor-core partial promoted to fp32.
//   BF16: A bf16 with a row stride, W bf16 (router gate, compressors, indexer weights_proj, head), fp32 sums.
// Paths (GemmPath), chosen by the caller or by AUTO:
//   WGMMA       sm_90a build on compute capability 9.0: TMA + wgmma, warp-specialized, persistent, tiles of 256, 128
//               or 64 rows x 128 columns (gemm_sm90.cu);
//   MMA_NATIVE  mma.sync e4m3 (FP8, compute capability >= 8.9; runs on sm_90 too, lowered to f16 by ptxas) or
//               bf16 (BF16, >= 8.0) (gemm_mma.cu);
//   MMA_F16     FP8 widened exactly to f16, mma.sync f16 (>= 8.0: sm_80, and for tests on sm_90).
// Every output element is computed in the same order whatever m and the tile configuration: a row's result does not
// depend on the other rows (batch invariance). Split-K (FP8, wgmma path, m <= 64: decode) is a separate request
// (Fp8GemmArgs::k_splits, planned by fp8_gemm_k_splits from the shape alone): its sums differ from the unsplit
// GEMM's, so prefill never asks for it; its split count does not depend on m.
// Host entries take raw device pointers and a stream, allocate nothing, hold no mutable state and can be captured
// in a CUDA graph (tensor maps are encoded on the host per call and passed by value). Bad arguments throw Error.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/act_quant.cuh"
#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {

enum class GemmPath : uint8_t { AUTO, WGMMA, MMA_NATIVE, MMA_F16 };

struct Fp8GemmArgs {
    Fp8Activation a;                 // m x k
    const uint8_t* w = nullptr;      // [n, k / groups] e4m3, row stride k / groups bytes
    const void* w_scales = nullptr;  // [ceil(n / 128), ceil(k / groups / 128)]
    ScaleKind w_scale_kind = ScaleKind::E8M0;
    int64_t n = 0;
    void* d = nullptr;               // [m, n] with row stride ldd elements
    OutKind d_kind = OutKind::BF16;
    int64_t ldd = 0;
    // groups > 1 (attention wo_a): G independent products in one launch, group g = D columns [g n/G, (g+1) n/G)
    // = A columns [g k/G, (g+1) k/G) . (W rows [g n/G, (g+1) n/G))^T; k/G and n/G multiples of 128.
    int groups = 1;
    // WGMMA path, bf16 output with 16-byte rows (ldd, n multiples of 8, d 16-byte aligned): each output tile is
    // written by TMA from shared memory while the next tile's main loop runs; false: stored by the math warps
    // (same bits; the policy name gemm_tma_store switches it off for A/B runs).
    bool tma_store = true;
    // Split-K (WGMMA path, m <= 64): K in k_splits ranges of whole 128-blocks (none empty: fp8_gemm_k_splits plans
    // them), one CTA per (output tile, range), fp32 partials in ws (k_splits x m x n floats, one counter per output
    // tile of 128 columns), summed in range order by each tile's last CTA: deterministic, each row independent of
    // the others. The output is then stored by the math warps (tma_store does not apply).
    int k_splits = 1;
    const GemmWorkspace* ws = nullptr;
};

struct Bf16GemmArgs {
    const uint16_t* a = nullptr;  // [m, k] bf16, row stride lda elements
    int64_t lda = 0;
    int64_t m = 0, k = 0;
    const uint16_t* w = nullptr;  // [n, k] bf16, row stride k
    int64_t n = 0;
    void* d = nullptr;
    OutKind d_kind = OutKind::F32;
    int64_t ldd = 0;
    // Instead of d (null then): the act_quant of the bf16 output (FP8_ROWS, natural order) into columns
    // [rows_col0, rows_col0 + n) of d_rows: bit for bit what prepare_activation_rows gives of the bf16 D, without
    // writing D (a linear whose output only feeds an FP8 GEMM: wo_a into wo_b). The wgmma path only, tiles of 128
    // or 256 rows (a math warpgroup's 128 columns are one scale block); n and rows_col0 multiples of 128,
    // d_rows.m >= m, d_rows.k >= rows_col0 + n.
    Fp8Activation d_rows;
    int64_t rows_col0 = 0;
    bool tma_store = true;  // as Fp8GemmArgs::tma_store (not with d_rows)
    // The weights were written by an earlier kernel of the stream (wo_a widened to bf16 per pass): none of them is
    // read before the kernel's PDL wait. Checkpoint weights (false) are requested before it.
    bool weights_in_stream = false;
    // groups > 1 (attention wo_a widened to bf16): as Fp8GemmArgs::groups, G independent products
    // in one launch, group g = D columns [g n/G, (g+1) n/G) = A columns [g k/G, (g+1) k/G) . (W rows [g n/G,
    // (g+1) n/G))^T, w [n, k/G] with row stride k/G; k/G a multiple of 64 (whole stages), n/G of 128 (whole
    // tiles). The wgmma path only (the mma.sync kernel takes one group: one launch per group there).
    int groups = 1;
};

// Whether `path` (AUTO: any) can run on the current device with this build.
bool gemm_path_supported(GemmPath path, bool fp8);

// The choice a call makes: the path taken for AUTO, the tile rows per CTA (wgmma: 256, 128 or 64, the height of
// least estimated time, dense_gemm.cu; mma.sync: 128; columns are always 128), the CTA count and the tile count.
// block_m (tests, benchmarks): 0 = that rule, or 64 / 128 / 256 forced on the wgmma path.
struct GemmPlan {
    GemmPath path = GemmPath::AUTO;
    int block_m = 128, block_n = 128;
    int k_splits = 1;
    int ctas = 0;
    int64_t tiles = 0;
};

// eligible: the arguments are well formed for `path` (AUTO: some path) and it is supported here. Requirements:
// k % 16 == 0 and n % 16 == 0 (FP8 also needs the activation's codes_ld / scales_ld layout of act_quant.cuh),
// 16-byte aligned A, W and A-scale pointers, BF16 lda % 8 == 0, ldd >= n, m in [1, 2^31), n < 2^31.
bool fp8_gemm_eligible(const Fp8GemmArgs& args, GemmPath path = GemmPath::AUTO);
bool bf16_gemm_eligible(const Bf16GemmArgs& args, GemmPath path = GemmPath::AUTO);
GemmPlan plan_fp8_gemm(const Fp8GemmArgs& args, GemmPath path = GemmPath::AUTO, int block_m = 0);
// The K splits of a decode-sized FP8 GEMM (WGMMA path) on n output columns over k (both over all groups), from the
// shape and the SM count alone (not m): as many as keep (output tiles x splits) within one wave of the SMs, whole
// 128-blocks each and none empty; 1 where splitting would not occupy more SMs. The partials then take
// k_splits x m x n x 4 <= 64 x 128 x SMs x 4 bytes (4.3 MB on 132 SMs).
int fp8_gemm_k_splits(int64_t n, int64_t k, int groups);
GemmPlan plan_bf16_gemm(const Bf16GemmArgs& args, GemmPath path = GemmPath::AUTO, int block_m = 0);

// Throws Error (naming the argument) when not eligible. m == 0 launches nothing.
void gemm_fp8(const Fp8GemmArgs& args, GemmPath path, cudaStream_t stream, int block_m = 0);
void gemm_bf16(const Bf16GemmArgs& args, GemmPath path, cudaStream_t stream, int block_m = 0);

}  // namespace flashseek::cuda
