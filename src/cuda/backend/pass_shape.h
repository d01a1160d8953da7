// The shape of one pass of the forward: what a CUDA graph is captured for (graph_runner.h) and what the forward
// sizes its launches by (forward.h). A step of the Backend interface runs as one or more passes.
#pragma once
#include <tuple>

namespace flashseek::cuda {

// Rows [0, n_rows) from n_seqs sequences, the head on n_head_rows rows.
struct PassShape {
    int n_rows = 0, n_seqs = 0, n_head_rows = 0, max_seq_tokens = 0;
    bool need_indexer = true;  // some sequence has more compressed entries than index_topk
    int max_entries = 1;       // power-of-two bound on visible ratio-4 entries (indexer grid and workspace)
    int max_context = 1;       // power-of-two bound on positions + 1 (attention grid)
    // A prefill pass (prompt pieces: SequenceStep::prefill or more than one token) runs the compute-bound kernels
    // (tensor-core GEMMs, grouped experts, the prefill attention and indexer) whatever its row count; a decode pass
    // the bandwidth-bound ones up to 16 rows and the compute-bound GEMMs from KernelPolicy's floors up. A pass is one
    // or the other, never both, so that a prompt token's kernels depend only on its being a prompt token: not on the
    // chunking, not on its batch-mates.
    bool prefill = false;
    bool operator<(const PassShape& o) const {
        return std::tie(n_rows, n_seqs, n_head_rows, max_seq_tokens, need_indexer, max_entries, max_context,
                        prefill) < std::tie(o.n_rows, o.n_seqs, o.n_head_rows, o.max_seq_tokens, o.need_indexer,
                                            o.max_entries, o.max_context, o.prefill);
    }
};

}  // namespace flashseek::cuda
