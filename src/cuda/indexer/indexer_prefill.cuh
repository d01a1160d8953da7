// The lightning indexer's selection (docs/model.md §2.6) for many query rows on tensor cores: the scores
// sum_h w_h ReLU(q_h . K_j) of every row against every visible key of its sequence with mma.sync bf16 (q is
// FP4-simulated and the keys are FP4 e2m1 with power-of-two scales or bf16, so both operands are exact in bf16
// and every product is exact; the sums are fp32), then the top-k per row with indexer_topk_rows (indexer.cuh).
// Same parameters and selection semantics as indexer_select: n_vis = (pos+1)/ratio visible entries, all of them
// when n_vis <= topk, else the topk best in ascending index order, ties to the lower index, -1 padding.
//
// Sized for long prompts: the [rows x max_entries] fp32 score matrix is never materialized whole; rows are scored
// and selected in chunks that fit the workspace given (32k rows x 8k entries would be 1 GiB; the default budget is
// 256 MiB), so the workspace does not grow with the prompt.
//
// A row's scores do not depend on the other rows of the pass, the chunking or the launch shape (each is the same
// chain of mma over head_dim and the same head-sum order), so the selection is batch-invariant. The scores differ
// from indexer_select's SIMT scores by fp32 summation order (near-ties at the k-th score may select differently):
// use one of the two for every pass of a sequence.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/indexer/indexer.cuh"

namespace flashseek::cuda {

// Workspace for steps of at most max_tokens rows and max_entries entries, using at most max_bytes for the scores
// (at least one row's worth).
size_t indexer_select_prefill_workspace_bytes(int max_tokens, int max_entries, size_t max_bytes = size_t(256) << 20);

// Requirements: head_dim 64 or 128, n_heads <= 128. Any number of rows per sequence (decode batches included).
// Rows are processed in chunks of workspace_bytes / (4 * max_entries). Graph-capturable, no allocation.
void indexer_select_prefill(const IndexerSelectParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
// Whether indexer_select_prefill accepts p on the current device (the same checks, without throwing; the workspace
// is not part of it).
bool indexer_select_prefill_supports(const IndexerSelectParams& p);

}  // namespace flashseek::cuda
