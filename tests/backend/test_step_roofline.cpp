// The roofline arithmetic of `flashseek bench` (backend/step_roofline.h): the bubble from the step time, the bytes
// and the copy bandwidth, each op's bandwidth columns, the report lines, and the errors naming bad arguments.
// Random profiles (fresh seeds) against the definitions, plus hand-computed cases for the printed text.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/step_roofline.h"
#include "error_message.h"

using namespace flashseek;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string line; std::getline(ss, line);) out.push_back(line);
    return out;
}

}  // namespace

TEST(StepRoofline, BubbleMatchesItsDefinitionOnRandomSteps) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> step_ms(0.05, 60.0), bytes(1e6, 5e10), bw(1e11, 8e12);
    std::uniform_int_distribution<int> layers(1, 61);
    for (int i = 0; i < 200; ++i) {
        const double t = step_ms(rng), b = bytes(rng), c = bw(rng);
        const int n = layers(rng);
        const StepBubble s = step_bubble(t, b, c, n);
        const double transfer_ms = b / c * 1e3;
        EXPECT_DOUBLE_EQ(s.step_ms, t);
        EXPECT_NEAR(s.transfer_ms, transfer_ms, 1e-12 * transfer_ms);
        EXPECT_NEAR(s.bubble_ms, t - transfer_ms, 1e-12 * (t + transfer_ms));
        EXPECT_NEAR(s.per_layer_us * n, s.bubble_ms * 1e3, 1e-9 * (t + transfer_ms) * 1e3);
        EXPECT_NEAR(s.step_fraction * t, s.bubble_ms, 1e-12 * (t + transfer_ms));
        // The roofline fraction bench prints beside it is 1 - the bubble's share of the step.
        EXPECT_NEAR(transfer_ms / t, 1.0 - s.step_fraction, 1e-12 * (1.0 + transfer_ms / t));
    }
}

TEST(StepRoofline, BubbleLineOfAHandComputedStep) {
    // 6 GB at 4 TB/s is 1.5 ms; a 4.5 ms step of 20 layers leaves 3 ms, 150 us per layer, two thirds of the step.
    const StepBubble s = step_bubble(4.5, 6e9, 4e12, 20);
    EXPECT_DOUBLE_EQ(s.transfer_ms, 1.5);
    EXPECT_DOUBLE_EQ(s.bubble_ms, 3.0);
    EXPECT_DOUBLE_EQ(s.per_layer_us, 150.0);
    const std::string line = format_bubble(s, "graph");
    EXPECT_NE(line.find("bubble: step time (graph, median) 4.500 ms"), std::string::npos) << line;
    EXPECT_NE(line.find("bytes/step \u00f7 copy bandwidth 1.500 ms"), std::string::npos) << line;
    EXPECT_NE(line.find("= 3.000 ms per step = 150.0 us per layer (66.7% of the step)"), std::string::npos) << line;
    // A step faster than its bytes at the copy rate (weights served from L2) shows a negative bubble, not a clamp.
    const StepBubble fast = step_bubble(1.0, 6e9, 4e12, 3);
    EXPECT_DOUBLE_EQ(fast.bubble_ms, -0.5);
    EXPECT_NE(format_bubble(fast, "eager").find("= -0.500 ms per step = -166.7 us per layer (-50.0% of the step)"),
              std::string::npos);
}

TEST(StepRoofline, BubbleRefusesBadArguments) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    EXPECT_NE(test::message_of([] { step_bubble(0.0, 1e9, 4e12, 20); }).find("step time"), std::string::npos);
    EXPECT_NE(test::message_of([&] { step_bubble(nan, 1e9, 4e12, 20); }).find("step time"), std::string::npos);
    EXPECT_NE(test::message_of([] { step_bubble(4.5, -1.0, 4e12, 20); }).find("bytes/step"), std::string::npos);
    EXPECT_NE(test::message_of([] { step_bubble(4.5, 1e9, 0.0, 20); }).find("copy bandwidth"), std::string::npos);
    EXPECT_NE(test::message_of([] { step_bubble(4.5, 1e9, 4e12, 0); }).find("layers"), std::string::npos);
}

TEST(StepRoofline, OpBandwidthMatchesItsDefinitionOnRandomOps) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> bytes(1e3, 2e9), us(1.0, 5e4), bw(1e11, 8e12);
    for (int i = 0; i < 200; ++i) {
        OpTime o;
        o.op = "op " + std::to_string(i);
        o.calls = 1 + int(rng() % 40);
        o.total_us = us(rng);
        o.bytes = bytes(rng);
        const double c = bw(rng);
        const OpBandwidth b = op_bandwidth(o, c);
        ASSERT_TRUE(b.streams_weights);
        EXPECT_NEAR(b.mb * 1e6, o.bytes, 1e-9 * o.bytes);
        EXPECT_NEAR(b.gb_s * 1e9 * o.total_us * 1e-6, o.bytes, 1e-9 * o.bytes);
        EXPECT_NEAR(b.copy_fraction * c, b.gb_s * 1e9, 1e-9 * b.gb_s * 1e9);
    }
    OpTime none;
    none.op = "attn.q head norm + rope";
    none.total_us = us(rng);
    EXPECT_FALSE(op_bandwidth(none, 4e12).streams_weights);
}

TEST(StepRoofline, OpBandwidthRefusesBadArguments) {
    OpTime o;
    o.op = "moe.routed w2";
    o.bytes = 4e7;
    o.total_us = 0;
    EXPECT_NE(test::message_of([&] { op_bandwidth(o, 4e12); }).find("moe.routed w2"), std::string::npos);
    o.total_us = 20;
    EXPECT_NE(test::message_of([&] { op_bandwidth(o, 0.0); }).find("copy bandwidth"), std::string::npos);
    o.bytes = -1;
    EXPECT_NE(test::message_of([&] { op_bandwidth(o, 4e12); }).find("moe.routed w2"), std::string::npos);
}

TEST(StepRoofline, OpTableShowsBytesBandwidthAndDashes) {
    StepProfile p;
    // 80 MB in 40 us is 2000 GB/s, half of a 4 TB/s copy bandwidth; 33.6 MB in 21 us is 1600 GB/s (40%).
    p.ops = {{"moe.routed w1+w3+swiglu", "gemv_experts", 20, 40.0, 80e6},
             {"attn.wq_b gemm", "simt_gemv", 20, 21.0, 33.6e6},
             {"attn.q head norm + rope", "", 20, 6.0, 0.0}};
    p.gpu_us = 67.0;
    const std::vector<std::string> lines = lines_of(format_op_table(p, 4e12, "one profiled decode step", 25));
    ASSERT_EQ(lines.size(), 5u);
    EXPECT_NE(lines[0].find("per-op GPU time of one profiled decode step (events, no graph), total 67.0 us, weight "
                            "bytes 113.6 MB"),
              std::string::npos)
        << lines[0];
    for (const char* column : {"op", "variant", "calls", "total us", "share", "MB", "GB/s", "% copy BW"})
        EXPECT_NE(lines[1].find(column), std::string::npos) << column;
    auto fields = [](const std::string& line) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string w; ss >> w;) f.push_back(w);
        return f;
    };
    // The last four fields of each row: share, MB, GB/s, % copy BW.
    auto tail = [&](const std::string& line) {
        const std::vector<std::string> f = fields(line);
        return std::vector<std::string>(f.end() - 4, f.end());
    };
    EXPECT_EQ(tail(lines[2]), (std::vector<std::string>{"59.7%", "80.00", "2000.0", "50.0%"})) << lines[2];
    EXPECT_EQ(tail(lines[3]), (std::vector<std::string>{"31.3%", "33.60", "1600.0", "40.0%"})) << lines[3];
    EXPECT_EQ(tail(lines[4]), (std::vector<std::string>{"9.0%", "-", "-", "-"})) << lines[4];
    // max_rows cuts the table after the title, the header and that many rows; a last line counts what it left out.
    const std::vector<std::string> cut = lines_of(format_op_table(p, 4e12, "x", 1));
    ASSERT_EQ(cut.size(), 4u);
    EXPECT_NE(cut[3].find("2 more ops not shown: 27.0 us (40.3%)"), std::string::npos) << cut[3];
    const std::vector<std::string> cut2 = lines_of(format_op_table(p, 4e12, "x", 2));
    ASSERT_EQ(cut2.size(), 5u);
    EXPECT_NE(cut2[4].find("1 more op not shown: 6.0 us (9.0%)"), std::string::npos) << cut2[4];
    EXPECT_EQ(lines_of(format_op_table(p, 4e12, "x", 3)).size(), 5u);  // nothing cut: no count line
}

TEST(StepRoofline, PerOpSumBesideTheStep) {
    const std::string line = format_per_op_sum_vs_step(6984.9, 4.513, "graph");
    EXPECT_NE(line.find("sum of per-op times (eager, events) 6984.9 us vs graph step (median) 4513.0 us: +2471.9 us "
                        "(+54.8%)"),
              std::string::npos)
        << line;
    EXPECT_NE(test::message_of([] { format_per_op_sum_vs_step(100.0, 0.0, "graph"); }).find("step time"),
              std::string::npos);
    EXPECT_NE(test::message_of([] { format_per_op_sum_vs_step(-1.0, 4.5, "graph"); }).find("per-op times"),
              std::string::npos);
}
