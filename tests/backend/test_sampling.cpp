// Sampler tests: greedy, reproducibility of the counter-based RNG, the top-k / top-p / min-p / temperature filters,
// the logit adjustments (bias, penalties, masks, bans) against hand-computed distributions, prompt scoring,
// all checked statistically against their exact distributions, logprobs, and parameter errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "util/error.h"

using namespace flashseek;

namespace {
std::vector<float> random_logits(int64_t n, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> d(0.f, 2.f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
}
// How often each token is drawn in n draws (draw_index 0..n-1).
std::vector<double> draw_frequencies(const std::vector<float>& l, SampleParams p, int n) {
    std::vector<double> f(l.size(), 0.0);
    for (int d = 0; d < n; ++d) {
        p.draw_index = uint64_t(d);
        f[size_t(sample_logits(l.data(), int64_t(l.size()), p).token)] += 1.0 / n;
    }
    return f;
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
    auto freq = [&](const SampleParams& p) { return draw_frequencies(l, p, 20000); };
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

namespace {
// Exact distribution of one draw at temperature t over already-adjusted logits (no top-k / top-p), with min-p.
std::vector<double> expected_distribution(const std::vector<float>& l, double t, float min_p = 0.f) {
    const float mx = *std::max_element(l.begin(), l.end());
    const float threshold = min_p > 0.f ? float(double(mx) + std::log(double(min_p))) : -INFINITY;
    std::vector<double> d(l.size(), 0.0);
    double z = 0;
    for (size_t i = 0; i < l.size(); ++i)
        if (l[i] >= threshold && std::isfinite(l[i])) z += (d[i] = std::exp((double(l[i]) - mx) / t));
    for (auto& v : d) v /= z;
    return d;
}
double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
    double tv = 0;
    for (size_t i = 0; i < a.size(); ++i) tv += 0.5 * std::fabs(a[i] - b[i]);
    return tv;
}
}  // namespace

TEST(Sampling, PenaltiesAndBiasFollowVllmOrder) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 g(seed);
    auto l = random_logits(12, seed);
    l[2] = 1.5f;
    l[3] = -0.75f;
    const std::vector<int32_t> prompt = {2, 5, 5};
    const std::vector<int32_t> output = {3, 3, 7, 2};
    const std::vector<LogitBias> bias = {{7, 2.5f}, {9, -1.25f}};
    SampleParams p;
    p.temperature = 0.8f;
    p.seed = g();
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.4f;
    p.presence_penalty = 0.6f;
    p.prompt_tokens = prompt;
    p.output_tokens = output;
    p.logit_bias = bias;
    // By hand: bias, then repetition over prompt + output, then frequency / presence over output.
    std::vector<float> want = l;
    want[7] += 2.5f;
    want[9] += -1.25f;
    for (int t : {2, 5, 3, 7}) want[size_t(t)] = want[size_t(t)] > 0 ? want[size_t(t)] / 1.3f : want[size_t(t)] * 1.3f;
    const std::map<int, int> counts = {{3, 2}, {7, 1}, {2, 1}};
    for (const auto& [t, c] : counts) want[size_t(t)] -= 0.4f * float(c) + 0.6f;
    const auto f = draw_frequencies(l, p, 40000);
    EXPECT_LE(total_variation(f, expected_distribution(want, 0.8)), 0.02);
    // Greedy follows the adjusted argmax; the reported logprob is the raw row's.
    p.temperature = 0.f;
    const SampleResult r = sample_logits(l.data(), 12, p);
    EXPECT_EQ(r.token, int32_t(std::max_element(want.begin(), want.end()) - want.begin()));
    double z = 0;
    for (float v : l) z += std::exp(double(v));
    EXPECT_NEAR(r.logprob, l[size_t(r.token)] - std::log(z), 1e-5);
}

// The API accepts any repetition_penalty > 0: a tiny one makes a seen positive logit overflow, which must stay a
// finite, largest logit (sampled with certainty) rather than +inf and a NaN softmax.
TEST(Sampling, TinyRepetitionPenaltyStaysFinite) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto l = random_logits(50, seed);
    l[4] = 2.f;  // seen and positive: 2 / 1e-40 overflows
    SampleParams p;
    p.repetition_penalty = 1e-40f;
    const std::vector<int32_t> prompt = {4};
    p.prompt_tokens = prompt;
    for (float temperature : {0.f, 0.7f, 1.5f}) {
        p.temperature = temperature;
        p.seed = seed + uint64_t(temperature * 10);
        const SampleResult r = sample_logits(l.data(), 50, p);
        EXPECT_EQ(r.token, 4) << "temperature " << temperature;
        EXPECT_TRUE(std::isfinite(r.logprob)) << "temperature " << temperature;
    }
}

TEST(Sampling, MaskAndBannedTokensAreNeverSampled) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 g(seed);
    const int64_t V = 300;
    auto l = random_logits(V, seed);
    std::vector<uint32_t> mask(size_t(token_mask_words(V)), 0u);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < V; ++t)
        if (g() % 5 == 0) {
            mask[size_t(t >> 5)] |= 1u << (t & 31);
            allowed.push_back(t);
        }
    ASSERT_GE(allowed.size(), 3u);
    const std::vector<int32_t> banned = {allowed[0], allowed[1]};
    SampleParams p;
    p.temperature = 1.5f;
    p.seed = g();
    p.top_k = int(g() % 2) * 40;
    p.allowed_tokens = mask.data();
    p.banned_tokens = banned;
    for (uint64_t d = 0; d < 3000; ++d) {
        p.draw_index = d;
        const int32_t t = sample_logits(l.data(), V, p).token;
        ASSERT_TRUE(std::find(allowed.begin() + 2, allowed.end(), t) != allowed.end()) << "token " << t;
    }
    p.temperature = 0.f;
    int32_t best = allowed[2];
    for (size_t i = 2; i < allowed.size(); ++i)
        if (l[size_t(allowed[i])] > l[size_t(best)]) best = allowed[i];
    EXPECT_EQ(sample_logits(l.data(), V, p).token, best);
    // Nothing left: an error, not a silent pick.
    std::vector<uint32_t> none(size_t(token_mask_words(V)), 0u);
    p.allowed_tokens = none.data();
    EXPECT_THROW(sample_logits(l.data(), V, p), Error);
}

TEST(Sampling, MinPKeepsTokensNearTheMostLikely) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto l = random_logits(40, seed);
    SampleParams p;
    p.temperature = 1.2f;
    p.seed = seed;
    p.min_p = 0.05f;
    const auto expect = expected_distribution(l, 1.2, 0.05f);
    const auto f = draw_frequencies(l, p, 40000);
    for (size_t i = 0; i < l.size(); ++i) {
        if (expect[i] == 0.0) {
            EXPECT_EQ(f[i], 0.0) << "token " << i << " is below the min-p threshold";
        }
    }
    EXPECT_LE(total_variation(f, expect), 0.02);
    p.min_p = 1.f;  // only the most likely token
    p.draw_index = 3;
    EXPECT_EQ(sample_logits(l.data(), 40, p).token, int32_t(std::max_element(l.begin(), l.end()) - l.begin()));
    p.min_p = 1.5f;
    EXPECT_THROW(sample_logits(l.data(), 40, p), Error);
    p.min_p = 0.f;
    p.repetition_penalty = 0.f;
    EXPECT_THROW(sample_logits(l.data(), 40, p), Error);
    p.repetition_penalty = 1.f;
    const std::vector<LogitBias> bad = {{40, 1.f}};
    p.logit_bias = bad;
    EXPECT_THROW(sample_logits(l.data(), 40, p), Error);
}

TEST(Sampling, ScoreTokenGivesLogprobRankAndTop) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto l = random_logits(500, seed);
    std::vector<int32_t> order(500);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
    double z = 0;
    for (float v : l) z += std::exp(double(v));
    for (int rank : {1, 2, 17, 500}) {
        const int32_t target = order[size_t(rank - 1)];
        const ScoredToken s = score_token(l.data(), 500, target, 4);
        EXPECT_EQ(s.token, target);
        EXPECT_EQ(s.rank, rank);
        EXPECT_NEAR(s.logprob, l[size_t(target)] - std::log(z), 1e-4);
        ASSERT_EQ(s.top.size(), 4u);
        for (int k = 0; k < 4; ++k) EXPECT_EQ(s.top[size_t(k)].first, order[size_t(k)]);
    }
    EXPECT_THROW(score_token(l.data(), 500, 500, 0), Error);
}
