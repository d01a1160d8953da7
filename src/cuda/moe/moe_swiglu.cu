// SwiGLU of a dense (shared) expert whose w1 and w3 ran as two ordinary linears (bf16 outputs), written directly as
// the prepared activation of its w2: h = act_quant(bf16(silu(min(g, limit)) * clamp(u, -limit, limit))).
// Why: at 2-16 tokens the FP8 linears' wgmma GEMV (gemm/wgmma_gemv.cu) streams the shared expert's weights about
// twice as fast as the fused up/down expert kernels (moe_gemv.cu), whose SwiGLU this kernel supplies.
// Layout: one warp per (row, 128-column block), 4 columns per lane; the same rounding and act_quant as the fused
// path (gemm/prepare_block.cuh, shared with moe_gemv.cu quantize_h), so both give identical h for identical g, u.
#include <cuda_runtime.h>

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/moe/moe.cuh"

namespace flashseek::cuda {
namespace {

__global__ void swiglu_prepare_kernel(const uint16_t* __restrict__ g, const uint16_t* __restrict__ u, int64_t ld,
                                      int64_t rows, int64_t inter, float limit, uint16_t* __restrict__ h,
                                      float* __restrict__ hs, int64_t h_kpad, WeightKind layout, int numerics) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int64_t n_blk = h_kpad / 128;
    const int64_t idx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= rows * n_blk) return;
    const int64_t r = idx / n_blk, blk = idx % n_blk;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t col = blk * 128 + 4 * lane + i;
        v[i] = 0.f;
        if (col < inter) {
            const float gate = fminf(bf16_bits_to_f32(g[r * ld + col]), limit);
            const float up = fminf(fmaxf(bf16_bits_to_f32(u[r * ld + col]), -limit), limit);
            v[i] = round_bf16(gate / (1.f + expf(-gate)) * up);
        }
    }
    store_prepared_block(v, lane, layout, numerics, h + r * h_kpad + blk * 128, hs + r * n_blk + blk);
}

}  // namespace

void moe_swiglu_prepare(const uint16_t* g, const uint16_t* u, int64_t ld, int64_t M, int64_t inter, float limit,
                        WeightKind layout, ActNumerics numerics, PreparedActivation& h, cudaStream_t stream) {
    FS_REQUIRE(g && u && h.values && h.scales && M > 0 && inter > 0 && ld >= inter,
               "moe_swiglu_prepare: bad arguments (M ", M, ", inter ", inter, ", ld ", ld, ")");
    FS_REQUIRE(layout == WeightKind::FP8_BLOCK128 || layout == WeightKind::FP4_BLOCK32,
               "moe_swiglu_prepare: h must be prepared for FP8 or FP4 weights");
    describe_prepared(h, layout, numerics, M, inter);
    const int64_t warps = M * (h.k_pad / 128);
    launch_pdl("swiglu_prepare_kernel", swiglu_prepare_kernel, dim3(unsigned((warps + 7) / 8)), dim3(256), 0, stream, g,
               u, ld, M, inter, limit, h.values, h.scales, h.k_pad, layout, int(numerics));
}

}  // namespace flashseek::cuda
