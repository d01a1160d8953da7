// Helpers for the CPU forward tests: fresh seeds, random token ids, running a prompt through one sequence in steps
// of given sizes, and the relative difference of two logit arrays.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "cpu/forward.h"
#include "cpu/model.h"

namespace flashseek::test {

inline uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = int32_t(g() % uint64_t(vocab));
    return t;
}

// Runs tokens through one fresh sequence in steps of the given sizes (all logits), returning [T, V].
inline std::vector<float> run_steps(const cpu::CpuModel& m, const std::vector<int32_t>& tokens,
                                    const std::vector<int>& sizes, cpu::ThreadPool* pool) {
    cpu::SequenceState st = cpu::new_sequence_state(m);
    std::vector<float> all, out;
    size_t pos = 0;
    for (int n : sizes) {
        cpu::StepInput in{&st, tokens.data() + pos, n, true};
        cpu::forward(m, std::span<const cpu::StepInput>(&in, 1), out, pool);
        all.insert(all.end(), out.begin(), out.end());
        pos += size_t(n);
    }
    EXPECT_EQ(pos, tokens.size());
    EXPECT_EQ(st.length, int64_t(tokens.size()));
    return all;
}

// Step sizes that cover `total` tokens in chunks of c (the last one shorter).
inline std::vector<int> chunks(int64_t total, int64_t c) {
    std::vector<int> s;
    for (int64_t b = 0; b < total; b += c) s.push_back(int(std::min(c, total - b)));
    return s;
}

// max |a - b| / max |b|
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double md = 0, mb = 1e-30;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        md = std::max(md, double(std::fabs(a[i] - b[i])));
        mb = std::max(mb, double(std::fabs(b[i])));
    }
    return md / mb;
}

}  // namespace flashseek::test
