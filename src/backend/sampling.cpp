// Host sampling of one logits row and the default Backend::forward_sample. Order of the filters, as users of
// OpenAI-style APIs expect: top-k over the logits, then top-p (nucleus) over the remaining candidates'
// probabilities, then temperature on what is left; temperature 0 is greedy. The random draw is counter-based
// (a hash of seed and draw_index), so a request reproduces its tokens whatever else is in the batch.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "util/error.h"

namespace flashseek {

namespace {

uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Uniform in [0, 1) from (seed, draw_index): two rounds of splitmix64 finalization over distinct inputs.
double counter_uniform(uint64_t seed, uint64_t draw_index) {
    const uint64_t h = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ (draw_index * 0xd1b54a32d192ed03ull + 1));
    return double(h >> 11) * (1.0 / 9007199254740992.0);
}

bool better(const float* logits, int32_t a, int32_t b) {
    if (logits[a] != logits[b]) return logits[a] > logits[b];
    return a < b;
}

}  // namespace

SampleResult sample_logits(const float* logits, int64_t vocab, const SampleParams& p) {
    FS_CHECK(vocab > 0, "sample: vocabulary size must be > 0");
    FS_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.f, "sample: temperature must be >= 0, got {}",
             p.temperature);
    FS_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "sample: top_p must be in (0, 1], got {}", p.top_p);
    FS_CHECK(p.top_k >= 0, "sample: top_k must be >= 0, got {}", p.top_k);
    FS_CHECK(p.n_logprobs >= 0, "sample: n_logprobs must be >= 0, got {}", p.n_logprobs);
    for (int64_t i = 0; i < vocab; ++i)
        FS_CHECK(!std::isnan(logits[i]), "sample: logit {} is NaN", i);

    // log-softmax at temperature 1 (reported logprobs)
    float mx = logits[0];
    for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
    double z = 0;
    for (int64_t i = 0; i < vocab; ++i) z += std::exp(double(logits[i]) - mx);
    const double log_z = std::log(z) + mx;

    SampleResult res;
    if (p.temperature == 0.f) {
        int32_t best = 0;
        for (int32_t i = 1; i < int32_t(vocab); ++i)
            if (logits[i] > logits[best]) best = i;
        res.token = best;
    } else {
        // Candidates in descending logit order (only as many as the filters need).
        std::vector<int32_t> cand;
        const bool need_order = p.top_k > 0 || p.top_p < 1.f;
        if (need_order) {
            cand.resize(size_t(vocab));
            std::iota(cand.begin(), cand.end(), 0);
            const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, vocab) : vocab;
            auto cmp = [&](int32_t a, int32_t b) { return better(logits, a, b); };
            if (k < vocab) {
                std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), cmp);
                cand.resize(size_t(k));
            } else {
                std::sort(cand.begin(), cand.end(), cmp);
            }
            if (p.top_p < 1.f) {
                // Nucleus over the top-k candidates' renormalized probabilities (temperature 1).
                double zk = 0;
                for (int32_t c : cand) zk += std::exp(double(logits[c]) - mx);
                double cum = 0;
                size_t keep = 0;
                while (keep < cand.size()) {
                    cum += std::exp(double(logits[cand[keep]]) - mx) / zk;
                    ++keep;
                    if (cum >= double(p.top_p)) break;
                }
                cand.resize(std::max<size_t>(1, keep));
            }
        }
        const double inv_t = 1.0 / double(p.temperature);
        auto weight = [&](int32_t i) { return std::exp((double(logits[i]) - mx) * inv_t); };
        const double u = counter_uniform(p.seed, p.draw_index);
        if (need_order) {
            double total = 0;
            for (int32_t c : cand) total += weight(c);
            double target = u * total, acc = 0;
            res.token = cand.back();
            for (int32_t c : cand) {
                acc += weight(c);
                if (acc > target) {
                    res.token = c;
                    break;
                }
            }
        } else {
            double total = 0;
            for (int64_t i = 0; i < vocab; ++i) total += weight(int32_t(i));
            double target = u * total, acc = 0;
            res.token = int32_t(vocab - 1);
            for (int64_t i = 0; i < vocab; ++i) {
                acc += weight(int32_t(i));
                if (acc > target) {
                    res.token = int32_t(i);
                    break;
                }
            }
        }
    }
    res.logprob = float(double(logits[res.token]) - log_z);
    if (p.n_logprobs > 0) {
        const int64_t n = std::min<int64_t>(p.n_logprobs, vocab);
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + n, order.end(),
                          [&](int32_t a, int32_t b) { return better(logits, a, b); });
        for (int64_t i = 0; i < n; ++i)
            res.top_logprobs.push_back({order[size_t(i)], float(double(logits[order[size_t(i)]]) - log_z)});
    }
    return res;
}

void Backend::forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                             std::vector<SampleResult>& out) {
    FS_CHECK(steps.size() == params.size(), "forward_sample: {} steps but {} sample parameter sets", steps.size(),
             params.size());
    std::vector<float> logits;
    forward(steps, logits);
    const int64_t V = config().vocab_size;
    out.clear();
    int64_t row = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
        const int64_t rows = steps[i].all_logits ? steps[i].n_tokens : 1;
        row += rows;
        out.push_back(sample_logits(logits.data() + (row - 1) * V, V, params[i]));
    }
}

}  // namespace flashseek
