// How decode passes run as CUDA graphs while a sequence grows (GraphRunner, BackendDiagnostics::graph_counts): a
// pass shape's first pass runs eagerly, its second is captured, later ones replay, and a sequence growing past a
// power of two changes the shape once (the attention's context bound and the indexer's entry bound move together),
// so each crossing costs one eager pass and one capture. The greedy tokens across the crossing equal those of the
// same steps without graphs.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/diagnostics.h"
#include "test_support.h"

namespace flashseek {
namespace {

// Greedy decode of one sequence: `prompt` in one pass, then `steps` one-token passes; the 1 + steps tokens chosen.
std::vector<int32_t> greedy(Backend& be, const std::vector<int32_t>& prompt, int steps) {
    BackendDiagnostics& ext = *be.diagnostics();
    const int id = be.create_sequence();
    std::vector<SequenceStep> step = {{id, prompt.data(), int(prompt.size()), false}};
    std::vector<int32_t> next, tokens;
    ext.decode_greedy(step, next);
    tokens.push_back(next[0]);
    for (int s = 0; s < steps; ++s) {
        step = {{id, &next[0], 1, false}};
        std::vector<int32_t> out;
        ext.decode_greedy(step, out);
        next = out;
        tokens.push_back(next[0]);
    }
    be.free_sequence(id);
    return tokens;
}

TEST(CudaGraphShapes, GrowingPastAPowerOfTwoChangesTheShapeOnce) {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    const std::string dir = test::tiny_checkpoint("tiny-a", seed % 997 + 1);
    std::mt19937_64 rng(seed);
    auto be = test::make_layout(dir, Numerics::Release, 1, 1);
    const auto prompt = test::random_tokens(rng, 60, be->config().vocab_size);
    // Decode passes at positions 60 .. 69 (contexts 61 .. 70): context bound 64 for four passes, then 128 for six.
    // tiny-a's ratio-4 layers have more than index_topk (8) entries throughout, so the indexer scores every pass; the
    // entry bound (contexts / 4 rounded up to a power of two) alone would move at context 68, three passes later.
    BackendDiagnostics& ext = *be->diagnostics();
    const GraphCounts before = ext.graph_counts();
    const std::vector<int32_t> with_graphs = greedy(*be, prompt, 10);
    const GraphCounts passes = ext.graph_counts() - before;
    EXPECT_EQ(passes.first_eager, 2) << "one new shape per context bound";
    EXPECT_EQ(passes.captured, 2);
    EXPECT_EQ(passes.replayed, 6);
    EXPECT_EQ(passes.eager, 0);

    // The same steps without graphs: every pass eager, the same tokens.
    auto plain = test::make_layout(dir, Numerics::Release, 1, 1);
    plain->diagnostics()->set_use_graphs(false);
    const std::vector<int32_t> without = greedy(*plain, prompt, 10);
    const GraphCounts eager = plain->diagnostics()->graph_counts();
    EXPECT_EQ(eager.eager, 10);
    EXPECT_EQ(eager.first_eager + eager.captured + eager.replayed, 0);
    EXPECT_EQ(with_graphs, without);
}

}  // namespace
}  // namespace flashseek
