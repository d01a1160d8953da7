// The FLOP count is checked against an independent derivation: the tensor inventory's matrices (every 2-D weight
// of a layer counts once per token, routed experts top_k / n_routed_experts times) and the attention count summed
// by hand for a small configuration.
#include <gtest/gtest.h>

#include "model/flop_count.h"
#include "model/model_test_util.h"
#include "model/weights.h"

namespace flashseek {
namespace {

using test::config_path;

// 2 x the multiply-adds of one token through the layers' matrices, read off the inventory.
double inventory_linear_flops(const ModelConfig& c) {
    double macs = 0;
    for (const TensorSpec& t : expected_tensors(c, {.include_mtp = false})) {
        if (t.name.rfind("layers.", 0) != 0 || t.shape.size() != 2) continue;
        const bool weight = t.name.ends_with(".weight") || t.name.ends_with("_fn");
        if (!weight || t.dtype == DType::I64) continue;
        // FP4 experts pack two values per byte along the input dimension.
        const double in = double(t.shape[1]) * (t.dtype == DType::I8 ? 2.0 : 1.0);
        double m = double(t.shape[0]) * in;
        if (t.name.find(".experts.") != std::string::npos)
            m *= double(c.num_experts_per_tok) / double(c.n_routed_experts);
        macs += m;
    }
    return 2.0 * macs;
}

TEST(FlopCount, LinearsMatchTheInventory) {
    for (const char* name : {"v4-flash.json", "golden-a.json", "tiny-sharding.json", "wide-b.json"}) {
        const ModelConfig c = load_model_config(config_path(name));
        const ForwardFlops f = token_flops(c, 0, 0);
        const double want = inventory_linear_flops(c);
        EXPECT_NEAR(f.linear, want, want * 1e-12) << name;
    }
}

TEST(FlopCount, V4FlashIsAboutTwiceTheActiveParameters) {
    const ModelConfig c = load_model_config(config_path("v4-flash.json"));
    const ForwardFlops f = token_flops(c, 0, 0);
    // 13B active parameters, of which about 1.06B are the embedding and the head: 2 x ~12B per token.
    EXPECT_GT(f.linear, 2 * 11.0e9);
    EXPECT_LT(f.linear, 2 * 13.0e9);
    // Half the layers' count for the first half of the layers, within the difference between layer kinds.
    const ForwardFlops half = token_flops(c, 20, 0);
    EXPECT_NEAR(half.linear / f.linear, 20.0 / c.num_hidden_layers, 0.02);
}

TEST(FlopCount, AttentionCountsTheAttendedKeys) {
    ModelConfig c = load_model_config(config_path("v4-flash.json"));
    const double H = c.num_attention_heads, hd = c.head_dim;
    // The first layer of each kind, alone in a one-layer configuration.
    int l4 = -1, l128 = -1, l0 = -1;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
        if (c.ratio(l) == 4 && l4 < 0) l4 = l;
        if (c.ratio(l) == 128 && l128 < 0) l128 = l;
        if (c.ratio(l) == 0 && l0 < 0) l0 = l;
    }
    ASSERT_GE(l4, 0);
    ASSERT_GE(l128, 0);
    const int64_t p = 100000;  // 100,001 tokens seen
    auto one_layer = [&](int layer) {
        ModelConfig only = c;
        only.compress_ratios.assign(size_t(c.num_hidden_layers), 0);
        only.compress_ratios[0] = c.ratio(layer);
        return token_flops(only, 1, p).attention;
    };
    EXPECT_DOUBLE_EQ(one_layer(l4), 2.0 * 2.0 * H * hd * (128 + 512) +
                                        2.0 * c.index_n_heads * c.index_head_dim * double(100001 / 4));
    EXPECT_DOUBLE_EQ(one_layer(l128), 2.0 * 2.0 * H * hd * (128 + double(100001 / 128)));
    if (l0 >= 0) {
        EXPECT_DOUBLE_EQ(one_layer(l0), 2.0 * 2.0 * H * hd * 128);
    }
    // Position 9: ten keys in the window, two ratio-4 entries, none of ratio 128.
    ModelConfig only = c;
    only.compress_ratios.assign(size_t(c.num_hidden_layers), 0);
    only.compress_ratios[0] = 4;
    EXPECT_DOUBLE_EQ(token_flops(only, 1, 9).attention,
                     2.0 * 2.0 * H * hd * (10 + 2) + 2.0 * c.index_n_heads * c.index_head_dim * 2);
}

TEST(FlopCount, PrefillMeanIsTheMeanOfThePositionsPlusTheHeadOnce) {
    const ModelConfig c = load_model_config(config_path("golden-a.json"));
    const int64_t n = 777;
    ForwardFlops sum;
    for (int64_t p = 0; p < n; ++p) {
        const ForwardFlops t = token_flops(c, 0, p);
        sum.linear += t.linear;
        sum.attention += t.attention;
    }
    const ForwardFlops mean = prefill_flops_per_token(c, 0, n);
    EXPECT_NEAR(mean.linear, sum.linear / n, sum.linear / n * 1e-12);
    EXPECT_NEAR(mean.attention, sum.attention / n, sum.attention / n * 1e-12);
    EXPECT_DOUBLE_EQ(mean.head, 2.0 * double(c.hidden_size) * double(c.vocab_size) / n);
    EXPECT_EQ(prefill_flops_per_token(c, 0, 0).total(), 0.0);
}

}  // namespace
}  // namespace flashseek
