// Reading another server's Prometheus text (runtime/prometheus_read.h), the totals bench-serve sets beside its own
// TTFT: prefixes, label sets summed, label values with spaces / braces / escaped quotes, timestamps after the value,
// tabs and CRLF, NaN or a missing half dropping only its label set, other metrics and lookalike names ignored; and
// the text our own metrics write.
#include <gtest/gtest.h>

#include "runtime/metrics.h"
#include "runtime/prometheus_read.h"

using flashseek::runtime::histogram_totals;

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
