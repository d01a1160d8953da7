// The kernel timeline's summary (backend/kernel_timeline.h) on synthetic traces with known answers: kernels cut
// into steps by the host marks, overlapping kernels on two streams counted once in the busy time, the gaps where
// nothing runs and the kernels around them, medians over steps, per-kernel totals; and the short kernel names of
// real mangled kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/kernel_timeline.h"

namespace flashseek {
namespace {

// One step's kernels at offsets (us) from its mark at `base` ns.
void add(KernelTrace& t, uint64_t base, const char* name, uint32_t stream, double start_us, double end_us) {
    t.spans.push_back({name, stream, base + uint64_t(start_us * 1e3), base + uint64_t(end_us * 1e3)});
}

TEST(KernelTimeline, OneStepWithOverlapAndGaps) {
    KernelTrace t;
    const uint64_t m0 = 1'000'000;
    t.marks = {m0, m0 + 100'000};  // a 100 us step
    // main stream: a [10, 30), c [50, 60); side stream: b [20, 40) overlaps a; d [70, 75) after a gap of 10.
    add(t, m0, "a", 1, 10, 30);
    add(t, m0, "b", 2, 20, 40);
    add(t, m0, "c", 1, 50, 60);
    add(t, m0, "d", 1, 70, 75);
    // An empty record inside the first gap changes nothing but the kernel count.
    add(t, m0, "empty", 1, 45, 45);
    // Outside the marks: ignored.
    add(t, m0, "before", 1, -5, -1);
    add(t, m0, "after", 1, 101, 102);
    const TimelineSummary s = summarize_timeline(t);
    ASSERT_EQ(s.steps, 1);
    const TimelineStep& m = s.median;
    EXPECT_DOUBLE_EQ(m.wall_us, 100);
    EXPECT_DOUBLE_EQ(m.lead_us, 10);
    EXPECT_DOUBLE_EQ(m.span_us, 65);                // 10 .. 75
    EXPECT_DOUBLE_EQ(m.busy_us, 30 + 10 + 5);       // [10, 40) + [50, 60) + [70, 75)
    EXPECT_DOUBLE_EQ(m.idle_us, 20);                // [40, 50) + [60, 70)
    EXPECT_DOUBLE_EQ(m.tail_us, 25);
    EXPECT_DOUBLE_EQ(m.kernel_us, 20 + 20 + 10 + 5);
    EXPECT_EQ(m.kernels, 5);
    EXPECT_EQ(m.gaps, 2);
    ASSERT_EQ(s.largest.size(), 2u);
    // Both gaps are 10 us: in time order, each named by the kernel that ended last before it and the next to start.
    EXPECT_DOUBLE_EQ(s.largest[0].us, 10);
    EXPECT_EQ(s.largest[0].before, "b");
    EXPECT_EQ(s.largest[0].after, "c");
    EXPECT_EQ(s.largest[1].before, "c");
    EXPECT_EQ(s.largest[1].after, "d");
    ASSERT_EQ(s.kernels.size(), 5u);
    // By charged time: a ends before b, so [20, 30) is a's; b is charged only [30, 40).
    EXPECT_EQ(s.kernels[0].name, "a");
    EXPECT_DOUBLE_EQ(s.kernels[0].charged_us_per_step, 20);
    EXPECT_EQ(s.kernels[1].name, "b");  // 10 us charged, first of the two by its longer duration
    EXPECT_DOUBLE_EQ(s.kernels[1].charged_us_per_step, 10);
    EXPECT_EQ(s.kernels[2].name, "c");
    EXPECT_DOUBLE_EQ(s.kernels[2].charged_us_per_step, 10);
    EXPECT_DOUBLE_EQ(s.kernels[3].us_per_step, 5);
    EXPECT_DOUBLE_EQ(s.kernels[3].charged_us_per_step, 5);
    EXPECT_EQ(s.kernels[4].name, "empty");
    EXPECT_DOUBLE_EQ(s.kernels[4].charged_us_per_step, 0);
    // The step's kernels as recorded, in start order, relative to the mark; the spans outside the marks are not.
    ASSERT_EQ(s.median_step_spans.size(), 5u);
    EXPECT_EQ(s.median_step_spans[0].name, "a");
    EXPECT_EQ(s.median_step_spans[0].start_ns, 10'000u);
    EXPECT_EQ(s.median_step_spans[0].end_ns, 30'000u);
    EXPECT_EQ(s.median_step_spans[1].name, "b");
    EXPECT_EQ(s.median_step_spans[1].stream, 2u);
    EXPECT_EQ(s.median_step_spans[2].name, "empty");
    EXPECT_EQ(s.median_step_spans[2].end_ns, 45'000u);
    EXPECT_EQ(s.median_step_spans[4].name, "d");
}

TEST(KernelTimeline, ChargedTimeFollowsAChainOfEarlyLaunchedKernels) {
    // Programmatic dependent launch: each kernel starts while its predecessor runs and waits for it, so its duration
    // includes the wait. Charged time is what each adds: load [0, 10), gemv [1, 25) (waits until 10), store [2, 30)
    // (waits until 25); a side-stream kernel [5, 8) ends first while it runs.
    KernelTrace t;
    const uint64_t m0 = 50'000;
    t.marks = {m0, m0 + 40'000};
    add(t, m0, "load", 1, 0, 10);
    add(t, m0, "gemv", 1, 1, 25);
    add(t, m0, "store", 1, 2, 30);
    add(t, m0, "side", 2, 5, 8);
    const TimelineSummary s = summarize_timeline(t);
    auto charged = [&](const char* name) {
        for (const TimelineKernel& k : s.kernels)
            if (k.name == name) return k.charged_us_per_step;
        ADD_FAILURE() << name << " missing";
        return -1.0;
    };
    EXPECT_DOUBLE_EQ(charged("load"), 7);  // [0, 5) and [8, 10)
    EXPECT_DOUBLE_EQ(charged("side"), 3);
    EXPECT_DOUBLE_EQ(charged("gemv"), 15);
    EXPECT_DOUBLE_EQ(charged("store"), 5);
    EXPECT_EQ(s.kernels[0].name, "gemv");
    EXPECT_DOUBLE_EQ(s.median.busy_us, 30);
    const std::string text = format_timeline(s);
    EXPECT_NE(text.find("charged us"), std::string::npos) << text;
}

TEST(KernelTimeline, MediansPerFieldAndPerKernelTotalsOverSteps) {
    // Three steps of the same two kernels with walls 100, 300, 200 us: the medians are the middle values of each
    // field; per kernel, calls and time per step are means over the steps.
    KernelTrace t;
    const double walls[3] = {100, 300, 200};
    uint64_t mark = 5'000'000;
    for (double w : walls) {
        t.marks.push_back(mark);
        add(t, mark, "gemv", 0, 2, 2 + w / 4);
        add(t, mark, "gemv", 0, w / 2, w / 2 + w / 4);
        mark += uint64_t(w * 1e3);
    }
    t.marks.push_back(mark);
    const TimelineSummary s = summarize_timeline(t, 1);
    ASSERT_EQ(s.steps, 3);
    EXPECT_DOUBLE_EQ(s.median.wall_us, 200);
    EXPECT_DOUBLE_EQ(s.median.busy_us, 100);    // 2 x 200 / 4
    EXPECT_DOUBLE_EQ(s.median.idle_us, 50 - 2);  // 200 / 2 - (2 + 50)
    ASSERT_EQ(s.largest.size(), 1u);             // of the 200 us step
    EXPECT_DOUBLE_EQ(s.largest[0].us, 48);
    ASSERT_EQ(s.kernels.size(), 1u);
    EXPECT_DOUBLE_EQ(s.kernels[0].calls_per_step, 2);
    EXPECT_DOUBLE_EQ(s.kernels[0].us_per_step, 100);  // (50 + 150 + 100) / 3
    EXPECT_DOUBLE_EQ(s.kernels[0].us_per_call, 50);    // 300 us over 6 calls
    ASSERT_EQ(s.median_step_spans.size(), 2u);  // of the 200 us step: [2, 52) and [100, 150) us
    EXPECT_EQ(s.median_step_spans[0].start_ns, 2'000u);
    EXPECT_EQ(s.median_step_spans[1].start_ns, 100'000u);
    EXPECT_EQ(s.median_step_spans[1].end_ns, 150'000u);
}

TEST(KernelTimeline, BusyTimeIsTheUnionOfRandomIntervals) {
    // Random overlapping kernels against a 1 ns occupancy grid: busy + idle = span, busy = occupied cells.
    std::mt19937_64 rng(std::random_device{}());
    for (int round = 0; round < 20; ++round) {
        KernelTrace t;
        const uint64_t base = 1'000, len = 2'000;
        t.marks = {base, base + len + 10};
        std::vector<char> occupied(len, 0);
        const int n = 1 + int(rng() % 30);
        std::vector<uint64_t> ends;  // distinct, so that "the running kernel that ends first" is one kernel
        for (int i = 0; i < n; ++i) {
            uint64_t s = 0, e = 0;
            do {
                s = rng() % len;
                e = std::min<uint64_t>(len, s + rng() % 300);
            } while (std::find(ends.begin(), ends.end(), e) != ends.end());
            ends.push_back(e);
            const char* names[4] = {"k0", "k1", "k2", "k3"};
            t.spans.push_back({names[i % 4], uint32_t(i % 3), base + s, base + e});
            for (uint64_t x = s; x < e; ++x) occupied[x] = 1;
        }
        // Charged time per name, cell by cell: the running kernel with the earliest end.
        std::map<std::string, double> charged;
        for (uint64_t x = 0; x < len; ++x) {
            const KernelSpan* first = nullptr;
            for (const KernelSpan& k : t.spans)
                if (k.start_ns - base <= x && x < k.end_ns - base && (!first || k.end_ns < first->end_ns)) first = &k;
            if (first) charged[first->name] += 1e-3;
        }
        uint64_t first = len, last = 0;
        for (const KernelSpan& k : t.spans) {
            first = std::min(first, k.start_ns - base);
            last = std::max(last, k.end_ns - base);
        }
        double busy = 0;
        for (char c : occupied) busy += c;
        const TimelineSummary s = summarize_timeline(t);
        EXPECT_NEAR(s.median.busy_us * 1e3, busy, 1e-6) << "round " << round;
        EXPECT_NEAR(s.median.span_us * 1e3, double(last - first), 1e-6) << "round " << round;
        EXPECT_NEAR(s.median.busy_us + s.median.idle_us, s.median.span_us, 1e-9) << "round " << round;
        EXPECT_EQ(s.median.kernels, n);
        double charged_sum = 0;
        for (const TimelineKernel& k : s.kernels) {
            charged_sum += k.charged_us_per_step;
            EXPECT_NEAR(k.charged_us_per_step, charged[k.name], 1e-9) << "round " << round << " " << k.name;
        }
        EXPECT_NEAR(charged_sum, s.median.busy_us, 1e-9) << "round " << round;
    }
}

TEST(KernelTimeline, EmptyTracesAndStepsWithoutKernels) {
    EXPECT_EQ(summarize_timeline(KernelTrace{}).steps, 0);
    EXPECT_NE(format_timeline(summarize_timeline(KernelTrace{})).find("no traced step"), std::string::npos);
    KernelTrace t;
    t.marks = {0, 4'000, 9'000};
    add(t, 4'000, "only", 0, 1, 2);
    const TimelineSummary s = summarize_timeline(t);
    EXPECT_EQ(s.steps, 2);
    EXPECT_DOUBLE_EQ(s.median.wall_us, 4.5);
    EXPECT_EQ(s.kernels.size(), 1u);
    EXPECT_DOUBLE_EQ(s.kernels[0].calls_per_step, 0.5);
    // The text names what lies between two marks: decode steps, or prefill passes (flashseek bench --timeline).
    const std::string steps = format_timeline(s), passes = format_timeline(s, 30, "pass");
    EXPECT_NE(steps.find("(2 steps,"), std::string::npos) << steps;
    EXPECT_NE(steps.find("us/step"), std::string::npos) << steps;
    EXPECT_NE(passes.find("(2 passes,"), std::string::npos) << passes;
    EXPECT_NE(passes.find("calls/pass"), std::string::npos) << passes;
    EXPECT_EQ(passes.find("step"), std::string::npos) << passes;
    EXPECT_NE(format_timeline(summarize_timeline(KernelTrace{}), 30, "pass").find("no traced pass"), std::string::npos);
}

TEST(KernelTimeline, ShortNamesOfMangledKernels) {
    // Names as the device reports them (from ptxas's listing of the sm_90a build).
    EXPECT_EQ(short_kernel_name("_ZN9flashseek4cuda13wgmma_experts45_GLOBAL__N__6b6f4081_12_moe_wgmma_cu_493726c822"
                                "wgmma_expert_ws_kernelILb1ELb0ELb1EEEvNS2_4ArgsE"),
              "wgmma_expert_ws_kernel<true, false, true>");
    EXPECT_EQ(short_kernel_name("_ZN9flashseek4cuda13wgmma_experts45_GLOBAL__N__6b6f4081_12_moe_wgmma_cu_493726c817"
                                "pack_tiles_kernelENS2_8PackArgsE"),
              "pack_tiles_kernel");
    EXPECT_EQ(short_kernel_name("_Z6kernelPfi"), "kernel");
    EXPECT_EQ(short_kernel_name("plain_c_kernel"), "plain_c_kernel");
    const std::string table = format_timeline(summarize_timeline(KernelTrace{{{"a", 0, 10, 20}}, {0, 100}}), 0);
    EXPECT_NE(table.find("... 1 more kernels"), std::string::npos) << table;
}

// The median step cut into layers at every second marker (mHC's partial kernel opens each sub-block): an embed
// before the first marker left out; three layers of one kind, the third with a longer GEMV; a fourth with one more
// kernel; the head (one marker and its GEMV) as the last period. Charges by hand (each instant to the running kernel
// that ends first): partial [0, 5) 5, finalize [5, 10) 5, side [10, 14) 4, gemv [14, 20) 6, partial #2 [20, 24) 4,
// moe [24, 50) 26.
TEST(KernelTimeline, PeriodsSummarizeTheCommonLayer) {
    KernelTrace t;
    const uint64_t m0 = 5'000'000;
    add(t, m0, "embed", 1, 0, 2);
    double o = 2;
    auto layer = [&](double stretch, bool indexer) {  // stretch: the GEMV's extra length
        add(t, m0, "mhc_partial_kernel", 1, o + 0, o + 5);
        add(t, m0, "mhc_finalize_kernel<4>", 1, o + 3, o + 10);
        add(t, m0, "gemv", 1, o + 8, o + 20 + stretch);
        add(t, m0, "side", 2, o + 9, o + 14);
        if (indexer) add(t, m0, "indexer", 3, o + 12, o + 16);
        add(t, m0, "mhc_partial_kernel", 1, o + 20 + stretch, o + 24 + stretch);
        add(t, m0, "moe", 1, o + 22 + stretch, o + 50 + stretch);
        o += 50 + stretch;
    };
    layer(0, false);
    layer(0, false);
    layer(2, false);
    layer(0, true);
    add(t, m0, "mhc_partial_kernel", 1, o, o + 4);  // the head
    add(t, m0, "head", 1, o + 4, o + 30);
    t.marks = {m0, m0 + uint64_t((o + 40) * 1e3)};
    const TimelineSummary s = summarize_timeline(t);
    ASSERT_EQ(s.median_step_charged_us.size(), s.median_step_spans.size());
    const PeriodSummary p = summarize_periods(s, {"mhc_partial"}, 2);
    EXPECT_EQ(p.periods, 5);
    EXPECT_EQ(p.alike, 3);
    EXPECT_DOUBLE_EQ(p.median_us, 50);  // 50, 50, 52
    EXPECT_DOUBLE_EQ(p.charged_us, 50);
    const std::vector<std::pair<std::string, int>> order = {{"mhc_partial_kernel", 0}, {"mhc_finalize_kernel<4>", 0},
                                                            {"side", 0},  {"gemv", 0}, {"mhc_partial_kernel", 1},
                                                            {"moe", 0}};
    const std::vector<double> ends = {5, 10, 14, 20, 24, 50}, charged = {5, 5, 4, 6, 4, 26};
    ASSERT_EQ(p.kernels.size(), order.size());
    for (size_t i = 0; i < order.size(); ++i) {
        SCOPED_TRACE(p.kernels[i].name);
        EXPECT_EQ(p.kernels[i].name, order[i].first);
        EXPECT_EQ(p.kernels[i].occurrence, order[i].second);
        EXPECT_NEAR(p.kernels[i].end_us, ends[i], 1e-9);
        EXPECT_NEAR(p.kernels[i].charged_us, charged[i], 1e-9);
    }
    const std::string text = format_periods(p);
    EXPECT_NE(text.find("per layer (the median step's 5 layers, 3 alike"), std::string::npos) << text;
    EXPECT_NE(text.find("mhc_partial_kernel #2"), std::string::npos) << text;
    // Markers by prefix: another marker kind counts the same; none at all gives no periods.
    EXPECT_EQ(summarize_periods(s, {"nothing", "mhc_p"}, 2).alike, 3);
    const PeriodSummary none = summarize_periods(s, {"absent"}, 2);
    EXPECT_EQ(none.periods, 0);
    EXPECT_NE(format_periods(none).find("no marker"), std::string::npos);
    EXPECT_EQ(summarize_periods(s, {"mhc_partial"}, 0).periods, 0);  // no period length: none
}

}  // namespace
}  // namespace flashseek
