// Reading Prometheus text exposition (format 0.0.4) as another server publishes it at /metrics: the totals of one
// histogram, or of a counter by one label, for clients such as `flashseek bench-serve` that set a server's own
// figures beside theirs. The writer
// is metrics.h; this side accepts what any conforming server writes (label values with spaces, braces or escaped
// quotes, a timestamp after the value, tabs).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace flashseek::runtime {

struct HistogramTotals {
    double sum = 0;
    double count = 0;
};

// The `<name>_sum` and `<name>_count` samples of the histogram `name`, or of `<prefix>:<name>` for any prefix
// (flashseek's, vLLM's, SGLang's), summed over label sets. A label set counts only with both samples present and
// finite. None when no label set has both.
std::optional<HistogramTotals> histogram_totals(std::string_view exposition, std::string_view name);

// The samples of the counter or gauge `name` (or `<prefix>:<name>`) summed by the value of their label `label`
// (unescaped; samples without it are left out, and so are non-finite values). Empty when there are none: e.g. the
// `cuda_graph_passes_total` of a server by `how`.
std::map<std::string, double> totals_by_label(std::string_view exposition, std::string_view name,
                                              std::string_view label);

}  // namespace flashseek::runtime
