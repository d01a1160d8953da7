// Cases for the GPU sampler (cuda/sample/sample.cuh) against the host sampler's semantics (backend/sampling.cpp):
// greedy exactly (token and logprob, ties to the lower id), sampling statistically: the empirical distribution of
// many draws (different draw_index) must match the exact distribution the host rules define (top-k, then top-p
// over the renormalized temperature-1 probabilities, then temperature), and never leave its support. --quick keeps
// two of the sampling configurations. The logit adjustments (allowed-token masks, banned ids, logit_bias, repetition /
// frequency / presence penalties, through the backend's SampleAdjustStaging) and min-p are checked against the host
// sampler itself: greedy tokens and raw-row logprobs exactly, sampled distributions statistically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <sstream>

#include "backend/backend.h"
#include "cuda/backend/sample_adjust.h"
#include "cuda/sample/sample.cuh"
#include "cuda/sample/sample_spread.cuh"
#include "harness.h"
#include "harness_mode.h"

namespace flashseek::test {
namespace {

using cuda::DeviceSampleParams;

// Exact distribution of one draw under the host rules.
std::vector<double> host_distribution(const std::vector<float>& l, const DeviceSampleParams& p) {
    const int64_t V = int64_t(l.size());
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const float mx = l[order[0]];
    size_t keep = size_t(V);
    if (p.top_k > 0) keep = std::min<size_t>(keep, size_t(p.top_k));
    if (p.top_p < 1.f) {
        double zk = 0;
        for (size_t i = 0; i < keep; ++i) zk += std::exp(double(l[order[i]]) - mx);
        double cum = 0;
        size_t n = 0;
        while (n < keep) {
            cum += std::exp(double(l[order[n]]) - mx) / zk;
            ++n;
            if (cum >= double(p.top_p)) break;
        }
        keep = std::max<size_t>(1, n);
    }
    std::vector<double> d(size_t(V), 0.0);
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += std::exp((double(l[order[i]]) - mx) / double(p.temperature));
    for (size_t i = 0; i < keep; ++i) d[size_t(order[i])] = std::exp((double(l[order[i]]) - mx) / double(p.temperature)) / total;
    return d;
}

// Every drawn row of the last sample_rows call on `scratch` took the spread passes' token: its SpreadRow::done holds
// each pass the row needs. The one-CTA sampler stands in, with the same bits, for a row whose passes did not complete
// (a pass the call did not launch, or a stale scratch that cost a pass its last CTA), so only these flags show it.
void expect_spread_passes_done(const DeviceArray<uint8_t>& scratch, const std::vector<DeviceSampleParams>& params,
                               int64_t vocab) {
    using cuda::sample_detail::SpreadRow;
    std::vector<SpreadRow> st(params.size());
    CUDA_CHECK(cudaMemcpy(st.data(), cuda::sample_detail::sample_spread_rows(scratch.ptr, scratch.n),
                          st.size() * sizeof(SpreadRow), cudaMemcpyDeviceToHost));
    for (size_t r = 0; r < params.size(); ++r) {
        const DeviceSampleParams& p = params[r];
        if (!(p.temperature > 0.f) || !(p.top_p > 0.f && p.top_p <= 1.f) || p.top_k < 0 || p.min_p < 0.f ||
            p.min_p > 1.f)
            continue;  // greedy or invalid: no spread token
        uint32_t need = cuda::sample_detail::kDoneDraw;
        if (p.top_k > 0 && p.top_k < vocab) need |= cuda::sample_detail::kDoneTopK;
        if (p.top_p < 1.f) need |= cuda::sample_detail::kDoneTopP;
        EXPECT_EQ(st[r].done & need, need) << "row " << r << ": the spread passes did not complete";
    }
}

TEST(Sample, GreedyMatchesHostArgmaxAndLogprob) {
    for (int64_t V : {int64_t(129280), int64_t(1007), int64_t(3)}) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(::testing::Message() << "V=" << V << " seed=" << seed);
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> nd(0.f, 3.f);
        const int rows = 5;
        std::vector<float> logits(size_t(rows * V));
        for (auto& v : logits) v = nd(rng);
        // row 1: a tie for the maximum; the lower id must win
        if (V > 10) {
            const float m = *std::max_element(logits.begin() + V, logits.begin() + 2 * V) + 1.f;
            logits[size_t(V + 7)] = m;
            logits[size_t(V + 3)] = m;
        }
        std::vector<DeviceSampleParams> params(static_cast<size_t>(rows));
        DeviceArray<float> dl(logits), lp(static_cast<size_t>(rows));
        DeviceArray<DeviceSampleParams> dp(params);
        DeviceArray<int32_t> tok(static_cast<size_t>(rows));
        tok.poison();
        lp.poison();
        cuda::sample_rows(dl.ptr, rows, V, V, dp.ptr, tok.ptr, lp.ptr, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto t = tok.download();
        const auto g = lp.download();
        for (int r = 0; r < rows; ++r) {
            const float* row = &logits[size_t(r * V)];
            int32_t best = 0;
            for (int32_t i = 1; i < V; ++i)
                if (row[i] > row[best]) best = i;
            double z = 0;
            for (int64_t i = 0; i < V; ++i) z += std::exp(double(row[i]) - row[best]);
            EXPECT_EQ(t[size_t(r)], best) << "row " << r;
            EXPECT_NEAR(g[size_t(r)], double(row[best]) - row[best] - std::log(z), 1e-4) << "row " << r;
        }
        if (V > 10) {
            EXPECT_EQ(t[1], 3);
        }
    }
}

// The spread passes (a scratch given: the max and the normalizer over many CTAs per row, then the drawn rows'
// top-k / top-p selections and draw) against the sampler's own one-CTA passes: the same token and the same logprob
// bits, greedy and sampled (temperature alone, top-k, top-p, min-p, ties at both thresholds), with every set of
// launched passes, for V4's vocabulary and odd ones, a row shared by every draw (ld 0), a raw row beside an adjusted one, rows with invalid parameters (their
// early return must still zero their max keys), NaN and infinities. The three forms run in turn on one scratch with
// different rows, so a key left over from a call would change the next call's tokens.
TEST(Sample, SpreadPassesGiveTheSameBits) {
    for (int64_t V : {int64_t(129280), int64_t(1007), int64_t(3), int64_t(5000)}) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(::testing::Message() << "V=" << V << " seed=" << seed);
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> nd(0.f, 3.f);
        const int rows = 14;
        std::vector<float> logits(size_t(rows * V)), raw(size_t(rows * V));
        for (auto& v : logits) v = nd(rng);
        for (auto& v : raw) v = nd(rng);
        for (int64_t i = 0; i < V; ++i)  // row 13: a few distinct values, so both thresholds fall on ties
            logits[size_t(13 * V + i)] = i % 5 == 0 ? -INFINITY : std::round(logits[size_t(13 * V + i)] * 0.5f);
        if (V > 10) {
            logits[size_t(V + 7)] = 40.f;  // a tie for the maximum in row 1
            logits[size_t(V + V - 2)] = 40.f;
            logits[size_t(2 * V + 5)] = NAN;  // row 2: a NaN
            raw[size_t(6 * V + 9)] = NAN;     // a NaN in a raw row: its max skips it (fmaxf), spread or not
            logits[size_t(3 * V + 1)] = INFINITY;  // row 3: +inf
            for (int64_t i = 0; i < V; ++i) logits[size_t(4 * V + i)] = i % 2 ? -INFINITY : -1e30f;  // row 4
        }
        std::vector<DeviceSampleParams> params(static_cast<size_t>(rows));
        params[5] = {0.8f, 0.9f, 0, 0.f, seed, 11};
        params[6] = {1.2f, 1.f, 40, 0.05f, seed, 12};
        params[7] = {-1.f, 1.f, 0, 0.f, seed, 13};  // invalid: -1 before any pass
        params[8] = {1.f, 0.5f, 7, 0.f, seed, 14};
        params[9] = {0.7f, 1.f, 0, 0.f, seed, 15};     // temperature alone: every token kept
        params[10] = {1.f, 0.95f, 0, 0.f, seed, 16};   // top-p alone
        params[11] = {0.9f, 1.f, 3, 0.f, seed, 17};    // top-k alone
        params[12] = {1.f, 0.7f, 50, 0.1f, seed, 18};  // all three
        params[13] = {1.f, 0.8f, 30, 0.f, seed, 19};   // ties at the thresholds
        DeviceArray<float> dl(logits), draw(raw);
        DeviceArray<DeviceSampleParams> dp(params);
        const size_t scratch_bytes = cuda::sample_rows_scratch_bytes(rows);
        DeviceArray<uint8_t> scratch(scratch_bytes);
        CUDA_CHECK(cudaMemset(scratch.ptr, 0, scratch_bytes));
        for (int mode = 0; mode < 3; ++mode) {  // rows of their own; ld 0; with raw rows
            SCOPED_TRACE(::testing::Message() << "mode " << mode);
            const int64_t ld = mode == 1 ? 0 : V;
            const float* raw_ptr = mode == 2 ? draw.ptr : nullptr;
            DeviceArray<int32_t> tok_a(static_cast<size_t>(rows)), tok_b(static_cast<size_t>(rows));
            DeviceArray<float> lp_a(static_cast<size_t>(rows)), lp_b(static_cast<size_t>(rows));
            tok_a.poison();
            tok_b.poison();
            lp_a.poison();
            lp_b.poison();
            cuda::sample_rows(dl.ptr, rows, V, ld, dp.ptr, tok_a.ptr, lp_a.ptr, nullptr, raw_ptr, V);
            // Every pass launched; the passes the rows need; the draw alone (rows needing top-k or top-p fall back
            // to the one-CTA sampler); none of the drawn rows' passes.
            const cuda::SamplePasses variants[] = {cuda::SamplePasses{},
                                                   cuda::sample_passes_for(params.data(), rows, V),
                                                   cuda::SamplePasses{true, false, false},
                                                   cuda::SamplePasses{false, false, false}};
            for (const cuda::SamplePasses& passes : variants) {
                SCOPED_TRACE(::testing::Message() << "passes " << passes.drawn << passes.top_k << passes.top_p);
                tok_b.poison();
                lp_b.poison();
                cuda::sample_rows(dl.ptr, rows, V, ld, dp.ptr, tok_b.ptr, lp_b.ptr, nullptr, raw_ptr, V, scratch.ptr,
                                  scratch_bytes, passes);
                CUDA_CHECK(cudaDeviceSynchronize());
                if (passes.drawn && passes.top_k && passes.top_p) expect_spread_passes_done(scratch, params, V);
                EXPECT_EQ(tok_b.download(), tok_a.download());
                const auto a = lp_a.download(), b = lp_b.download();
                for (int r = 0; r < rows; ++r)
                    EXPECT_EQ(std::memcmp(&a[size_t(r)], &b[size_t(r)], 4), 0)
                        << "row " << r << ": " << a[size_t(r)] << " against " << b[size_t(r)];
            }
            const auto t = tok_a.download();
            for (int r = 5; r < rows; ++r) {
                if (r == 7) continue;
                EXPECT_TRUE(t[size_t(r)] >= 0 && t[size_t(r)] < V) << "row " << r << ": " << t[size_t(r)];
            }
        }
        if (V == 3) {
            EXPECT_THROW(cuda::sample_rows(dl.ptr, rows, V, V, dp.ptr, nullptr, nullptr, nullptr, nullptr, 0,
                                           scratch.ptr, scratch_bytes),
                         Error);  // a null output
        }
    }
    std::vector<float> one = {1.f, 2.f};
    DeviceArray<float> d1(one);
    std::vector<DeviceSampleParams> p1(2);
    DeviceArray<DeviceSampleParams> dp1(p1);
    DeviceArray<int32_t> t1(2);
    DeviceArray<uint8_t> small(cuda::sample_rows_scratch_bytes(2) - 1);
    EXPECT_THROW(cuda::sample_rows(d1.ptr, 2, 2, 0, dp1.ptr, t1.ptr, nullptr, nullptr, nullptr, 0, small.ptr,
                                   small.n),
                 Error);  // a scratch too small
}

TEST(Sample, DistributionMatchesHostRules) {
    struct C { float t, top_p; int top_k; bool ties; };
    std::vector<C> configs = {C{1.f, 1.f, 0, false},    C{0.7f, 1.f, 10, false}, C{1.3f, 0.8f, 0, false},
                              C{1.f, 0.5f, 20, false},  C{2.f, 0.95f, 5, false}, C{1.f, 0.9f, 30, true},
                              C{0.8f, 0.6f, 0, true}};
    if (quick_mode()) configs = {C{1.3f, 0.8f, 0, false}, C{2.f, 0.95f, 5, false}, C{1.f, 0.9f, 30, true}};
    for (const C& c : configs) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(::testing::Message() << "T=" << c.t << " top_p=" << c.top_p << " top_k=" << c.top_k
                                          << " ties=" << c.ties << " seed=" << seed);
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> nd(0.f, 1.5f);
        const int64_t V = 97;
        std::vector<float> logits(static_cast<size_t>(V));
        for (auto& v : logits) v = c.ties ? std::round(nd(rng)) : nd(rng);  // ties: ~9 distinct values
        const int N = 60000;
        std::vector<DeviceSampleParams> params(static_cast<size_t>(N));
        for (int i = 0; i < N; ++i) params[size_t(i)] = {c.t, c.top_p, c.top_k, 0, seed, uint64_t(i)};
        DeviceArray<float> dl(logits);
        DeviceArray<DeviceSampleParams> dp(params);
        DeviceArray<int32_t> tok(static_cast<size_t>(N));
        tok.poison();
        cuda::sample_rows(dl.ptr, N, V, 0, dp.ptr, tok.ptr, nullptr, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto t = tok.download();
        const auto expect = host_distribution(logits, {c.t, c.top_p, c.top_k, 0, seed, 0});
        std::vector<double> hist(size_t(V), 0.0);
        for (int32_t x : t) {
            ASSERT_TRUE(x >= 0 && x < V) << "token " << x;
            EXPECT_GT(expect[size_t(x)], 0.0) << "token " << x << " is outside the host's candidate set";
            hist[size_t(x)] += 1.0 / N;
        }
        double tv = 0;
        for (int64_t i = 0; i < V; ++i) tv += 0.5 * std::fabs(hist[size_t(i)] - expect[size_t(i)]);
        // Sampling noise of the total-variation distance at N = 60000 over <= 97 outcomes is about 0.01.
        EXPECT_LE(tv, 0.02);
        // Same (seed, draw_index) -> same token.
        cuda::sample_rows(dl.ptr, N, V, 0, dp.ptr, tok.ptr, nullptr, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(tok.download(), t);
        // The spread passes draw the same tokens (in calls of 5,000 rows: the scratch grows with the rows).
        const int chunk = 5000;
        DeviceArray<uint8_t> scratch(cuda::sample_rows_scratch_bytes(chunk));
        CUDA_CHECK(cudaMemset(scratch.ptr, 0, scratch.n));
        tok.poison();
        for (int r0 = 0; r0 < N; r0 += chunk)
            cuda::sample_rows(dl.ptr, std::min(chunk, N - r0), V, 0, dp.ptr + r0, tok.ptr + r0, nullptr, nullptr,
                              nullptr, 0, scratch.ptr, scratch.n);
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(tok.download(), t);
    }
}

// A drawn row's token and logprob depend on its row and parameters alone: the same bits sampled alone, among other
// rows, and at another position of a reordered batch, through the spread passes, which complete for every drawn row
// although the calls on the one scratch change their row count.
TEST(Sample, DrawnTokenIgnoresBatchMates) {
    for (int64_t V : {int64_t(129280), int64_t(5000)}) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(::testing::Message() << "V=" << V << " seed=" << seed);
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> nd(0.f, 2.f);
        const int rows = 8;
        std::vector<float> logits(size_t(rows * V));
        for (auto& v : logits) v = nd(rng);
        std::vector<DeviceSampleParams> params(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r)
            params[size_t(r)] = {0.5f + 0.2f * float(r), r % 3 == 0 ? 1.f : 0.6f + 0.05f * float(r),
                                 r % 2 == 0 ? 0 : 20 * r, r == 5 ? 0.05f : 0.f, seed, uint64_t(r) + 7};
        params[2].temperature = 0.f;  // a greedy batch-mate
        DeviceArray<uint8_t> scratch(cuda::sample_rows_scratch_bytes(rows));
        CUDA_CHECK(cudaMemset(scratch.ptr, 0, scratch.n));
        auto run = [&](const std::vector<float>& l, const std::vector<DeviceSampleParams>& p, int n) {
            DeviceArray<float> dl(l);
            DeviceArray<DeviceSampleParams> dp(p);
            DeviceArray<int32_t> tok(static_cast<size_t>(n));
            DeviceArray<float> lp(static_cast<size_t>(n));
            tok.poison();
            lp.poison();
            cuda::sample_rows(dl.ptr, n, V, V, dp.ptr, tok.ptr, lp.ptr, nullptr, nullptr, 0, scratch.ptr, scratch.n,
                              cuda::sample_passes_for(p.data(), n, V));
            CUDA_CHECK(cudaDeviceSynchronize());
            expect_spread_passes_done(scratch, p, V);  // calls of 8 rows, then of 1, on one scratch
            return std::make_pair(tok.download(), lp.download());
        };
        const auto [bt, bl] = run(logits, params, rows);
        // Reversed order.
        std::vector<float> rev(logits.size());
        std::vector<DeviceSampleParams> rev_p(params.rbegin(), params.rend());
        for (int r = 0; r < rows; ++r)
            std::copy_n(logits.begin() + r * V, V, rev.begin() + (rows - 1 - r) * V);
        const auto [rt, rl] = run(rev, rev_p, rows);
        for (int r = 0; r < rows; ++r) {
            SCOPED_TRACE(::testing::Message() << "row " << r);
            const std::vector<float> one(logits.begin() + r * V, logits.begin() + (r + 1) * V);
            const auto [ot, ol] = run(one, {params[size_t(r)]}, 1);
            EXPECT_EQ(ot[0], bt[size_t(r)]);
            EXPECT_EQ(std::memcmp(&ol[0], &bl[size_t(r)], 4), 0);
            EXPECT_EQ(rt[size_t(rows - 1 - r)], bt[size_t(r)]);
            EXPECT_EQ(std::memcmp(&rl[size_t(rows - 1 - r)], &bl[size_t(r)], 4), 0);
        }
    }
}

TEST(Sample, InvalidParametersGiveMinusOne) {
    std::vector<float> logits = {0.f, 1.f, 2.f};
    std::vector<DeviceSampleParams> params = {{-1.f, 1.f, 0, 0, 1, 0}, {1.f, 0.f, 0, 0, 1, 0}, {1.f, 1.f, -2, 0, 1, 0}};
    DeviceArray<float> dl(logits);
    DeviceArray<DeviceSampleParams> dp(params);
    DeviceArray<int32_t> tok(3);
    cuda::sample_rows(dl.ptr, 3, 3, 0, dp.ptr, tok.ptr, nullptr, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int32_t x : tok.download()) EXPECT_EQ(x, -1);
    EXPECT_THROW(cuda::sample_rows(dl.ptr, 3, 3, 2, dp.ptr, tok.ptr, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace flashseek::test

// ---- min-p and logit adjustments (masks, bans, logit_bias, penalties) against the host sampler ----

namespace flashseek::test {
namespace {

// Random adjustment inputs of one row; the vectors own what the SampleParams spans point at.
struct RowInputs {
    std::vector<int32_t> prompt, output, banned;
    std::vector<LogitBias> bias;
    std::vector<uint32_t> mask;
    SampleParams params;
};

RowInputs random_row_inputs(std::mt19937_64& rng, int64_t V, bool with_mask) {
    RowInputs r;
    auto tok = [&] { return int32_t(rng() % uint64_t(V)); };
    for (int i = 0, n = int(rng() % 40); i < n; ++i) r.prompt.push_back(tok());
    for (int i = 0, n = int(rng() % 40); i < n; ++i)
        r.output.push_back(i > 0 && rng() % 3 == 0 ? r.output.back() : tok());  // repeats: counts above 1
    for (int i = 0, n = int(rng() % 4); i < n; ++i) r.banned.push_back(tok());
    for (int i = 0, n = int(rng() % 20); i < n; ++i) {
        const int32_t t = tok();
        bool dup = false;
        for (const auto& b : r.bias) dup |= b.token == t;
        if (!dup) r.bias.push_back({t, float(int(rng() % 401) - 200) / 2.f});
    }
    if (with_mask) {
        r.mask.assign(size_t(token_mask_words(V)), 0u);
        for (int64_t t = 0; t < V; ++t)
            if (rng() % 3 == 0) r.mask[size_t(t >> 5)] |= 1u << (t & 31);
    }
    SampleParams& p = r.params;
    p.repetition_penalty = rng() % 2 ? 1.f : 0.5f + float(rng() % 200) / 100.f;
    p.frequency_penalty = float(int(rng() % 401) - 200) / 100.f;
    p.presence_penalty = float(int(rng() % 401) - 200) / 100.f;
    p.prompt_tokens = r.prompt;
    p.output_tokens = r.output;
    p.banned_tokens = r.banned;
    p.logit_bias = r.bias;
    if (with_mask) p.allowed_tokens = r.mask.data();
    return r;
}

// The device path of a step with logit adjustments: the rows' edits staged and applied to a copy of `logits`
// ([rows, V]), then sampled with `params`, the logprobs reported from the raw rows. Returns tokens and logprobs.
std::pair<std::vector<int32_t>, std::vector<float>> sample_adjusted(const std::vector<float>& logits, int64_t V,
                                                                    const std::vector<const SampleParams*>& rows_params,
                                                                    const std::vector<DeviceSampleParams>& params) {
    const int64_t rows = int64_t(rows_params.size());
    cuda::SampleAdjustStaging staging;
    EXPECT_TRUE(staging.prepare(rows_params, V));
    DeviceArray<float> dl(logits), lp(static_cast<size_t>(rows));
    DeviceArray<DeviceSampleParams> dp(params);
    DeviceArray<int32_t> tok(static_cast<size_t>(rows));
    tok.poison();
    const float* adjusted = staging.apply(dl.ptr, V, nullptr);
    cuda::sample_rows(adjusted, rows, V, V, dp.ptr, tok.ptr, lp.ptr, nullptr, dl.ptr, V);
    CUDA_CHECK(cudaDeviceSynchronize());
    return {tok.download(), lp.download()};
}

TEST(Sample, AdjustedGreedyMatchesHostSampler) {
    for (int64_t V : {int64_t(129280), int64_t(3001)}) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(::testing::Message() << "V=" << V << " seed=" << seed);
        std::mt19937_64 rng(seed);
        std::normal_distribution<float> nd(0.f, 3.f);
        const int rows = 24;
        std::vector<float> logits(size_t(rows * V));
        for (auto& v : logits) v = nd(rng);
        std::vector<RowInputs> inputs;
        inputs.reserve(rows);
        std::vector<const SampleParams*> row_params;
        for (int r = 0; r < rows; ++r) {
            inputs.push_back(random_row_inputs(rng, V, r % 2 == 0));
            row_params.push_back(r == rows - 1 ? nullptr : &inputs.back().params);  // last: a padding row
        }
        const auto [t, g] =
            sample_adjusted(logits, V, row_params, std::vector<DeviceSampleParams>(static_cast<size_t>(rows)));
        for (int r = 0; r < rows; ++r) {
            const SampleParams host = row_params[size_t(r)] ? *row_params[size_t(r)] : SampleParams{};
            const SampleResult want = sample_logits(&logits[size_t(r * V)], V, host);
            EXPECT_EQ(t[size_t(r)], want.token) << "row " << r;
            EXPECT_NEAR(g[size_t(r)], want.logprob, 1e-4) << "row " << r << ": the raw row's logprob";
        }
    }
}

// A tiny repetition_penalty (the API accepts any > 0) overflows a seen positive logit: it must stay the largest finite
// logit, sampled with certainty at any temperature, not +inf and a NaN softmax (sampling.cpp does the same).
TEST(Sample, TinyRepetitionPenaltyStaysFinite) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed=" << seed);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 3.f);
    const int64_t V = 3001;
    const int rows = 3;
    std::vector<float> logits(size_t(rows * V));
    for (auto& v : logits) v = nd(rng);
    const int32_t seen = int32_t(rng() % uint64_t(V));
    for (int r = 0; r < rows; ++r) logits[size_t(r * V + seen)] = 2.f;  // 2 / 1e-40 overflows
    const std::vector<int32_t> prompt = {seen};
    SampleParams host;
    host.repetition_penalty = 1e-40f;
    host.prompt_tokens = prompt;
    const std::vector<const SampleParams*> row_params(static_cast<size_t>(rows), &host);
    std::vector<DeviceSampleParams> params(static_cast<size_t>(rows));
    const float temperatures[rows] = {0.f, 0.7f, 1.5f};
    for (int r = 0; r < rows; ++r) params[size_t(r)] = {temperatures[r], 1.f, 0, 0, seed, uint64_t(r)};
    const auto [t, g] = sample_adjusted(logits, V, row_params, params);
    for (int r = 0; r < rows; ++r) {
        EXPECT_EQ(t[size_t(r)], seen) << "temperature " << temperatures[r];
        EXPECT_TRUE(std::isfinite(g[size_t(r)])) << "temperature " << temperatures[r];
    }
}

TEST(Sample, AdjustedAndMinPDistributionsMatchHostRules) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed=" << seed);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.5f);
    const int64_t V = 97;
    std::vector<float> logits(static_cast<size_t>(V));
    for (auto& v : logits) v = nd(rng);
    RowInputs in = random_row_inputs(rng, V, true);
    in.params.temperature = 0.9f;
    in.params.min_p = 0.02f;
    in.params.top_k = 30;
    // Host rules: the distribution of many host draws (the host sampler is the reference).
    const int N = 60000;
    std::vector<double> expect(size_t(V), 0.0);
    for (int i = 0; i < N; ++i) {
        SampleParams p = in.params;
        p.seed = seed;
        p.draw_index = uint64_t(i) + 1000000;
        expect[size_t(sample_logits(logits.data(), V, p).token)] += 1.0 / N;
    }
    std::vector<const SampleParams*> row_params(static_cast<size_t>(N), &in.params);
    cuda::SampleAdjustStaging staging;
    ASSERT_TRUE(staging.prepare(row_params, V));
    std::vector<DeviceSampleParams> params(static_cast<size_t>(N));
    for (int i = 0; i < N; ++i) params[size_t(i)] = {0.9f, 1.f, 30, 0.02f, seed, uint64_t(i)};
    DeviceArray<float> dl(logits);
    DeviceArray<DeviceSampleParams> dp(params);
    DeviceArray<int32_t> tok(static_cast<size_t>(N));
    tok.poison();
    // Every row reads the same logits (ld 0) and gets its own adjusted copy.
    const float* adjusted = staging.apply(dl.ptr, 0, nullptr);
    cuda::sample_rows(adjusted, N, V, V, dp.ptr, tok.ptr, nullptr, nullptr, dl.ptr, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> hist(size_t(V), 0.0);
    for (int32_t x : tok.download()) {
        ASSERT_TRUE(x >= 0 && x < V) << "token " << x;
        EXPECT_GT(expect[size_t(x)], 0.0) << "token " << x << " is excluded by the host's rules";
        hist[size_t(x)] += 1.0 / N;
    }
    double tv = 0;
    for (int64_t i = 0; i < V; ++i) tv += 0.5 * std::fabs(hist[size_t(i)] - expect[size_t(i)]);
    EXPECT_LE(tv, 0.03);  // two samples of 60000 draws each
}

TEST(Sample, EverythingExcludedGivesMinusOne) {
    const int64_t V = 64;
    std::vector<float> logits(static_cast<size_t>(V), 0.5f);
    std::vector<uint32_t> none(size_t(token_mask_words(V)), 0u);
    SampleParams p;
    p.allowed_tokens = none.data();
    std::vector<const SampleParams*> rows = {&p};
    cuda::SampleAdjustStaging staging;
    ASSERT_TRUE(staging.prepare(rows, V));
    DeviceArray<float> dl(logits);
    DeviceArray<DeviceSampleParams> dp(std::vector<DeviceSampleParams>(1));
    DeviceArray<int32_t> tok(1);
    const float* adjusted = staging.apply(dl.ptr, V, nullptr);
    cuda::sample_rows(adjusted, 1, V, V, dp.ptr, tok.ptr, nullptr, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(tok.download()[0], -1);
}

}  // namespace
}  // namespace flashseek::test
