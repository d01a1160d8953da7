// DeepSeek-V4 model configuration: every key of the official config.json (docs/model.md §1),
// parsed and validated. Invalid or inconsistent values fail with an Error that names the key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashseek {

enum class ExpertDtype { FP4, FP8 };

struct RopeScaling {
    std::string type;  // "yarn" or "" (none)
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
};

struct QuantizationConfig {
    std::string quant_method = "fp8";
    std::string fmt = "e4m3";
    std::string scale_fmt = "ue8m0";
    int weight_block_size[2] = {128, 128};
    std::string activation_scheme = "dynamic";
    bool present = false;
};

struct ModelConfig {
    // sizes
    int64_t hidden_size = 4096;
    int num_hidden_layers = 43;
    int64_t vocab_size = 129280;
    bool tie_word_embeddings = false;
    int64_t max_position_embeddings = 1048576;
    int64_t bos_token_id = 0;
    int64_t eos_token_id = 1;
    // attention
    int num_attention_heads = 64;
    int num_key_value_heads = 1;
    int head_dim = 512;
    int qk_rope_head_dim = 64;
    int q_lora_rank = 1024;
    int o_lora_rank = 1024;
    int o_groups = 8;
    int sliding_window = 128;
    bool attention_bias = false;
    // rope
    double rope_theta = 10000.0;
    double compress_rope_theta = 160000.0;
    RopeScaling rope_scaling;
    // compression + indexer; compress_ratios has one entry per layer (trailing MTP entries are kept in mtp_ratios)
    std::vector<int> compress_ratios;
    std::vector<int> mtp_compress_ratios;
    int index_n_heads = 64;
    int index_head_dim = 128;
    int index_topk = 512;
    // mHC
    int hc_mult = 4;
    int hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    // MoE
    int n_routed_experts = 256;
    int n_shared_experts = 1;
    int num_experts_per_tok = 6;
    int64_t moe_intermediate_size = 2048;
    int num_hash_layers = 3;
    std::string scoring_func = "sqrtsoftplus";
    std::string topk_method = "noaux_tc";
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.5;
    double swiglu_limit = 10.0;
    std::string hidden_act = "silu";
    // norms
    double rms_norm_eps = 1e-6;
    // MTP
    int num_nextn_predict_layers = 1;
    // quantization
    QuantizationConfig quantization;
    ExpertDtype expert_dtype = ExpertDtype::FP4;
    bool expert_dtype_explicit = false;  // true when config.json names expert_dtype
    std::string torch_dtype = "bfloat16";
    std::string model_type = "deepseek_v4";
    // identity keys of the official file (kept so that model_config_to_json round-trips them)
    std::vector<std::string> architectures = {"DeepseekV4ForCausalLM"};
    std::string transformers_version = "4.57.1";
    double initializer_range = 0.02;
    bool use_cache = true;
    double attention_dropout = 0.0;
    // keys of config.json this parser does not know (ignored; e.g. the 0731 release's dspark_*)
    std::vector<std::string> unknown_keys;

    int n_layers() const { return num_hidden_layers; }
    int ratio(int layer) const { return compress_ratios.at(size_t(layer)); }
    bool is_hash_layer(int layer) const { return layer < num_hash_layers; }
    int rope_dim() const { return qk_rope_head_dim; }
    int nope_dim() const { return head_dim - qk_rope_head_dim; }
    int n_mtp_layers() const { return num_nextn_predict_layers; }
    // compress ratio of MTP layer i (its trailing compress_ratios entry, else 0 = sliding window only)
    int mtp_ratio(int i) const {
        return size_t(i) < mtp_compress_ratios.size() ? mtp_compress_ratios[size_t(i)] : 0;
    }
    bool quantized() const { return quantization.present; }
};

// Parses config.json text; `source` (a file name) is used in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source = "config.json");
ModelConfig load_model_config(const std::string& path);
// Serializes to the official config.json layout (used by gen-checkpoint).
std::string model_config_to_json(const ModelConfig& cfg);
// Checks internal consistency (divisibility, ranges); throws Error naming the key and the reason. Accepts every
// shape the model's math defines (e.g. rotary-only attention or indexer heads, dimensions that are not multiples
// of 128, one head, a window shorter than a compression window); refuses only what cannot be computed or stored.
void validate_model_config(const ModelConfig& cfg, const std::string& source = "config.json");
// The release numerics (the reference's quantization simulations) need more than the model: throws Error naming
// the key when cfg has a shape they are not defined for (index_head_dim not a power of two while a main layer has
// an indexer, for the Hadamard rotation).
void check_release_numerics_supported(const ModelConfig& cfg, const std::string& source = "config.json");

}  // namespace flashseek
