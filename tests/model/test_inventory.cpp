// expected_tensors() against the official DeepSeek-V4-Flash checkpoint inventory (spec §1.4, §3): tensor count,
// dtype histogram, total bytes, parameter counts and the shapes the spec lists.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "model/weights.h"
#include "model_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

int64_t numel(const TensorSpec& t) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    return n;
}
bool ends_with(const std::string& s, const std::string& x) {
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}
const TensorSpec& find(const std::vector<TensorSpec>& v, const std::string& name) {
    for (const auto& t : v)
        if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
}
void expect_spec(const std::vector<TensorSpec>& v, const std::string& name, DType dt, std::vector<int64_t> shape) {
    SCOPED_TRACE(name);
    const TensorSpec& t = find(v, name);
    EXPECT_EQ(t.dtype, dt) << dtype_name(t.dtype);
    EXPECT_EQ(t.shape, shape);
}

}  // namespace

TEST(Inventory, MatchesOfficialV4FlashCheckpoint) {
    const ModelConfig c = load_model_config(config_path("v4-flash.json"));
    const auto specs = expected_tensors(c);
    // spec §3.1: 69 187 tensors, 159 609 485 896 bytes, dtype histogram.
    EXPECT_EQ(specs.size(), 69187u);
    std::map<DType, int> hist;
    size_t bytes = 0;
    int64_t params = 0, mtp_params = 0, mtp_tensors = 0;
    for (const auto& t : specs) {
        hist[t.dtype]++;
        bytes += size_t(numel(t)) * dtype_size(t.dtype);
        const bool mtp = t.name.rfind("mtp.", 0) == 0;
        mtp_tensors += mtp;
        // Parameters: logical elements (packed FP4 holds two per byte), scales and tid2eid not counted.
        if (ends_with(t.name, ".scale") || ends_with(t.name, "tid2eid")) continue;
        (mtp ? mtp_params : params) += numel(t) * (t.dtype == DType::I8 ? 2 : 1);
    }
    EXPECT_EQ(bytes, 159609485896ull);
    EXPECT_EQ(hist[DType::BF16], 433);
    EXPECT_EQ(hist[DType::F32], 417);
    EXPECT_EQ(hist[DType::F8_E4M3], 375);
    EXPECT_EQ(hist[DType::F8_E8M0], 34167);
    EXPECT_EQ(hist[DType::I64], 3);
    EXPECT_EQ(hist[DType::I8], 33792);
    EXPECT_EQ(mtp_tensors, 1575);
    // spec §1.4: main model 284 332 240 471 parameters; with MTP, the inventory's 290 942 289 362.
    EXPECT_EQ(params, 284332240471LL);
    EXPECT_EQ(params + mtp_params, 290942289362LL);

    // Names unique; order: globals, then layers in order, then MTP.
    std::set<std::string> names;
    for (const auto& t : specs) EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_EQ(specs.front().name, "embed.weight");
    EXPECT_EQ(specs.back().name.rfind("mtp.0.", 0), 0u);

    // Shapes from spec §3.2/§3.3.
    expect_spec(specs, "embed.weight", DType::BF16, {129280, 4096});
    expect_spec(specs, "head.weight", DType::BF16, {129280, 4096});
    expect_spec(specs, "norm.weight", DType::BF16, {4096});
    expect_spec(specs, "hc_head_fn", DType::F32, {4, 16384});
    expect_spec(specs, "hc_head_base", DType::F32, {4});
    expect_spec(specs, "hc_head_scale", DType::F32, {1});
    expect_spec(specs, "layers.0.hc_attn_fn", DType::F32, {24, 16384});
    expect_spec(specs, "layers.0.hc_ffn_base", DType::F32, {24});
    expect_spec(specs, "layers.0.hc_ffn_scale", DType::F32, {3});
    expect_spec(specs, "layers.5.attn.attn_sink", DType::F32, {64});
    expect_spec(specs, "layers.5.attn.q_norm.weight", DType::BF16, {1024});
    expect_spec(specs, "layers.5.attn.kv_norm.weight", DType::BF16, {512});
    expect_spec(specs, "layers.7.attn.wq_a.weight", DType::F8_E4M3, {1024, 4096});
    expect_spec(specs, "layers.7.attn.wq_a.scale", DType::F8_E8M0, {8, 32});
    expect_spec(specs, "layers.7.attn.wq_b.scale", DType::F8_E8M0, {256, 8});
    expect_spec(specs, "layers.7.attn.wkv.scale", DType::F8_E8M0, {4, 32});
    expect_spec(specs, "layers.7.attn.wo_a.weight", DType::F8_E4M3, {8192, 4096});
    expect_spec(specs, "layers.7.attn.wo_a.scale", DType::F8_E8M0, {64, 32});
    expect_spec(specs, "layers.7.attn.wo_b.weight", DType::F8_E4M3, {4096, 8192});
    expect_spec(specs, "layers.7.attn.wo_b.scale", DType::F8_E8M0, {32, 64});
    expect_spec(specs, "layers.9.ffn.gate.weight", DType::BF16, {256, 4096});
    expect_spec(specs, "layers.9.ffn.shared_experts.w1.scale", DType::F8_E8M0, {16, 32});
    expect_spec(specs, "layers.9.ffn.shared_experts.w2.weight", DType::F8_E4M3, {4096, 2048});
    expect_spec(specs, "layers.9.ffn.experts.255.w1.weight", DType::I8, {2048, 2048});
    expect_spec(specs, "layers.9.ffn.experts.255.w3.scale", DType::F8_E8M0, {2048, 128});
    expect_spec(specs, "layers.9.ffn.experts.0.w2.weight", DType::I8, {4096, 1024});
    expect_spec(specs, "layers.9.ffn.experts.0.w2.scale", DType::F8_E8M0, {4096, 64});
    for (int l = 0; l < 43; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        EXPECT_EQ(names.count(p + "ffn.gate.tid2eid"), l < 3 ? 1u : 0u) << l;
        EXPECT_EQ(names.count(p + "ffn.gate.bias"), l < 3 ? 0u : 1u) << l;
        EXPECT_EQ(names.count(p + "attn.compressor.norm.weight"), l >= 2 ? 1u : 0u) << l;
        EXPECT_EQ(names.count(p + "attn.indexer.weights_proj.weight"), (l >= 2 && l % 2 == 0) ? 1u : 0u) << l;
    }
    expect_spec(specs, "layers.2.ffn.gate.tid2eid", DType::I64, {129280, 6});
    expect_spec(specs, "layers.3.ffn.gate.bias", DType::F32, {256});
    expect_spec(specs, "layers.2.attn.compressor.wkv.weight", DType::BF16, {1024, 4096});
    expect_spec(specs, "layers.2.attn.compressor.ape", DType::F32, {4, 1024});
    expect_spec(specs, "layers.3.attn.compressor.wgate.weight", DType::BF16, {512, 4096});
    expect_spec(specs, "layers.3.attn.compressor.ape", DType::F32, {128, 512});
    expect_spec(specs, "layers.3.attn.compressor.norm.weight", DType::BF16, {512});
    expect_spec(specs, "layers.2.attn.indexer.wq_b.weight", DType::F8_E4M3, {8192, 1024});
    expect_spec(specs, "layers.2.attn.indexer.wq_b.scale", DType::F8_E8M0, {64, 8});
    expect_spec(specs, "layers.2.attn.indexer.weights_proj.weight", DType::BF16, {64, 4096});
    expect_spec(specs, "layers.2.attn.indexer.compressor.wkv.weight", DType::BF16, {256, 4096});
    expect_spec(specs, "layers.2.attn.indexer.compressor.ape", DType::F32, {4, 256});
    expect_spec(specs, "layers.2.attn.indexer.compressor.norm.weight", DType::BF16, {128});
    expect_spec(specs, "mtp.0.e_proj.weight", DType::F8_E4M3, {4096, 4096});
    expect_spec(specs, "mtp.0.h_proj.scale", DType::F8_E8M0, {32, 32});
    expect_spec(specs, "mtp.0.enorm.weight", DType::BF16, {4096});
    expect_spec(specs, "mtp.0.hnorm.weight", DType::BF16, {4096});
    expect_spec(specs, "mtp.0.norm.weight", DType::BF16, {4096});
    expect_spec(specs, "mtp.0.hc_head_fn", DType::F32, {4, 16384});
    expect_spec(specs, "mtp.0.ffn.gate.bias", DType::F32, {256});
    EXPECT_EQ(names.count("mtp.0.attn.compressor.wkv.weight"), 0u);  // MTP ratio 0
}

TEST(Inventory, Options) {
    const ModelConfig c = load_model_config(config_path("v4-flash.json"));
    InventoryOptions no_mtp;
    no_mtp.include_mtp = false;
    EXPECT_EQ(expected_tensors(c, no_mtp).size(), 69187u - 1575u);

    InventoryOptions f32;
    f32.f32_block_scales = true;
    std::map<DType, int> hist;
    for (const auto& t : expected_tensors(c, f32)) hist[t.dtype]++;
    EXPECT_EQ(hist[DType::F8_E8M0], 0);
    EXPECT_EQ(hist[DType::F32], 417 + 34167);

    ModelConfig fp8 = c;
    fp8.expert_dtype = ExpertDtype::FP8;
    const auto s8 = expected_tensors(fp8);
    expect_spec(s8, "layers.9.ffn.experts.3.w1.weight", DType::F8_E4M3, {2048, 4096});
    expect_spec(s8, "layers.9.ffn.experts.3.w1.scale", DType::F8_E8M0, {16, 32});
    expect_spec(s8, "layers.9.ffn.experts.3.w2.scale", DType::F8_E8M0, {32, 16});

    ModelConfig plain = c;  // no quantization_config: every linear is plain bf16 without scales
    plain.quantization.present = false;
    for (const auto& t : expected_tensors(plain)) {
        EXPECT_FALSE(ends_with(t.name, ".scale")) << t.name;
        EXPECT_NE(t.dtype, DType::F8_E4M3) << t.name;
    }
    expect_spec(expected_tensors(plain), "layers.9.ffn.experts.3.w2.weight", DType::BF16, {4096, 2048});

    ModelConfig tied = c;
    tied.tie_word_embeddings = true;
    EXPECT_EQ(expected_tensors(tied).size(), 69186u);
}

TEST(Inventory, LinearShapes) {
    EXPECT_EQ(linear_weight_shape(WeightFormat::FP4_BLOCK32, 2048, 4096), (std::vector<int64_t>{2048, 2048}));
    EXPECT_EQ(linear_scale_shape(WeightFormat::FP4_BLOCK32, 2048, 4096), (std::vector<int64_t>{2048, 128}));
    EXPECT_EQ(linear_scale_shape(WeightFormat::FP8_BLOCK128, 200, 300), (std::vector<int64_t>{2, 3}));  // ceil
    EXPECT_TRUE(linear_scale_shape(WeightFormat::BF16, 4, 4).empty());
}
