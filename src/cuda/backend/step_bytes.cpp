// Bytes a profiled step moves, for the roofline that `flashseek bench` reports: every weight byte the step must
// read (dense weights of every layer, the routed experts the router actually chose - counted once per layer -,
// the head and the embedding rows) plus the per-sequence state it reads and writes (window ring entries, the
// compressed entries attention reads, indexer keys when scoring runs, compressor state). Metadata, activations
// and logits are left out: they are small against these and live mostly in L2.
#include <algorithm>

#include "cuda/backend/forward.h"

namespace flashseek::cuda {

void ForwardPass::account_bytes(const PassShape& s, StepProfile& profile) {
    const auto& layers = shard_.layers();
    double w = shard_.global_bytes() + double(s.n_rows) * double(cfg_.hidden_size) * 2;  // + embedding rows
    for (const ShardLayer& d : layers) w += d.dense_bytes;
    // distinct_experts_ was summed over the layers by the MoE sub-blocks of this pass.
    double expert = layers.empty() ? 0 : layers.back().expert_bytes;
    w += double(distinct_experts_) * expert;
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
