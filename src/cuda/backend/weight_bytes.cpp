// The bytes each op reads (weight_bytes.h), from the bound tensor views' sizes.
#include "cuda/backend/weight_bytes.h"

namespace flashseek::cuda {

namespace {

double view_bytes(const TensorView& t) { return double(t.nbytes); }  // 0 for an empty view

double hc_bytes(const HyperConnection& hc) { return view_bytes(hc.fn) + view_bytes(hc.base) + view_bytes(hc.scale); }

double linear_bytes(const Linear& l) { return view_bytes(l.weight) + view_bytes(l.scale); }

}  // namespace

double LayerWeightBytes::dense(bool indexer_scores) const {
    double d = mhc_pre[0] + mhc_pre[1] + wq_a + wq_b + wkv + wo_a + wo_b + q_norm + kv_norm + attn_sink +
               compressor_gemm + compressor + index_compressor_gemm + index_compressor + router + route + shared_up +
               shared_down;
    if (indexer_scores) d += index_wq_b + index_weights_proj;
    return d;
}

LayerWeightBytes layer_weight_bytes(const LayerWeights& w) {
    LayerWeightBytes b;
    b.mhc_pre[0] = hc_bytes(w.hc_attn) + view_bytes(w.attn_norm);
    b.mhc_pre[1] = hc_bytes(w.hc_ffn) + view_bytes(w.ffn_norm);
    const AttentionWeights& a = w.attn;
    b.wq_a = linear_bytes(a.wq_a);
    b.wq_b = linear_bytes(a.wq_b);
    b.wkv = linear_bytes(a.wkv);
    b.wo_a = linear_bytes(a.wo_a);
    b.wo_b = linear_bytes(a.wo_b);
    b.q_norm = view_bytes(a.q_norm);
    b.kv_norm = view_bytes(a.kv_norm);
    b.attn_sink = view_bytes(a.attn_sink);
    auto compressor = [](const CompressorWeights& c, double& gemm, double& pool) {
        if (!c.present) return;
        gemm = view_bytes(c.wkv) + view_bytes(c.wgate);
        pool = view_bytes(c.ape) + view_bytes(c.norm);
    };
    compressor(a.compressor, b.compressor_gemm, b.compressor);
    if (a.indexer.present) {
        compressor(a.indexer.compressor, b.index_compressor_gemm, b.index_compressor);
        b.index_wq_b = linear_bytes(a.indexer.wq_b);
        b.index_weights_proj = view_bytes(a.indexer.weights_proj);
    }
    const MoeWeights& m = w.ffn;
    b.router = view_bytes(m.gate_weight);
    b.route = view_bytes(m.gate_bias);
    b.shared_up = linear_bytes(m.shared.w1) + linear_bytes(m.shared.w3);
    b.shared_down = linear_bytes(m.shared.w2);
    if (!m.experts.empty()) {  // the inventory gives every routed expert one shape, bind_expert_tables one format
        b.expert_up = linear_bytes(m.experts[0].w1) + linear_bytes(m.experts[0].w3);
        b.expert_down = linear_bytes(m.experts[0].w2);
    }
    return b;
}

HeadWeightBytes head_weight_bytes(const ModelWeights& w) {
    HeadWeightBytes b;
    b.head = view_bytes(w.head);
    b.hc_head = hc_bytes(w.hc_head) + view_bytes(w.norm);
    if (!w.embed.shape.empty() && w.embed.shape[0] > 0) b.embed_row = view_bytes(w.embed) / double(w.embed.shape[0]);
    return b;
}

}  // namespace flashseek::cuda
