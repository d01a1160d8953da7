// RoPE kernel: one thread per rotated pair; positions from the step's token_pos array. See rope.cuh.
#include <algorithm>

#include "cuda/common/attn_helpers.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

__global__ void rope_kernel(bf16* x, int64_t token_stride, int n_tokens, int n_heads, int head_dim,
                            const int32_t* positions, RopeTable rope, bool inverse) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int pairs = rope.n_pairs;
    const int64_t total = int64_t(n_tokens) * n_heads * pairs;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int pair = int(i % pairs);
        const int64_t th = i / pairs;
        const int h = int(th % n_heads);
        const int t = int(th / n_heads);
        bf16* v = x + t * token_stride + int64_t(h) * head_dim + (head_dim - 2 * pairs) + 2 * pair;
        float c, s;
        rope_cos_sin(positions[t], rope.inv_freq[pair], c, s);
        float x0 = __bfloat162float(v[0]), x1 = __bfloat162float(v[1]);
        rope_rotate(x0, x1, c, s, inverse);
        v[0] = __float2bfloat16_rn(x0);
        v[1] = __float2bfloat16_rn(x1);
    }
}

}  // namespace

void rope_apply(bf16* x, int64_t token_stride, int n_tokens, int n_heads, int head_dim, const int32_t* positions,
                const RopeTable& rope, bool inverse, cudaStream_t stream) {
    FS_ATTN_REQUIRE(2 * rope.n_pairs <= head_dim, "rope_apply: rope_dim {} exceeds head_dim {}", 2 * rope.n_pairs, head_dim);
    if (n_tokens == 0 || rope.n_pairs == 0) return;
    const int64_t total = int64_t(n_tokens) * n_heads * rope.n_pairs;
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((total + threads - 1) / threads, 4096));
    launch_pdl("rope_kernel", rope_kernel, dim3(blocks), dim3(threads), 0, stream, x, token_stride, n_tokens, n_heads,
               head_dim, positions, rope, inverse);
    CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace flashseek::cuda
