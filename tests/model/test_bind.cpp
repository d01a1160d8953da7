// bind_weights on deliberately damaged checkpoints: missing, unexpected, wrongly typed or shaped tensors, bad scale
// bytes, bad hash tables and expert-format conflicts are all reported, by name, in one Error.
#include <gtest/gtest.h>

#include <cstring>

#include "model/checkpoint_gen.h"
#include "model/weights.h"
#include "model_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

// A freshly generated tiny-a checkpoint whose tensors a test edits and writes back.
class BindTest : public ::testing::Test {
protected:
    void SetUp() override {
        seed_ = fresh_seed();
        GenOptions opt;
        opt.seed = seed_;
        generate_checkpoint(load_model_config(config_path("tiny-a.json")), dir_.str(), opt);
        cfg_ = load_model_config(dir_.file("config.json"));
        tensors_ = copy_tensors(*Checkpoint::open(dir_.str()));
    }
    TensorData& t(const std::string& name) {
        TensorData* p = find_tensor(tensors_, name);
        if (!p) throw std::runtime_error("no tensor " + name);
        return *p;
    }
    void drop(const std::string& name) {
        tensors_.erase(std::remove_if(tensors_.begin(), tensors_.end(), [&](auto& x) { return x.name == name; }),
                       tensors_.end());
    }
    void expect_bind_error(std::initializer_list<std::string> parts, BindOptions opt = {}) {
        write_model(dir_.str(), tensors_);
        const auto ck = Checkpoint::open(dir_.str());
        SCOPED_TRACE("seed " + std::to_string(seed_));
        expect_error([&] { bind_weights(cfg_, *ck, opt); }, parts);
    }
    TempDir dir_;
    uint64_t seed_ = 0;
    ModelConfig cfg_;
    std::vector<TensorData> tensors_;
};

}  // namespace

TEST_F(BindTest, UnmodifiedBinds) {
    write_model(dir_.str(), tensors_);
    EXPECT_NO_THROW(bind_weights(cfg_, *Checkpoint::open(dir_.str())));
}

TEST_F(BindTest, MissingTensor) {
    drop("layers.2.attn.compressor.ape");
    expect_bind_error({"missing tensor 'layers.2.attn.compressor.ape'", "F32 [128, 128]", "1 problem"});
}

TEST_F(BindTest, MissingLinearWeightAndScale) {
    drop("layers.1.attn.wq_b.weight");
    drop("layers.3.ffn.experts.7.w2.scale");
    expect_bind_error({"missing tensor 'layers.1.attn.wq_b.weight'", "missing tensor 'layers.3.ffn.experts.7.w2.scale'",
                       "2 problems"});
}

TEST_F(BindTest, UnexpectedTensor) {
    tensors_.push_back({"layers.0.attn.bias", DType::F32, {4}, std::vector<uint8_t>(16, 1)});
    expect_bind_error({"unexpected tensor 'layers.0.attn.bias'"});
}

TEST_F(BindTest, WrongDtype) {
    TensorData& n = t("layers.0.attn_norm.weight");
    n.dtype = DType::F16;  // same byte size, wrong type
    expect_bind_error({"'layers.0.attn_norm.weight'", "dtype F16, expected BF16"});
}

TEST_F(BindTest, WrongShape) {
    TensorData& a = t("layers.1.attn.attn_sink");
    a.shape = {2, 4};  // 8 elements either way
    expect_bind_error({"'layers.1.attn.attn_sink'", "shape [2, 4], expected [8]"});
}

TEST_F(BindTest, LinearWithUnusableDtypeOrShape) {
    TensorData& w = t("layers.0.attn.wkv.weight");
    w.dtype = DType::U8;
    TensorData& s = t("layers.0.attn.wq_a.scale");
    s.shape = {s.shape[1], s.shape[0]};  // [1, 2] vs [2, 1]: transposed
    TensorData& e = t("layers.2.ffn.experts.1.w3.weight");
    e.shape = {e.shape[0] / 2, e.shape[1] * 2};
    expect_bind_error({"'layers.0.attn.wkv.weight'", "U8 is not a weight format", "'layers.0.attn.wq_a.scale'",
                       "'layers.2.ffn.experts.1.w3.weight'", "3 problems"});
}

TEST_F(BindTest, AllProblemsInOneError) {
    drop("norm.weight");
    drop("layers.1.ffn.gate.weight");
    tensors_.push_back({"extra.one", DType::I8, {1}, {0}});
    tensors_.push_back({"extra.two", DType::I8, {1}, {0}});
    t("layers.3.hc_ffn_scale").dtype = DType::I32;
    expect_bind_error({"5 problems", "'norm.weight'", "'layers.1.ffn.gate.weight'", "'extra.one'", "'extra.two'",
                       "'layers.3.hc_ffn_scale'"});
}

TEST_F(BindTest, NanE8M0ScaleIsReported) {
    TensorData& s = t("layers.2.ffn.experts.4.w1.scale");
    s.bytes[s.bytes.size() / 2 + 3] = 255;
    expect_bind_error({"'layers.2.ffn.experts.4.w1.scale'", "255 (NaN)"});
    BindOptions no_check;
    no_check.check_values = false;  // the scan can be skipped
    write_model(dir_.str(), tensors_);
    EXPECT_NO_THROW(bind_weights(cfg_, *Checkpoint::open(dir_.str()), no_check));
}

TEST_F(BindTest, BadHashTable) {
    TensorData& h = t("layers.1.ffn.gate.tid2eid");
    int64_t bad = 8;  // n_routed_experts = 8
    std::memcpy(h.bytes.data() + 8 * 40, &bad, 8);
    expect_bind_error({"'layers.1.ffn.gate.tid2eid'", "expert id 8", "[20, 0]"});
    std::memcpy(h.bytes.data() + 8 * 40, h.bytes.data() + 8 * 41, 8);  // row 20 = [x, x]
    expect_bind_error({"'layers.1.ffn.gate.tid2eid'", "row 20 repeats"});
}

TEST_F(BindTest, ExpertDtypeConflictsWithConfig) {
    // Replace one expert's FP4 tensors with FP8 ones: config.json says expert_dtype "fp4".
    TensorData& w = t("layers.0.ffn.experts.0.w1.weight");
    w.dtype = DType::F8_E4M3;
    w.shape = {w.shape[0], w.shape[1] * 2};
    w.bytes.assign(size_t(w.shape[0] * w.shape[1]), 0x38);
    TensorData& s = t("layers.0.ffn.experts.0.w1.scale");
    s.shape = {1, 2};
    s.bytes.assign(2, 127);
    expect_bind_error({"'layers.0.ffn.experts.0.w1.weight'", "expert_dtype = \"fp4\""});
    // Without an explicit expert_dtype the format is read from the header and accepted.
    cfg_.expert_dtype_explicit = false;
    write_model(dir_.str(), tensors_);
    const ModelWeights mw = bind_weights(cfg_, *Checkpoint::open(dir_.str()));
    EXPECT_EQ(mw.layers[0].ffn.experts[0].w1.format, WeightFormat::FP8_BLOCK128);
    EXPECT_EQ(mw.layers[0].ffn.experts[1].w1.format, WeightFormat::FP4_BLOCK32);
}

TEST_F(BindTest, BadF32Scale) {
    // Switch one linear to F32 scales with a negative entry.
    TensorData& s = t("layers.0.attn.wo_b.scale");
    const size_t n = s.bytes.size();
    s.dtype = DType::F32;
    s.bytes.assign(n * 4, 0);
    for (size_t i = 0; i < n; ++i) {
        const float v = i == n - 1 ? -1.f : 0.01f;
        std::memcpy(s.bytes.data() + 4 * i, &v, 4);
    }
    expect_bind_error({"'layers.0.attn.wo_b.scale'", "not a positive finite number"});
}

TEST_F(BindTest, MissingConfigFile) {
    std::filesystem::remove(dir_.file("config.json"));
    expect_error([&] { load_model_config(dir_.file("config.json")); }, {"config.json", "cannot open"});
}
