// Reading another server's Prometheus text (runtime/prometheus_read.h), the totals bench-serve sets beside its own
// TTFT: prefixes, label sets summed, label values with spaces / braces / escaped quotes, timestamps after the value,
// tabs and CRLF, NaN or a missing half dropping only its label set, other metrics and lookalike names ignored; a
// counter's totals by one label (escaped values, other labels, prefixes); and the text our own metrics write.
#include <gtest/gtest.h>

#include "runtime/metrics.h"
#include "runtime/prometheus_read.h"

using flashseek::runtime::histogram_totals;
using flashseek::runtime::totals_by_label;

TEST(PrometheusRead, HistogramTotalsOverLabelSetsAndPrefixes) {
    const char* text =
        "# HELP vllm:time_to_first_token_seconds TTFT\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        "vllm:time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"a\"} 3\n"
        "vllm:time_to_first_token_seconds_sum{model_name=\"a b {c}\"} 1.5\n"
        "vllm:time_to_first_token_seconds_count{model_name=\"a b {c}\"} 3\n"
        "vllm:time_to_first_token_seconds_sum{model_name=\"q\\\"}\\\\\"} 2.5 1712345678901\r\n"
        "vllm:time_to_first_token_seconds_count{model_name=\"q\\\"}\\\\\"}\t5\t1712345678901\n"
        "vllm:time_to_first_token_seconds_sum{model_name=\"nan\"} NaN\n"
        "vllm:time_to_first_token_seconds_count{model_name=\"nan\"} 7\n"
        "vllm:time_to_first_token_seconds_sum{model_name=\"half\"} 9\n"
        "vllm:e2e_time_to_first_token_seconds_sum 100\n"
        "vllm:e2e_time_to_first_token_seconds_count 100\n"
        "other_metric 4\n";
    const auto t = histogram_totals(text, "time_to_first_token_seconds");
    ASSERT_TRUE(t.has_value());
    EXPECT_DOUBLE_EQ(t->sum, 4.0);    // 1.5 + 2.5: the NaN set, the set without a count and the lookalike left out
    EXPECT_DOUBLE_EQ(t->count, 8.0);  // 3 + 5
    EXPECT_FALSE(histogram_totals(text, "time_per_output_token_seconds").has_value());
    EXPECT_FALSE(histogram_totals("vllm:time_to_first_token_seconds_sum 1\n", "time_to_first_token_seconds"));
    EXPECT_FALSE(histogram_totals("", "time_to_first_token_seconds"));
    const auto bare = histogram_totals("time_to_first_token_seconds_sum 2\ntime_to_first_token_seconds_count 4",
                                       "time_to_first_token_seconds");
    ASSERT_TRUE(bare.has_value());
    EXPECT_DOUBLE_EQ(bare->sum / bare->count, 0.5);
}

TEST(PrometheusRead, ReadsWhatOurMetricsWrite) {
    flashseek::runtime::Metrics m("model with \"quotes\" {and braces}");
    const double ttfts[] = {0.012, 0.5, 3.25};
    for (double t : ttfts) m.on_first_token(t);
    const auto t = histogram_totals(m.render({}), "time_to_first_token_seconds");
    ASSERT_TRUE(t.has_value());
    EXPECT_NEAR(t->sum, 0.012 + 0.5 + 3.25, 1e-9);
    EXPECT_DOUBLE_EQ(t->count, 3);
}

TEST(PrometheusRead, CounterTotalsByLabel) {
    const char* text =
        "# TYPE flashseek:cuda_graph_passes_total counter\n"
        "flashseek:cuda_graph_passes_total{model_name=\"a, \\\"b\\\" {c}\",how=\"replayed\"} 40\n"
        "flashseek:cuda_graph_passes_total{how=\"replayed\",model_name=\"d\"} 2 1712345678901\r\n"
        "flashseek:cuda_graph_passes_total{model_name=\"a\",how=\"first\"}\t3\n"
        "other:cuda_graph_passes_total{how=\"first\"} 1\n"
        "flashseek:cuda_graph_passes_total{model_name=\"a\"} 7\n"
        "flashseek:cuda_graph_passes_total{how=\"eager\"} NaN\n"
        "flashseek:cuda_graph_passes_total_created{how=\"first\"} 5\n"
        "flashseek:cuda_graph_passes_total 9\n";
    const auto by = totals_by_label(text, "cuda_graph_passes_total", "how");
    ASSERT_EQ(by.size(), 2u);  // the set without `how`, the unlabelled sample, NaN and the lookalike left out
    EXPECT_DOUBLE_EQ(by.at("replayed"), 42.0);
    EXPECT_DOUBLE_EQ(by.at("first"), 4.0);  // any prefix
    EXPECT_TRUE(totals_by_label(text, "cuda_graph_passes", "how").empty());
    EXPECT_TRUE(totals_by_label("", "cuda_graph_passes_total", "how").empty());
    const auto quoted = totals_by_label("m{k=\"x\\\"y\\\\z\"} 1\n", "m", "k");
    ASSERT_EQ(quoted.size(), 1u);
    EXPECT_EQ(quoted.begin()->first, "x\"y\\z");
}

TEST(PrometheusRead, ReadsOurGraphPassCounters) {
    flashseek::runtime::Metrics m("model {x}");
    flashseek::runtime::MetricsSnapshotInput in;
    in.graph_passes = flashseek::GraphCounts{2, 2, 60, 0};  // first, captured, replayed, eager
    const auto by = totals_by_label(m.render(in), "cuda_graph_passes_total", "how");
    ASSERT_EQ(by.size(), 4u);
    EXPECT_DOUBLE_EQ(by.at("first"), 2);
    EXPECT_DOUBLE_EQ(by.at("captured"), 2);
    EXPECT_DOUBLE_EQ(by.at("replayed"), 60);
    EXPECT_DOUBLE_EQ(by.at("eager"), 0);
}
