// config.json -> ModelConfig: typed reading of every official DeepSeek-V4 key, then consistency checks. Every
// error names the key (and the file), because a wrong config otherwise surfaces much later as a shape mismatch.
#include "model/config.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "util/error.h"

namespace flashseek {

namespace {

using nlohmann::json;

// Typed access to one JSON object, with errors that name "<source>: <prefix><key>".
class Reader {
public:
    Reader(const json& obj, std::string source, std::string prefix = "")
        : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

    bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
    std::string where(const char* key) const { return fmt::format("{}: {}{}", source_, prefix_, key); }
    const std::string& source() const { return source_; }

    const json& require(const char* key) const {
        FS_CHECK(has(key), "{}: missing required key", where(key));
        return obj_.at(key);
    }

    void get_int(const char* key, int64_t& out, bool required) const {
        if (!has(key)) {
            FS_CHECK(!required, "{}: missing required key", where(key));
            return;
        }
        const json& v = obj_.at(key);
        if (v.is_number_integer()) {
            if (v.is_number_unsigned()) {
                FS_CHECK(v.get<uint64_t>() <= uint64_t(INT64_MAX), "{}: value {} is too large", where(key), v.dump());
            }
            out = v.get<int64_t>();
            return;
        }
        fail("{}: expected an integer, got {}", where(key), v.dump());
    }
    void get_int(const char* key, int& out, bool required) const {
        int64_t v = out;
        get_int(key, v, required);
        FS_CHECK(v >= INT32_MIN && v <= INT32_MAX, "{}: value {} is out of range", where(key), v);
        out = int(v);
    }
    void get_double(const char* key, double& out, bool required) const {
        if (!has(key)) {
            FS_CHECK(!required, "{}: missing required key", where(key));
            return;
        }
        const json& v = obj_.at(key);
        FS_CHECK(v.is_number(), "{}: expected a number, got {}", where(key), v.dump());
        out = v.get<double>();
        FS_CHECK(std::isfinite(out), "{}: value must be finite", where(key));
    }
    void get_bool(const char* key, bool& out, bool required) const {
        if (!has(key)) {
            FS_CHECK(!required, "{}: missing required key", where(key));
            return;
        }
        const json& v = obj_.at(key);
        FS_CHECK(v.is_boolean(), "{}: expected true or false, got {}", where(key), v.dump());
        out = v.get<bool>();
    }
    void get_string(const char* key, std::string& out, bool required) const {
        if (!has(key)) {
            FS_CHECK(!required, "{}: missing required key", where(key));
            return;
        }
        const json& v = obj_.at(key);
        FS_CHECK(v.is_string(), "{}: expected a string, got {}", where(key), v.dump());
        out = v.get<std::string>();
    }

private:
    const json& obj_;
    std::string source_, prefix_;
};

// Token ids may be given as one integer or (in some configs) a list whose first entry is the primary id.
void get_token_id(const Reader& r, const json& obj, const char* key, int64_t& out) {
    if (!r.has(key)) return;
    const json& v = obj.at(key);
    if (v.is_array()) {
        FS_CHECK(!v.empty() && v[0].is_number_integer(), "{}: expected an integer or a list of integers, got {}",
                 r.where(key), v.dump());
        out = v[0].get<int64_t>();
        return;
    }
    r.get_int(key, out, false);
}

const std::set<std::string>& known_keys() {
    static const std::set<std::string> keys = {
        "architectures", "model_type", "torch_dtype", "transformers_version", "initializer_range", "use_cache",
        "hidden_size", "num_hidden_layers", "vocab_size", "tie_word_embeddings", "max_position_embeddings",
        "bos_token_id", "eos_token_id", "num_attention_heads", "num_key_value_heads", "head_dim",
        "qk_rope_head_dim", "q_lora_rank", "o_lora_rank", "o_groups", "sliding_window", "attention_bias",
        "attention_dropout", "rope_theta", "compress_rope_theta", "rope_scaling", "compress_ratios",
        "index_n_heads", "index_head_dim", "index_topk", "hc_mult", "hc_sinkhorn_iters", "hc_eps",
        "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "num_hash_layers",
        "scoring_func", "topk_method", "norm_topk_prob", "routed_scaling_factor", "swiglu_limit", "hidden_act",
        "rms_norm_eps", "num_nextn_predict_layers", "quantization_config", "expert_dtype",
        // HF transformers' names of the same settings (read or checked, see above)
        "layer_types", "compress_rates", "compress_rate_csa", "compress_rate_hca", "mlp_layer_types",
        "partial_rotary_factor", "rope_parameters"};
    return keys;
}

// 0 = sliding window only; 4 = overlapping compression with a lightning indexer (CSA); any other ratio >= 1 =
// non-overlapping compression of that many tokens per entry (HCA). The upper bound only keeps sizes in range.
constexpr int kMaxCompressRatio = 1 << 20;
bool is_valid_ratio(int64_t r) { return r >= 0 && r <= kMaxCompressRatio; }
bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// A rope scaling object (`rope_scaling`, or HF's `rope_parameters` / its "compress" part): "yarn" or none.
RopeScaling read_rope_scaling(const json& obj, const std::string& source, const std::string& prefix) {
    const Reader rr(obj, source, prefix);
    RopeScaling out;
    std::string type;
    if (rr.has("type")) rr.get_string("type", type, false);
    else rr.get_string("rope_type", type, false);
    FS_CHECK(type == "yarn" || type == "default" || type == "none" || type.empty(),
             "{}: '{}' is not supported (only 'yarn')", rr.where("type"), type);
    if (type != "yarn") return out;
    out.type = "yarn";
    rr.get_double("factor", out.factor, true);
    rr.get_int("original_max_position_embeddings", out.original_max_position_embeddings, true);
    rr.get_double("beta_fast", out.beta_fast, false);
    rr.get_double("beta_slow", out.beta_slow, false);
    // HF transformers forces attention_factor 1.0 for DeepSeek-V4 (no mscale on cos/sin); another value would
    // scale the rotated dims, which the model does not do.
    double attention_factor = 1.0;
    rr.get_double("attention_factor", attention_factor, false);
    FS_CHECK(attention_factor == 1.0, "{}: {} is not supported (DeepSeek-V4 applies no YaRN magnitude factor; only "
             "1.0)", rr.where("attention_factor"), attention_factor);
    return out;
}

bool same_rope_scaling(const RopeScaling& a, const RopeScaling& b) {
    if (a.type != b.type) return false;
    return a.type.empty() || (a.factor == b.factor && a.original_max_position_embeddings ==
                              b.original_max_position_embeddings && a.beta_fast == b.beta_fast &&
                              a.beta_slow == b.beta_slow);
}

// HF transformers' DeepseekV4Config also names the layer schedule its own way (a config it saves has only these):
// layer_types (+ compress_rates, or compress_rate_csa / compress_rate_hca), mlp_layer_types, partial_rotary_factor
// and rope_parameters. Each is read when the official key is absent and must agree with it when both are given,
// so that no key is silently ignored.
constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";

struct CompressRates {
    int64_t csa = 4, hca = 128;
};

// compress_rates (or compress_rate_csa / compress_rate_hca): HF's compress ratio of each compressed layer type.
CompressRates read_compress_rates(const json& j, const Reader& r) {
    CompressRates out;
    if (r.has("compress_rates")) {
        const json& cr = j.at("compress_rates");
        FS_CHECK(cr.is_object(), "{}: expected an object, got {}", r.where("compress_rates"), cr.dump());
        for (const auto& [k, v] : cr.items())
            FS_CHECK(k == kCsa || k == kHca, "{}: unknown layer type '{}' (expected {} or {})",
                     r.where("compress_rates"), k, kCsa, kHca);
        const Reader rr(cr, r.source(), "compress_rates.");
        rr.get_int(kCsa, out.csa, false);
        rr.get_int(kHca, out.hca, false);
    }
    r.get_int("compress_rate_csa", out.csa, false);
    r.get_int("compress_rate_hca", out.hca, false);
    // flashseek loads the official layout, where compress ratio 4 means overlapping windows with an indexer and
    // any other ratio non-overlapping windows without one; the two HF layer types must keep that meaning.
    FS_CHECK(out.csa == 4, "{}: a compress rate of {} for {} is not supported (overlapping compression with an "
             "indexer has ratio 4 in the official layout)", r.where("compress_rates"), out.csa, kCsa);
    FS_CHECK(out.hca >= 1 && out.hca != 4 && is_valid_ratio(out.hca), "{}: a compress rate of {} for {} is not "
             "supported (a non-overlapping ratio in [1, {}] other than 4, which means overlapping with an indexer)",
             r.where("compress_rates"), out.hca, kHca, kMaxCompressRatio);
    return out;
}

std::vector<int> ratios_from_layer_types(const json& j, const Reader& r, int n_layers) {
    const auto [csa, hca] = read_compress_rates(j, r);
    const json& lt = j.at("layer_types");
    FS_CHECK(lt.is_array() && lt.size() >= size_t(n_layers), "{}: expected a list of num_hidden_layers = {} layer "
             "types, got {}", r.where("layer_types"), n_layers, lt.dump());
    std::vector<int> out;
    for (int i = 0; i < n_layers; ++i) {
        const json& t = lt[size_t(i)];
        FS_CHECK(t.is_string(), "{}[{}]: expected a string, got {}", r.where("layer_types"), i, t.dump());
        const std::string s = t.get<std::string>();
        if (s == "sliding_attention") out.push_back(0);
        else if (s == kCsa) out.push_back(int(csa));
        else if (s == kHca) out.push_back(int(hca));
        else fail("{}[{}]: '{}' is not a DeepSeek-V4 layer type (sliding_attention, {}, {})", r.where("layer_types"),
                  i, s, kCsa, kHca);
    }
    return out;
}

int hash_layers_from_mlp_layer_types(const json& j, const Reader& r, int n_layers) {
    const json& mt = j.at("mlp_layer_types");
    FS_CHECK(mt.is_array() && mt.size() >= size_t(n_layers), "{}: expected a list of num_hidden_layers = {} entries, "
             "got {}", r.where("mlp_layer_types"), n_layers, mt.dump());
    int n_hash = 0;
    for (int i = 0; i < n_layers; ++i) {
        const json& t = mt[size_t(i)];
        FS_CHECK(t.is_string() && (t == "hash_moe" || t == "moe"), "{}[{}]: expected \"hash_moe\" or \"moe\", got {}",
                 r.where("mlp_layer_types"), i, t.dump());
        // The model hash-routes its first num_hash_layers layers (the official layout has no other form).
        FS_CHECK(t == "moe" || n_hash == i, "{}[{}]: a hash_moe layer after a moe layer is not supported (hash "
                 "routing covers the first num_hash_layers layers)", r.where("mlp_layer_types"), i);
        n_hash += t == "hash_moe";
    }
    return n_hash;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON ({})", source, e.what());
    }
    FS_CHECK(j.is_object(), "{}: the top level must be a JSON object", source);
    const Reader r(j, source);
    ModelConfig c;

    r.get_string("model_type", c.model_type, true);
    FS_CHECK(c.model_type == "deepseek_v4", "{}: '{}' is not supported (only 'deepseek_v4'; DeepSeek-V4.1 is a "
             "different architecture)", r.where("model_type"), c.model_type);
    if (r.has("architectures")) {
        const json& a = j["architectures"];
        FS_CHECK(a.is_array(), "{}: expected a list of strings", r.where("architectures"));
        c.architectures.clear();
        for (const auto& v : a) {
            FS_CHECK(v.is_string(), "{}: expected a list of strings, got {}", r.where("architectures"), a.dump());
            c.architectures.push_back(v.get<std::string>());
        }
    }
    r.get_string("torch_dtype", c.torch_dtype, false);
    r.get_string("transformers_version", c.transformers_version, false);
    r.get_double("initializer_range", c.initializer_range, false);
    r.get_bool("use_cache", c.use_cache, false);

    r.get_int("hidden_size", c.hidden_size, true);
    r.get_int("num_hidden_layers", c.num_hidden_layers, true);
    r.get_int("vocab_size", c.vocab_size, true);
    r.get_bool("tie_word_embeddings", c.tie_word_embeddings, false);
    r.get_int("max_position_embeddings", c.max_position_embeddings, false);
    get_token_id(r, j, "bos_token_id", c.bos_token_id);
    get_token_id(r, j, "eos_token_id", c.eos_token_id);

    r.get_int("num_attention_heads", c.num_attention_heads, true);
    r.get_int("num_key_value_heads", c.num_key_value_heads, false);
    r.get_int("head_dim", c.head_dim, true);
    r.get_int("qk_rope_head_dim", c.qk_rope_head_dim, !r.has("partial_rotary_factor"));
    if (r.has("partial_rotary_factor")) {  // HF's form: qk_rope_head_dim = int(head_dim * factor)
        double factor = 0;
        r.get_double("partial_rotary_factor", factor, true);
        const int rope = int(double(c.head_dim) * factor);
        FS_CHECK(!r.has("qk_rope_head_dim") || rope == c.qk_rope_head_dim, "{}: {} gives int(head_dim {} x {}) = {} "
                 "rotary dims, but qk_rope_head_dim is {}", r.where("partial_rotary_factor"), factor, c.head_dim,
                 factor, rope, c.qk_rope_head_dim);
        c.qk_rope_head_dim = rope;
    }
    r.get_int("q_lora_rank", c.q_lora_rank, true);
    r.get_int("o_lora_rank", c.o_lora_rank, true);
    r.get_int("o_groups", c.o_groups, true);
    r.get_int("sliding_window", c.sliding_window, true);
    r.get_bool("attention_bias", c.attention_bias, false);
    r.get_double("attention_dropout", c.attention_dropout, false);

    r.get_double("rope_theta", c.rope_theta, false);
    r.get_double("compress_rope_theta", c.compress_rope_theta, false);
    if (r.has("rope_scaling")) {
        const json& rs = j["rope_scaling"];
        FS_CHECK(rs.is_object(), "{}: expected an object or null, got {}", r.where("rope_scaling"), rs.dump());
        c.rope_scaling = read_rope_scaling(rs, source, "rope_scaling.");
    }
    if (r.has("rope_parameters")) {
        // HF's form: {"main": {...}, "compress": {...}} per rope type, or one flat object (the compress scaling).
        const json& rp = j["rope_parameters"];
        FS_CHECK(rp.is_object(), "{}: expected an object or null, got {}", r.where("rope_parameters"), rp.dump());
        const bool nested = rp.contains("main") || rp.contains("compress");
        auto check_theta = [&](const json& sub, const std::string& prefix, const char* official_key, double& theta) {
            const Reader sr(sub, source, prefix);
            if (!sr.has("rope_theta")) return;
            double t = 0;
            sr.get_double("rope_theta", t, false);
            FS_CHECK(!r.has(official_key) || t == theta, "{}: {} disagrees with {} = {}", sr.where("rope_theta"), t,
                     official_key, theta);
            theta = t;
        };
        if (nested) {
            if (rp.contains("main")) {
                const json& main = rp.at("main");
                FS_CHECK(main.is_object(), "{}: expected an object", r.where("rope_parameters") + ".main");
                FS_CHECK(read_rope_scaling(main, source, "rope_parameters.main.").type.empty(),
                         "{}: the sliding layers' RoPE has no scaling in DeepSeek-V4 (only 'default')",
                         r.where("rope_parameters.main"));
                check_theta(main, "rope_parameters.main.", "rope_theta", c.rope_theta);
            }
            if (rp.contains("compress")) {
                const json& comp = rp.at("compress");
                FS_CHECK(comp.is_object(), "{}: expected an object", r.where("rope_parameters") + ".compress");
                check_theta(comp, "rope_parameters.compress.", "compress_rope_theta", c.compress_rope_theta);
                const RopeScaling rs = read_rope_scaling(comp, source, "rope_parameters.compress.");
                FS_CHECK(!r.has("rope_scaling") || same_rope_scaling(rs, c.rope_scaling), "{}: disagrees with "
                         "rope_scaling", r.where("rope_parameters.compress"));
                c.rope_scaling = rs;
            }
        } else {
            const RopeScaling rs = read_rope_scaling(rp, source, "rope_parameters.");
            FS_CHECK(!r.has("rope_scaling") || same_rope_scaling(rs, c.rope_scaling), "{}: disagrees with rope_scaling",
                     r.where("rope_parameters"));
            c.rope_scaling = rs;
        }
    }

    if (r.has("compress_ratios") || !r.has("layer_types")) {
        const json& cr = r.require("compress_ratios");
        FS_CHECK(cr.is_array(), "{}: expected a list of integers, got {}", r.where("compress_ratios"), cr.dump());
        std::vector<int> all;
        for (size_t i = 0; i < cr.size(); ++i) {
            FS_CHECK(cr[i].is_number_integer(), "{}[{}]: expected an integer, got {}", r.where("compress_ratios"), i,
                     cr[i].dump());
            const int64_t v = cr[i].get<int64_t>();
            FS_CHECK(is_valid_ratio(v), "{}[{}]: {} is not a valid compress ratio (0 = sliding window only, 4 = "
                     "overlapping with an indexer, any other value in [1, {}] = tokens per compressed entry)",
                     r.where("compress_ratios"), i, v, kMaxCompressRatio);
            all.push_back(int(v));
        }
        c.compress_ratios = all;  // split after num_hidden_layers is known (below)
    }
    if (!r.has("layer_types") && (r.has("compress_rates") || r.has("compress_rate_csa") ||
                                  r.has("compress_rate_hca"))) {
        // HF would run the compress_ratios 128 layers at its HCA rate: only the default rates mean the same model.
        const CompressRates rates = read_compress_rates(j, r);
        FS_CHECK(rates.hca == 128, "{}: an HCA rate of {} without layer_types would make HF run the compress_ratios "
                 "128 layers at that rate; give the ratios in compress_ratios", r.where("compress_rates"), rates.hca);
    }
    if (r.has("layer_types")) {
        FS_CHECK(c.num_hidden_layers >= 1, "{}: must be >= 1, got {}", r.where("num_hidden_layers"),
                 c.num_hidden_layers);
        const std::vector<int> from_types = ratios_from_layer_types(j, r, c.num_hidden_layers);
        if (!r.has("compress_ratios")) {
            c.compress_ratios = from_types;
        } else {
            for (int i = 0; i < c.num_hidden_layers && size_t(i) < c.compress_ratios.size(); ++i)
                FS_CHECK(c.compress_ratios[size_t(i)] == from_types[size_t(i)], "{}[{}] = {} disagrees with "
                         "layer_types[{}] (compress ratio {})", r.where("compress_ratios"), i,
                         c.compress_ratios[size_t(i)], i, from_types[size_t(i)]);
        }
    }
    r.get_int("index_n_heads", c.index_n_heads, true);
    r.get_int("index_head_dim", c.index_head_dim, true);
    r.get_int("index_topk", c.index_topk, true);

    r.get_int("hc_mult", c.hc_mult, true);
    r.get_int("hc_sinkhorn_iters", c.hc_sinkhorn_iters, false);
    r.get_double("hc_eps", c.hc_eps, false);

    r.get_int("n_routed_experts", c.n_routed_experts, true);
    r.get_int("n_shared_experts", c.n_shared_experts, false);
    r.get_int("num_experts_per_tok", c.num_experts_per_tok, true);
    r.get_int("moe_intermediate_size", c.moe_intermediate_size, true);
    r.get_int("num_hash_layers", c.num_hash_layers, !r.has("mlp_layer_types"));
    if (r.has("mlp_layer_types")) {
        const int n_hash = hash_layers_from_mlp_layer_types(j, r, c.num_hidden_layers);
        FS_CHECK(!r.has("num_hash_layers") || n_hash == c.num_hash_layers, "{}: {} hash_moe layers, but "
                 "num_hash_layers is {}", r.where("mlp_layer_types"), n_hash, c.num_hash_layers);
        c.num_hash_layers = n_hash;
    }
    r.get_string("scoring_func", c.scoring_func, false);
    r.get_string("topk_method", c.topk_method, false);
    r.get_bool("norm_topk_prob", c.norm_topk_prob, false);
    r.get_double("routed_scaling_factor", c.routed_scaling_factor, true);
    r.get_double("swiglu_limit", c.swiglu_limit, false);
    r.get_string("hidden_act", c.hidden_act, false);
    r.get_double("rms_norm_eps", c.rms_norm_eps, false);
    c.num_nextn_predict_layers = 0;  // absent: no MTP tensors are expected
    r.get_int("num_nextn_predict_layers", c.num_nextn_predict_layers, false);

    if (r.has("quantization_config")) {
        const json& q = j["quantization_config"];
        FS_CHECK(q.is_object(), "{}: expected an object or null, got {}", r.where("quantization_config"), q.dump());
        const Reader qr(q, source, "quantization_config.");
        auto& qc = c.quantization;
        qc.present = true;
        qr.get_string("quant_method", qc.quant_method, true);
        qr.get_string("fmt", qc.fmt, false);
        qr.get_string("scale_fmt", qc.scale_fmt, false);
        qr.get_string("activation_scheme", qc.activation_scheme, false);
        if (qr.has("weight_block_size")) {
            const json& b = q["weight_block_size"];
            FS_CHECK(b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer(),
                     "{}: expected [rows, cols], got {}", qr.where("weight_block_size"), b.dump());
            qc.weight_block_size[0] = b[0].get<int>();
            qc.weight_block_size[1] = b[1].get<int>();
        }
    } else {
        c.quantization.present = false;
    }
    if (r.has("expert_dtype")) {
        std::string e;
        r.get_string("expert_dtype", e, false);
        if (e == "fp4") c.expert_dtype = ExpertDtype::FP4;
        else if (e == "fp8") c.expert_dtype = ExpertDtype::FP8;
        else fail("{}: '{}' is not supported (expected \"fp4\" or \"fp8\")", r.where("expert_dtype"), e);
        c.expert_dtype_explicit = true;
    }

    for (const auto& [k, v] : j.items()) {
        (void)v;
        if (!known_keys().count(k)) c.unknown_keys.push_back(k);
    }

    // Trailing compress_ratios entries beyond the main layers belong to the MTP layers.
    FS_CHECK(c.num_hidden_layers >= 1, "{}: must be >= 1, got {}", r.where("num_hidden_layers"), c.num_hidden_layers);
    FS_CHECK(c.compress_ratios.size() >= size_t(c.num_hidden_layers),
             "{}: {} entries, but num_hidden_layers = {} needs one per layer", r.where("compress_ratios"),
             c.compress_ratios.size(), c.num_hidden_layers);
    c.mtp_compress_ratios.assign(c.compress_ratios.begin() + c.num_hidden_layers, c.compress_ratios.end());
    c.compress_ratios.resize(size_t(c.num_hidden_layers));

    validate_model_config(c, source);
    return c;
}

ModelConfig load_model_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    FS_CHECK(in.good(), "{}: cannot open the model config", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_model_config(ss.str(), path);
}

void validate_model_config(const ModelConfig& c, const std::string& src) {
    auto positive = [&](int64_t v, const char* key) { FS_CHECK(v >= 1, "{}: {} must be >= 1, got {}", src, key, v); };
    auto positive_real = [&](double v, const char* key) {
        FS_CHECK(v > 0 && std::isfinite(v), "{}: {} must be > 0, got {}", src, key, v);
    };
    positive(c.hidden_size, "hidden_size");
    positive(c.num_hidden_layers, "num_hidden_layers");
    positive(c.vocab_size, "vocab_size");
    FS_CHECK(c.vocab_size <= (int64_t(1) << 31) - 1, "{}: vocab_size {} does not fit token ids of 32 bits", src,
             c.vocab_size);
    positive(c.max_position_embeddings, "max_position_embeddings");
    FS_CHECK(c.bos_token_id >= 0 && c.bos_token_id < c.vocab_size, "{}: bos_token_id {} is outside [0, vocab_size "
             "{})", src, c.bos_token_id, c.vocab_size);
    FS_CHECK(c.eos_token_id >= 0 && c.eos_token_id < c.vocab_size, "{}: eos_token_id {} is outside [0, vocab_size "
             "{})", src, c.eos_token_id, c.vocab_size);

    positive(c.num_attention_heads, "num_attention_heads");
    FS_CHECK(c.num_key_value_heads == 1, "{}: num_key_value_heads must be 1 (DeepSeek-V4 shares one K=V head: wkv "
             "projects to a single head_dim vector), got {}", src, c.num_key_value_heads);
    positive(c.head_dim, "head_dim");
    FS_CHECK(c.qk_rope_head_dim >= 2 && c.qk_rope_head_dim % 2 == 0, "{}: qk_rope_head_dim must be a positive even "
             "number (RoPE rotates pairs of dims), got {}", src, c.qk_rope_head_dim);
    // head_dim == qk_rope_head_dim is a head that is rotary only (no no-rope part): allowed.
    FS_CHECK(c.head_dim >= c.qk_rope_head_dim, "{}: head_dim {} must be >= qk_rope_head_dim {} (RoPE acts on the "
             "last qk_rope_head_dim dims of each head)", src, c.head_dim, c.qk_rope_head_dim);
    positive(c.q_lora_rank, "q_lora_rank");
    positive(c.o_lora_rank, "o_lora_rank");
    positive(c.o_groups, "o_groups");
    // The grouped output projection cuts the concatenated head outputs into o_groups equal slices; a slice may
    // span a head boundary (HF transformers reshapes the same way).
    FS_CHECK((int64_t(c.num_attention_heads) * c.head_dim) % c.o_groups == 0, "{}: num_attention_heads {} x "
             "head_dim {} = {} must be a multiple of o_groups {} (the output projection splits the heads' outputs "
             "into o_groups equal parts)", src, c.num_attention_heads, c.head_dim,
             int64_t(c.num_attention_heads) * c.head_dim, c.o_groups);
    positive(c.sliding_window, "sliding_window");
    FS_CHECK(!c.attention_bias, "{}: attention_bias = true is not supported (DeepSeek-V4 has no attention biases)",
             src);
    FS_CHECK(c.attention_dropout >= 0 && c.attention_dropout < 1, "{}: attention_dropout must be in [0, 1)", src);

    positive_real(c.rope_theta, "rope_theta");
    positive_real(c.compress_rope_theta, "compress_rope_theta");
    if (c.rope_scaling.type == "yarn") {
        FS_CHECK(c.rope_scaling.factor >= 1 && std::isfinite(c.rope_scaling.factor), "{}: rope_scaling.factor must "
                 "be >= 1, got {}", src, c.rope_scaling.factor);
        positive(c.rope_scaling.original_max_position_embeddings, "rope_scaling.original_max_position_embeddings");
        positive_real(c.rope_scaling.beta_fast, "rope_scaling.beta_fast");
        positive_real(c.rope_scaling.beta_slow, "rope_scaling.beta_slow");
        FS_CHECK(c.rope_scaling.beta_fast > c.rope_scaling.beta_slow, "{}: rope_scaling.beta_fast {} must exceed "
                 "beta_slow {}", src, c.rope_scaling.beta_fast, c.rope_scaling.beta_slow);
    } else {
        FS_CHECK(c.rope_scaling.type.empty(), "{}: rope_scaling.type '{}' is not supported", src,
                 c.rope_scaling.type);
    }

    FS_CHECK(c.compress_ratios.size() == size_t(c.num_hidden_layers), "{}: compress_ratios has {} entries for {} "
             "layers", src, c.compress_ratios.size(), c.num_hidden_layers);
    bool has_indexer = false;
    for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
        FS_CHECK(is_valid_ratio(c.compress_ratios[i]), "{}: compress_ratios[{}] = {} is outside [0, {}]", src, i,
                 c.compress_ratios[i], kMaxCompressRatio);
        has_indexer |= c.compress_ratios[i] == 4;
    }
    for (size_t i = 0; i < c.mtp_compress_ratios.size(); ++i) {
        FS_CHECK(is_valid_ratio(c.mtp_compress_ratios[i]), "{}: compress_ratios[{}] (MTP) = {} is outside [0, {}]",
                 src, c.num_hidden_layers + int(i), c.mtp_compress_ratios[i], kMaxCompressRatio);
        has_indexer |= c.mtp_compress_ratios[i] == 4;
    }
    if (has_indexer) {
        positive(c.index_n_heads, "index_n_heads");
        // index_head_dim == qk_rope_head_dim is an indexer head that is rotary only: allowed.
        FS_CHECK(c.index_head_dim >= c.qk_rope_head_dim, "{}: index_head_dim {} must be >= qk_rope_head_dim {} (the "
                 "indexer rotates the last qk_rope_head_dim dims of its query heads and keys)", src, c.index_head_dim,
                 c.qk_rope_head_dim);
        // index_topk = 0 selects no compressed entry (the layer then attends to its window only).
        FS_CHECK(c.index_topk >= 0, "{}: index_topk must be >= 0, got {}", src, c.index_topk);
    }

    positive(c.hc_mult, "hc_mult");
    positive(c.hc_sinkhorn_iters, "hc_sinkhorn_iters");
    positive_real(c.hc_eps, "hc_eps");

    positive(c.n_routed_experts, "n_routed_experts");
    FS_CHECK(c.n_shared_experts >= 1, "{}: n_shared_experts must be >= 1 (DeepSeek-V4 always has a shared expert), "
             "got {}", src, c.n_shared_experts);
    FS_CHECK(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.n_routed_experts, "{}: num_experts_per_tok {} "
             "must be in [1, n_routed_experts = {}]", src, c.num_experts_per_tok, c.n_routed_experts);
    positive(c.moe_intermediate_size, "moe_intermediate_size");
    FS_CHECK(c.num_hash_layers >= 0 && c.num_hash_layers <= c.num_hidden_layers, "{}: num_hash_layers {} must be in "
             "[0, num_hidden_layers = {}]", src, c.num_hash_layers, c.num_hidden_layers);
    FS_CHECK(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "softmax" || c.scoring_func == "sigmoid",
             "{}: scoring_func '{}' is not supported (sqrtsoftplus, softmax or sigmoid)", src, c.scoring_func);
    FS_CHECK(c.topk_method == "noaux_tc", "{}: topk_method '{}' is not supported (only 'noaux_tc')", src,
             c.topk_method);
    positive_real(c.routed_scaling_factor, "routed_scaling_factor");
    positive_real(c.swiglu_limit, "swiglu_limit");
    // "swish" is HF transformers' other name of the same function.
    FS_CHECK(c.hidden_act == "silu" || c.hidden_act == "swish", "{}: hidden_act '{}' is not supported (the experts "
             "are SwiGLU: only 'silu', alias 'swish')", src, c.hidden_act);
    positive_real(c.rms_norm_eps, "rms_norm_eps");
    FS_CHECK(c.num_nextn_predict_layers >= 0 && c.num_nextn_predict_layers <= 16, "{}: num_nextn_predict_layers "
             "must be in [0, 16], got {}", src, c.num_nextn_predict_layers);
    FS_CHECK(c.torch_dtype == "bfloat16" || c.torch_dtype == "float32" || c.torch_dtype == "float16",
             "{}: torch_dtype '{}' is not supported", src, c.torch_dtype);

    if (c.quantization.present) {
        const auto& q = c.quantization;
        FS_CHECK(q.quant_method == "fp8", "{}: quantization_config.quant_method '{}' is not supported (only 'fp8')",
                 src, q.quant_method);
        FS_CHECK(q.fmt == "e4m3", "{}: quantization_config.fmt '{}' is not supported (only 'e4m3')", src, q.fmt);
        FS_CHECK(q.scale_fmt == "ue8m0" || q.scale_fmt == "float32" || q.scale_fmt == "fp32",
                 "{}: quantization_config.scale_fmt '{}' is not supported", src, q.scale_fmt);
        FS_CHECK(q.weight_block_size[0] == 128 && q.weight_block_size[1] == 128, "{}: quantization_config."
                 "weight_block_size [{}, {}] is not supported (only [128, 128])", src, q.weight_block_size[0],
                 q.weight_block_size[1]);
        FS_CHECK(q.activation_scheme == "dynamic", "{}: quantization_config.activation_scheme '{}' is not supported "
                 "(only 'dynamic')", src, q.activation_scheme);
        if (c.expert_dtype == ExpertDtype::FP4) {
            // The FP4 expert layout stores I8 [out, in/2] (two values per byte) and one scale per 32 inputs
            // [out, in/32]: a checkpoint cannot hold other widths. FP8 experts (128x128 blocks, partial blocks
            // allowed) or an unquantized checkpoint can.
            FS_CHECK(c.hidden_size % 32 == 0, "{}: hidden_size {} must be a multiple of 32 for FP4 experts (one "
                     "scale per 32 inputs); use expert_dtype \"fp8\" or no quantization_config", src, c.hidden_size);
            FS_CHECK(c.moe_intermediate_size % 32 == 0, "{}: moe_intermediate_size {} must be a multiple of 32 for "
                     "FP4 experts (one scale per 32 inputs); use expert_dtype \"fp8\" or no quantization_config", src,
                     c.moe_intermediate_size);
        }
    }
}

void check_release_numerics_supported(const ModelConfig& c, const std::string& src) {
    // Only the main layers: the forward passes do not run the MTP layers.
    bool has_indexer = false;
    for (int r : c.compress_ratios) has_indexer |= r == 4;
    // The reference rotates the indexer's queries and keys by a Walsh-Hadamard transform before their FP4 rounding;
    // that transform exists only for power-of-two sizes. (The FP8 / FP4 block roundings themselves take a shorter
    // last block, as the 128-wide activation blocks do.)
    FS_CHECK(!has_indexer || is_power_of_two(c.index_head_dim), "{}: index_head_dim {} is not a power of two: "
             "release numerics simulate the reference's Hadamard rotation of the indexer, which needs one (exact "
             "numerics run any size)", src, c.index_head_dim);
}

std::string model_config_to_json(const ModelConfig& c) {
    nlohmann::ordered_json j;
    j["architectures"] = c.architectures;
    j["model_type"] = c.model_type;
    j["torch_dtype"] = c.torch_dtype;
    j["transformers_version"] = c.transformers_version;
    j["initializer_range"] = c.initializer_range;
    j["use_cache"] = c.use_cache;
    j["hidden_size"] = c.hidden_size;
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["vocab_size"] = c.vocab_size;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["bos_token_id"] = c.bos_token_id;
    j["eos_token_id"] = c.eos_token_id;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_key_value_heads;
    j["head_dim"] = c.head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["q_lora_rank"] = c.q_lora_rank;
    j["o_lora_rank"] = c.o_lora_rank;
    j["o_groups"] = c.o_groups;
    j["sliding_window"] = c.sliding_window;
    j["attention_bias"] = c.attention_bias;
    j["attention_dropout"] = c.attention_dropout;
    j["rope_theta"] = c.rope_theta;
    j["compress_rope_theta"] = c.compress_rope_theta;
    if (c.rope_scaling.type.empty()) {
        j["rope_scaling"] = nullptr;
    } else {
        nlohmann::ordered_json rs;
        rs["type"] = c.rope_scaling.type;
        rs["factor"] = c.rope_scaling.factor;
        rs["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
        rs["beta_fast"] = c.rope_scaling.beta_fast;
        rs["beta_slow"] = c.rope_scaling.beta_slow;
        j["rope_scaling"] = rs;
    }
    std::vector<int> ratios = c.compress_ratios;
    ratios.insert(ratios.end(), c.mtp_compress_ratios.begin(), c.mtp_compress_ratios.end());
    j["compress_ratios"] = ratios;
    j["index_n_heads"] = c.index_n_heads;
    j["index_head_dim"] = c.index_head_dim;
    j["index_topk"] = c.index_topk;
    j["hc_mult"] = c.hc_mult;
    j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
    j["hc_eps"] = c.hc_eps;
    j["n_routed_experts"] = c.n_routed_experts;
    j["n_shared_experts"] = c.n_shared_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["num_hash_layers"] = c.num_hash_layers;
    j["scoring_func"] = c.scoring_func;
    j["topk_method"] = c.topk_method;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["swiglu_limit"] = c.swiglu_limit;
    j["hidden_act"] = c.hidden_act;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
    if (c.quantization.present) {
        nlohmann::ordered_json q;
        q["quant_method"] = c.quantization.quant_method;
        q["fmt"] = c.quantization.fmt;
        q["scale_fmt"] = c.quantization.scale_fmt;
        q["weight_block_size"] = {c.quantization.weight_block_size[0], c.quantization.weight_block_size[1]};
        q["activation_scheme"] = c.quantization.activation_scheme;
        j["quantization_config"] = q;
    }
    if (c.expert_dtype_explicit) j["expert_dtype"] = c.expert_dtype == ExpertDtype::FP4 ? "fp4" : "fp8";
    return j.dump(2) + "\n";
}

}  // namespace flashseek
