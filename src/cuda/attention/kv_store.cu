// kv_store_window: one CTA per token row. The row is normalized in fp32 (block reduction), rounded to bf16 as the
// reference stores it, rotated pair-wise, rounded again, then quantized/stored by store_kv_entry.
#include <algorithm>

#include "cuda/attention/kv_entry.cuh"
#include "cuda/attention/kv_store.cuh"
#include "cuda/common/pdl.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) kv_store_kernel(const bf16* __restrict__ kv, int64_t kv_stride, int dim,
                                                            int rope_dim, const bf16* __restrict__ w, float eps,
                                                            RopeTable rope, TokenBatch batch, RingView ring,
                                                            bf16* final_kv) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ float v[];
    __shared__ float scratch[32];
    const int t = blockIdx.x;
    const bf16* src = kv + t * kv_stride;
    float ss = 0.f;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const float x = __bfloat162float(src[d]);
        v[d] = x;
        ss += x * x;
    }
    ss = block_sum(ss, scratch);
    const float r = rsqrtf(ss / float(dim) + eps);
    for (int d = threadIdx.x; d < dim; d += blockDim.x) v[d] = round_bf16(__bfloat162float(w[d]) * (v[d] * r));
    __syncthreads();
    const int64_t pos = batch.token_pos[t];
    const int nope = dim - rope_dim;
    for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) {
        float c, s;
        rope_cos_sin(pos, rope.inv_freq[i], c, s);
        float x0 = v[nope + 2 * i], x1 = v[nope + 2 * i + 1];
        rope_rotate(x0, x1, c, s, false);
        v[nope + 2 * i] = round_bf16(x0);
        v[nope + 2 * i + 1] = round_bf16(x1);
    }
    __syncthreads();
    const int seq = batch.token_seq[t];
    uint8_t* dst = ring_entry(ring, batch.seq_slot[seq], pos);
    store_kv_entry(v, dim, rope_dim, ring.format, dst, final_kv != nullptr, ring.fp8_sim);
    if (final_kv) {
        __syncthreads();
        for (int d = threadIdx.x; d < dim; d += blockDim.x) final_kv[int64_t(t) * dim + d] = __float2bfloat16_rn(v[d]);
    }
}

}  // namespace

void kv_store_window(const bf16* kv, int64_t kv_stride, int dim, int rope_dim, const bf16* norm_weight, float eps,
                     const RopeTable& rope, const TokenBatch& batch, const RingView& ring, bf16* final_kv,
                     cudaStream_t stream) {
    FS_ATTN_REQUIRE(rope_dim == 2 * rope.n_pairs, "kv_store_window: rope_dim {} does not match the RoPE table ({})",
                    rope_dim, 2 * rope.n_pairs);
    FS_ATTN_REQUIRE(dim > rope_dim && (dim - rope_dim) % 64 == 0,
                    "kv_store_window: head_dim - qk_rope_head_dim must be a positive multiple of 64, got {}",
                    dim - rope_dim);
    FS_ATTN_REQUIRE(ring.entry_bytes == kv_entry_bytes(ring.format, dim, rope_dim),
                    "kv_store_window: ring entry_bytes {} does not match the format ({} expected)", ring.entry_bytes,
                    kv_entry_bytes(ring.format, dim, rope_dim));
    FS_ATTN_REQUIRE(norm_weight != nullptr, "kv_store_window: kv_norm weight is required");
    FS_ATTN_REQUIRE(ring.fp8_sim || ring.format == KvFormat::BF16,
                    "kv_store_window: FP8 ring entries are always quantized (fp8_sim = false needs BF16 entries)");
    if (batch.n_tokens <= 0) return;
    const size_t smem = size_t(dim) * sizeof(float);
    launch_pdl("kv_store_kernel", kv_store_kernel, dim3(batch.n_tokens), dim3(kThreads), smem, stream, kv, kv_stride,
               dim, rope_dim, norm_weight, eps, rope, batch, ring, final_kv);
    CUDA_CHECK_LAUNCH("kv_store_kernel");
}

}  // namespace flashseek::cuda
