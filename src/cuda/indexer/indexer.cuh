// The lightning indexer (docs/model.md §2.6) on the GPU: query preparation, scoring and top-k selection of the
// compressed entries each query attends to in a ratio-4 (CSA) layer. The indexer's keys come from its compressor
// (cuda/compressor), its q from the attention's q-latent through wq_b (a linear-layer GEMM).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/attention/kv_cache.cuh"
#include "cuda/rope/rope.cuh"

namespace flashseek::cuda {

// In place on q [n_tokens, n_heads, head_dim] bf16 (the wq_b output, token rows `stride` elements apart): RoPE on
// the last 2*rope.n_pairs dims at positions[token] -> bf16 -> Hadamard (Sylvester, 1/sqrt(head_dim)) -> bf16 ->
// FP4 e2m1 simulation, block 32, power-of-two scales -> bf16. head_dim in {32, 64, 128, 256}. quant_sim = false
// (the reference configuration, with BF16 keys stored without simulation): RoPE -> bf16 only.
void indexer_prepare_q(__nv_bfloat16* q, int64_t stride, int n_tokens, int n_heads, int head_dim,
                       const int32_t* positions, const RopeTable& rope, cudaStream_t stream, bool quant_sim = true);

struct IndexerSelectParams {
    TokenBatch batch;
    int n_heads = 0, head_dim = 0;
    int ratio = 4;
    int topk = 0;                        // index_topk
    const __nv_bfloat16* q = nullptr;    // [n_tokens, n_heads, head_dim] prepared by indexer_prepare_q
    int64_t q_stride = 0;                // elements between token rows
    const __nv_bfloat16* weights = nullptr;  // [n_tokens, n_heads] weights_proj(x) (bf16 GEMM output)
    int64_t weights_stride = 0;
    float weights_scale = 0.f;           // head_dim^-1/2 * n_heads^-1/2; w = weights * weights_scale in fp32
    PagedEntries keys;                   // the indexer compressor's entries (IndexFormat)
    int max_entries = 0;                 // must be >= (pos+1)/ratio for every token of the step (workspace rows, grid)
    int32_t* selected = nullptr;         // [n_tokens, topk] output
    // The decode scorer's and the top-k's form (KernelPolicy::indexer_select_form): 0 the first one, 1 with the
    // staging and the radix passes shortened and the scoring spread over tiles sized to fill the GPU (indexer.cu:
    // stage_q_by_head, stage_keys_by_block, scores_tile_kernel, radix_bin_from_top, the cached row). The same
    // scores and selections bit for bit.
    int form = 0;
    // Form 1's entries per scoring CTA: 16, 32 or 64; 0 = indexer_score_tile's choice. The scores are the same bits
    // for every tile (tests pin each one).
    int score_tile = 0;
};

// Form 1's scoring tile: the largest of 64, 32, 16 entries whose grid (tokens x tiles) still covers sm_count CTAs,
// else 16. At one token and an 8k context (~2,080 entries) that is 16: 130 CTAs instead of 33 of 64.
int indexer_score_tile(int n_tokens, int max_entries, int sm_count);

// Per query token at position p with n = (p+1)/ratio visible entries: when n <= topk, selected = 0..n-1 (no
// scoring: every valid entry is attended); otherwise score(j) = sum_h w_h * ReLU(q_h . K_j) over j < n (fp32) and
// selected = the topk best in ascending index order (ties to the lower index). Unused slots are -1.
size_t indexer_select_workspace_bytes(int n_tokens, int max_entries);
// The checks every selection entry runs first: throws Error naming index_topk, ratio or the output when invalid;
// false when the step has no rows (nothing to do).
bool indexer_check_select(const IndexerSelectParams& p);
void indexer_select(const IndexerSelectParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// The selection step alone, for rows t in [row_begin, row_begin + n_rows) of p.batch whose scores were computed
// elsewhere: row t's score of entry j < n_vis(t) at scores[(t - row_begin) * row_stride + j]. Same rules as above
// (n_vis <= topk: 0..n_vis-1 without reading scores); writes p.selected rows [row_begin, row_begin + n_rows).
void indexer_topk_rows(const IndexerSelectParams& p, const float* scores, int row_begin, int n_rows,
                       int64_t row_stride, cudaStream_t stream);

}  // namespace flashseek::cuda
