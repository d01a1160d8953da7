// ShardWeights (shard.h): binds a device tensor store as one shard's layers, builds the expert pointer tables (with
// the grouped expert GEMMs' row references and weight maps) and keeps the bytes each op reads (weight_bytes.h).
#include "cuda/backend/shard.h"

#include <string>

#include "cuda/moe/moe_gemm.cuh"
#include "util/error.h"

namespace flashseek::cuda {

namespace {

const bf16* bf16_ptr(const TensorView& t) { return reinterpret_cast<const bf16*>(t.data); }
const float* f32_ptr(const TensorView& t) { return reinterpret_cast<const float*>(t.data); }

DeviceLinear bf16_linear(const TensorView& w) {
    Linear l;
    l.format = WeightFormat::BF16;
    l.out = w.shape.at(0);
    l.in = w.shape.at(1);
    l.weight = w;
    return to_device_linear(l);
}

CompressorLinears compressor_linears(const CompressorWeights& c) {
    CompressorLinears out;
    if (!c.present) return out;
    out.present = true;
    out.ratio = c.ratio;
    out.dim = c.dim;
    out.wkv = bf16_linear(c.wkv);
    out.wgate = bf16_linear(c.wgate);
    out.ape = f32_ptr(c.ape);
    out.norm = bf16_ptr(c.norm);
    return out;
}

ShardLayer bind_layer(const ModelConfig& cfg, int l, const LayerWeights& w) {
    ShardLayer d;
    d.ratio = w.ratio;
    d.hash = cfg.is_hash_layer(l);
    d.rope = make_rope_table(cfg, w.ratio);
    d.attn_norm = bf16_ptr(w.attn_norm);
    d.ffn_norm = bf16_ptr(w.ffn_norm);
    d.hc_attn_fn = f32_ptr(w.hc_attn.fn);
    d.hc_attn_base = f32_ptr(w.hc_attn.base);
    d.hc_attn_scale = f32_ptr(w.hc_attn.scale);
    d.hc_ffn_fn = f32_ptr(w.hc_ffn.fn);
    d.hc_ffn_base = f32_ptr(w.hc_ffn.base);
    d.hc_ffn_scale = f32_ptr(w.hc_ffn.scale);
    d.wq_a = to_device_linear(w.attn.wq_a);
    d.wq_b = to_device_linear(w.attn.wq_b);
    d.wkv = to_device_linear(w.attn.wkv);
    d.wo_a = to_device_linear(w.attn.wo_a);
    d.wo_b = to_device_linear(w.attn.wo_b);
    d.q_norm = bf16_ptr(w.attn.q_norm);
    d.kv_norm = bf16_ptr(w.attn.kv_norm);
    d.attn_sink = f32_ptr(w.attn.attn_sink);
    d.compressor = compressor_linears(w.attn.compressor);
    if (w.attn.indexer.present) {
        d.index_compressor = compressor_linears(w.attn.indexer.compressor);
        d.index_wq_b = to_device_linear(w.attn.indexer.wq_b);
        d.index_weights_proj = bf16_linear(w.attn.indexer.weights_proj);
    }
    d.gate = bf16_linear(w.ffn.gate_weight);
    d.gate_bias = w.ffn.gate_bias.empty() ? nullptr : f32_ptr(w.ffn.gate_bias);
    d.tid2eid = w.ffn.tid2eid.empty() ? nullptr : reinterpret_cast<const int64_t*>(w.ffn.tid2eid.data);
    for (const ExpertWeights& e : w.ffn.experts) {
        d.w1.push_back(to_device_linear(e.w1));
        d.w2.push_back(to_device_linear(e.w2));
        d.w3.push_back(to_device_linear(e.w3));
    }
    if (!w.ffn.shared.w1.weight.empty()) {
        d.shared_w1 = to_device_linear(w.ffn.shared.w1);
        d.shared_w2 = to_device_linear(w.ffn.shared.w2);
        d.shared_w3 = to_device_linear(w.ffn.shared.w3);
    }
    d.bytes = layer_weight_bytes(w);
    return d;
}

}  // namespace

ShardSpec ShardSpec::whole(const ModelConfig& cfg) {
    ShardSpec s;
    s.head_end = cfg.num_attention_heads;
    s.group_end = cfg.o_groups;
    s.expert_end = cfg.n_routed_experts;
    s.inter_end = cfg.moe_intermediate_size;
    s.shared_inter_end = int64_t(cfg.moe_intermediate_size) * cfg.n_shared_experts;
    s.vocab_end = cfg.vocab_size;
    return s;
}

ShardSpec ShardSpec::of(const RankSlice& r) {
    ShardSpec s;
    s.rank = r.rank;
    s.ranks = r.layout.ranks();
    s.tp = r.layout.tp;
    s.ep = r.layout.ep;
    s.tp_rank = r.tp_rank;
    s.ep_rank = r.ep_rank;
    s.head_begin = r.head_begin;
    s.head_end = r.head_end;
    s.group_begin = r.group_begin;
    s.group_end = r.group_end;
    s.expert_begin = r.expert_begin;
    s.expert_end = r.expert_end;
    s.inter_begin = r.inter_begin;
    s.inter_end = r.inter_end;
    s.shared_inter_begin = r.shared_inter_begin;
    s.shared_inter_end = r.shared_inter_end;
    s.vocab_begin = r.vocab_begin;
    s.vocab_end = r.vocab_end;
    return s;
}

bool ShardSpec::holds_whole_model(const ModelConfig& cfg) const {
    const ShardSpec w = whole(cfg);
    return ranks == 1 && head_begin == 0 && head_end == w.head_end && group_begin == 0 && group_end == w.group_end &&
           expert_begin == 0 && expert_end == w.expert_end && inter_begin == 0 && inter_end == w.inter_end &&
           shared_inter_begin == 0 && shared_inter_end == w.shared_inter_end && vocab_begin == 0 && vocab_end == w.vocab_end;
}

DeviceLinear to_device_linear(const Linear& l) {
    DeviceLinear d;
    d.out = l.out;
    d.in = l.in;
    d.weight = l.weight.data;
    switch (l.format) {
        case WeightFormat::BF16: d.kind = WeightKind::BF16; break;
        case WeightFormat::FP8_BLOCK128: d.kind = WeightKind::FP8_BLOCK128; break;
        case WeightFormat::FP4_BLOCK32: d.kind = WeightKind::FP4_BLOCK32; break;
        case WeightFormat::F32: fail("CUDA backend: F32 weight {} is not supported by the GPU linear", l.weight.name);
    }
    if (d.kind != WeightKind::BF16) {
        d.scale = l.scale.data;
        d.scale_kind = l.scale.dtype == DType::F32 ? ScaleKind::F32 : ScaleKind::E8M0;
    }
    return d;
}

ShardWeights::ShardWeights(const ModelConfig& cfg, const ShardSpec& spec, DeviceTensorStore store)
    : spec_(spec), store_(std::move(store)) {
    const int L = cfg.num_hidden_layers;
    FS_CHECK(spec_.experts() >= 1, "CUDA backend: shard {} of {} holds no routed expert", spec_.rank, spec_.ranks);
    weights_ = bind_device_weights(cfg, store_, L, spec_.expert_begin, spec_.expert_end, spec_.has_shared());
    embed_ = bf16_ptr(weights_.embed);
    final_norm_ = bf16_ptr(weights_.norm);
    FS_CHECK(weights_.head.dtype == DType::BF16, "CUDA backend: head.weight must be BF16, got {}",
             dtype_name(weights_.head.dtype));
    head_ = bf16_linear(weights_.head);
    hc_head_fn_ = f32_ptr(weights_.hc_head.fn);
    hc_head_base_ = f32_ptr(weights_.hc_head.base);
    hc_head_scale_ = f32_ptr(weights_.hc_head.scale);
    layers_.reserve(size_t(L));
    for (int l = 0; l < L; ++l) layers_.push_back(bind_layer(cfg, l, weights_.layers[size_t(l)]));
    bind_expert_tables(cfg);
    head_bytes_ = head_weight_bytes(weights_);
}

// Per layer 6 device arrays of E pointers (routed w1, w1 scale, w3, w3 scale, w2, w2 scale; E = the shard's experts)
// and 6 of one (shared; null pointers where the shard has no part of it).
void ShardWeights::bind_expert_tables(const ModelConfig& cfg) {
    const int L = cfg.num_hidden_layers, E = spec_.experts();
    const size_t per_layer = size_t(6 * E + 6);
    std::vector<const void*> host(size_t(L) * per_layer);
    for (int l = 0; l < L; ++l) {
        const ShardLayer& d = layers_[size_t(l)];
        const void** base = host.data() + size_t(l) * per_layer;
        for (int e = 0; e < E; ++e) {
            base[0 * E + e] = d.w1[size_t(e)].weight;
            base[1 * E + e] = d.w1[size_t(e)].scale;
            base[2 * E + e] = d.w3[size_t(e)].weight;
            base[3 * E + e] = d.w3[size_t(e)].scale;
            base[4 * E + e] = d.w2[size_t(e)].weight;
            base[5 * E + e] = d.w2[size_t(e)].scale;
            const DeviceLinear& w = d.w1[size_t(e)];
            FS_CHECK(w.kind == d.w1[0].kind && d.w2[size_t(e)].kind == w.kind && d.w3[size_t(e)].kind == w.kind,
                     "CUDA backend: layer {} expert {} mixes weight formats", l, e);
        }
        const void** sb = base + 6 * E;
        sb[0] = d.shared_w1.weight;
        sb[1] = d.shared_w1.scale;
        sb[2] = d.shared_w3.weight;
        sb[3] = d.shared_w3.scale;
        sb[4] = d.shared_w2.weight;
        sb[5] = d.shared_w2.scale;
    }
    expert_ptrs_.allocate(host.size() * sizeof(void*), "expert pointer tables");
    CUDA_CHECK(cudaMemcpy(expert_ptrs_.get(), host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice));
    const void* const* dev = expert_ptrs_.as<const void*>();
    auto table = [](const void* const* b, int n, const DeviceLinear& w1) {
        ExpertTable t;
        t.kind = w1.kind;
        t.scale_kind = w1.scale_kind;
        t.hidden = w1.in;
        t.inter = w1.out;
        t.w1 = b + 0 * n;
        t.w1_scale = b + 1 * n;
        t.w3 = b + 2 * n;
        t.w3_scale = b + 3 * n;
        t.w2 = b + 4 * n;
        t.w2_scale = b + 5 * n;
        t.scales_aligned16 = true;  // device_weights places every tensor on a 256-byte boundary
        return t;
    };
    for (int l = 0; l < L; ++l) {
        ShardLayer& d = layers_[size_t(l)];
        const void* const* base = dev + size_t(l) * per_layer;
        d.routed = table(base, E, d.w1[0]);
        if (spec_.has_shared()) d.shared = table(base + 6 * E, 1, d.shared_w1);
    }
    // What the grouped expert GEMMs need beside the tables (row references and weight maps, moe_gemm.cuh) for FP4
    // routed experts on the 128 grid, from the weights just bound (checkpoint or dummy weights alike).
    auto grouped = [](const ExpertTable& t) {
        return t.kind == WeightKind::FP4_BLOCK32 && t.scale_kind == ScaleKind::E8M0 && t.hidden % 128 == 0 &&
               t.inter % 128 == 0;
    };
    size_t total = 0;
    for (int l = 0; l < L; ++l)
        if (grouped(layers_[size_t(l)].routed)) total += moe_grouped_extras_bytes(layers_[size_t(l)].routed, E);
    if (total == 0) return;
    expert_extras_.allocate(total, "grouped expert GEMM row references and weight maps");
    unsigned char* out = expert_extras_.as<unsigned char>();
    for (int l = 0; l < L; ++l) {
        ExpertTable& t = layers_[size_t(l)].routed;
        if (!grouped(t)) continue;
        moe_attach_grouped_extras(t, E, out);
        out += moe_grouped_extras_bytes(t, E);
    }
}

}  // namespace flashseek::cuda
