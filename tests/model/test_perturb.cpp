// --perturb-norms at the weight level (model/perturb.h): every RMSNorm weight, and nothing else, moves by exactly
// bf16(w * (1 + s * 2^-8)) with per-channel signs from the seed; deterministic; applied through the loader's
// ScopedCheckpointTransform to every checkpoint opened while installed; bad seeds are clear errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "model/checkpoint_gen.h"
#include "model/perturb.h"
#include "model/weights.h"
#include "model_test_util.h"
#include "util/numeric.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

uint16_t bf16_at(const TensorView& t, int64_t i) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    return h;
}

}  // namespace

TEST(PerturbNorms, NamesEveryRmsNormWeightOfTheInventory) {
    const ModelConfig cfg = load_model_config(config_path("tiny-a.json"));
    const auto names = rmsnorm_weight_names(cfg);
    const std::set<std::string> set(names.begin(), names.end());
    EXPECT_EQ(set.size(), names.size());
    for (const char* n : {"norm.weight", "layers.0.attn_norm.weight", "layers.0.ffn_norm.weight",
                          "layers.0.attn.q_norm.weight", "layers.0.attn.kv_norm.weight"})
        EXPECT_TRUE(set.count(n)) << n;
    int per_layer = 0, compressor = 0, indexer = 0;
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        per_layer += set.count(p + "attn_norm.weight") + set.count(p + "ffn_norm.weight") +
                     set.count(p + "attn.q_norm.weight") + set.count(p + "attn.kv_norm.weight");
        const int r = cfg.ratio(l);
        EXPECT_EQ(set.count(p + "attn.compressor.norm.weight"), r > 0 ? 1u : 0u) << p;
        EXPECT_EQ(set.count(p + "attn.indexer.compressor.norm.weight"), r == 4 ? 1u : 0u) << p;
        compressor += r > 0;
        indexer += r == 4;
    }
    EXPECT_EQ(per_layer, 4 * cfg.num_hidden_layers);
    // Everything named is a BF16 vector of the inventory, and every such "...norm.weight" vector is named.
    size_t expected = 0;
    for (const TensorSpec& t : expected_tensors(cfg)) {
        const bool is_norm = t.name.size() >= 11 && t.name.compare(t.name.size() - 11, 11, "norm.weight") == 0;
        if (is_norm) {
            EXPECT_EQ(t.dtype, DType::BF16) << t.name;
            EXPECT_EQ(t.shape.size(), 1u) << t.name;
            ++expected;
        }
    }
    EXPECT_EQ(names.size(), expected);
    // 1 final + 4 per layer + compressors + indexers + the MTP layers' own (4 + enorm, hnorm, norm, compressor).
    EXPECT_GT(names.size(), size_t(1 + 4 * cfg.num_hidden_layers + compressor + indexer));
}

TEST(PerturbNorms, SignsAreDeterministicBalancedAndSeedDependent) {
    const auto a = norm_perturbation_signs(7, "layers.0.attn_norm.weight", 4096);
    EXPECT_EQ(a, norm_perturbation_signs(7, "layers.0.attn_norm.weight", 4096));
    EXPECT_NE(a, norm_perturbation_signs(8, "layers.0.attn_norm.weight", 4096));
    EXPECT_NE(a, norm_perturbation_signs(7, "layers.0.ffn_norm.weight", 4096));
    int plus = 0;
    for (int8_t s : a) {
        ASSERT_TRUE(s == 1 || s == -1);
        plus += s == 1;
    }
    EXPECT_NEAR(plus, 2048, 200);  // 6.25 sigma
    // A prefix of the stream does not depend on the length asked for.
    const auto b = norm_perturbation_signs(7, "layers.0.attn_norm.weight", 100);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));
}

TEST(PerturbNorms, ValueIsOneBf16RoundingOfTheScaledWeight) {
    // Exact expectations: bf16 has 8 significant bits.
    EXPECT_EQ(perturb_bf16_value(f32_to_bf16(1.0f), -1), f32_to_bf16(1.f - 1.f / 256));  // exact below 1
    EXPECT_EQ(perturb_bf16_value(f32_to_bf16(1.0f), +1), f32_to_bf16(1.0f));  // half an ulp: ties to even
    EXPECT_EQ(perturb_bf16_value(f32_to_bf16(1.5f), +1), f32_to_bf16(1.5f + 1.f / 128));  // 0.75 ulp: one ulp up
    EXPECT_EQ(perturb_bf16_value(f32_to_bf16(-1.9921875f), +1), f32_to_bf16(-2.0f));
    EXPECT_EQ(perturb_bf16_value(0, +1), 0);
    // Against a double-precision computation on random bf16 values around 1 (what norms look like).
    std::mt19937 rng(std::random_device{}());
    std::normal_distribution<float> nd(1.f, 0.3f);
    int changed = 0;
    for (int i = 0; i < 10000; ++i) {
        const uint16_t w = f32_to_bf16(nd(rng));
        const int s = (i & 1) ? 1 : -1;
        const double want = double(bf16_to_f32(w)) * (1.0 + s / 256.0);
        const uint16_t p = perturb_bf16_value(w, s);
        EXPECT_EQ(p, f32_to_bf16(float(want))) << bf16_to_f32(w) << " s=" << s;  // float(want) is exact
        const double rel = std::fabs(double(bf16_to_f32(p)) / bf16_to_f32(w) - 1);
        EXPECT_LE(rel, 1.0 / 128 + 1e-12) << "more than one ulp";
        changed += p != w;
    }
    EXPECT_GT(changed, 9000);
}

TEST(PerturbNorms, ChangesExactlyTheNormsByTheRule) {
    const ModelConfig cfg = load_model_config(config_path("tiny-a.json"));
    TempDir dir;
    GenOptions g;
    g.seed = std::random_device{}();
    SCOPED_TRACE("checkpoint seed " + std::to_string(g.seed));
    generate_checkpoint(cfg, dir.str(), g);
    const uint64_t seed = 12345;

    const auto plain = Checkpoint::open(dir.str());
    const uint64_t plain_hash = content_hash(*plain);
    auto pert = Checkpoint::open(dir.str());
    const NormPerturbationSummary sum = perturb_norm_weights(cfg, *pert, seed);
    EXPECT_EQ(content_hash(*plain), plain_hash) << "the unperturbed checkpoint must not change";

    const auto names = rmsnorm_weight_names(cfg);
    const std::set<std::string> norms(names.begin(), names.end());
    EXPECT_EQ(sum.tensors, int(names.size()));
    ASSERT_EQ(plain->all().size(), pert->all().size());
    int64_t values = 0, changed = 0;
    for (const auto& [name, p] : pert->all()) {
        const TensorView& o = plain->get(name);
        ASSERT_EQ(p->nbytes, o.nbytes) << name;
        EXPECT_EQ(p->dtype, o.dtype) << name;
        EXPECT_EQ(p->shape, o.shape) << name;
        if (!norms.count(name)) {
            EXPECT_EQ(std::memcmp(p->data, o.data, o.nbytes), 0) << name << ": not a norm, must not change";
            continue;
        }
        const auto signs = norm_perturbation_signs(seed, name, o.numel());
        for (int64_t i = 0; i < o.numel(); ++i) {
            const uint16_t w = bf16_at(o, i), q = bf16_at(*p, i);
            ASSERT_EQ(q, f32_to_bf16(float(double(bf16_to_f32(w)) * (1.0 + signs[size_t(i)] / 256.0))))
                << name << "[" << i << "]";
            changed += q != w;
        }
        values += o.numel();
    }
    EXPECT_EQ(sum.values, values);
    EXPECT_EQ(sum.changed, changed);
    EXPECT_GT(changed, values * 3 / 4) << "most channels must move";
    // The perturbed checkpoint still binds (same names, dtypes and shapes).
    EXPECT_NO_THROW(bind_weights(cfg, *pert));

    // Deterministic: a second application from the same seed gives the same bytes; another seed does not.
    auto again = Checkpoint::open(dir.str());
    perturb_norm_weights(cfg, *again, seed);
    EXPECT_EQ(content_hash(*again), content_hash(*pert));
    auto other = Checkpoint::open(dir.str());
    perturb_norm_weights(cfg, *other, seed + 1);
    EXPECT_NE(content_hash(*other), content_hash(*pert));
}

TEST(PerturbNorms, InstalledTransformAppliesToEveryOpenWhileAlive) {
    const ModelConfig cfg = load_model_config(config_path("tiny-a.json"));
    TempDir dir;
    GenOptions g;
    g.seed = 3;
    generate_checkpoint(cfg, dir.str(), g);
    const uint64_t plain = content_hash(*Checkpoint::open(dir.str()));
    auto manual = Checkpoint::open(dir.str());
    perturb_norm_weights(cfg, *manual, 99);
    {
        NormPerturbationSummary sum;
        auto guard = install_norm_perturbation(99, &sum);
        EXPECT_EQ(guard->applications(), 0);
        EXPECT_EQ(content_hash(*Checkpoint::open(dir.str())), content_hash(*manual));
        EXPECT_EQ(guard->applications(), 1);
        EXPECT_EQ(sum.tensors, int(rmsnorm_weight_names(cfg).size()));
        EXPECT_NE(message_of([] { install_norm_perturbation(1); }).find("another checkpoint transformation"),
                  std::string::npos);
    }
    EXPECT_EQ(content_hash(*Checkpoint::open(dir.str())), plain) << "the guard is gone, nothing may be applied";
}

TEST(PerturbNorms, MissingOrMistypedNormIsAnErrorNamingIt) {
    const ModelConfig cfg = load_model_config(config_path("tiny-a.json"));
    TempDir dir;
    GenOptions g;
    g.seed = 5;
    generate_checkpoint(cfg, dir.str(), g);
    auto ts = copy_tensors(*Checkpoint::open(dir.str()));
    TensorData* t = find_tensor(ts, "layers.1.attn.kv_norm.weight");
    ASSERT_NE(t, nullptr);
    t->dtype = DType::F16;
    write_model(dir.str(), ts);
    auto ck = Checkpoint::open(dir.str());
    const std::string m = message_of([&] { perturb_norm_weights(cfg, *ck, 1); });
    EXPECT_NE(m.find("--perturb-norms"), std::string::npos) << m;
    EXPECT_NE(m.find("'layers.1.attn.kv_norm.weight' is F16"), std::string::npos) << m;
    ts.erase(ts.begin() + (t - ts.data()));
    write_model(dir.str(), ts);
    auto ck2 = Checkpoint::open(dir.str());
    const std::string m2 = message_of([&] { perturb_norm_weights(cfg, *ck2, 1); });
    EXPECT_NE(m2.find("norm tensor 'layers.1.attn.kv_norm.weight' is missing"), std::string::npos) << m2;
}

TEST(PerturbNorms, SeedParsing) {
    EXPECT_EQ(parse_perturbation_seed("0"), 0u);
    EXPECT_EQ(parse_perturbation_seed("42"), 42u);
    EXPECT_EQ(parse_perturbation_seed("18446744073709551615"), UINT64_MAX);
    for (const char* bad : {"", "-1", "+3", "abc", "12x", "1e3", " 7", "0x10", "18446744073709551616",
                            "123456789012345678901"}) {
        const std::string m = message_of([&] { parse_perturbation_seed(bad); });
        EXPECT_NE(m.find("--perturb-norms: SEED must be a decimal integer in [0, 2^64), got '" + std::string(bad) +
                         "'"),
                  std::string::npos)
            << "'" << bad << "': " << m;
    }
}
