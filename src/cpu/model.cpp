// Loading a checkpoint into the CPU reference model: bind_weights validates names, dtypes and shapes, then every
// linear layer is dequantized to fp32 once (so the forward's inner loops are plain fp32 products) and the small
// fp32/bf16 parameters are converted. Large per-vocabulary tensors (embedding, head) stay in the mapped file.
#include "cpu/model.h"

#include <cstring>

#include "cpu/ops.h"
#include "model/rope.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::cpu {

namespace {

DenseLinear dense(const Linear& lin) {
    DenseLinear d;
    d.format = lin.format;
    d.out = lin.out;
    d.in = lin.in;
    d.w = dequantize_linear(lin);
    return d;
}

// A plain float tensor used as a linear layer run in fp32 (compressor projections, router, indexer weights).
DenseLinear dense_plain(const TensorView& t, WeightFormat fmt) {
    FS_CHECK(t.shape.size() == 2, "tensor {}: expected 2 dimensions, got {}", t.name, t.shape_str());
    DenseLinear d;
    d.format = fmt;
    d.out = t.dim(0);
    d.in = t.dim(1);
    d.w = tensor_to_f32(t);
    return d;
}

std::vector<float> vec(const TensorView& t, int64_t expect_numel) {
    FS_CHECK(!t.empty(), "tensor '{}' is not bound", t.name);
    FS_CHECK(expect_numel < 0 || t.numel() == expect_numel, "tensor {}: {} elements, expected {}", t.name, t.numel(),
             expect_numel);
    return tensor_to_f32(t);
}

HcParams hc(const HyperConnection& h) {
    return {vec(h.fn, -1), vec(h.base, -1), vec(h.scale, -1)};
}

CompressorParams compressor(const CompressorWeights& w, int64_t D) {
    CompressorParams c;
    if (!w.present) return c;
    c.present = true;
    c.ratio = w.ratio;
    c.dim = w.dim;
    c.halves = w.ratio == 4 ? 2 : 1;
    c.wkv = dense_plain(w.wkv, WeightFormat::F32);
    c.wgate = dense_plain(w.wgate, WeightFormat::F32);
    FS_CHECK(c.wkv.out == int64_t(c.halves) * c.dim && c.wkv.in == D, "tensor {}: shape {} does not match ratio {}",
             w.wkv.name, w.wkv.shape_str(), w.ratio);
    c.ape = vec(w.ape, int64_t(w.ratio) * c.halves * c.dim);
    c.norm = vec(w.norm, c.dim);
    return c;
}

ExpertParams expert(const ExpertWeights& e) { return {dense(e.w1), dense(e.w2), dense(e.w3)}; }

}  // namespace

void apply_linear(const DenseLinear& lin, const float* x, int64_t rows, float* y, bool release, ThreadPool* pool) {
    if (release) {
        linear_release(x, rows, lin.w.data(), lin.format, lin.out, lin.in, y, pool);
    } else {
        linear_f32(x, rows, lin.w.data(), lin.out, lin.in, y, pool);
    }
}

std::unique_ptr<CpuModel> load_cpu_model(const std::string& model_dir, const CpuModelOptions& opt) {
    auto m = std::make_unique<CpuModel>();
    m->cfg = load_model_config(model_dir + "/config.json");
    m->ckpt = Checkpoint::open(model_dir);
    const ModelConfig& cfg = m->cfg;
    const ModelWeights w = bind_weights(cfg, *m->ckpt);
    m->release = opt.release;
    if (opt.release) check_release_numerics_supported(cfg, model_dir + "/config.json");
    FS_CHECK(opt.layers >= 0, "layers must be >= 0, got {}", opt.layers);
    m->n_layers = opt.layers > 0 ? std::min(opt.layers, cfg.num_hidden_layers) : cfg.num_hidden_layers;
    const int64_t D = cfg.hidden_size;

    m->embed = w.embed;
    m->head = w.head;
    FS_CHECK(m->embed.shape == std::vector<int64_t>({cfg.vocab_size, D}), "tensor {}: shape {}, expected [{}, {}]",
             m->embed.name, m->embed.shape_str(), cfg.vocab_size, D);
    FS_CHECK(m->head.shape == std::vector<int64_t>({cfg.vocab_size, D}), "tensor {}: shape {}, expected [{}, {}]",
             m->head.name, m->head.shape_str(), cfg.vocab_size, D);
    if (!(m->head.dtype == DType::BF16 && reinterpret_cast<uintptr_t>(m->head.data) % 2 == 0))
        m->head_f32 = tensor_to_f32(m->head);
    m->norm = vec(w.norm, D);
    m->hc_head = hc(w.hc_head);

    auto rope_plain = rope_inv_freq(cfg.qk_rope_head_dim, cfg.rope_theta, nullptr);
    auto rope_compress = rope_inv_freq(cfg.qk_rope_head_dim, cfg.compress_rope_theta, &cfg.rope_scaling);

    m->layers.resize(size_t(m->n_layers));
    auto load_layer = [&](int64_t l) {
        const LayerWeights& lw = w.layers[size_t(l)];
        LayerParams& p = m->layers[size_t(l)];
        p.ratio = cfg.ratio(int(l));
        p.attn_norm = vec(lw.attn_norm, D);
        p.ffn_norm = vec(lw.ffn_norm, D);
        p.hc_attn = hc(lw.hc_attn);
        p.hc_ffn = hc(lw.hc_ffn);
        const auto& a = lw.attn;
        p.wq_a = dense(a.wq_a);
        p.wq_b = dense(a.wq_b);
        p.wkv = dense(a.wkv);
        p.wo_a = dense(a.wo_a);
        // The reference dequantizes wo_a to bf16 and runs its grouped einsum in bf16 (exact for E8M0 scales).
        if (opt.release) round_bf16_inplace(p.wo_a.w.data(), int64_t(p.wo_a.w.size()));
        p.wo_b = dense(a.wo_b);
        p.q_norm = vec(a.q_norm, cfg.q_lora_rank);
        p.kv_norm = vec(a.kv_norm, cfg.head_dim);
        p.attn_sink = vec(a.attn_sink, cfg.num_attention_heads);
        p.compressor = compressor(a.compressor, D);
        FS_CHECK(p.compressor.present == (p.ratio > 0), "layer {}: compress_ratios says {} but the compressor is {}",
                 l, p.ratio, p.compressor.present ? "present" : "absent");
        p.has_indexer = a.indexer.present;
        if (p.has_indexer) {
            p.index_wq_b = dense(a.indexer.wq_b);
            p.index_weights_proj = dense_plain(a.indexer.weights_proj, WeightFormat::BF16);
            p.index_compressor = compressor(a.indexer.compressor, D);
        }
        const auto& f = lw.ffn;
        p.gate = dense_plain(f.gate_weight, WeightFormat::F32);
        if (!f.gate_bias.empty()) p.gate_bias = vec(f.gate_bias, cfg.n_routed_experts);
        if (cfg.is_hash_layer(int(l))) {
            const TensorView& t = f.tid2eid;
            FS_CHECK(!t.empty() && t.dtype == DType::I64 && t.numel() == cfg.vocab_size * cfg.num_experts_per_tok,
                     "tensor {}: expected I64 [{}, {}]", t.name, cfg.vocab_size, cfg.num_experts_per_tok);
            p.tid2eid.resize(size_t(t.numel()));
            for (int64_t i = 0; i < t.numel(); ++i) {
                int64_t v;
                std::memcpy(&v, t.data + 8 * i, 8);
                FS_CHECK(v >= 0 && v < cfg.n_routed_experts, "tensor {}: expert id {} at row {} out of range [0, {})",
                         t.name, v, i / cfg.num_experts_per_tok, cfg.n_routed_experts);
                p.tid2eid[size_t(i)] = int32_t(v);
            }
        }
        p.experts.reserve(f.experts.size());
        for (const auto& e : f.experts) p.experts.push_back(expert(e));
        p.shared = expert(f.shared);
        p.inv_freq = p.ratio > 0 ? rope_compress : rope_plain;
    };
    // Layers dequantize independently; the pool parallelizes across them.
    parallel_for(opt.pool, m->n_layers, [&](int64_t b, int64_t e) {
        for (int64_t l = b; l < e; ++l) load_layer(l);
    });
    return m;
}

}  // namespace flashseek::cpu
