// The window-KV path of attention (docs/model.md §2.4 step 4): kv = RMSNorm_{kv_norm}(wkv x) (bf16), RoPE on the
// last rope_dim dims at the token's position (bf16), FP8 simulation of the no-rope dims (block 64; skipped when ring.fp8_sim is false), written into the
// layer's sliding-window ring in the ring's format. One CTA per token; the whole chunk is written before attention
// reads the window (the ring holds window + chunk entries, kv_cache.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/attention/kv_cache.cuh"
#include "cuda/rope/rope.cuh"

namespace flashseek::cuda {

// kv: [batch.n_tokens, dim] bf16 (wkv output, rows kv_stride elements apart). norm_weight [dim] bf16.
// final_kv (optional, [n_tokens, dim] bf16): receives the final simulated vectors (tests, debugging).
void kv_store_window(const __nv_bfloat16* kv, int64_t kv_stride, int dim, int rope_dim,
                     const __nv_bfloat16* norm_weight, float eps, const RopeTable& rope, const TokenBatch& batch,
                     const RingView& ring, __nv_bfloat16* final_kv, cudaStream_t stream);

}  // namespace flashseek::cuda
