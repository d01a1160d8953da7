// Sparse attention with sink (docs/model.md §2.7) over a query's sliding window plus its compressed candidates,
// for prefill and decode alike, with the inverse RoPE of the output (§2.4 step 7) fused in.
//
// For query row t (sequence s, position p), the candidates are: the window positions max(0, p-window+1) .. p,
// read from the layer's ring (kv_cache.cuh; the step's own KV must already be stored there, kv_store_window),
// then compressed entries (ratio > 0): the ids topk[t][0..topk_width) when topk is given (-1 = none; the indexer's
// choice in CSA layers), else every visible entry w < (p+1)/ratio (HCA layers, or CSA while the sequence has no
// more than index_topk entries). Entries with w >= (p+1)/ratio are ignored.
// s_i = (q_h . kv_i) * softmax_scale; out_h = sum_i e^(s_i-M) kv_i / (sum_i e^(s_i-M) + e^(sink_h-M)), the
// probabilities rounded to bf16 before the PV product (as the reference kernel does), accumulation fp32; then the
// last 2*rope.n_pairs dims of out_h are rotated by -p; bf16 out.
//
// Kernel: CTA = (query, group of 8 heads, split of the candidate list); the KV tile (32 entries, dequantized to
// bf16 in shared memory) is shared by the 8 heads; online softmax across tiles; splits are merged by a second
// kernel when a step has too few queries to fill the GPU (decode at small batch).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cuda/attention/kv_cache.cuh"
#include "cuda/common/kernel_policy.h"
#include "cuda/rope/rope.cuh"

namespace flashseek::cuda {

// Kernel variants (the attention catalogue, KernelPolicy names): attn_mma, tensor-core mma.sync m16n8k16 bf16 (16
// heads per CTA, sm_80+; needs head_dim % 64 == 0 and <= 512, q 16-byte aligned), preferred for decode passes of
// KernelPolicy::attn_mma_min_seqs (1) or more sequences (measured faster end to end: C=16 -0.33 ms per step,
// C=1 -0.03 to -0.045 ms, docs/perf.md); attn_simt, SIMT fp32 (the first, verified path), everywhere else. Forcing
// attn_mma wherever it fits serves A/B runs and sensitivity probes.

struct SparseAttentionParams {
    TokenBatch batch;
    int n_heads = 0, head_dim = 0;  // head_dim a multiple of 16, <= 1024
    int rope_dim = 0;               // qk_rope_head_dim (the KV entries' layout)
    float softmax_scale = 0.f;
    const __nv_bfloat16* q = nullptr;  // [n_tokens, n_heads, head_dim] (normed + roped), rows q_stride apart
    int64_t q_stride = 0;
    __nv_bfloat16* out = nullptr;      // [n_tokens, n_heads, head_dim], rows out_stride apart
    int64_t out_stride = 0;
    const float* sink = nullptr;       // [n_heads] attn_sink
    RopeTable rope;                    // output de-rotation (n_pairs = 0: none)
    int window = 0;
    RingView ring;
    int ratio = 0;                     // 0: window only
    PagedEntries comp;                 // compressed entries (KvFormat), when ratio > 0
    const int32_t* topk = nullptr;     // [n_tokens, topk_width] rows topk_stride apart, or nullptr (all visible)
    int64_t topk_stride = 0;
    int topk_width = 0;
    int max_candidates = 0;            // host bound on window + compressed candidates of any query in the step
    // The splits' merge lets the next kernel launch at its entry instead of after its wait (common/pdl.cuh
    // pdl_wait_and_trigger): set where the kernels after the attention are a small chain ending in a GEMV that
    // requests its weights before its wait.
    bool merge_launches_next_early = false;
    // The merge also writes its output prepared for the FP8 / FP4 linear that reads it (wo_a), as
    // prepare_activation(out, n_tokens, n_heads * head_dim, ld out_stride) would: values [round_up8(n_tokens)]
    // [n_heads * head_dim] at their permuted positions for prepared_layout (WeightKind), scales per 128-block, rows
    // past n_tokens zero blocks (gemm/prepare_block.cuh). Null: not. Only where the splits are merged
    // (sparse_attention_merges), with head_dim % 128 == 0, out 16-byte aligned and out_stride % 8 == 0.
    uint16_t* prepared_values = nullptr;
    float* prepared_scales = nullptr;
    int prepared_layout = 0;    // WeightKind: FP8_BLOCK128 or FP4_BLOCK32
    int prepared_numerics = 0;  // ActNumerics
};

// Workspace for any step of at most max_tokens query rows with at most max_candidates candidates each.
size_t sparse_attention_workspace_bytes(int max_tokens, int n_heads, int head_dim, int max_candidates);
// Whether sparse_attention(p, ..., policy) merges splits in a kernel of its own (the merge that can also prepare the
// output for the next linear: SparseAttentionParams::prepared_values).
bool sparse_attention_merges(const SparseAttentionParams& p, const KernelPolicy& policy = KernelPolicy{});
// Returns the name of the variant that ran.
std::string_view sparse_attention(const SparseAttentionParams& p, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream, const KernelPolicy& policy = KernelPolicy{});

}  // namespace flashseek::cuda
