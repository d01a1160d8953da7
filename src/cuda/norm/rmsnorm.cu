// RMSNorm and the fused per-head norm + RoPE: one warp per row, the row walked as bf16 pairs so that a RoPE
// pair never straddles two lanes. The row is read twice (sum of squares, then scale); it stays in L1.
#include <algorithm>

#include "cuda/common/attn_helpers.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/norm/rmsnorm.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kWarpsPerBlock = 8;

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
        float2 v = __bfloat1622float2(src[k]);
        v.x *= r;
        v.y *= r;
        if (weight) {
            v.x *= __bfloat162float(weight[2 * k]);
            v.y *= __bfloat162float(weight[2 * k + 1]);
        }
        if (k >= rope_first_pair) {
            // the reference stores the normed vector in bf16 before rotating it
            v.x = round_bf16(v.x);
            v.y = round_bf16(v.y);
            float c, s;
            rope_cos_sin(pos, rope.inv_freq[k - rope_first_pair], c, s);
            rope_rotate(v.x, v.y, c, s, false);
        }
        dst[k] = __floats2bfloat162_rn(v.x, v.y);
    }
}

void launch(const bf16* in, int64_t in_stride, bf16* out, int64_t out_stride, const bf16* weight, int rows,
            int heads, int dim, float eps, const int32_t* positions, const RopeTable& rope, cudaStream_t stream) {
    FS_ATTN_REQUIRE(dim > 0 && dim % 2 == 0, "rmsnorm: dim must be positive and even, got {}", dim);
    FS_ATTN_REQUIRE(2 * rope.n_pairs <= dim, "rmsnorm: rope_dim {} exceeds dim {}", 2 * rope.n_pairs, dim);
    FS_ATTN_REQUIRE(rope.n_pairs == 0 || positions != nullptr, "rmsnorm: RoPE needs positions");
    if (rows <= 0) return;
    const int blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    launch_pdl("rmsnorm_rope_kernel", rmsnorm_rope_kernel, dim3(blocks), dim3(kWarpsPerBlock * 32), 0, stream, in,
               in_stride, out, out_stride, weight, rows, heads, dim, eps, positions, rope);
    FS_ATTN_LAUNCHED();
}

}  // namespace

void rmsnorm(const bf16* in, int64_t in_stride, bf16* out, int64_t out_stride, const bf16* weight, int rows, int dim,
             float eps, cudaStream_t stream) {
    launch(in, in_stride, out, out_stride, weight, rows, 1, dim, eps, nullptr, RopeTable{}, stream);
}

void head_rmsnorm_rope(bf16* x, int64_t token_stride, int n_tokens, int n_heads, int head_dim, const bf16* weight,
                       float eps, const int32_t* positions, const RopeTable& rope, cudaStream_t stream) {
    launch(x, token_stride, x, token_stride, weight, n_tokens * n_heads, n_heads, head_dim, eps, positions, rope,
           stream);
}

}  // namespace flashseek::cuda
