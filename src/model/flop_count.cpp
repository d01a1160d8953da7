// Counts the matrix-product FLOPs of the forward from the configuration (see flop_count.h for what is counted).
#include "model/flop_count.h"

#include <algorithm>

namespace flashseek {

namespace {

int layers_counted(const ModelConfig& cfg, int n_layers) {
    return n_layers <= 0 ? cfg.num_hidden_layers : std::min(n_layers, cfg.num_hidden_layers);
}

// Multiply-adds of one token through one layer's linears (independent of the position).
double layer_linear_macs(const ModelConfig& c, int ratio) {
    const double D = double(c.hidden_size), H = double(c.num_attention_heads), hd = double(c.head_dim);
    const double q = double(c.q_lora_rank), o = double(c.o_lora_rank), g = double(c.o_groups);
    double m = q * D + H * hd * q + hd * D + (g * o) * (H * hd / g) + D * (g * o);
    auto compressor = [&](double dim) { return 2.0 * double(ratio == 4 ? 2 : 1) * dim * D; };
    if (ratio > 0) m += compressor(hd);
    if (ratio == 4) {
        const double ih = double(c.index_n_heads), id = double(c.index_head_dim);
        m += ih * id * q + ih * D + compressor(id);
    }
    const double I = double(c.moe_intermediate_size);
    m += double(c.n_routed_experts) * D;                       // router
    m += 3.0 * D * I * double(c.n_shared_experts);             // shared expert
    m += 3.0 * D * I * double(c.num_experts_per_tok);          // routed experts
    const double hc = double(c.hc_mult);
    m += 2.0 * (hc * D) * ((2.0 + hc) * hc);                   // mHC mixing, attention and FFN sides
    return m;
}

// Multiply-adds of one token's attention at `position` in one layer.
double layer_attention_macs(const ModelConfig& c, int ratio, int64_t position) {
    const double seen = double(position + 1);
    double keys = std::min(seen, double(c.sliding_window));
    double indexer = 0;
    if (ratio == 4) {
        const double entries = double((position + 1) / 4);
        keys += std::min(entries, double(c.index_topk));
        indexer = double(c.index_n_heads) * double(c.index_head_dim) * entries;
    } else if (ratio > 0) {
        keys += double((position + 1) / ratio);
    }
    return 2.0 * double(c.num_attention_heads) * double(c.head_dim) * keys + indexer;
}

}  // namespace

ForwardFlops token_flops(const ModelConfig& cfg, int n_layers, int64_t position) {
    ForwardFlops f;
    for (int l = 0; l < layers_counted(cfg, n_layers); ++l) {
        const int ratio = cfg.ratio(l);
        f.linear += 2.0 * layer_linear_macs(cfg, ratio);
        f.attention += 2.0 * layer_attention_macs(cfg, ratio, position);
    }
    return f;
}

ForwardFlops prefill_flops_per_token(const ModelConfig& cfg, int n_layers, int64_t tokens) {
    ForwardFlops sum;
    if (tokens <= 0) return sum;
    const int L = layers_counted(cfg, n_layers);
    for (int l = 0; l < L; ++l) {
        const int ratio = cfg.ratio(l);
        sum.linear += 2.0 * layer_linear_macs(cfg, ratio) * double(tokens);
        for (int64_t p = 0; p < tokens; ++p) sum.attention += 2.0 * layer_attention_macs(cfg, ratio, p);
    }
    sum.head = 2.0 * double(cfg.hidden_size) * double(cfg.vocab_size);
    return {sum.linear / double(tokens), sum.attention / double(tokens), sum.head / double(tokens)};
}

}  // namespace flashseek
