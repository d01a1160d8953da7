// kv_store_window: one CTA per token row. The row is normalized in fp32 (block reduction), rounded to bf16 as the
// reference stores it, rotated pair-wise, rounded again, then quantized/stored by store_kv_entry.
//
// Latency at one token (the decode critical path; every number below is one dependent step). The serial chain was:
// the row's loads -> block sum -> the norm weight's loads (issued only then) -> barrier -> the token's position ->
// RoPE (a double-precision sincos per pair) -> barrier -> the token's sequence -> its state slot -> the entry's
// stores: five dependent global round trips and four barriers. Now:
//   - the weight is read before pdl_wait (a weight: no earlier kernel writes it, common/pdl.cuh), into registers;
//   - position, sequence and slot are requested right after pdl_wait, in flight with the row's loads, and the RoPE
//     cos / sin of the thread's pairs are evaluated while the block sum runs;
//   - the scaling and the rotation are one pass over pairs (thread i owns pairs i, i + 128, ...), so the barrier
//     between them is gone.
// The arithmetic is today's expression for expression and in the same order (the sum of squares keeps its
// per-thread order and block_sum; each element is w * (x * r), rounded, rotated, rounded), so the entries are
// bit-identical.
#include <algorithm>

#include "cuda/attention/kv_entry.cuh"
#include "cuda/attention/kv_store.cuh"
#include "cuda/common/pdl.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kThreads = 128;
constexpr int kPairsInRegisters = 4;  // pairs per thread whose weight and RoPE factors are held: dim <= 1024

__global__ void __launch_bounds__(kThreads) kv_store_kernel(const bf16* __restrict__ kv, int64_t kv_stride, int dim,
                                                            int rope_dim, const bf16* __restrict__ w, float eps,
                                                            RopeTable rope, TokenBatch batch, RingView ring,
                                                            bf16* final_kv) {
    const int n_pairs = dim / 2, nope = dim - rope_dim, first_rope_pair = nope / 2;
    const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(w);
    float2 wp[kPairsInRegisters];
#pragma unroll
    for (int i = 0; i < kPairsInRegisters; ++i) {
        const int p = threadIdx.x + kThreads * i;
        wp[i] = p < n_pairs ? __bfloat1622float2(w2[p]) : make_float2(0.f, 0.f);
    }
    pdl_wait_after_prefetch();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ float v[];
    __shared__ float scratch[32];
    const int t = blockIdx.x;
    const int64_t pos = batch.token_pos[t];
    const int seq = batch.token_seq[t];
    const int slot = batch.seq_slot[seq];
    const bf16* src = kv + t * kv_stride;
    float ss = 0.f;
#pragma unroll 4
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const float x = __bfloat162float(src[d]);
        v[d] = x;
        ss += x * x;
    }
    float2 cs[kPairsInRegisters];  // (cos, sin) of the rope pairs among the held ones, ready before the sum is
#pragma unroll
    for (int i = 0; i < kPairsInRegisters; ++i) {
        const int p = threadIdx.x + kThreads * i;
        cs[i] = make_float2(1.f, 0.f);
        if (p >= first_rope_pair && p < n_pairs) rope_cos_sin(pos, rope.inv_freq[p - first_rope_pair], cs[i].x, cs[i].y);
    }
    ss = block_sum(ss, scratch);  // its barriers also publish v
    const float r = rsqrtf(ss / float(dim) + eps);
    auto finish_pair = [&](int p, float2 wf, float2 c) {  // norm, bf16, rotation, bf16: the reference's steps
        float x0 = round_bf16(wf.x * (v[2 * p] * r));
        float x1 = round_bf16(wf.y * (v[2 * p + 1] * r));
        if (p >= first_rope_pair) {
            rope_rotate(x0, x1, c.x, c.y, false);
            x0 = round_bf16(x0);
            x1 = round_bf16(x1);
        }
        v[2 * p] = x0;
        v[2 * p + 1] = x1;
    };
#pragma unroll
    for (int i = 0; i < kPairsInRegisters; ++i) {
        const int p = threadIdx.x + kThreads * i;
        if (p < n_pairs) finish_pair(p, wp[i], cs[i]);
    }
    for (int p = threadIdx.x + kThreads * kPairsInRegisters; p < n_pairs; p += kThreads) {  // dim > 1024
        float2 c = make_float2(1.f, 0.f);
        if (p >= first_rope_pair) rope_cos_sin(pos, rope.inv_freq[p - first_rope_pair], c.x, c.y);
        finish_pair(p, __bfloat1622float2(w2[p]), c);
    }
    __syncthreads();
    uint8_t* dst = ring_entry(ring, slot, pos);
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
