// Forward-pass tests on generated tiny checkpoints (tests/cpu/configs): a prompt run at once, in chunks of 1, 3
// and 64 tokens, or prefilled then decoded token by token must give the same logits (<= 1e-5), and a batch of
// sequences of different lengths must give each sequence's logits as if it ran alone. Both configs cover window,
// CSA (ratio 4 + indexer with top-k smaller than the entries) and non-overlapping compression (ratio 128 and 16),
// with windows shorter than the prompt. Checkpoint seeds are fresh each run and printed on failure.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <unistd.h>

#include "cpu/forward.h"
#include "cpu/model.h"
#include "model/checkpoint_gen.h"
#include "model/config.h"
#include "forward_test_util.h"

using namespace flashseek;
using namespace flashseek::cpu;
using namespace flashseek::test;
namespace fs = std::filesystem;

namespace {

std::string config_path(const std::string& name) {
    return std::string(FLASHSEEK_SOURCE_DIR) + "/tests/cpu/configs/" + name;
}

// A checkpoint per (config, process), generated with a fresh seed.
struct TinyModel {
    std::string dir;
    uint64_t seed = 0;
};

struct Cleanup {
    std::vector<std::string> dirs;
    ~Cleanup() {
        std::error_code ec;
        for (const auto& d : dirs) fs::remove_all(d, ec);
    }
};

const TinyModel& tiny_model(const std::string& config) {
    static Cleanup cleanup;
    static std::map<std::string, TinyModel> cache;
    auto it = cache.find(config);
    if (it != cache.end()) return it->second;
    TinyModel t;
    t.seed = fresh_seed();
    t.dir = (fs::temp_directory_path() / ("flashseek-test-cpu-" + std::to_string(::getpid()) + "-" + config)).string();
    GenOptions opt;
    opt.seed = t.seed;
    cleanup.dirs.push_back(t.dir);
    generate_checkpoint(load_model_config(config_path(config)), t.dir, opt);
    return cache.emplace(config, t).first->second;
}

void check_consistency(const std::string& config, bool release, int64_t T) {
    const TinyModel& tm = tiny_model(config);
    SCOPED_TRACE(config + " checkpoint seed " + std::to_string(tm.seed) + (release ? " release" : " exact"));
    ThreadPool pool(2);
    CpuModelOptions mo;
    mo.release = release;
    mo.pool = &pool;
    auto m = load_cpu_model(tm.dir, mo);
    const uint64_t tseed = fresh_seed();
    SCOPED_TRACE("token seed " + std::to_string(tseed));
    const auto tokens = random_tokens(T, m->cfg.vocab_size, tseed);
    const auto full = run_steps(*m, tokens, {int(T)}, &pool);
    ASSERT_EQ(full.size(), size_t(T * m->cfg.vocab_size));
    for (float v : full) ASSERT_TRUE(std::isfinite(v));
    for (int64_t c : {1, 3, 64}) {
        const auto got = run_steps(*m, tokens, chunks(T, c), &pool);
        EXPECT_LE(max_rel_diff(got, full), 1e-5) << "chunk " << c;
    }
    // prefill P then teacher-forced decode
    std::vector<int> sizes = {int(T / 3)};
    for (int64_t t = T / 3; t < T; ++t) sizes.push_back(1);
    EXPECT_LE(max_rel_diff(run_steps(*m, tokens, sizes, &pool), full), 1e-5) << "prefill + decode";
    // single-threaded gives the same
    EXPECT_LE(max_rel_diff(run_steps(*m, tokens, chunks(T, 37), nullptr), full), 1e-5) << "no pool";
}

}  // namespace

TEST(Forward, ChunkAndDecodeConsistencyAllLayerTypes) { check_consistency("tiny_all_types.json", false, 300); }
TEST(Forward, ChunkAndDecodeConsistencyHashFp8Config) { check_consistency("tiny_hash_fp8.json", false, 300); }
TEST(Forward, ChunkAndDecodeConsistencyRelease) { check_consistency("tiny_all_types.json", true, 140); }

TEST(Forward, BatchOfDifferentLengthsEqualsAlone) {
    const TinyModel& tm = tiny_model("tiny_all_types.json");
    SCOPED_TRACE("checkpoint seed " + std::to_string(tm.seed));
    ThreadPool pool(2);
    CpuModelOptions mo;
    mo.pool = &pool;
    auto m = load_cpu_model(tm.dir, mo);
    const int64_t V = m->cfg.vocab_size;
    const uint64_t tseed = fresh_seed();
    SCOPED_TRACE("token seed " + std::to_string(tseed));
    // Three sequences; per step, how many tokens each appends (0 = not in this step).
    const std::vector<std::vector<int>> plan = {{50, 7, 1}, {1, 30, 13}, {140, 0, 1}, {1, 1, 200}, {3, 1, 0}};
    std::vector<std::vector<int32_t>> toks(3);
    std::vector<int64_t> lens(3, 0);
    for (const auto& row : plan)
        for (int s = 0; s < 3; ++s) lens[size_t(s)] += row[size_t(s)];
    for (int s = 0; s < 3; ++s) toks[size_t(s)] = random_tokens(lens[size_t(s)], V, tseed + uint64_t(s));
    std::vector<SequenceState> st(3, new_sequence_state(*m));
    std::vector<std::vector<float>> got(3);
    std::vector<size_t> pos(3, 0);
    for (const auto& row : plan) {
        std::vector<StepInput> in;
        std::vector<int> who;
        for (int s = 0; s < 3; ++s) {
            if (row[size_t(s)] == 0) continue;
            in.push_back({&st[size_t(s)], toks[size_t(s)].data() + pos[size_t(s)], row[size_t(s)], true});
            who.push_back(s);
            pos[size_t(s)] += size_t(row[size_t(s)]);
        }
        std::vector<float> out;
        forward(*m, in, out, &pool);
        size_t off = 0;
        for (size_t i = 0; i < in.size(); ++i) {
            const size_t n = size_t(in[i].n_tokens) * size_t(V);
            got[size_t(who[i])].insert(got[size_t(who[i])].end(), out.begin() + long(off), out.begin() + long(off + n));
            off += n;
        }
        EXPECT_EQ(off, out.size());
    }
    for (int s = 0; s < 3; ++s) {
        const auto alone = run_steps(*m, toks[size_t(s)], {int(lens[size_t(s)])}, &pool);
        EXPECT_LE(max_rel_diff(got[size_t(s)], alone), 1e-5) << "sequence " << s;
    }
}

TEST(Forward, LastRowLogitsAndValidation) {
    const TinyModel& tm = tiny_model("tiny_all_types.json");
    auto m = load_cpu_model(tm.dir, {});
    const auto tokens = random_tokens(20, m->cfg.vocab_size, fresh_seed());
    const auto full = run_steps(*m, tokens, {20}, nullptr);
    SequenceState st = new_sequence_state(*m);
    StepInput in{&st, tokens.data(), 20, false};
    std::vector<float> out;
    forward(*m, std::span<const StepInput>(&in, 1), out, nullptr);
    const int64_t V = m->cfg.vocab_size;
    ASSERT_EQ(out.size(), size_t(V));
    EXPECT_EQ(max_rel_diff(out, std::vector<float>(full.end() - V, full.end())), 0.0);
    // bad inputs leave the state untouched
    std::vector<int32_t> bad = {3, int32_t(V)};
    StepInput b{&st, bad.data(), 2, false};
    try {
        forward(*m, std::span<const StepInput>(&b, 1), out, nullptr);
        FAIL() << "expected an error";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
    }
    EXPECT_EQ(st.length, 20);
    StepInput twice[2] = {{&st, tokens.data(), 1, false}, {&st, tokens.data(), 1, false}};
    EXPECT_THROW(forward(*m, std::span<const StepInput>(twice, 2), out, nullptr), std::exception);
    StepInput empty{&st, tokens.data(), 0, false};
    EXPECT_THROW(forward(*m, std::span<const StepInput>(&empty, 1), out, nullptr), std::exception);
    EXPECT_EQ(st.length, 20);
}

TEST(Forward, ReleaseNumericsStayCloseToExact) {
    const TinyModel& tm = tiny_model("tiny_all_types.json");
    SCOPED_TRACE("checkpoint seed " + std::to_string(tm.seed));
    ThreadPool pool(2);
    CpuModelOptions ex, re;
    ex.pool = re.pool = &pool;
    re.release = true;
    auto me = load_cpu_model(tm.dir, ex), mr = load_cpu_model(tm.dir, re);
    const auto tokens = random_tokens(64, me->cfg.vocab_size, fresh_seed());
    const auto a = run_steps(*me, tokens, {64}, &pool), b = run_steps(*mr, tokens, {64}, &pool);
    // FP8 activations keep 3 mantissa bits (~3% per element), so on a random 4-layer model the logits move by
    // several percent (measured: rms 5% after one layer, ~20% after four). Over 150 fresh checkpoints the relative
    // rms was 0.15-0.37 (median 0.24) and one seed reached 0.405; the argmax agreed on 34-56 of 64 positions
    // (120 checkpoints). A bug (logits unrelated to the exact ones) gives ~1.4 and agreement near 0, so the bounds
    // sit well outside the measured spread: 0.6 and 20.
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += double(a[i] - b[i]) * (a[i] - b[i]);
        den += double(a[i]) * a[i];
    }
    const double rms_rel = std::sqrt(num / den);
    EXPECT_GT(rms_rel, 1e-4);  // the simulations change the numbers...
    EXPECT_LT(rms_rel, 0.6);   // ...by rounding, not more
    // and the argmax agrees on most positions
    const int64_t V = me->cfg.vocab_size;
    int agree = 0;
    for (int64_t t = 0; t < 64; ++t) {
        auto am = std::max_element(a.begin() + t * V, a.begin() + (t + 1) * V) - (a.begin() + t * V);
        auto bm = std::max_element(b.begin() + t * V, b.begin() + (t + 1) * V) - (b.begin() + t * V);
        agree += am == bm;
    }
    EXPECT_GE(agree, 20);
}


// The acceptance run size: 720 tokens of a hidden-256, 6-layer, 16-expert model with the real vocabulary (129280),
// all logits kept (the `flashseek logits` contract: prefill 200, then 520 decode steps). Measured in process CPU
// time so that other jobs on the machine do not make it flaky; about 5-10 CPU-seconds is expected.
TEST(Forward, PerfConfig720TokensRunsInSeconds) {
    const TinyModel& tm = tiny_model("perf_h256_l6_e16.json");
    ThreadPool pool(0);
    CpuModelOptions mo;
    mo.pool = &pool;
    auto m = load_cpu_model(tm.dir, mo);
    const auto tokens = random_tokens(720, m->cfg.vocab_size, fresh_seed());
    const std::clock_t c0 = std::clock();
    const auto w0 = std::chrono::steady_clock::now();
    std::vector<int> sizes = {200};
    sizes.resize(521, 1);
    const auto logits = run_steps(*m, tokens, sizes, &pool);
    const double cpu_s = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    std::printf("720-token run (prefill 200 + 520 decode, vocab %lld): %.2f CPU-s, %.2f s wall, %d threads\n",
                (long long)m->cfg.vocab_size, cpu_s, wall_s, pool.size());
    ASSERT_EQ(logits.size(), size_t(720) * size_t(m->cfg.vocab_size));
    EXPECT_LT(cpu_s, 120.0);
}
