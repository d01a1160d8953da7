// RMSNorm kernels (docs/model.md §2): out = w * x / sqrt(mean(x^2) + eps), fp32 math on bf16 rows, bf16 result.
// One warp per row. The fused variant also applies the interleaved RoPE to the last rope_dim dims of each row at
// its token's position: that is the query path (unweighted per-head norm + RoPE, §2.4 step 2-3) in one launch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/linear.cuh"
#include "cuda/rope/rope.cuh"

namespace flashseek::cuda {

// in [rows, dim] (row i at in + i * in_stride), out likewise (may alias in). weight [dim] bf16 or nullptr
// (unweighted); it is read before the PDL wait, so the kernel just before in the stream must not write it (a model
// weight never is). dim must be even.
// prepared (optional): also writes the output as a prepared activation for an FP8 / FP4 linear (caller sets values,
// scales, layout and numerics; the shape fields are filled in), bit for bit what prepare_activation(out) gives, in the
// same kernel where dim % 128 == 0 on the vector path, else with one preparation launch after it. With format
// FP8_ROWS (FP8 layout, release numerics) the act_quant form of prepare_activation_rows instead, the same way.
void rmsnorm(const __nv_bfloat16* in, int64_t in_stride, __nv_bfloat16* out, int64_t out_stride,
             const __nv_bfloat16* weight, int rows, int dim, float eps, cudaStream_t stream,
             PreparedActivation* prepared = nullptr);

// In place on x [n_tokens, n_heads, head_dim] (token rows token_stride elements apart): each head vector is
// RMS-normalized (weight [head_dim] or nullptr), then its last 2*rope.n_pairs dims are rotated at
// positions[token] (rope.n_pairs == 0: no rotation).
void head_rmsnorm_rope(__nv_bfloat16* x, int64_t token_stride, int n_tokens, int n_heads, int head_dim,
                       const __nv_bfloat16* weight, float eps, const int32_t* positions, const RopeTable& rope,
                       cudaStream_t stream);

}  // namespace flashseek::cuda
