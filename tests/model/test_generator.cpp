// gen-checkpoint: output binds cleanly, is bit-identical for a given (config, seed) whatever the thread and shard
// counts (pinned by golden content hashes), and has the intended value statistics after dequantization.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

#include "model/checkpoint_gen.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "util/numeric.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

// Pinned: regenerated checkpoints must be bit-identical on every machine (goldens are made from them).
constexpr uint64_t kTinyASeed1Hash = 0x4d0b571e6c80b9d3ull;

ModelConfig tiny(const char* name) { return load_model_config(config_path(name)); }

float scale_value(const TensorView& s, int64_t i) {
    if (s.dtype == DType::F8_E8M0) return e8m0_to_f32(s.data[i]);
    float f;
    std::memcpy(&f, s.data + 4 * i, 4);
    return f;
}

// Dequantized [out, in] matrix of a bound linear, written independently of the forward's code.
std::vector<float> dequant(const Linear& l) {
    std::vector<float> w(size_t(l.out * l.in));
    for (int64_t o = 0; o < l.out; ++o) {
        for (int64_t i = 0; i < l.in; ++i) {
            float v = 0, s = 1;
            switch (l.format) {
                case WeightFormat::FP8_BLOCK128:
                    v = e4m3_to_f32(l.weight.data[o * l.in + i]);
                    s = scale_value(l.scale, (o / 128) * l.scale.dim(1) + i / 128);
                    break;
                case WeightFormat::FP4_BLOCK32: {
                    const uint8_t b = l.weight.data[o * (l.in / 2) + i / 2];
                    v = e2m1_to_f32(i % 2 ? b >> 4 : b & 15);
                    s = scale_value(l.scale, o * (l.in / 32) + i / 32);
                    break;
                }
                case WeightFormat::BF16: {
                    uint16_t h;
                    std::memcpy(&h, l.weight.data + 2 * (o * l.in + i), 2);
                    v = bf16_to_f32(h);
                    break;
                }
                case WeightFormat::F32: std::memcpy(&v, l.weight.data + 4 * (o * l.in + i), 4); break;
            }
            w[size_t(o * l.in + i)] = v * s;
        }
    }
    return w;
}

std::vector<float> floats(const TensorView& t) {
    std::vector<float> out(size_t(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
        if (t.dtype == DType::BF16) {
            uint16_t h;
            std::memcpy(&h, t.data + 2 * i, 2);
            out[i] = bf16_to_f32(h);
        } else {
            std::memcpy(&out[i], t.data + 4 * i, 4);
        }
    }
    return out;
}

void mean_std(const std::vector<float>& v, double* mean, double* sd) {
    double s = 0, q = 0;
    for (float x : v) s += x;
    *mean = s / double(v.size());
    for (float x : v) q += (x - *mean) * (x - *mean);
    *sd = std::sqrt(q / double(v.size()));
}

std::string generate(const TempDir& dir, const char* config, uint64_t seed, GenOptions opt = {}) {
    opt.seed = seed;
    generate_checkpoint(tiny(config), dir.str(), opt);
    return dir.str();
}

}  // namespace

TEST(Generator, BindsAndHasTheOfficialStructure) {
    TempDir dir;
    const uint64_t seed = fresh_seed();
    generate(dir, "tiny-a.json", seed);
    const ModelConfig cfg = load_model_config(dir.file("config.json"));
    EXPECT_TRUE(cfg.expert_dtype_explicit);
    const auto ck = Checkpoint::open(dir.str());
    EXPECT_EQ(ck->all().size(), expected_tensors(cfg).size());
    const ModelWeights w = bind_weights(cfg, *ck);
    ASSERT_EQ(w.layers.size(), 4u);
    ASSERT_EQ(w.mtp.size(), 1u);
    EXPECT_FALSE(w.embed.empty());
    EXPECT_FALSE(w.head.empty());
    EXPECT_NE(w.head.data, w.embed.data);
    for (int l = 0; l < 4; ++l) {
        SCOPED_TRACE(l);
        const LayerWeights& L = w.layers[size_t(l)];
        EXPECT_EQ(L.ratio, cfg.ratio(l));
        EXPECT_EQ(L.attn.compressor.present, cfg.ratio(l) > 0);
        EXPECT_EQ(L.attn.indexer.present, cfg.ratio(l) == 4);
        EXPECT_EQ(L.ffn.tid2eid.empty(), !cfg.is_hash_layer(l));
        EXPECT_EQ(L.ffn.gate_bias.empty(), cfg.is_hash_layer(l));
        EXPECT_EQ(L.attn.wq_a.format, WeightFormat::FP8_BLOCK128);
        EXPECT_EQ(L.attn.wq_a.out, cfg.q_lora_rank);
        EXPECT_EQ(L.attn.wq_a.in, cfg.hidden_size);
        EXPECT_EQ(L.attn.wq_a.scale.dtype, DType::F8_E8M0);
        ASSERT_EQ(L.ffn.experts.size(), 8u);
        EXPECT_EQ(L.ffn.experts[3].w2.format, WeightFormat::FP4_BLOCK32);
        EXPECT_EQ(L.ffn.experts[3].w2.in, cfg.moe_intermediate_size);
        EXPECT_FALSE(L.ffn.shared.w1.weight.empty());
    }
    EXPECT_FALSE(w.mtp[0].e_proj.weight.empty());
    EXPECT_FALSE(w.mtp[0].layer.ffn.gate_bias.empty());
}

TEST(Generator, DeterministicAcrossThreadsAndShards) {
    TempDir a, b, c, d;
    GenOptions one_thread;
    one_thread.threads = 1;
    GenOptions sharded;
    sharded.shards = 3;
    sharded.threads = 2;
    generate(a, "tiny-a.json", 1, one_thread);
    generate(b, "tiny-a.json", 1);
    generate(c, "tiny-a.json", 1, sharded);
    generate(d, "tiny-a.json", 2);
    EXPECT_EQ(read_bytes(a.file("model.safetensors")), read_bytes(b.file("model.safetensors")));
    EXPECT_EQ(read_bytes(a.file("config.json")), read_bytes(b.file("config.json")));
    const uint64_t ha = content_hash(*Checkpoint::open(a.str()));
    EXPECT_EQ(ha, kTinyASeed1Hash) << std::hex << ha << " (the generator's output changed: every golden made "
                                                       "from generated checkpoints must be regenerated)";
    EXPECT_EQ(content_hash(*Checkpoint::open(c.str())), ha);
    EXPECT_NE(content_hash(*Checkpoint::open(d.str())), ha);
    EXPECT_TRUE(std::filesystem::exists(c.file("model-00003-of-00003.safetensors")));
    EXPECT_TRUE(std::filesystem::exists(c.file("model.safetensors.index.json")));
    EXPECT_FALSE(std::filesystem::exists(c.file("model.safetensors")));
    const auto idx = nlohmann::json::parse(read_bytes(c.file("model.safetensors.index.json")));
    EXPECT_EQ(idx["metadata"]["total_size"].get<size_t>(), Checkpoint::open(c.str())->total_bytes());
    // Regenerating into a folder that held shards leaves only the new layout.
    generate(c, "tiny-a.json", 1);
    EXPECT_FALSE(std::filesystem::exists(c.file("model.safetensors.index.json")));
    EXPECT_EQ(content_hash(*Checkpoint::open(c.str())), ha);
}

TEST(Generator, ValueStatistics) {
    TempDir dir;
    const uint64_t seed = fresh_seed();
    generate(dir, "tiny-a.json", seed);
    const ModelConfig cfg = load_model_config(dir.file("config.json"));
    const auto ck = Checkpoint::open(dir.str());
    const ModelWeights w = bind_weights(cfg, *ck);
    double m, sd;
    std::set<float> fp8_scales, fp4_scales;
    double rel_var_sum = 0;
    int n_linears = 0;
    for (const auto& L : w.layers) {
        for (const Linear* l : {&L.attn.wq_a, &L.attn.wq_b, &L.attn.wo_a, &L.attn.wo_b, &L.ffn.shared.w2,
                                &L.ffn.experts[0].w1, &L.ffn.experts[5].w2}) {
            SCOPED_TRACE(l->weight.name + " seed " + std::to_string(seed));
            mean_std(dequant(*l), &m, &sd);
            // ~ N(0, 1/in) after dequantization, times a per-block spread 2^U(-1/2, 1/2) (E = 1.08 for sd^2).
            const double rel = sd * std::sqrt(double(l->in));
            EXPECT_GT(rel, 0.65);
            EXPECT_LT(rel, 1.5);
            rel_var_sum += rel * rel;
            ++n_linears;
            EXPECT_NEAR(m * std::sqrt(double(l->in)), 0.0, 0.1);
            auto& set = l->format == WeightFormat::FP4_BLOCK32 ? fp4_scales : fp8_scales;
            for (int64_t i = 0; i < l->scale.numel(); ++i) set.insert(scale_value(l->scale, i));
        }
        mean_std(floats(L.attn_norm), &m, &sd);
        EXPECT_NEAR(m, 1.0, 0.05);
        EXPECT_NEAR(sd, 0.1, 0.04);
        for (float s : floats(L.hc_attn.scale)) {
            EXPECT_GE(s, 0.25f);
            EXPECT_LE(s, 1.0f);
        }
        for (const TensorView* t : {&L.hc_ffn.base, &L.attn.attn_sink}) {
            mean_std(floats(*t), &m, &sd);
            EXPECT_GT(sd, 0.2) << t->name;
        }
        if (!L.ffn.gate_bias.empty()) {
            mean_std(floats(L.ffn.gate_bias), &m, &sd);
            EXPECT_GT(sd, 0.02);
        }
        if (L.attn.compressor.present) {
            mean_std(floats(L.attn.compressor.ape), &m, &sd);
            EXPECT_NEAR(sd, 0.5, 0.1);
        }
        if (!L.ffn.tid2eid.empty()) {
            const int64_t k = L.ffn.tid2eid.dim(1);
            std::vector<int> uses(8);
            for (int64_t r = 0; r < L.ffn.tid2eid.dim(0); ++r) {
                std::set<int64_t> row;
                for (int64_t j = 0; j < k; ++j) {
                    int64_t e;
                    std::memcpy(&e, L.ffn.tid2eid.data + 8 * (r * k + j), 8);
                    ASSERT_GE(e, 0);
                    ASSERT_LT(e, 8);
                    row.insert(e);
                    uses[size_t(e)]++;
                }
                ASSERT_EQ(row.size(), size_t(k)) << "row " << r;
            }
            for (int u : uses) EXPECT_GT(u, 100);  // every expert is used
        }
    }
    EXPECT_NEAR(rel_var_sum / n_linears, 1.08, 0.2) << "seed " << seed;
    EXPECT_GE(fp8_scales.size(), 3u);  // block scales vary
    EXPECT_GE(fp4_scales.size(), 3u);
    mean_std(floats(w.embed), &m, &sd);
    EXPECT_NEAR(sd, 1.0, 0.05);
    mean_std(floats(w.head), &m, &sd);
    EXPECT_NEAR(sd * std::sqrt(double(cfg.hidden_size)), 1.0, 0.05);
    mean_std(floats(w.hc_head.fn), &m, &sd);
    EXPECT_NEAR(sd * std::sqrt(double(cfg.hc_mult * cfg.hidden_size)), 1.0, 0.05);
}

TEST(Generator, Fp8ExpertsAndF32ScalesAreDetected) {
    TempDir dir;
    GenOptions opt;
    opt.expert_dtype = ExpertDtype::FP8;
    opt.f32_scales = true;
    const uint64_t seed = fresh_seed();
    generate(dir, "tiny-a.json", seed, opt);
    const ModelConfig cfg = load_model_config(dir.file("config.json"));
    EXPECT_EQ(cfg.expert_dtype, ExpertDtype::FP8);
    const auto ck = Checkpoint::open(dir.str());  // views in ModelWeights live as long as the checkpoint
    const ModelWeights w = bind_weights(cfg, *ck);
    const Linear& e = w.layers[1].ffn.experts[2].w1;
    EXPECT_EQ(e.format, WeightFormat::FP8_BLOCK128);
    EXPECT_EQ(e.scale.dtype, DType::F32);
    EXPECT_EQ(w.layers[0].attn.wkv.scale.dtype, DType::F32);
    double m, sd;
    mean_std(dequant(e), &m, &sd);
    EXPECT_GT(sd * std::sqrt(double(e.in)), 0.65) << "seed " << seed;
    EXPECT_LT(sd * std::sqrt(double(e.in)), 1.5) << "seed " << seed;
    // F32 scales are amax/448, not powers of two.
    int non_pow2 = 0;
    for (int64_t i = 0; i < e.scale.numel(); ++i) {
        int ex;
        non_pow2 += std::frexp(scale_value(e.scale, i), &ex) != 0.5f;
    }
    EXPECT_GT(non_pow2, 0);

    // The same config with the config's own expert dtype (tiny-b says fp8) and no MTP, hc_mult 2.
    TempDir b;
    generate(b, "tiny-b.json", seed);
    const ModelConfig cb = load_model_config(b.file("config.json"));
    const auto ckb = Checkpoint::open(b.str());
    const ModelWeights wb = bind_weights(cb, *ckb);
    EXPECT_TRUE(wb.mtp.empty());
    EXPECT_EQ(wb.layers[0].ffn.experts[0].w2.format, WeightFormat::FP8_BLOCK128);
    EXPECT_EQ(wb.layers[0].hc_attn.fn.dim(0), 8);  // (2 + hc) * hc
    EXPECT_EQ(wb.hc_head.fn.dim(1), 2 * 128);
}

TEST(Generator, TinyConfigIsFast) {
    TempDir dir;
    const auto t0 = std::chrono::steady_clock::now();
    const clock_t c0 = std::clock();
    generate(dir, "tiny-a.json", 3);
    const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("tiny-a: %.3f s wall, %.3f s CPU\n", wall, cpu);
    EXPECT_LT(cpu, 3.0);  // ~0.35 s CPU in a release build; generous for sanitizer builds
}

TEST(Generator, RejectsBadOptions) {
    TempDir dir;
    GenOptions opt;
    opt.shards = 0;
    expect_error([&] { generate_checkpoint(tiny("tiny-a.json"), dir.str(), opt); }, {"--shards"});
    ModelConfig bad = tiny("tiny-a.json");
    bad.o_groups = 3;
    expect_error([&] { generate_checkpoint(bad, dir.str(), {}); }, {"o_groups"});
}
