// The kernel timeline (BackendDiagnostics' kernel trace through CUPTI, flashseek bench --timeline) on a tiny model:
// replayed decode graphs report their kernels (with their graph), every kernel lies between the marks with its end
// after its start, each traced step has the same kernels (replays of one bucket's graph), a second trace starts
// empty, and the summary's parts add up. Fails where CUPTI cannot be loaded (the device bundle carries it; the CUDA toolkit has it).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/diagnostics.h"
#include "backend/kernel_timeline.h"
#include "test_support.h"

namespace flashseek {
namespace {

TEST(CudaKernelTrace, GraphStepsReportTheirKernelsBetweenTheMarks) {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    const std::string dir = test::tiny_checkpoint("tiny-a", seed % 997 + 1);
    auto be = test::make_layout(dir, Numerics::Release, 1, 1);
    BackendDiagnostics& ext = *be->diagnostics();
    const std::string why = ext.enable_kernel_trace();  // before any graph is captured
    ASSERT_EQ(why, "") << "CUPTI could not be loaded";
    std::mt19937_64 rng(seed);
    const int64_t V = be->config().vocab_size;
    // Prompts whose decode lengths (41 .. 53) stay in one graph bucket throughout: the context bucket 64 and 9-16
    // compressed entries of the ratio-4 layers (more than index_topk: the indexer scores every step).
    const auto p0 = test::random_tokens(rng, 40, V), p1 = test::random_tokens(rng, 44, V);
    const int a = be->create_sequence(), b = be->create_sequence();
    std::vector<SequenceStep> steps = {{a, p0.data(), 40, false}, {b, p1.data(), 44, false}};
    std::vector<int32_t> next;
    ext.decode_greedy(steps, next);
    auto decode = [&] {
        steps = {{a, &next[0], 1, false}, {b, &next[1], 1, false}};
        std::vector<int32_t> out;
        ext.decode_greedy(steps, out);
        next = out;
    };
    for (int s = 0; s < 3; ++s) decode();  // the bucket's first sighting runs eagerly, its second is captured

    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE("trace " + std::to_string(round));
        constexpr int kSteps = 3;
        for (int s = 0; s < kSteps; ++s) {
            ext.mark_kernel_trace();
            decode();
        }
        ext.mark_kernel_trace();
        const KernelTrace t = ext.take_kernel_trace();
        ASSERT_EQ(t.marks.size(), size_t(kSteps + 1));
        ASSERT_TRUE(std::is_sorted(t.marks.begin(), t.marks.end()));
        ASSERT_FALSE(t.spans.empty()) << "no kernel reported for replayed graphs";
        std::vector<std::vector<std::string>> names(kSteps);
        std::vector<int> graph_kernels(kSteps, 0);
        for (const KernelSpan& k : t.spans) {
            ASSERT_GE(k.start_ns, t.marks.front());
            ASSERT_LT(k.start_ns, t.marks.back());
            EXPECT_GE(k.end_ns, k.start_ns) << k.name;
            EXPECT_LE(k.end_ns, t.marks.back()) << k.name << ": ended after the step was marked done";
            EXPECT_FALSE(k.name.empty());
            const size_t step = size_t(std::upper_bound(t.marks.begin(), t.marks.end(), k.start_ns) - t.marks.begin()) - 1;
            names[step].push_back(short_kernel_name(k.name));
            if (k.graph != 0) ++graph_kernels[step];
        }
        for (auto& n : names) std::sort(n.begin(), n.end());
        for (int s = 0; s < kSteps; ++s) {
            EXPECT_GT(graph_kernels[size_t(s)], 10) << "step " << s << ": the replayed graph's kernels are missing";
            EXPECT_EQ(names[size_t(s)], names[0]) << "step " << s << " ran other kernels than step 0";
        }
        const TimelineSummary sum = summarize_timeline(t);
        EXPECT_EQ(sum.steps, kSteps);
        EXPECT_EQ(sum.median.kernels, int(names[0].size()));
        EXPECT_GT(sum.median.busy_us, 0);
        EXPECT_LE(sum.median.busy_us, sum.median.span_us + 1e-9);
        EXPECT_LE(sum.median.span_us, sum.median.wall_us + 1e-9);
        EXPECT_GE(sum.median.kernel_us, sum.median.busy_us - 1e-9);
    }
    be->free_sequence(a);
    be->free_sequence(b);
}

}  // namespace
}  // namespace flashseek
