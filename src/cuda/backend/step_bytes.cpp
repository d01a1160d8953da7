// Bytes a profiled step moves, for the roofline that `flashseek bench` reports: every weight byte the pass must
// read (weight_bytes.h: each layer's ops - the indexer's query projections only where it scores -, the routed
// experts the router actually chose - counted once per layer -, the head where the pass computes logits and the
// embedding rows) plus the per-sequence state it reads and writes (window ring entries, the compressed entries
// attention reads, indexer keys when scoring runs, compressor state). The profiler scopes of forward*.cpp attribute
// the same weight bytes op by op, so the per-op table sums to these totals. Metadata, activations and logits are
// left out: they are small against these and live mostly in L2.
#include <algorithm>

#include "cuda/backend/forward.h"

namespace flashseek::cuda {

void ForwardPass::account_bytes(const PassShape& s, StepProfile& profile) {
    const auto& layers = shard_.layers();
    const HeadWeightBytes& head = shard_.head_bytes();
    double w = double(s.n_rows) * head.embed_row;
    if (s.n_head_rows > 0) w += head.head + head.hc_head;
    for (const ShardLayer& d : layers) w += d.bytes.dense(s.need_indexer);
    // distinct_experts_ was summed over the layers by the MoE sub-blocks of this pass (every layer's experts have
    // the same size).
    w += layers.empty() ? 0 : double(distinct_experts_) * layers.back().bytes.expert();
    double st = 0;
    const double kv = double(pool_.geometry().kv_entry_bytes);
    for (int i = 0; i < s.n_seqs; ++i) {
        const int64_t start = buf_.meta.h(StepMeta::kSeqStartPos)[i];
        const int64_t end = start + buf_.meta.h(StepMeta::kSeqNTokens)[i];
        for (size_t l = 0; l < layers.size(); ++l) {
            const auto& g = pool_.geometry().layers[l];
            st += double(std::min<int64_t>(end, cfg_.sliding_window)) * kv;  // window read
            st += double(end - start) * kv;                                    // window write
            if (g.ratio == 0) continue;
            const int64_t n = end / g.ratio;
            if (g.ratio == 4) {
                st += double(std::min<int64_t>(n, cfg_.index_topk)) * kv;
                if (n > cfg_.index_topk) st += double(n) * double(g.index_key_bytes);
                st += 2.0 * double(g.index_compressor_state_bytes);
            } else {
                st += double(n) * kv;
            }
            st += 2.0 * double(g.compressor_state_bytes);
        }
    }
    profile.bytes_weights += w;
    profile.bytes_state += st;
    profile.distinct_experts += distinct_experts_;
    distinct_experts_ = 0;
}

}  // namespace flashseek::cuda
