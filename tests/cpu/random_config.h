// Random valid DeepSeek-V4 configs for the wide-config tests: every size drawn from small ranges that include the
// edge shapes the validation accepts (one head, rotary-only attention or indexer heads, dimensions that are not
// multiples of 128 or even of 2, a window of one token or shorter than a compression window, compress ratios
// other than 4 and 128, index_topk 0, one stream, hash-routed layers, odd vocabularies, FP8 or FP4 or
// unquantized weights). The generator only draws; validate_model_config decides, so a draw it refuses is a bug
// in one of the two.
#pragma once
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "util/random.h"

namespace flashseek::test {

struct RandomConfigLimits {
    int max_layers = 4;
    int max_ratio_pool = 24;  // largest non-overlapping ratio drawn (128 is drawn separately)
};

// One random config (the official config.json layout) from rng.
inline nlohmann::ordered_json random_config(Rng& rng, const RandomConfigLimits& lim = {}) {
    auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng.below(uint64_t(hi - lo + 1))); };
    auto chance = [&](double p) { return rng.uniform() < p; };
    nlohmann::ordered_json j;
    j["architectures"] = {"DeepseekV4ForCausalLM"};
    j["model_type"] = "deepseek_v4";
    j["torch_dtype"] = "bfloat16";

    const int layers = int(pick(1, lim.max_layers));
    const int rope = 2 * int(pick(1, 8));
    const int heads = chance(0.3) ? 1 : int(pick(2, 5));
    const int head_dim = chance(0.3) ? rope : rope + int(pick(1, 21));  // rotary-only heads about a third of the time
    // o_groups: any divisor of heads * head_dim (a group may span a head boundary).
    std::vector<int> divisors;
    for (int g = 1; g <= heads * head_dim; ++g)
        if ((heads * head_dim) % g == 0 && g <= 12) divisors.push_back(g);
    const int o_groups = divisors[size_t(pick(0, int64_t(divisors.size()) - 1))];

    // Quantization: none (bf16 weights, any size), FP8 everywhere (partial 128-blocks), or FP4 experts (widths
    // multiples of 32, the layout's scale granularity).
    const int quant = int(pick(0, 2));
    int64_t hidden = pick(3, 70), inter = pick(1, 40);
    if (quant == 2) {
        hidden = 32 * pick(1, 3);
        inter = 32 * pick(1, 2);
    }
    j["hidden_size"] = hidden;
    j["num_hidden_layers"] = layers;
    j["vocab_size"] = 2 * pick(8, 150) + 1;
    j["tie_word_embeddings"] = chance(0.2);
    j["max_position_embeddings"] = 65536;
    j["bos_token_id"] = 0;
    j["eos_token_id"] = 1;
    j["num_attention_heads"] = heads;
    j["num_key_value_heads"] = 1;
    j["head_dim"] = head_dim;
    j["qk_rope_head_dim"] = rope;
    j["q_lora_rank"] = pick(1, 40);
    j["o_lora_rank"] = pick(1, 20);
    j["o_groups"] = o_groups;
    j["sliding_window"] = chance(0.25) ? pick(1, 3) : pick(4, 40);
    j["attention_bias"] = false;
    j["rope_theta"] = 10000;
    j["compress_rope_theta"] = 160000;
    if (chance(0.7)) {
        j["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 4096},
                             {"beta_fast", 32}, {"beta_slow", 1}};
    } else {
        j["rope_scaling"] = nullptr;
    }
    // Layer schedule: sliding (0), CSA (4), or a non-overlapping ratio; MTP layers get trailing entries.
    const int mtp = int(pick(0, 1));
    std::vector<int> ratios;
    for (int l = 0; l < layers + mtp; ++l) {
        const int kind = int(pick(0, 3));  // sliding 1/4, CSA 1/2, non-overlapping 1/4
        if (kind == 0) ratios.push_back(0);
        else if (kind == 3) ratios.push_back(chance(0.2) ? 128 : int(pick(1, lim.max_ratio_pool)));
        else ratios.push_back(4);
    }
    j["compress_ratios"] = ratios;
    j["index_n_heads"] = pick(1, 20);
    j["index_head_dim"] = chance(0.3) ? rope : rope + pick(1, 20);
    j["index_topk"] = chance(0.15) ? 0 : pick(1, 12);
    j["hc_mult"] = pick(1, 4);
    j["hc_sinkhorn_iters"] = pick(1, 20);
    j["hc_eps"] = 1e-6;
    const int experts = int(pick(1, 9));
    j["n_routed_experts"] = experts;
    j["n_shared_experts"] = pick(1, 2);
    j["num_experts_per_tok"] = pick(1, experts);
    j["moe_intermediate_size"] = inter;
    j["num_hash_layers"] = pick(0, layers);
    const char* scoring[] = {"sqrtsoftplus", "sigmoid", "softmax"};
    j["scoring_func"] = scoring[pick(0, 2)];
    j["topk_method"] = "noaux_tc";
    j["norm_topk_prob"] = chance(0.8);
    j["routed_scaling_factor"] = 0.5 + 2.0 * rng.uniform();
    j["swiglu_limit"] = chance(0.5) ? 10.0 : 0.5 + 2.0 * rng.uniform();
    j["hidden_act"] = chance(0.9) ? "silu" : "swish";
    j["rms_norm_eps"] = 1e-6;
    j["num_nextn_predict_layers"] = mtp;
    if (quant > 0) {
        j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                                    {"weight_block_size", {128, 128}}, {"activation_scheme", "dynamic"}};
        j["expert_dtype"] = quant == 2 ? "fp4" : "fp8";
    }
    return j;
}

}  // namespace flashseek::test
