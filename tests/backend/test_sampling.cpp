// Sampler tests: greedy, reproducibility of the counter-based RNG, the top-k / top-p / temperature filters
// (checked statistically against their exact distributions), logprobs, and parameter errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "backend/backend.h"

using namespace flashseek;

namespace {
std::vector<float> random_logits(int64_t n, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> d(0.f, 2.f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
}
}  // namespace

TEST(Sampling, GreedyAndLogprobs) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto l = random_logits(1000, seed);
    const int32_t best = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    SampleParams p;
    p.n_logprobs = 3;
    auto r = sample_logits(l.data(), 1000, p);
    EXPECT_EQ(r.token, best);
    double z = 0;
    for (float v : l) z += std::exp(double(v));
    EXPECT_NEAR(r.logprob, l[size_t(best)] - std::log(z), 1e-4);
    ASSERT_EQ(r.top_logprobs.size(), 3u);
    EXPECT_EQ(r.top_logprobs[0].first, best);
    EXPECT_GE(r.top_logprobs[0].second, r.top_logprobs[1].second);
    EXPECT_GE(r.top_logprobs[1].second, r.top_logprobs[2].second);
    // ties: the lowest index
    std::vector<float> tie = {1.f, 3.f, 3.f, 0.f};
    EXPECT_EQ(sample_logits(tie.data(), 4, SampleParams{}).token, 1);
}

TEST(Sampling, SameSeedAndDrawGiveSameToken) {
    auto l = random_logits(500, 7);
    SampleParams p;
    p.temperature = 1.f;
    p.seed = 1234;
    std::map<int32_t, int> distinct;
    for (uint64_t d = 0; d < 50; ++d) {
        p.draw_index = d;
        const int32_t a = sample_logits(l.data(), 500, p).token;
        EXPECT_EQ(a, sample_logits(l.data(), 500, p).token);
        distinct[a]++;
    }
    EXPECT_GT(distinct.size(), 5u);  // different draws differ
}

TEST(Sampling, DistributionsMatchFilters) {
    // 5 logits with known probabilities; 20000 draws per setting.
    std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.15f), std::log(0.1f), std::log(0.05f)};
    auto freq = [&](SampleParams p) {
        std::vector<double> f(5, 0.0);
        for (uint64_t d = 0; d < 20000; ++d) {
            p.draw_index = d;
            f[size_t(sample_logits(l.data(), 5, p).token)] += 1.0 / 20000;
        }
        return f;
    };
    SampleParams p;
    p.temperature = 1.f;
    p.seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(p.seed));
    auto f = freq(p);
    const double expect_full[5] = {0.4, 0.3, 0.15, 0.1, 0.05};
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(f[size_t(i)], expect_full[i], 0.02) << i;
    p.top_k = 2;  // renormalized over {0.4, 0.3}
    f = freq(p);
    EXPECT_NEAR(f[0], 0.4 / 0.7, 0.02);
    EXPECT_NEAR(f[1], 0.3 / 0.7, 0.02);
    EXPECT_EQ(f[2] + f[3] + f[4], 0.0);
    p.top_k = 0;
    p.top_p = 0.8f;  // smallest prefix reaching 0.8: {0.4, 0.3, 0.15}
    f = freq(p);
    EXPECT_NEAR(f[0], 0.4 / 0.85, 0.02);
    EXPECT_NEAR(f[2], 0.15 / 0.85, 0.02);
    EXPECT_EQ(f[3] + f[4], 0.0);
    p.top_p = 1.f;
    p.temperature = 0.5f;  // p^2 renormalized
    f = freq(p);
    double z = 0;
    for (double v : expect_full) z += v * v;
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(f[size_t(i)], expect_full[i] * expect_full[i] / z, 0.02) << i;
    // top-p is applied before temperature: with top_p 0.5 only {0.4, 0.3} survive at any temperature
    p.top_p = 0.5f;
    p.temperature = 5.f;
    f = freq(p);
    EXPECT_EQ(f[2] + f[3] + f[4], 0.0);
    EXPECT_GT(f[1], 0.3);
}

TEST(Sampling, BadParametersAreErrors) {
    std::vector<float> l = {0.f, 1.f};
    SampleParams p;
    p.temperature = -1.f;
    EXPECT_THROW(sample_logits(l.data(), 2, p), std::exception);
    p = {};
    p.top_p = 0.f;
    EXPECT_THROW(sample_logits(l.data(), 2, p), std::exception);
    p = {};
    p.top_k = -2;
    EXPECT_THROW(sample_logits(l.data(), 2, p), std::exception);
    std::vector<float> nan = {0.f, NAN};
    EXPECT_THROW(sample_logits(nan.data(), 2, SampleParams{}), std::exception);
}
