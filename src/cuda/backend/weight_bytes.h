// The checkpoint bytes (weights and their scales, as stored on the device) each op of a pass reads: the one source
// of the byte counts of a profiled step, both of its totals (the roofline of `flashseek bench`, step_bytes.cpp) and
// of its per-op table (the profiler scopes of forward*.cpp attribute these same numbers). Counted from the bound
// tensor views of one shard, so a tensor-parallel slice counts the bytes of its slice. Host code only.
#pragma once
#include "model/weights.h"

namespace flashseek::cuda {

// One layer. Every field but the routed experts is read once per pass by the op named beside it; the routed
// experts are read once per pass for each distinct expert the pass routes to.
struct LayerWeightBytes {
    double mhc_pre[2] = {0, 0};  // sub-block 0 (attention) / 1 (MoE): hc fn + base + scale and the sub-block's RMSNorm
    double wq_a = 0, wq_b = 0, wkv = 0, wo_a = 0, wo_b = 0;  // the attention linears (weight + scale)
    double q_norm = 0;                                       // attn.q_norm
    double kv_norm = 0;                                      // attn.kv norm + rope + store
    double attn_sink = 0;                                    // the sparse attention
    double compressor_gemm = 0, compressor = 0;              // wkv + wgate; ape + norm (ratio 4 and 128 layers)
    double index_compressor_gemm = 0, index_compressor = 0;  // the same of the indexer's compressor (ratio 4)
    double index_wq_b = 0, index_weights_proj = 0;           // read only when the pass scores (PassShape::need_indexer)
    double router = 0;                                       // the gate weight
    double route = 0;                                        // the gate bias (a hash layer's tid2eid is a lookup: none)
    double shared_up = 0, shared_down = 0;                   // shared expert w1 + w3; w2 (0: the shard holds none)
    double expert_up = 0, expert_down = 0;                   // ONE routed expert: w1 + w3; w2

    // Every op of the layer but the routed experts; the indexer's query projections only when it scores.
    double dense(bool indexer_scores) const;
    double expert() const { return expert_up + expert_down; }
};

// Outside the layers: the head, its hyper-connection and the final norm (read whenever the pass computes logits)
// and one embedding row per token (the embedding is gathered, never read whole).
struct HeadWeightBytes {
    double head = 0;       // head gemm
    double hc_head = 0;    // hc_head + norm: hc fn + base + scale and the final RMSNorm
    double embed_row = 0;  // embedding, per token
};

// `layer` as bound for one shard: its routed experts are the shard's (the first one sizes them all).
LayerWeightBytes layer_weight_bytes(const LayerWeights& layer);
HeadWeightBytes head_weight_bytes(const ModelWeights& w);

}  // namespace flashseek::cuda
