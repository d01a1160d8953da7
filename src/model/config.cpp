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
        "rms_norm_eps", "num_nextn_predict_layers", "quantization_config", "expert_dtype"};
    return keys;
}

bool is_valid_ratio(int r) { return r == 0 || (r >= 2 && r <= (1 << 20) && (r & (r - 1)) == 0); }
bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

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
    r.get_int("qk_rope_head_dim", c.qk_rope_head_dim, true);
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
        const Reader rr(rs, source, "rope_scaling.");
        std::string type;
        if (rr.has("type")) rr.get_string("type", type, false);
        else rr.get_string("rope_type", type, false);
        FS_CHECK(type == "yarn" || type == "default" || type == "none" || type.empty(),
                 "{}: '{}' is not supported (only 'yarn')", rr.where("type"), type);
        if (type == "yarn") {
            c.rope_scaling.type = "yarn";
            rr.get_double("factor", c.rope_scaling.factor, true);
            rr.get_int("original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings, true);
            rr.get_double("beta_fast", c.rope_scaling.beta_fast, false);
            rr.get_double("beta_slow", c.rope_scaling.beta_slow, false);
        }
    }

    {
        const json& cr = r.require("compress_ratios");
        FS_CHECK(cr.is_array(), "{}: expected a list of integers, got {}", r.where("compress_ratios"), cr.dump());
        std::vector<int> all;
        for (size_t i = 0; i < cr.size(); ++i) {
            FS_CHECK(cr[i].is_number_integer(), "{}[{}]: expected an integer, got {}", r.where("compress_ratios"), i,
                     cr[i].dump());
            const int64_t v = cr[i].get<int64_t>();
            FS_CHECK(v >= 0 && v <= (1 << 20) && is_valid_ratio(int(v)),
                     "{}[{}]: {} is not a valid compress ratio (0, or a power of two >= 2 such as 4 or 128)",
                     r.where("compress_ratios"), i, v);
            all.push_back(int(v));
        }
        c.compress_ratios = all;  // split after num_hidden_layers is known (below)
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
    r.get_int("num_hash_layers", c.num_hash_layers, true);
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
    FS_CHECK(c.num_key_value_heads == 1, "{}: num_key_value_heads must be 1 (DeepSeek-V4 shares one K=V head), got "
             "{}", src, c.num_key_value_heads);
    positive(c.qk_rope_head_dim, "qk_rope_head_dim");
    FS_CHECK(c.qk_rope_head_dim % 2 == 0, "{}: qk_rope_head_dim must be even (rotated in pairs), got {}", src,
             c.qk_rope_head_dim);
    FS_CHECK(c.head_dim > c.qk_rope_head_dim, "{}: head_dim {} must exceed qk_rope_head_dim {}", src, c.head_dim,
             c.qk_rope_head_dim);
    FS_CHECK(c.nope_dim() % 64 == 0, "{}: head_dim - qk_rope_head_dim = {} must be a multiple of 64 (the KV FP8 "
             "block); check head_dim", src, c.nope_dim());
    positive(c.q_lora_rank, "q_lora_rank");
    positive(c.o_lora_rank, "o_lora_rank");
    positive(c.o_groups, "o_groups");
    FS_CHECK(c.num_attention_heads % c.o_groups == 0, "{}: num_attention_heads {} must be a multiple of o_groups {}",
             src, c.num_attention_heads, c.o_groups);
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
        FS_CHECK(is_valid_ratio(c.compress_ratios[i]), "{}: compress_ratios[{}] = {} is not 0 or a power of two >= 2",
                 src, i, c.compress_ratios[i]);
        has_indexer |= c.compress_ratios[i] == 4;
    }
    for (size_t i = 0; i < c.mtp_compress_ratios.size(); ++i) {
        FS_CHECK(is_valid_ratio(c.mtp_compress_ratios[i]), "{}: compress_ratios[{}] (MTP) = {} is not 0 or a power "
                 "of two >= 2", src, c.num_hidden_layers + int(i), c.mtp_compress_ratios[i]);
        has_indexer |= c.mtp_compress_ratios[i] == 4;
    }
    if (has_indexer) {
        positive(c.index_n_heads, "index_n_heads");
        FS_CHECK(is_power_of_two(c.index_head_dim) && c.index_head_dim >= 32, "{}: index_head_dim must be a power of "
                 "two >= 32 (Hadamard transform, FP4 blocks of 32), got {}", src, c.index_head_dim);
        FS_CHECK(c.index_head_dim > c.qk_rope_head_dim, "{}: index_head_dim {} must exceed qk_rope_head_dim {}", src,
                 c.index_head_dim, c.qk_rope_head_dim);
        positive(c.index_topk, "index_topk");
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
    FS_CHECK(c.hidden_act == "silu", "{}: hidden_act '{}' is not supported (only 'silu')", src, c.hidden_act);
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
            // FP4 experts pack two values per byte and carry one scale per 32 inputs.
            FS_CHECK(c.hidden_size % 32 == 0, "{}: hidden_size {} must be a multiple of 32 for FP4 experts", src,
                     c.hidden_size);
            FS_CHECK(c.moe_intermediate_size % 32 == 0, "{}: moe_intermediate_size {} must be a multiple of 32 for "
                     "FP4 experts", src, c.moe_intermediate_size);
        }
    }
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
