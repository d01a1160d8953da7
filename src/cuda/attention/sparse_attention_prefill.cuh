// Sparse attention with sink for prefill passes (many query rows per sequence) on tensor cores: the same math,
// candidate rules and rounding points as sparse_attention (sparse_attention.cuh), with the KV dequantized once per
// step instead of once per query and head group.
//
// Two launches:
//  1. gather: every KV row any query of the step can read is dequantized to bf16 into the workspace, once: for
//     each sequence its window history (positions start-W+1 .. start-1) and its own new positions from the ring,
//     and its compressed entries 0 .. min(max_entries, (start+n)/ratio)-1 from the paged cache.
//  2. attention: CTA = (one query row, up to 64 heads = 4 row groups of 16); each row group is two warps, one per
//     half of head_dim. The query's candidate tiles (32 candidates, the decode kernel's rounding groups) are copied
//     from the gathered rows into shared memory with cp.async (a ring of 1-3 stage buffers on mbarriers: warps
//     meet only their row group's partner and the ring, no CTA barrier per tile; PrefillAttentionTuning::cta_release
//     releases the stages through one CTA barrier per tile instead), QK^T and PV run on mma.sync
//     m16n8k16 bf16 (sm_80+), the online softmax keeps P in registers, the output is normalized with the sink and
//     de-rotated as in the decode kernel. Queries of one tile with different top-k lists are no problem: each CTA
//     owns one query and reads its rows by index. A tile without a valid candidate (the -1 tail of a top-k list
//     shorter than topk_width) is skipped: it would leave every running value as it is. The grid takes the last
//     rows first (the longest candidate lists), so the short ones fill the tail.
//     V4's shape (head_dim 512, 64 heads) runs an instantiation with these sizes at compile time and three stage
//     buffers, in which row groups 2 and 3 run each tile's PV product one tile late (their warps share
//     the schedulers with groups 0 and 1); other shapes run the runtime-sized instantiation.
//
// Bit-identity (batch invariance): a query's output depends only on its own inputs (q row, window, compressed
// entries, top-k row): not on which other rows the pass holds, how the prompt was chunked, the CTA's head-group
// count or the pipeline depth. It is bit-identical to the tensor-core decode kernel (variant attn_mma) when that
// kernel runs one split: the same candidate order and 32-candidate tiles, the same mma chains per score (two
// head_dim halves of k16 steps from zero, summed half0 + half1) and per output element (acc * before, two k16 PV
// steps, * after), the same tile max / sum trees (the sum reproduces the warp butterfly 16-8-4-2-1) and the same
// epilogue (attn_tile.cuh holds the shared code). The skipped tiles, the row order, the launch shape and the
// instantiation change only the timing. It is not bit-identical to the decode kernel's split-KV path
// (the combine renormalizes partial sums: rare one-ulp differences) nor to the SIMT kernel (fp32 dot products in
// another order); both agree with it to bf16 rounding.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/attention/sparse_attention.cuh"

namespace flashseek::cuda {

// Launch shape of the attention kernel, for A/B runs; 0 = chosen from the head count and the device's shared
// memory (results do not depend on it).
struct PrefillAttentionTuning {
    int head_groups = 0;  // row groups of 16 heads per CTA, 1..4
    int stages = 0;       // cp.async pipeline depth, 1..3
    // With head_groups and stages 0, V4's shape (head_dim 512, 49+ heads) runs an instantiation with compile-time
    // sizes (4 head groups, 3 stage buffers, half the groups' PV products one tile late) where the device's shared
    // memory holds it. false: the runtime-sized kernel instead. Both give the same bits.
    bool allow_fixed_shape = true;
    // Stage refills after one CTA barrier per tile instead of the per-stage `empty` mbarriers: the form
    // compute-sanitizer's racecheck can follow (it does not follow mbarrier phases). The same bits; the backend
    // takes it where the policy forces "attn_prefill_cta_release".
    bool cta_release = false;
};

// Workspace of sparse_attention_prefill for a step of at most max_tokens rows in at most max_seqs sequences
// with window `window` and at most max_entries compressed entries per sequence (0 for window-only layers).
size_t sparse_attention_prefill_workspace_bytes(int max_tokens, int max_seqs, int window, int max_entries,
                                                int head_dim);

// p as for sparse_attention (p.kernel and p.max_candidates are not used). max_entries: host bound on the
// compressed entries of every sequence after the step, (start + n) / ratio; candidates at or beyond it are
// masked. Requirements: head_dim a multiple of 32 in [32, 512]; q 16-byte aligned with q_stride % 8 == 0; the
// ring holds window - 1 + max_seq_tokens entries; topk_width <= 8192. Graph-capturable, no allocation.
void sparse_attention_prefill(const SparseAttentionParams& p, int max_entries, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream, const PrefillAttentionTuning& tuning = {});
// Whether sparse_attention_prefill accepts p on the current device (the same checks, without throwing; the
// workspace is not part of it): for a catalogue choosing between this kernel and sparse_attention.
bool sparse_attention_prefill_supports(const SparseAttentionParams& p, int max_entries);

}  // namespace flashseek::cuda
