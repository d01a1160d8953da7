// config.json parsing: the official V4-Flash file, compress_ratios with and without the MTP entry, and one error
// per kind of bad key (missing, wrong type, invalid or inconsistent value), each naming the key.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model_test_util.h"

using namespace flashseek;
using namespace flashseek::test;
using json = nlohmann::ordered_json;

namespace {

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "test-config.json"); }

void expect_config_error(const json& j, std::initializer_list<std::string> parts) {
    expect_error([&] { parse(j); }, parts);
}

// The config must be refused with a message holding every part and the file name.
void expect_refused(const json& j, std::vector<std::string> parts) {
    parts.push_back("test-config.json");
    try {
        parse(j);
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(Config, ParsesOfficialV4Flash) {
    const ModelConfig c = load_model_config(config_path("v4-flash.json"));
    EXPECT_EQ(c.model_type, "deepseek_v4");
    EXPECT_EQ(c.architectures, std::vector<std::string>{"DeepseekV4ForCausalLM"});
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.num_hidden_layers, 43);
    EXPECT_EQ(c.vocab_size, 129280);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.max_position_embeddings, 1048576);
    EXPECT_EQ(c.bos_token_id, 0);
    EXPECT_EQ(c.eos_token_id, 1);
    EXPECT_EQ(c.num_attention_heads, 64);
    EXPECT_EQ(c.num_key_value_heads, 1);
    EXPECT_EQ(c.head_dim, 512);
    EXPECT_EQ(c.qk_rope_head_dim, 64);
    EXPECT_EQ(c.nope_dim(), 448);
    EXPECT_EQ(c.q_lora_rank, 1024);
    EXPECT_EQ(c.o_lora_rank, 1024);
    EXPECT_EQ(c.o_groups, 8);
    EXPECT_EQ(c.sliding_window, 128);
    EXPECT_EQ(c.rope_theta, 10000);
    EXPECT_EQ(c.compress_rope_theta, 160000);
    EXPECT_EQ(c.rope_scaling.type, "yarn");
    EXPECT_EQ(c.rope_scaling.factor, 16);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 65536);
    EXPECT_EQ(c.rope_scaling.beta_fast, 32);
    EXPECT_EQ(c.rope_scaling.beta_slow, 1);
    ASSERT_EQ(c.compress_ratios.size(), 43u);
    EXPECT_EQ(c.ratio(0), 0);
    EXPECT_EQ(c.ratio(1), 0);
    for (int l = 2; l < 43; ++l) EXPECT_EQ(c.ratio(l), l % 2 == 0 ? 4 : 128) << l;
    EXPECT_EQ(c.mtp_compress_ratios, std::vector<int>{0});
    EXPECT_EQ(c.mtp_ratio(0), 0);
    EXPECT_EQ(c.index_n_heads, 64);
    EXPECT_EQ(c.index_head_dim, 128);
    EXPECT_EQ(c.index_topk, 512);
    EXPECT_EQ(c.hc_mult, 4);
    EXPECT_EQ(c.hc_sinkhorn_iters, 20);
    EXPECT_EQ(c.hc_eps, 1e-6);
    EXPECT_EQ(c.n_routed_experts, 256);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.num_experts_per_tok, 6);
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.num_hash_layers, 3);
    EXPECT_TRUE(c.is_hash_layer(2));
    EXPECT_FALSE(c.is_hash_layer(3));
    EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
    EXPECT_EQ(c.topk_method, "noaux_tc");
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.routed_scaling_factor, 1.5);
    EXPECT_EQ(c.swiglu_limit, 10.0);
    EXPECT_EQ(c.hidden_act, "silu");
    EXPECT_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.num_nextn_predict_layers, 1);
    EXPECT_TRUE(c.quantization.present);
    EXPECT_EQ(c.quantization.quant_method, "fp8");
    EXPECT_EQ(c.quantization.fmt, "e4m3");
    EXPECT_EQ(c.quantization.scale_fmt, "ue8m0");
    EXPECT_EQ(c.quantization.weight_block_size[0], 128);
    EXPECT_EQ(c.quantization.weight_block_size[1], 128);
    EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
    EXPECT_EQ(c.expert_dtype, ExpertDtype::FP4);
    EXPECT_FALSE(c.expert_dtype_explicit);  // the initial revision has no expert_dtype key
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    EXPECT_EQ(c.transformers_version, "4.57.1");
    EXPECT_TRUE(c.unknown_keys.empty());
}

TEST(Config, CompressRatiosWithAndWithoutMtpEntries) {
    json j = config_json("v4-flash.json");
    auto r = j["compress_ratios"];
    ASSERT_EQ(r.size(), 44u);
    r.erase(r.size() - 1);
    j["compress_ratios"] = r;  // 43 entries: no MTP entry
    ModelConfig c = parse(j);
    EXPECT_EQ(c.compress_ratios.size(), 43u);
    EXPECT_TRUE(c.mtp_compress_ratios.empty());
    EXPECT_EQ(c.mtp_ratio(0), 0);  // MTP defaults to sliding window
    // 0731-style: three trailing entries.
    r.push_back(0);
    r.push_back(0);
    r.push_back(4);
    j["compress_ratios"] = r;
    c = parse(j);
    EXPECT_EQ(c.compress_ratios.size(), 43u);
    EXPECT_EQ(c.mtp_compress_ratios, (std::vector<int>{0, 0, 4}));
    // Too few entries.
    r = json::array();
    for (int i = 0; i < 42; ++i) r.push_back(0);
    j["compress_ratios"] = r;
    expect_config_error(j, {"test-config.json", "compress_ratios", "42 entries", "num_hidden_layers = 43"});
}

TEST(Config, CurrentRevisionExpertDtypeAndVariants) {
    json j = config_json("v4-flash.json");
    j["expert_dtype"] = "fp4";
    ModelConfig c = parse(j);
    EXPECT_TRUE(c.expert_dtype_explicit);
    EXPECT_EQ(c.expert_dtype, ExpertDtype::FP4);
    j["expert_dtype"] = "fp8";
    EXPECT_EQ(parse(j).expert_dtype, ExpertDtype::FP8);
    j["expert_dtype"] = nullptr;  // null = not given
    EXPECT_FALSE(parse(j).expert_dtype_explicit);
    j["eos_token_id"] = {1, 2};  // some configs list several
    EXPECT_EQ(parse(j).eos_token_id, 1);
    j["rope_scaling"] = nullptr;
    EXPECT_EQ(parse(j).rope_scaling.type, "");
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 4096}};
    c = parse(j);
    EXPECT_EQ(c.rope_scaling.type, "yarn");
    EXPECT_EQ(c.rope_scaling.factor, 4);
    EXPECT_EQ(c.rope_scaling.beta_fast, 32);  // defaults
    j.erase("quantization_config");
    EXPECT_FALSE(parse(j).quantized());
    j["dspark_block_size"] = 5;  // 0731 keys are kept as unknown, not rejected
    EXPECT_EQ(parse(j).unknown_keys, std::vector<std::string>{"dspark_block_size"});
}

TEST(Config, MissingRequiredKeysAreNamed) {
    const json base = config_json("v4-flash.json");
    for (const char* key : {"model_type", "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                            "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_lora_rank", "o_groups",
                            "sliding_window", "compress_ratios", "index_n_heads", "index_head_dim", "index_topk",
                            "hc_mult", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                            "num_hash_layers", "routed_scaling_factor"}) {
        SCOPED_TRACE(key);
        json j = base;
        j.erase(key);
        expect_config_error(j, {std::string("test-config.json: ") + key, "missing required key"});
    }
    json j = base;
    j["rope_scaling"].erase("factor");
    expect_config_error(j, {"rope_scaling.factor", "missing"});
    j = base;
    j["quantization_config"].erase("quant_method");
    expect_config_error(j, {"quantization_config.quant_method", "missing"});
}

TEST(Config, WrongTypesAreNamed) {
    struct Case {
        const char* key;
        json value;
        const char* expect;
    };
    const std::vector<Case> cases = {
        {"hidden_size", "4096", "expected an integer"},
        {"hidden_size", 4096.5, "expected an integer"},
        {"num_hidden_layers", true, "expected an integer"},
        {"vocab_size", json::array(), "expected an integer"},
        {"rope_theta", "10000", "expected a number"},
        {"hc_eps", json::object(), "expected a number"},
        {"tie_word_embeddings", 0, "expected true or false"},
        {"norm_topk_prob", "true", "expected true or false"},
        {"scoring_func", 3, "expected a string"},
        {"model_type", json::array(), "expected a string"},
        {"compress_ratios", 4, "expected a list of integers"},
        {"compress_ratios", json::array({0, "4"}), "expected an integer"},
        {"rope_scaling", "yarn", "expected an object or null"},
        {"quantization_config", 1, "expected an object or null"},
        {"architectures", "DeepseekV4ForCausalLM", "expected a list of strings"},
        {"expert_dtype", 4, "expected a string"},
        {"eos_token_id", "1", "expected an integer"},
        {"num_attention_heads", 1e12, "expected an integer"},
        {"num_attention_heads", 4294967296LL, "out of range"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
        json j = config_json("v4-flash.json");
        j[c.key] = c.value;
        expect_config_error(j, {c.key, c.expect});
    }
    json j = config_json("v4-flash.json");
    j["quantization_config"]["weight_block_size"] = 128;
    expect_config_error(j, {"quantization_config.weight_block_size", "expected [rows, cols]"});
    j = config_json("v4-flash.json");
    j["rope_scaling"]["beta_fast"] = "32";
    expect_config_error(j, {"rope_scaling.beta_fast", "expected a number"});
}

TEST(Config, InvalidOrInconsistentValuesAreNamed) {
    struct Case {
        const char* key;  // top-level key to set (or a dotted sub-key)
        json value;
        std::vector<std::string> expect;
    };
    const std::vector<Case> cases = {
        {"model_type", "deepseek_v41", {"model_type", "not supported"}},
        {"hidden_size", 0, {"hidden_size", ">= 1"}},
        {"num_hidden_layers", 0, {"num_hidden_layers"}},
        {"vocab_size", -5, {"vocab_size"}},
        {"num_key_value_heads", 8, {"num_key_value_heads", "must be 1"}},
        {"head_dim", 62, {"head_dim 62 must be >= qk_rope_head_dim 64"}},
        {"head_dim", 0, {"head_dim", ">= 1"}},
        {"qk_rope_head_dim", 63, {"qk_rope_head_dim", "even"}},
        {"qk_rope_head_dim", 0, {"qk_rope_head_dim", "positive even"}},
        {"qk_rope_head_dim", 514, {"head_dim 512 must be >= qk_rope_head_dim 514"}},
        {"o_groups", 7, {"o_groups 7", "multiple"}},
        {"o_groups", 0, {"o_groups", ">= 1"}},
        {"sliding_window", 0, {"sliding_window", ">= 1"}},
        {"num_attention_heads", 0, {"num_attention_heads", ">= 1"}},
        {"attention_bias", true, {"attention_bias"}},
        {"compress_ratios", json::array({0, -3}), {"compress_ratios[1]", "-3", "not a valid compress ratio"}},
        {"compress_ratios", json::array({0, 1 << 21}), {"compress_ratios[1]", "2097152"}},
        {"index_head_dim", 32, {"index_head_dim 32 must be >= qk_rope_head_dim 64"}},
        {"index_n_heads", 0, {"index_n_heads", ">= 1"}},
        {"index_topk", -1, {"index_topk", ">= 0"}},
        {"hc_mult", 0, {"hc_mult"}},
        {"hc_eps", 0, {"hc_eps", "> 0"}},
        {"n_shared_experts", 0, {"n_shared_experts"}},
        {"num_experts_per_tok", 300, {"num_experts_per_tok", "n_routed_experts = 256"}},
        {"num_hash_layers", 44, {"num_hash_layers"}},
        {"scoring_func", "softmax_plus", {"scoring_func", "softmax_plus"}},
        {"topk_method", "greedy", {"topk_method"}},
        {"hidden_act", "gelu", {"hidden_act", "SwiGLU"}},
        {"rms_norm_eps", -1, {"rms_norm_eps"}},
        {"routed_scaling_factor", 0, {"routed_scaling_factor"}},
        {"expert_dtype", "int4", {"expert_dtype", "int4"}},
        {"bos_token_id", 129280, {"bos_token_id", "vocab_size"}},
        {"torch_dtype", "int8", {"torch_dtype"}},
        {"moe_intermediate_size", 2000, {"moe_intermediate_size", "multiple of 32", "expert_dtype"}},
        {"hidden_size", 4001, {"hidden_size 4001", "multiple of 32", "FP4 experts"}},
        {"hc_sinkhorn_iters", 0, {"hc_sinkhorn_iters", ">= 1"}},
        {"num_experts_per_tok", 0, {"num_experts_per_tok"}},
        {"num_nextn_predict_layers", -1, {"num_nextn_predict_layers"}},
        {"max_position_embeddings", 0, {"max_position_embeddings"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
        json j = config_json("v4-flash.json");
        j[c.key] = c.value;
        if (std::string(c.key) == "compress_ratios") j["num_hidden_layers"] = 2;
        expect_refused(j, c.expect);
    }
    struct SubCase {
        const char* obj;
        const char* key;
        json value;
        const char* expect;
    };
    const std::vector<SubCase> sub = {
        {"rope_scaling", "type", "linear", "rope_scaling.type"},
        {"rope_scaling", "factor", 0.5, "rope_scaling.factor"},
        {"rope_scaling", "beta_fast", 0.5, "beta_fast"},
        {"quantization_config", "quant_method", "gptq", "quantization_config.quant_method"},
        {"quantization_config", "fmt", "e5m2", "quantization_config.fmt"},
        {"quantization_config", "weight_block_size", json::array({32, 32}), "weight_block_size"},
        {"quantization_config", "activation_scheme", "static", "activation_scheme"},
    };
    for (const auto& c : sub) {
        SCOPED_TRACE(std::string(c.obj) + "." + c.key);
        json j = config_json("v4-flash.json");
        j[c.obj][c.key] = c.value;
        expect_config_error(j, {c.expect});
    }
}

// Shapes the model's math defines and HF transformers' DeepseekV4Config runs are accepted, each on its own edit of
// a tiny config; and the release numerics refuse only what their simulations cannot do (the Hadamard rotation).
TEST(Config, AcceptsEveryShapeTheMathDefines) {
    struct Case {
        const char* what;
        json edits;  // top-level keys to set on tiny-a.json
    };
    const std::vector<Case> cases = {
        {"rotary-only attention heads", {{"head_dim", 64}, {"qk_rope_head_dim", 64}}},
        {"rotary-only indexer heads", {{"index_head_dim", 64}, {"qk_rope_head_dim", 64}}},
        {"no-rope part not a multiple of 64", {{"head_dim", 77}, {"qk_rope_head_dim", 6}}},
        {"indexer head not a power of two", {{"index_head_dim", 96}}},
        {"indexer head below 32", {{"index_head_dim", 10}, {"qk_rope_head_dim", 4}}},
        {"one head", {{"num_attention_heads", 1}, {"o_groups", 1}}},
        {"output groups spanning heads", {{"num_attention_heads", 3}, {"head_dim", 128}, {"o_groups", 8}}},
        {"window of one token", {{"sliding_window", 1}}},
        {"window shorter than a compression window", {{"sliding_window", 3}}},
        {"compress ratio mix", {{"compress_ratios", {0, 4, 3, 1, 16, 4, 128}}, {"num_hidden_layers", 6}}},
        {"index_topk 0", {{"index_topk", 0}}},
        {"one indexer head", {{"index_n_heads", 1}}},
        {"dimensions not multiples of 128, unquantized",
         {{"hidden_size", 37}, {"q_lora_rank", 5}, {"o_lora_rank", 3}, {"moe_intermediate_size", 7},
          {"vocab_size", 101}, {"quantization_config", nullptr}}},
        {"FP8 experts with partial 128-blocks", {{"hidden_size", 40}, {"moe_intermediate_size", 20},
                                                 {"expert_dtype", "fp8"}}},
        {"FP4 experts, multiples of 32", {{"hidden_size", 96}, {"moe_intermediate_size", 32}}},
        {"one stream", {{"hc_mult", 1}}},
        {"every expert active, single expert", {{"n_routed_experts", 1}, {"num_experts_per_tok", 1}}},
        {"every layer hash-routed", {{"num_hash_layers", 4}}},
        {"swish (HF's name of silu)", {{"hidden_act", "swish"}}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        json j = config_json("tiny-a.json");
        for (const auto& [k, v] : c.edits.items()) j[k] = v;
        try {
            const ModelConfig cfg = parse(j);
            EXPECT_EQ(parse_model_config(model_config_to_json(cfg), "roundtrip.json").head_dim, cfg.head_dim);
        } catch (const Error& e) {
            ADD_FAILURE() << "refused: " << e.what();
        }
    }
    json j = config_json("tiny-a.json");
    j["index_head_dim"] = 96;
    expect_error([&] { check_release_numerics_supported(parse(j), "x.json"); },
                 {"x.json", "index_head_dim 96", "power of two", "Hadamard"});
    j["compress_ratios"] = {0, 128, 128, 0, 0};  // no indexer layer: the indexer size does not matter
    EXPECT_NO_THROW(check_release_numerics_supported(parse(j), "x.json"));
    EXPECT_NO_THROW(check_release_numerics_supported(parse(config_json("tiny-a.json")), "x.json"));
}

// A config in HF transformers' own names (as DeepseekV4Config.save_pretrained writes it: layer_types +
// compress_rates, mlp_layer_types, partial_rotary_factor, nested rope_parameters, none of the official schedule
// keys) gives the same model as the official names; both together must agree, and what the official layout
// cannot express is refused naming the key.
TEST(Config, ReadsAndChecksHfTransformersNames) {
    const json official = config_json("tiny-a.json");  // ratios [0, 4, 128, 4] + MTP 0, 2 hash layers, rope 64 of 128
    json hf = official;
    for (const char* k : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling"}) hf.erase(k);
    hf["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                         "compressed_sparse_attention"};
    hf["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
    hf["mlp_layer_types"] = {"hash_moe", "hash_moe", "moe", "moe"};
    hf["partial_rotary_factor"] = 0.5;
    hf["rope_parameters"] = {
        {"main", {{"rope_type", "default"}, {"rope_theta", 10000}, {"partial_rotary_factor", 0.5}}},
        {"compress", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32},
                      {"beta_slow", 1}, {"rope_theta", 160000}, {"rope_type", "yarn"}, {"attention_factor", 1.0}}}};
    const ModelConfig a = parse(official), b = parse(hf);
    EXPECT_EQ(b.compress_ratios, a.compress_ratios);
    EXPECT_TRUE(b.mtp_compress_ratios.empty());
    EXPECT_EQ(b.num_hash_layers, a.num_hash_layers);
    EXPECT_EQ(b.qk_rope_head_dim, a.qk_rope_head_dim);
    EXPECT_EQ(b.rope_scaling.type, "yarn");
    EXPECT_EQ(b.rope_scaling.factor, a.rope_scaling.factor);
    EXPECT_EQ(b.rope_scaling.original_max_position_embeddings, a.rope_scaling.original_max_position_embeddings);
    EXPECT_EQ(b.compress_rope_theta, a.compress_rope_theta);
    EXPECT_TRUE(b.unknown_keys.empty());
    // Both names given and agreeing: accepted.
    json both = hf;
    for (const char* k : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling"})
        both[k] = official[k];
    EXPECT_EQ(parse(both).compress_ratios, a.compress_ratios);
    // An HCA rate other than 128 is a non-overlapping ratio.
    json hca = hf;
    hca["compress_rates"]["heavily_compressed_attention"] = 16;
    EXPECT_EQ(parse(hca).compress_ratios, (std::vector<int>{0, 4, 16, 4}));
    hca.erase("compress_rates");
    hca["compress_rate_hca"] = 3;
    EXPECT_EQ(parse(hca).compress_ratios, (std::vector<int>{0, 4, 3, 4}));

    struct Bad {
        const char* what;
        json edits;
        std::vector<std::string> expect;
    };
    const std::vector<Bad> bad = {
        {"ratios disagree", {{"compress_ratios", {0, 4, 4, 4, 0}}}, {"compress_ratios[2] = 4", "layer_types[2]"}},
        {"hash layers disagree", {{"num_hash_layers", 1}}, {"mlp_layer_types", "num_hash_layers is 1"}},
        {"rope width disagrees", {{"qk_rope_head_dim", 32}}, {"partial_rotary_factor", "qk_rope_head_dim is 32"}},
        {"yarn disagrees",
         {{"rope_scaling", {{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 4096}}}},
         {"rope_parameters.compress", "rope_scaling"}},
        {"CSA rate 8", {{"compress_rates", {{"compressed_sparse_attention", 8}}}}, {"compress_rates", "rate of 8"}},
        {"HCA rate 4", {{"compress_rate_hca", 4}}, {"compress_rates", "rate of 4"}},
        {"unknown layer type", {{"layer_types", {"sliding_attention", "full_attention", "sliding_attention",
                                                 "sliding_attention"}}},
         {"layer_types[1]", "full_attention"}},
        {"too few layer types", {{"layer_types", {"sliding_attention"}}}, {"layer_types", "num_hidden_layers = 4"}},
        {"hash after moe", {{"mlp_layer_types", {"moe", "hash_moe", "moe", "moe"}}},
         {"mlp_layer_types[1]", "hash_moe"}},
        {"main rope scaled", {{"rope_parameters", {{"main", {{"rope_type", "yarn"}, {"factor", 2},
                                                             {"original_max_position_embeddings", 64}}}}}},
         {"rope_parameters.main", "no scaling"}},
        {"YaRN magnitude factor", {{"rope_parameters", {{"compress", {{"rope_type", "yarn"}, {"factor", 16},
                                                                      {"original_max_position_embeddings", 4096},
                                                                      {"attention_factor", 1.277}}}}}},
         {"rope_parameters.compress.attention_factor", "1.277"}},
        {"theta disagrees", {{"rope_theta", 5000}}, {"rope_parameters.main.rope_theta", "rope_theta = 5000"}},
    };
    // HF applies compress_rates to the compress_ratios 128 layers too: only the default rates agree.
    json rates = official;
    rates["compress_rates"] = {{"heavily_compressed_attention", 128}};
    EXPECT_EQ(parse(rates).compress_ratios, a.compress_ratios);
    rates["compress_rate_hca"] = 64;
    expect_refused(rates, {"compress_rates", "HCA rate of 64", "layer_types"});
    for (const auto& c : bad) {
        SCOPED_TRACE(c.what);
        json j = hf;
        for (const auto& [k, v] : c.edits.items()) j[k] = v;
        expect_refused(j, c.expect);
    }
}

TEST(Config, NotJsonAndMissingFile) {
    expect_error([] { parse_model_config("{\"hidden_size\": ", "broken.json"); }, {"broken.json", "not valid JSON"});
    expect_error([] { parse_model_config("[1]", "list.json"); }, {"list.json", "JSON object"});
    expect_error([] { load_model_config("/nonexistent/config.json"); }, {"/nonexistent/config.json", "cannot open"});
}

TEST(Config, RoundTripsThroughJson) {
    for (const char* name : {"v4-flash.json", "tiny-a.json", "tiny-b.json"}) {
        SCOPED_TRACE(name);
        const ModelConfig a = load_model_config(config_path(name));
        const std::string text = model_config_to_json(a);
        const ModelConfig b = parse_model_config(text, "roundtrip.json");
        EXPECT_EQ(model_config_to_json(b), text);
        EXPECT_EQ(b.compress_ratios, a.compress_ratios);
        EXPECT_EQ(b.mtp_compress_ratios, a.mtp_compress_ratios);
        EXPECT_EQ(b.hidden_size, a.hidden_size);
        EXPECT_EQ(b.rope_scaling.factor, a.rope_scaling.factor);
        EXPECT_EQ(b.expert_dtype, a.expert_dtype);
        EXPECT_EQ(b.expert_dtype_explicit, a.expert_dtype_explicit);
        EXPECT_EQ(b.quantization.present, a.quantization.present);
        // Every key of the official file is written back (47, + expert_dtype when explicit).
        const auto j = json::parse(text);
        EXPECT_EQ(j.size(), a.expert_dtype_explicit ? 48u : 47u);
    }
}
