// The tensor inventory of a DeepSeek-V4 checkpoint and its binding to ModelWeights. One walk over the model's
// structure (walk_model) serves both: with an InventorySink it lists the expected tensors in the official layout,
// with a BindSink it looks each one up in a Checkpoint, detects the stored format of every linear layer from its
// dtype, and collects every problem (missing, unexpected, wrong dtype or shape, bad scale values) into one Error.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "model/weights.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Receives every tensor of the model as the walk meets it.
class Sink {
public:
    virtual ~Sink() = default;
    virtual TensorView plain(const std::string& name, DType dtype, std::vector<int64_t> shape) = 0;
    // A linear layer `prefix.weight` (+ `prefix.scale`) with logical shape [out, in]; experts may be FP4.
    virtual Linear linear(const std::string& prefix, int64_t out, int64_t in, bool routed_expert) = 0;
};

HyperConnection walk_hc(Sink& s, const std::string& p, const ModelConfig& c, int64_t mix, int64_t n_scale) {
    const int64_t nd = int64_t(c.hc_mult) * c.hidden_size;
    HyperConnection hc;
    hc.fn = s.plain(p + "fn", DType::F32, {mix, nd});
    hc.base = s.plain(p + "base", DType::F32, {mix});
    hc.scale = s.plain(p + "scale", DType::F32, {n_scale});
    return hc;
}

CompressorWeights walk_compressor(Sink& s, const std::string& p, const ModelConfig& c, int ratio, int dim) {
    CompressorWeights cw;
    cw.present = true;
    cw.ratio = ratio;
    cw.dim = dim;
    const int64_t width = int64_t(ratio == 4 ? 2 : 1) * dim;  // ratio 4 overlaps two halves (spec §2.5)
    cw.wkv = s.plain(p + "wkv.weight", DType::BF16, {width, c.hidden_size});
    cw.wgate = s.plain(p + "wgate.weight", DType::BF16, {width, c.hidden_size});
    cw.ape = s.plain(p + "ape", DType::F32, {ratio, width});
    cw.norm = s.plain(p + "norm.weight", DType::BF16, {dim});
    return cw;
}

// One block (`layers.{L}.` or `mtp.{i}.`); hash layers route by tid2eid and have no gate bias.
LayerWeights walk_layer(Sink& s, const std::string& p, const ModelConfig& c, int ratio, bool hash) {
    const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim;
    const int64_t mix = int64_t(2 + c.hc_mult) * c.hc_mult;
    LayerWeights L;
    L.ratio = ratio;
    L.attn_norm = s.plain(p + "attn_norm.weight", DType::BF16, {D});
    L.ffn_norm = s.plain(p + "ffn_norm.weight", DType::BF16, {D});
    L.hc_attn = walk_hc(s, p + "hc_attn_", c, mix, 3);
    L.hc_ffn = walk_hc(s, p + "hc_ffn_", c, mix, 3);

    const std::string a = p + "attn.";
    AttentionWeights& at = L.attn;
    at.attn_sink = s.plain(a + "attn_sink", DType::F32, {H});
    at.q_norm = s.plain(a + "q_norm.weight", DType::BF16, {c.q_lora_rank});
    at.kv_norm = s.plain(a + "kv_norm.weight", DType::BF16, {hd});
    at.wq_a = s.linear(a + "wq_a", c.q_lora_rank, D, false);
    at.wq_b = s.linear(a + "wq_b", H * hd, c.q_lora_rank, false);
    at.wkv = s.linear(a + "wkv", hd, D, false);
    at.wo_a = s.linear(a + "wo_a", int64_t(c.o_groups) * c.o_lora_rank, H * hd / c.o_groups, false);
    at.wo_b = s.linear(a + "wo_b", D, int64_t(c.o_groups) * c.o_lora_rank, false);
    if (ratio > 0) at.compressor = walk_compressor(s, a + "compressor.", c, ratio, c.head_dim);
    if (ratio == 4) {
        IndexerWeights& ix = at.indexer;
        ix.present = true;
        ix.wq_b = s.linear(a + "indexer.wq_b", int64_t(c.index_n_heads) * c.index_head_dim, c.q_lora_rank, false);
        ix.weights_proj = s.plain(a + "indexer.weights_proj.weight", DType::BF16, {c.index_n_heads, D});
        ix.compressor = walk_compressor(s, a + "indexer.compressor.", c, ratio, c.index_head_dim);
    }

    const std::string f = p + "ffn.";
    MoeWeights& moe = L.ffn;
    moe.gate_weight = s.plain(f + "gate.weight", DType::BF16, {c.n_routed_experts, D});
    if (hash) moe.tid2eid = s.plain(f + "gate.tid2eid", DType::I64, {c.vocab_size, c.num_experts_per_tok});
    else moe.gate_bias = s.plain(f + "gate.bias", DType::F32, {c.n_routed_experts});
    const int64_t I = c.moe_intermediate_size;
    moe.experts.resize(size_t(c.n_routed_experts));
    for (int e = 0; e < c.n_routed_experts; ++e) {
        const std::string ep = f + "experts." + std::to_string(e) + ".";
        moe.experts[size_t(e)].w1 = s.linear(ep + "w1", I, D, true);
        moe.experts[size_t(e)].w2 = s.linear(ep + "w2", D, I, true);
        moe.experts[size_t(e)].w3 = s.linear(ep + "w3", I, D, true);
    }
    const int64_t Is = I * c.n_shared_experts;
    moe.shared.w1 = s.linear(f + "shared_experts.w1", Is, D, false);
    moe.shared.w2 = s.linear(f + "shared_experts.w2", D, Is, false);
    moe.shared.w3 = s.linear(f + "shared_experts.w3", Is, D, false);
    return L;
}

ModelWeights walk_model(Sink& s, const ModelConfig& c, bool include_mtp) {
    const int64_t D = c.hidden_size;
    ModelWeights w;
    w.embed = s.plain("embed.weight", DType::BF16, {c.vocab_size, D});
    w.head = c.tie_word_embeddings ? w.embed : s.plain("head.weight", DType::BF16, {c.vocab_size, D});
    w.norm = s.plain("norm.weight", DType::BF16, {D});
    w.hc_head = walk_hc(s, "hc_head_", c, c.hc_mult, 1);
    for (int l = 0; l < c.num_hidden_layers; ++l)
        w.layers.push_back(walk_layer(s, "layers." + std::to_string(l) + ".", c, c.ratio(l), c.is_hash_layer(l)));
    if (include_mtp) {
        for (int i = 0; i < c.num_nextn_predict_layers; ++i) {
            const std::string p = "mtp." + std::to_string(i) + ".";
            MtpWeights m;
            m.layer = walk_layer(s, p, c, c.mtp_ratio(i), false);
            m.e_proj = s.linear(p + "e_proj", D, D, false);
            m.h_proj = s.linear(p + "h_proj", D, D, false);
            m.enorm = s.plain(p + "enorm.weight", DType::BF16, {D});
            m.hnorm = s.plain(p + "hnorm.weight", DType::BF16, {D});
            m.norm = s.plain(p + "norm.weight", DType::BF16, {D});
            m.hc_head = walk_hc(s, p + "hc_head_", c, c.hc_mult, 1);
            w.mtp.push_back(std::move(m));
        }
    }
    return w;
}

// The official layout: FP8 block-128 linears, routed experts FP4 or FP8 per expert_dtype; plain BF16 when the
// config has no quantization_config.
class InventorySink : public Sink {
public:
    InventorySink(const ModelConfig& c, const InventoryOptions& o, std::vector<TensorSpec>& out)
        : cfg_(c), opt_(o), out_(out) {}
    TensorView plain(const std::string& name, DType dtype, std::vector<int64_t> shape) override {
        out_.push_back({name, dtype, std::move(shape)});
        return {};
    }
    Linear linear(const std::string& prefix, int64_t out, int64_t in, bool routed_expert) override {
        Linear l;
        l.out = out;
        l.in = in;
        l.format = !cfg_.quantized() ? WeightFormat::BF16
                   : (routed_expert && cfg_.expert_dtype == ExpertDtype::FP4) ? WeightFormat::FP4_BLOCK32
                                                                              : WeightFormat::FP8_BLOCK128;
        const DType wdt = l.format == WeightFormat::BF16          ? DType::BF16
                          : l.format == WeightFormat::FP4_BLOCK32 ? DType::I8
                                                                  : DType::F8_E4M3;
        out_.push_back({prefix + ".weight", wdt, linear_weight_shape(l.format, out, in)});
        if (l.format != WeightFormat::BF16)
            out_.push_back({prefix + ".scale", opt_.f32_block_scales ? DType::F32 : DType::F8_E8M0,
                            linear_scale_shape(l.format, out, in)});
        return l;
    }

private:
    const ModelConfig& cfg_;
    const InventoryOptions& opt_;
    std::vector<TensorSpec>& out_;
};

class BindSink : public Sink {
public:
    BindSink(const ModelConfig& c, const Checkpoint& ck) : cfg_(c), ck_(ck) {}

    TensorView plain(const std::string& name, DType dtype, std::vector<int64_t> shape) override {
        const TensorView* t = ck_.find(name);
        if (!t) {
            problem("missing tensor '{}' ({} {})", name, dtype_name(dtype), shape_to_string(shape));
            return {};
        }
        used_.insert(name);
        bool ok = true;
        if (t->dtype != dtype) {
            problem("tensor '{}': dtype {}, expected {}", name, dtype_name(t->dtype), dtype_name(dtype));
            ok = false;
        }
        if (t->shape != shape) {
            problem("tensor '{}': shape {}, expected {}", name, t->shape_str(), shape_to_string(shape));
            ok = false;
        }
        return ok ? *t : TensorView{};
    }

    Linear linear(const std::string& prefix, int64_t out, int64_t in, bool routed_expert) override {
        Linear l;
        l.out = out;
        l.in = in;
        const std::string wname = prefix + ".weight", sname = prefix + ".scale";
        const TensorView* w = ck_.find(wname);
        if (!w) {
            problem("missing tensor '{}' (linear [{}, {}])", wname, out, in);
            if (ck_.find(sname)) used_.insert(sname);  // reported once, as the missing weight
            return l;
        }
        used_.insert(wname);
        switch (w->dtype) {
            case DType::F8_E4M3: l.format = WeightFormat::FP8_BLOCK128; break;
            case DType::I8: l.format = WeightFormat::FP4_BLOCK32; break;
            case DType::BF16: l.format = WeightFormat::BF16; break;
            case DType::F32: l.format = WeightFormat::F32; break;
            default:
                problem("tensor '{}': dtype {} is not a weight format (F8_E4M3, I8 = packed FP4, BF16 or F32)",
                        wname, dtype_name(w->dtype));
                if (ck_.find(sname)) used_.insert(sname);
                return l;
        }
        bool ok = true;
        if (l.format == WeightFormat::FP4_BLOCK32 && !routed_expert) {
            problem("tensor '{}': dtype I8 (packed FP4) is only used for routed experts", wname);
            ok = false;
        }
        if (routed_expert && cfg_.expert_dtype_explicit && cfg_.quantized()) {
            const bool want_fp4 = cfg_.expert_dtype == ExpertDtype::FP4;
            if ((l.format == WeightFormat::FP4_BLOCK32) != want_fp4) {
                problem("tensor '{}': dtype {}, but config.json expert_dtype = \"{}\" expects {}", wname,
                        dtype_name(w->dtype), want_fp4 ? "fp4" : "fp8", want_fp4 ? "I8" : "F8_E4M3");
                ok = false;
            }
        }
        const auto want_shape = linear_weight_shape(l.format, out, in);
        if (w->shape != want_shape) {
            problem("tensor '{}': shape {}, expected {} ({} [{}, {}])", wname, w->shape_str(),
                    shape_to_string(want_shape), weight_format_name(l.format), out, in);
            ok = false;
        }
        const bool scaled = l.format == WeightFormat::FP8_BLOCK128 || l.format == WeightFormat::FP4_BLOCK32;
        if (scaled) {
            const TensorView* s = ck_.find(sname);
            const auto want_scale = linear_scale_shape(l.format, out, in);
            if (!s) {
                problem("missing tensor '{}' (F8_E8M0 or F32 {}, the block scales of {} weight '{}')", sname,
                        shape_to_string(want_scale), dtype_name(w->dtype), wname);
                ok = false;
            } else {
                used_.insert(sname);
                if (s->dtype != DType::F8_E8M0 && s->dtype != DType::F32) {
                    problem("tensor '{}': dtype {}, expected F8_E8M0 or F32", sname, dtype_name(s->dtype));
                    ok = false;
                } else if (s->shape != want_scale) {
                    problem("tensor '{}': shape {}, expected {}", sname, s->shape_str(), shape_to_string(want_scale));
                    ok = false;
                } else {
                    l.scale = *s;
                }
            }
        }
        if (ok) l.weight = *w;
        else l.scale = {};
        return l;
    }

    template <typename... Args>
    void problem(fmt::format_string<Args...> f, Args&&... args) {
        problems_.push_back(fmt::format(f, std::forward<Args>(args)...));
    }
    const std::set<std::string>& used() const { return used_; }
    std::vector<std::string>& problems() { return problems_; }

private:
    const ModelConfig& cfg_;
    const Checkpoint& ck_;
    std::set<std::string> used_;
    std::vector<std::string> problems_;
};

void check_scale_values(const Linear& l, std::vector<std::string>& problems) {
    if (l.scale.empty()) return;
    const TensorView& s = l.scale;
    const int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
    if (s.dtype == DType::F8_E8M0) {
        const void* hit = std::memchr(s.data, 255, s.nbytes);
        if (hit) {
            const int64_t i = static_cast<const uint8_t*>(hit) - s.data;
            problems.push_back(fmt::format("tensor '{}': E8M0 byte 255 (NaN) at [{}, {}]", s.name, i / cols, i % cols));
        }
    } else if (s.dtype == DType::F32) {
        for (int64_t i = 0; i < int64_t(s.nbytes / 4); ++i) {
            float v;
            std::memcpy(&v, s.data + 4 * i, 4);
            if (!(v > 0.f) || !std::isfinite(v)) {
                problems.push_back(fmt::format("tensor '{}': scale {} at [{}, {}] is not a positive finite number",
                                               s.name, v, i / cols, i % cols));
                break;
            }
        }
    }
}

void check_tid2eid(const TensorView& t, int n_experts, std::vector<std::string>& problems) {
    if (t.empty()) return;
    const int64_t rows = t.dim(0), k = t.dim(1);
    std::vector<int64_t> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(row.data(), t.data + size_t(r * k) * 8, size_t(k) * 8);
        for (int64_t j = 0; j < k; ++j) {
            if (row[size_t(j)] < 0 || row[size_t(j)] >= n_experts) {
                problems.push_back(fmt::format("tensor '{}': expert id {} at [{}, {}] is outside [0, {})", t.name,
                                               row[size_t(j)], r, j, n_experts));
                return;
            }
            for (int64_t i = 0; i < j; ++i) {
                if (row[size_t(i)] == row[size_t(j)]) {
                    problems.push_back(fmt::format("tensor '{}': row {} repeats expert id {}", t.name, r,
                                                   row[size_t(j)]));
                    return;
                }
            }
        }
    }
}

template <typename F>
void for_each_linear(const LayerWeights& L, F&& f) {
    for (const Linear* l : {&L.attn.wq_a, &L.attn.wq_b, &L.attn.wkv, &L.attn.wo_a, &L.attn.wo_b,
                            &L.attn.indexer.wq_b, &L.ffn.shared.w1, &L.ffn.shared.w2, &L.ffn.shared.w3})
        f(*l);
    for (const auto& e : L.ffn.experts) {
        f(e.w1);
        f(e.w2);
        f(e.w3);
    }
}

}  // namespace

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::BF16: return "BF16";
        case WeightFormat::F32: return "F32";
        case WeightFormat::FP8_BLOCK128: return "FP8 e4m3 (128x128 blocks)";
        case WeightFormat::FP4_BLOCK32: return "FP4 e2m1 packed (32-wide blocks)";
    }
    return "?";
}

std::vector<int64_t> linear_weight_shape(WeightFormat f, int64_t out, int64_t in) {
    if (f == WeightFormat::FP4_BLOCK32) return {out, in / 2};
    return {out, in};
}

std::vector<int64_t> linear_scale_shape(WeightFormat f, int64_t out, int64_t in) {
    if (f == WeightFormat::FP8_BLOCK128) return {ceil_div(out, 128), ceil_div(in, 128)};
    if (f == WeightFormat::FP4_BLOCK32) return {out, in / 32};
    return {};
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg, const InventoryOptions& opt) {
    std::vector<TensorSpec> out;
    InventorySink sink(cfg, opt, out);
    walk_model(sink, cfg, opt.include_mtp);
    return out;
}

ModelWeights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt) { return bind_weights(cfg, ckpt, {}); }

ModelWeights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt, const BindOptions& opt) {
    BindSink sink(cfg, ckpt);
    ModelWeights w = walk_model(sink, cfg, true);
    auto& problems = sink.problems();
    for (const auto& [name, view] : ckpt.all()) {
        (void)view;
        if (!sink.used().count(name)) problems.push_back(fmt::format("unexpected tensor '{}'", name));
    }
    if (opt.check_values) {
        auto scan = [&](const LayerWeights& L) {
            for_each_linear(L, [&](const Linear& l) { check_scale_values(l, problems); });
            check_tid2eid(L.ffn.tid2eid, cfg.n_routed_experts, problems);
        };
        for (const auto& L : w.layers) scan(L);
        for (const auto& m : w.mtp) {
            scan(m.layer);
            check_scale_values(m.e_proj, problems);
            check_scale_values(m.h_proj, problems);
        }
    }
    if (!problems.empty()) {
        constexpr size_t kMaxListed = 200;
        std::string msg = fmt::format("{}: checkpoint does not match its config ({} problem{}):", ckpt.dir(),
                                      problems.size(), problems.size() == 1 ? "" : "s");
        for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i) msg += "\n  " + problems[i];
        if (problems.size() > kMaxListed) msg += fmt::format("\n  ... and {} more", problems.size() - kMaxListed);
        throw Error(msg);
    }
    return w;
}

}  // namespace flashseek
