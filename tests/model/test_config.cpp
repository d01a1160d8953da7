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
        {"head_dim", 500, {"head_dim", "multiple of 64"}},
        {"qk_rope_head_dim", 63, {"qk_rope_head_dim", "even"}},
        {"qk_rope_head_dim", 512, {"head_dim", "qk_rope_head_dim"}},
        {"o_groups", 7, {"o_groups", "multiple"}},
        {"attention_bias", true, {"attention_bias"}},
        {"compress_ratios", json::array({0, 3}), {"compress_ratios[1]", "3"}},
        {"index_head_dim", 96, {"index_head_dim", "power of two"}},
        {"index_topk", 0, {"index_topk"}},
        {"hc_mult", 0, {"hc_mult"}},
        {"hc_eps", 0, {"hc_eps", "> 0"}},
        {"n_shared_experts", 0, {"n_shared_experts"}},
        {"num_experts_per_tok", 300, {"num_experts_per_tok", "n_routed_experts = 256"}},
        {"num_hash_layers", 44, {"num_hash_layers"}},
        {"scoring_func", "softmax_plus", {"scoring_func", "softmax_plus"}},
        {"topk_method", "greedy", {"topk_method"}},
        {"hidden_act", "gelu", {"hidden_act"}},
        {"rms_norm_eps", -1, {"rms_norm_eps"}},
        {"routed_scaling_factor", 0, {"routed_scaling_factor"}},
        {"expert_dtype", "int4", {"expert_dtype", "int4"}},
        {"bos_token_id", 129280, {"bos_token_id", "vocab_size"}},
        {"torch_dtype", "int8", {"torch_dtype"}},
        {"moe_intermediate_size", 2000, {"moe_intermediate_size", "multiple of 32"}},
        {"num_nextn_predict_layers", -1, {"num_nextn_predict_layers"}},
        {"max_position_embeddings", 0, {"max_position_embeddings"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
        json j = config_json("v4-flash.json");
        j[c.key] = c.value;
        if (std::string(c.key) == "compress_ratios") j["num_hidden_layers"] = 2;
        if (std::string(c.key) == "num_hash_layers" || std::string(c.key) == "compress_ratios") {}
        std::vector<std::string> parts = c.expect;
        parts.push_back("test-config.json");
        try {
            parse(j);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
        }
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
