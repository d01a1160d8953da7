// CpuBackend tests: sequence lifecycle, block accounting, OutOfStateMemory raised before any state changes,
// context and sequence limits, forward_sample, and the factory's backend dispatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "cpu/cpu_backend.h"
#include "backend/registry.h"
#include "backend_test_util.h"
#include "backends/builtin.h"

using namespace flashseek;

namespace {
const bool g_backends_registered = (register_builtin_backends(), true);
}  // namespace

TEST(CpuBackend, LifecycleAndAccounting) {
    const auto& tm = backend_test::tiny_model();
    BackendOptions opt;
    opt.max_sequences = 2;
    auto be = create_backend(tm.dir, opt);
    EXPECT_EQ(be->name(), "cpu");
    auto mem = be->memory();
    EXPECT_EQ(mem.used_blocks, 0);
    EXPECT_GT(mem.total_blocks, 0);
    EXPECT_EQ(mem.block_tokens, 64);
    EXPECT_EQ(be->blocks_for(0), 0);
    EXPECT_EQ(be->blocks_for(65) - be->blocks_for(64), 1);
    const int a = be->create_sequence(), b = be->create_sequence();
    EXPECT_THROW(be->create_sequence(), std::exception);  // max_sequences
    const auto tok = backend_test::random_tokens(70, be->config().vocab_size, 1);
    std::vector<float> logits;
    SequenceStep s[2] = {{a, tok.data(), 70, false}, {b, tok.data(), 5, true}};
    be->forward(s, logits);
    EXPECT_EQ(logits.size(), size_t(6 * be->config().vocab_size));
    EXPECT_EQ(be->sequence_length(a), 70);
    EXPECT_EQ(be->sequence_length(b), 5);
    EXPECT_EQ(be->memory().used_blocks, be->blocks_for(70) + be->blocks_for(5));
    EXPECT_EQ(be->memory().live_sequences, 2);
    be->free_sequence(a);
    EXPECT_EQ(be->memory().used_blocks, be->blocks_for(5));
    EXPECT_THROW(be->sequence_length(a), std::exception);
    EXPECT_THROW(be->free_sequence(a), std::exception);
    SequenceStep bad = {a, tok.data(), 1, false};
    EXPECT_THROW(be->forward(std::span<const SequenceStep>(&bad, 1), logits), std::exception);
    // forward_sample: greedy = argmax of the last row
    SequenceStep one = {b, tok.data() + 5, 3, false};
    std::vector<float> ref;
    auto be2 = create_backend(tm.dir, opt);
    const int c = be2->create_sequence();
    SequenceStep pre = {c, tok.data(), 5, false}, one2 = {c, tok.data() + 5, 3, false};
    be2->forward(std::span<const SequenceStep>(&pre, 1), ref);
    be2->forward(std::span<const SequenceStep>(&one2, 1), ref);
    std::vector<SampleResult> res;
    SampleParams sp;
    be->forward_sample(std::span<const SequenceStep>(&one, 1), std::span<const SampleParams>(&sp, 1), res);
    ASSERT_EQ(res.size(), 1u);
    EXPECT_EQ(res[0].token, int32_t(std::max_element(ref.begin(), ref.end()) - ref.begin()));
}

TEST(CpuBackend, OutOfStateMemoryChangesNothing) {
    const auto& tm = backend_test::tiny_model();
    BackendOptions probe_opt;
    auto probe = create_backend(tm.dir, probe_opt);
    const int64_t bpb = probe->memory().bytes_per_block;
    const int64_t fixed = probe->blocks_for(1) - 1;
    BackendOptions opt;
    opt.state_memory_bytes = bpb * (fixed + 2) + bpb / 2;  // room for one sequence of up to 128 tokens
    auto be = create_backend(tm.dir, opt);
    ASSERT_EQ(be->memory().total_blocks, fixed + 2);
    const int a = be->create_sequence(), b = be->create_sequence();
    const auto tok = backend_test::random_tokens(200, be->config().vocab_size, 2);
    std::vector<float> logits = {42.f};
    SequenceStep sa = {a, tok.data(), 100, false};
    be->forward(std::span<const SequenceStep>(&sa, 1), logits);
    const auto after_a = logits;
    // b cannot start (needs fixed + 1 blocks), and a batch holding a fitting entry changes nothing either
    SequenceStep both[2] = {{a, tok.data() + 100, 1, false}, {b, tok.data(), 1, false}};
    EXPECT_THROW(be->forward(both, logits), OutOfStateMemory);
    EXPECT_EQ(be->sequence_length(a), 100);
    EXPECT_EQ(be->sequence_length(b), 0);
    EXPECT_EQ(be->memory().used_blocks, be->blocks_for(100));
    // a may grow inside its last block; beyond 128 tokens no sequence could ever fit: the context limit
    SequenceStep grow = {a, tok.data() + 100, 28, false};
    be->forward(std::span<const SequenceStep>(&grow, 1), logits);
    SequenceStep over = {a, tok.data() + 128, 1, false};
    EXPECT_THROW(be->forward(std::span<const SequenceStep>(&over, 1), logits), std::exception);
    EXPECT_EQ(be->sequence_length(a), 128);
    EXPECT_EQ(static_cast<CpuBackend*>(be.get())->max_context(), 128);
    // freeing a makes room for b, and b's results equal a fresh run (a's failed steps left no trace)
    be->free_sequence(a);
    SequenceStep sb = {b, tok.data(), 100, false};
    be->forward(std::span<const SequenceStep>(&sb, 1), logits);
    EXPECT_EQ(logits, after_a);
}

TEST(CpuBackend, ContextLimitAndOptions) {
    const auto& tm = backend_test::tiny_model();
    BackendOptions opt;
    opt.max_context = 50;
    auto be = create_backend(tm.dir, opt);
    const int a = be->create_sequence();
    const auto tok = backend_test::random_tokens(60, be->config().vocab_size, 3);
    std::vector<float> logits;
    SequenceStep s = {a, tok.data(), 51, false};
    try {
        be->forward(std::span<const SequenceStep>(&s, 1), logits);
        FAIL() << "expected a context-limit error";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("context limit"), std::string::npos) << e.what();
    }
    EXPECT_EQ(be->sequence_length(a), 0);
    s.n_tokens = 50;
    be->forward(std::span<const SequenceStep>(&s, 1), logits);
    opt.max_sequences = 0;
    EXPECT_THROW(create_backend(tm.dir, opt), std::exception);
    BackendOptions bad;
    bad.backend = "tpu";
    EXPECT_THROW(create_backend(tm.dir, bad), std::exception);
    EXPECT_THROW(create_backend("/nonexistent/flashseek-model", BackendOptions{}), std::exception);
    EXPECT_EQ(parse_numerics("exact"), Numerics::Exact);
    EXPECT_EQ(parse_numerics("release"), Numerics::Release);
    EXPECT_THROW(parse_numerics("fast"), std::exception);
#ifndef FLASHSEEK_HAVE_CUDA
    BackendOptions cuda;
    cuda.backend = "cuda";
    try {
        create_backend(tm.dir, cuda);
        FAIL() << "expected an error";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("no CUDA"), std::string::npos) << e.what();
    }
#endif
}

// Prompt scoring in the same forward as the prefill: forward_sample with all_logits and score targets gives the
// log-softmax of the forward() rows at the targets (and samples from the last row as usual).
TEST(CpuBackend, ForwardSampleScoresPromptRows) {
    const auto& tm = backend_test::tiny_model();
    BackendOptions opt;
    opt.max_sequences = 2;
    auto be = create_backend(tm.dir, opt);
    const int64_t V = be->config().vocab_size;
    const auto tok = backend_test::random_tokens(9, V, std::random_device{}());
    const int a = be->create_sequence(), b = be->create_sequence();
    std::vector<float> ref;
    SequenceStep full = {a, tok.data(), 9, true};
    be->forward(std::span<const SequenceStep>(&full, 1), ref);
    SequenceStep scored = {b, tok.data(), 9, true};
    SampleParams sp;
    sp.score_targets = std::span<const int32_t>(tok.data() + 1, 8);
    sp.score_top_n = 2;
    std::vector<SampleResult> res;
    be->forward_sample(std::span<const SequenceStep>(&scored, 1), std::span<const SampleParams>(&sp, 1), res);
    ASSERT_EQ(res.size(), 1u);
    ASSERT_EQ(res[0].scored.size(), 8u);
    for (size_t j = 0; j < 8; ++j) {
        const float* row = ref.data() + j * size_t(V);
        double z = 0;
        const float mx = *std::max_element(row, row + V);
        for (int64_t i = 0; i < V; ++i) z += std::exp(double(row[i]) - mx);
        EXPECT_NEAR(res[0].scored[j].logprob, row[tok[j + 1]] - mx - std::log(z), 1e-5) << "row " << j;
        EXPECT_EQ(res[0].scored[j].top.size(), 2u);
    }
    const float* last = ref.data() + 8 * size_t(V);
    EXPECT_EQ(res[0].token, int32_t(std::max_element(last, last + V) - last));
}
