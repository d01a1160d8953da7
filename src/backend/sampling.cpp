// Host sampling of one logits row and the default Backend::forward_sample. Logit adjustments come first, in
// vLLM's order (allowed-token mask and banned ids, logit_bias, repetition penalty over prompt + output, frequency
// and presence penalties over output), on a copy of the row so that reported logprobs stay the model's. Then the
// filters, as users of OpenAI-style APIs expect: top-k over the logits, top-p (nucleus) over the remaining
// candidates' probabilities, min-p against the most likely candidate (both at temperature 1, as in llama.cpp's
// chain), then temperature on what is left; temperature 0 is greedy. The random draw is counter-based (a hash
// of seed and draw_index), so a request reproduces its tokens whatever else is in the batch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

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

float row_max(const float* logits, int64_t vocab) {
    float mx = logits[0];
    for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
    return mx;
}

// log of the softmax normalizer of a row whose maximum is mx.
double log_normalizer(const float* logits, int64_t vocab, float mx) {
    double z = 0;
    for (int64_t i = 0; i < vocab; ++i) z += std::exp(double(logits[i]) - mx);
    return std::log(z) + mx;
}

// The n most likely tokens of a row (ties: lower id first) with their log-softmax.
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab, double log_z, int n_top) {
    std::vector<std::pair<int32_t, float>> out;
    if (n_top <= 0) return out;
    const int64_t n = std::min<int64_t>(n_top, vocab);
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int32_t a, int32_t b) { return better(logits, a, b); });
    for (int64_t i = 0; i < n; ++i)
        out.push_back({order[size_t(i)], float(double(logits[order[size_t(i)]]) - log_z)});
    return out;
}

void check_params(int64_t vocab, const SampleParams& p) {
    FS_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.f, "sample: temperature must be >= 0, got {}",
             p.temperature);
    FS_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "sample: top_p must be in (0, 1], got {}", p.top_p);
    FS_CHECK(p.top_k >= 0, "sample: top_k must be >= 0, got {}", p.top_k);
    FS_CHECK(p.min_p >= 0.f && p.min_p <= 1.f, "sample: min_p must be in [0, 1], got {}", p.min_p);
    FS_CHECK(p.n_logprobs >= 0, "sample: n_logprobs must be >= 0, got {}", p.n_logprobs);
    FS_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.f,
             "sample: repetition_penalty must be > 0, got {}", p.repetition_penalty);
    FS_CHECK(std::isfinite(p.frequency_penalty) && std::isfinite(p.presence_penalty),
             "sample: frequency_penalty and presence_penalty must be finite");
    for (const LogitBias& b : p.logit_bias)
        FS_CHECK(b.token >= 0 && b.token < vocab && std::isfinite(b.bias),
                 "sample: logit_bias entry for token {} (bias {}) is outside the vocabulary or not finite", b.token,
                 b.bias);
    for (int32_t t : p.banned_tokens)
        FS_CHECK(t >= 0 && t < vocab, "sample: banned token {} is outside the vocabulary", t);
    // The context is checked where the penalties read it (adjusted_logits): a full scan per row otherwise.
    const bool repetition = p.repetition_penalty != 1.f;
    if (repetition)
        for (int32_t t : p.prompt_tokens) FS_CHECK(t >= 0 && t < vocab, "sample: prompt token {} is out of range", t);
    if (repetition || p.frequency_penalty != 0.f || p.presence_penalty != 0.f)
        for (int32_t t : p.output_tokens) FS_CHECK(t >= 0 && t < vocab, "sample: output token {} is out of range", t);
}

// The adjusted copy of a row (see SampleParams). The per-token arithmetic is written out step by step so that the
// device sampler (cuda/sample) can reproduce it bit for bit.
std::vector<float> adjusted_logits(const float* logits, int64_t vocab, const SampleParams& p) {
    std::vector<float> out(logits, logits + vocab);
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    if (p.allowed_tokens)
        for (int64_t i = 0; i < vocab; ++i)
            if (!((p.allowed_tokens[i >> 5] >> (i & 31)) & 1u)) out[size_t(i)] = kNegInf;
    for (int32_t t : p.banned_tokens) out[size_t(t)] = kNegInf;
    for (const LogitBias& b : p.logit_bias) out[size_t(b.token)] += b.bias;
    const bool repetition = p.repetition_penalty != 1.f;
    const bool freq_presence = p.frequency_penalty != 0.f || p.presence_penalty != 0.f;
    if (!repetition && !freq_presence) return out;
    std::unordered_map<int32_t, int32_t> output_count;  // token -> occurrences in the output
    for (int32_t t : p.output_tokens) ++output_count[t];
    if (repetition) {
        std::vector<bool> seen(size_t(vocab), false);
        for (int32_t t : p.prompt_tokens) seen[size_t(t)] = true;
        for (const auto& [t, c] : output_count) seen[size_t(t)] = true;
        for (int64_t i = 0; i < vocab; ++i) {
            if (!seen[size_t(i)]) continue;
            float& l = out[size_t(i)];
            // A tiny penalty (the API allows any > 0) would turn a positive logit into +inf, and inf - inf is NaN in
            // the softmax: the quotient stops at the largest float (the device sampler does the same).
            l = l > 0.f ? std::min(l / p.repetition_penalty, std::numeric_limits<float>::max())
                        : l * p.repetition_penalty;
        }
    }
    if (freq_presence)
        for (const auto& [t, c] : output_count) {
            const float penalty = p.frequency_penalty * float(c) + p.presence_penalty;
            out[size_t(t)] = out[size_t(t)] - penalty;
        }
    return out;
}

// Draws from the candidates (in the given order) with weights exp((l - mx) / T); rounding can leave the target
// unreached, so the fallback is the last candidate of positive weight, never an excluded one.
template <typename Range>
int32_t draw(const float* logits, float mx, double inv_t, double u, const Range& cand) {
    auto weight = [&](int32_t i) { return std::exp((double(logits[i]) - mx) * inv_t); };
    double total = 0;
    for (int32_t c : cand) total += weight(c);
    const double target = u * total;
    double acc = 0;
    int32_t last_positive = -1;
    for (int32_t c : cand) {
        const double w = weight(c);
        if (w <= 0) continue;
        last_positive = c;
        acc += w;
        if (acc > target) return c;
    }
    return last_positive;
}

// Ids 0..n-1 as a range, without materializing them.
struct IdRange {
    int32_t n;
    struct It {
        int32_t i;
        int32_t operator*() const { return i; }
        It& operator++() { ++i; return *this; }
        bool operator!=(const It& o) const { return i != o.i; }
    };
    It begin() const { return {0}; }
    It end() const { return {n}; }
};

}  // namespace

SampleResult sample_logits(const float* raw_logits, int64_t vocab, const SampleParams& p) {
    FS_CHECK(vocab > 0, "sample: vocabulary size must be > 0");
    check_params(vocab, p);
    for (int64_t i = 0; i < vocab; ++i)
        FS_CHECK(!std::isnan(raw_logits[i]), "sample: logit {} is NaN", i);

    // log-softmax of the raw logits at temperature 1 (reported logprobs)
    const float raw_max = row_max(raw_logits, vocab);
    const double log_z = log_normalizer(raw_logits, vocab, raw_max);

    std::vector<float> adjusted;
    const float* logits = raw_logits;
    float mx = raw_max;  // of the row the filters see: another pass only when it was adjusted
    if (p.adjusts_logits()) {
        adjusted = adjusted_logits(raw_logits, vocab, p);
        logits = adjusted.data();
        mx = row_max(logits, vocab);
    }
    FS_CHECK(mx > -std::numeric_limits<float>::infinity(),
             "sample: the allowed-token mask and banned tokens exclude every token");

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
        if (p.min_p > 0.f) {
            // Relative to the most likely token (always kept): a logit threshold, the same float on the device.
            const float threshold = float(double(mx) + std::log(double(p.min_p)));
            if (!need_order) {
                for (int32_t i = 0; i < int32_t(vocab); ++i)
                    if (logits[i] >= threshold) cand.push_back(i);
            } else {
                std::erase_if(cand, [&](int32_t c) { return logits[c] < threshold; });
            }
        }
        const double inv_t = 1.0 / double(p.temperature);
        const double u = counter_uniform(p.seed, p.draw_index);
        res.token = need_order || p.min_p > 0.f ? draw(logits, mx, inv_t, u, cand)
                                                : draw(logits, mx, inv_t, u, IdRange{int32_t(vocab)});
    }
    res.logprob = float(double(raw_logits[res.token]) - log_z);
    res.top_logprobs = top_logprobs(raw_logits, vocab, log_z, p.n_logprobs);
    return res;
}

ScoredToken score_token(const float* logits, int64_t vocab, int32_t target, int top_n) {
    FS_CHECK(target >= 0 && target < vocab, "score: token {} is outside the vocabulary [0, {})", target, vocab);
    FS_CHECK(top_n >= 0, "score: top_n must be >= 0, got {}", top_n);
    for (int64_t i = 0; i < vocab; ++i) FS_CHECK(!std::isnan(logits[i]), "score: logit {} is NaN", i);
    const double log_z = log_normalizer(logits, vocab, row_max(logits, vocab));
    ScoredToken s;
    s.token = target;
    s.logprob = float(double(logits[target]) - log_z);
    s.rank = 1;
    for (int64_t i = 0; i < vocab; ++i)
        if (better(logits, int32_t(i), target)) ++s.rank;
    s.top = top_logprobs(logits, vocab, log_z, top_n);
    return s;
}

void wait_for_allowed_tokens(std::span<const SampleParams> params) {
    for (const SampleParams& p : params)
        if (p.allowed_tokens_ready.valid()) p.allowed_tokens_ready.wait();
}

void Backend::forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                             std::vector<SampleResult>& out) {
    FS_CHECK(steps.size() == params.size(), "forward_sample: {} steps but {} sample parameter sets", steps.size(),
             params.size());
    const WaitForAllowedTokensOnExit wait_on_exit{params};
    std::vector<float> logits;
    forward(steps, logits);
    wait_for_allowed_tokens(params);
    const int64_t V = config().vocab_size;
    out.clear();
    int64_t row = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
        const int64_t rows = steps[i].all_logits ? steps[i].n_tokens : 1;
        const SampleParams& p = params[i];
        FS_CHECK(p.score_targets.empty() || (steps[i].all_logits && int64_t(p.score_targets.size()) <= rows),
                 "forward_sample: entry {} scores {} tokens but has {} logits rows", i, p.score_targets.size(),
                 rows);
        SampleResult r = sample_logits(logits.data() + (row + rows - 1) * V, V, p);
        for (size_t j = 0; j < p.score_targets.size(); ++j)
            r.scored.push_back(score_token(logits.data() + (row + int64_t(j)) * V, V, p.score_targets[j],
                                           p.score_top_n));
        out.push_back(std::move(r));
        row += rows;
    }
}

}  // namespace flashseek
