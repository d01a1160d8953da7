// Bytes a profiled step moves, for the roofline that `flashseek bench` reports: every weight byte the step must
// read (dense weights of every layer, the routed experts the router actually chose - counted once per layer -,
// the head and the embedding rows) plus the per-sequence state it reads and writes (window ring entries, the
// compressed entries attention reads, indexer keys when scoring runs, compressor state). Metadata, activations
// and logits are left out: they are small against these and live mostly in L2.
#include <algorithm>

#include "cuda/backend/backend_impl.h"

namespace flashseek::cuda {

void CudaBackendImpl::init_byte_counts() {
    global_bytes_ = 0;
    for (auto& d : layers_) d.dense_bytes = d.expert_bytes = 0;
    for (const auto& [name, v] : store_.views) {
        if (name.rfind("layers.", 0) != 0) {
            if (name != "embed.weight") global_bytes_ += double(v.nbytes);  // embed: only the rows used
            continue;
        }
        const size_t dot = name.find('.', 7);
        const int l = std::stoi(name.substr(7, dot - 7));
        if (l >= int(layers_.size())) continue;
        LayerDev& d = layers_[size_t(l)];
        if (name.find(".ffn.experts.") != std::string::npos) {
            if (name.find(".ffn.experts.0.") != std::string::npos) d.expert_bytes += double(v.nbytes);
        } else if (name.find("tid2eid") != std::string::npos) {
            continue;  // a table lookup of k ids per token, not a full read
        } else {
            d.dense_bytes += double(v.nbytes);
        }
    }
}

void CudaBackendImpl::account_bytes(const PassShape& s) {
    double w = global_bytes_ + double(s.n_rows) * double(cfg_.hidden_size) * 2;  // + embedding rows
    for (const LayerDev& d : layers_) w += d.dense_bytes;
    // distinct_experts_ was summed over the layers by the MoE sub-blocks of this pass.
    double expert = layers_.empty() ? 0 : layers_.back().expert_bytes;
    w += double(distinct_experts_) * expert;
    double st = 0;
    const double kv = double(pool_->geometry().kv_entry_bytes);
    for (int i = 0; i < s.n_seqs; ++i) {
        const int64_t start = meta_.h(StepMeta::kSeqStartPos)[i];
        const int64_t end = start + meta_.h(StepMeta::kSeqNTokens)[i];
        for (size_t l = 0; l < layers_.size(); ++l) {
            const auto& g = pool_->geometry().layers[l];
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
    last_profile_.bytes_weights += w;
    last_profile_.bytes_state += st;
    last_profile_.distinct_experts += distinct_experts_;
    distinct_experts_ = 0;
}

}  // namespace flashseek::cuda
