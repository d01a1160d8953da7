// histogram_totals and totals_by_label (prometheus_read.h): one pass over the exposition's sample lines each.
#include "runtime/prometheus_read.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

namespace flashseek::runtime {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// A sample line split into its metric name, its label set (verbatim, "" when none) and its value; false when the
// line is no sample or does not parse.
bool split_sample(std::string_view line, std::string_view& name, std::string_view& labels, double& value) {
    size_t i = 0;
    while (i < line.size() && !is_blank(line[i]) && line[i] != '{') ++i;
    name = line.substr(0, i);
    if (name.empty()) return false;
    labels = {};
    if (i < line.size() && line[i] == '{') {
        const size_t open = i;
        bool quoted = false;
        for (++i; i < line.size(); ++i) {
            if (quoted && line[i] == '\\') {
                ++i;  // the escaped character
            } else if (line[i] == '"') {
                quoted = !quoted;
            } else if (!quoted && line[i] == '}') {
                break;
            }
        }
        if (i >= line.size()) return false;  // unterminated label set
        labels = line.substr(open, i + 1 - open);
        ++i;
    }
    while (i < line.size() && is_blank(line[i])) ++i;
    size_t end = i;
    while (end < line.size() && !is_blank(line[end])) ++end;  // a timestamp may follow
    if (end == i) return false;
    const std::string token(line.substr(i, end - i));
    char* parsed_to = nullptr;
    value = std::strtod(token.c_str(), &parsed_to);
    return parsed_to == token.c_str() + token.size();
}

// Whether `metric` is `name` or `<prefix>:name`.
bool names(std::string_view metric, std::string_view name) {
    if (metric.size() < name.size() || metric.substr(metric.size() - name.size()) != name) return false;
    return metric.size() == name.size() || metric[metric.size() - name.size() - 1] == ':';
}

// The value of label `key` in a label set as split_sample returns it ("{a=\"x\",b=\"y\"}"), unescaped; none
// when the set lacks it or does not parse.
std::optional<std::string> label_value(std::string_view labels, std::string_view key) {
    size_t i = 1;  // past '{'
    while (i < labels.size()) {
        while (i < labels.size() && (is_blank(labels[i]) || labels[i] == ',')) ++i;
        const size_t eq = labels.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= labels.size() || labels[eq + 1] != '"') return std::nullopt;
        const std::string_view k = labels.substr(i, eq - i);
        std::string v;
        size_t j = eq + 2;
        for (; j < labels.size() && labels[j] != '"'; ++j) {
            if (labels[j] == '\\' && j + 1 < labels.size()) {
                ++j;
                v += labels[j] == 'n' ? '\n' : labels[j];
            } else {
                v += labels[j];
            }
        }
        if (j >= labels.size()) return std::nullopt;  // unterminated value
        if (k == key) return v;
        i = j + 1;
    }
    return std::nullopt;
}

template <typename F>
void for_each_sample(std::string_view exposition, F&& f) {
    size_t pos = 0;
    while (pos < exposition.size()) {
        size_t eol = exposition.find('\n', pos);
        if (eol == std::string_view::npos) eol = exposition.size();
        std::string_view line = exposition.substr(pos, eol - pos);
        pos = eol + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        while (!line.empty() && is_blank(line.front())) line.remove_prefix(1);
        if (line.empty() || line.front() == '#') continue;
        std::string_view metric, labels;
        double value = 0;
        if (split_sample(line, metric, labels, value)) f(metric, labels, value);
    }
}

}  // namespace

std::map<std::string, double> totals_by_label(std::string_view exposition, std::string_view name,
                                              std::string_view label) {
    std::map<std::string, double> out;
    for_each_sample(exposition, [&](std::string_view metric, std::string_view labels, double value) {
        if (!names(metric, name) || labels.empty() || !std::isfinite(value)) return;
        if (const std::optional<std::string> v = label_value(labels, label)) out[*v] += value;
    });
    return out;
}

std::optional<HistogramTotals> histogram_totals(std::string_view exposition, std::string_view name) {
    const std::string sum_name = std::string(name) + "_sum", count_name = std::string(name) + "_count";
    struct Pair {
        std::optional<double> sum, count;
    };
    std::map<std::string, Pair> by_labels;  // keyed by metric prefix and label set
    for_each_sample(exposition, [&](std::string_view metric, std::string_view labels, double value) {
        const bool is_sum = names(metric, sum_name), is_count = !is_sum && names(metric, count_name);
        if (!is_sum && !is_count) return;
        const std::string_view prefix = metric.substr(0, metric.size() - (is_sum ? sum_name : count_name).size());
        Pair& p = by_labels[std::string(prefix) + std::string(labels)];
        (is_sum ? p.sum : p.count) = value;
    });
    HistogramTotals t;
    bool any = false;
    for (const auto& [key, p] : by_labels) {
        if (!p.sum || !p.count || !std::isfinite(*p.sum) || !std::isfinite(*p.count)) continue;
        t.sum += *p.sum;
        t.count += *p.count;
        any = true;
    }
    if (!any) return std::nullopt;
    return t;
}

}  // namespace flashseek::runtime
