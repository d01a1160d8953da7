// Summary of a kernel trace (kernel_timeline.h): per-step union of the kernels' intervals, the gaps between them,
// per-kernel totals, and the lines `flashseek bench` prints.
#include "backend/kernel_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>

#include <fmt/format.h>

namespace flashseek {
namespace {

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Removes every "X::" qualifier at template depth 0 of `s` up to the name (namespaces, anonymous ones included).
std::string strip_qualifiers(const std::string& s) {
    size_t cut = 0;
    int depth = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
        const char c = s[i];
        if (c == '<' || c == '(') ++depth;
        if (c == '>' || c == ')') --depth;
        if (depth == 0 && c == ':' && s[i + 1] == ':') cut = i + 2;
    }
    return s.substr(cut);
}

// A span's end, never before its start (an empty or inverted record is a glitch of zero length).
uint64_t span_end(const KernelSpan& k) { return std::max(k.end_ns, k.start_ns); }

struct StepAnalysis {
    TimelineStep step;
    std::vector<TimelineGap> gaps;
    // per span, in the step's start order (TimelineKernel::charged_us_per_step sums them by short name)
    std::vector<double> charged_us;
};

// Sweeps the step's kernels in time order, charging each stretch in which some run to the running kernel that ends
// first (ties: the one that started first). `spans` sorted by start; the charges in the same order (us).
std::vector<double> charge_by_first_end(const std::vector<const KernelSpan*>& spans) {
    std::vector<double> charged(spans.size(), 0.0);
    auto later_end = [&](size_t x, size_t y) {
        const KernelSpan &a = *spans[x], &b = *spans[y];
        return a.end_ns != b.end_ns ? a.end_ns > b.end_ns : a.start_ns > b.start_ns;
    };
    std::vector<size_t> running;  // indices into spans: a min-heap by end (std::push_heap with later_end)
    uint64_t t = 0;
    size_t i = 0;
    while (i < spans.size() || !running.empty()) {
        if (running.empty()) t = std::max(t, spans[i]->start_ns);
        // Start every kernel that begins by now, then charge up to the next start or the first end.
        while (i < spans.size() && spans[i]->start_ns <= t) {
            if (spans[i]->end_ns > spans[i]->start_ns) {
                running.push_back(i);
                std::push_heap(running.begin(), running.end(), later_end);
            }
            ++i;
        }
        if (running.empty()) continue;
        const size_t first = running.front();
        const uint64_t first_end = spans[first]->end_ns;
        const uint64_t until = i < spans.size() ? std::min(first_end, spans[i]->start_ns) : first_end;
        if (until > t) charged[first] += double(until - t) / 1e3;
        t = std::max(t, until);
        if (first_end <= t) {
            std::pop_heap(running.begin(), running.end(), later_end);
            running.pop_back();
        }
    }
    return charged;
}

// `spans` in start order (then end order).
StepAnalysis analyze_step(const std::vector<const KernelSpan*>& spans, uint64_t begin, uint64_t end) {
    StepAnalysis a;
    TimelineStep& st = a.step;
    st.wall_us = double(end - begin) / 1e3;
    if (spans.empty()) return a;
    st.kernels = int(spans.size());
    uint64_t first = spans.front()->start_ns, last = 0, covered_until = spans.front()->start_ns, busy = 0;
    const KernelSpan* last_ender = spans.front();
    for (const KernelSpan* k : spans) {
        const uint64_t s = k->start_ns, e = span_end(*k);
        st.kernel_us += double(e - s) / 1e3;
        last = std::max(last, e);
        if (e == s) continue;  // an empty record (a glitch) splits no gap and ends none
        if (s > covered_until) {
            a.gaps.push_back({double(s - covered_until) / 1e3, short_kernel_name(last_ender->name),
                              short_kernel_name(k->name)});
            covered_until = s;
        }
        if (e > covered_until) {
            busy += e - covered_until;
            covered_until = e;
            last_ender = k;
        }
    }
    st.lead_us = double(first - std::min(first, begin)) / 1e3;
    st.span_us = double(last - first) / 1e3;
    st.busy_us = double(busy) / 1e3;
    st.idle_us = st.span_us - st.busy_us;
    st.tail_us = end > last ? double(end - last) / 1e3 : 0.0;
    st.gaps = int(a.gaps.size());
    std::stable_sort(a.gaps.begin(), a.gaps.end(), [](const TimelineGap& x, const TimelineGap& y) { return x.us > y.us; });
    a.charged_us = charge_by_first_end(spans);
    return a;
}

}  // namespace

std::string short_kernel_name(const std::string& name) {
    // Only function symbols: the demangler also reads plain words as type codes ("b" is bool).
    int status = -1;
    std::unique_ptr<char, void (*)(void*)> dem(
        name.rfind("_Z", 0) == 0 ? abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status) : nullptr, std::free);
    std::string s = status == 0 && dem ? std::string(dem.get()) : name;
    // The parameter list: the first '(' outside template arguments ("(anonymous namespace)" is inside a qualifier).
    constexpr std::string_view kAnonymous = "(anonymous namespace)";
    int depth = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '<') ++depth;
        if (s[i] == '>') --depth;
        if (s[i] == '(' && depth == 0 && s.compare(i, kAnonymous.size(), kAnonymous) != 0) {
            s.resize(i);
            break;
        }
    }
    if (s.rfind("void ", 0) == 0) s = s.substr(5);
    return strip_qualifiers(s);
}

TimelineSummary summarize_timeline(const KernelTrace& trace, int largest_gaps) {
    TimelineSummary out;
    const size_t n_steps = trace.marks.size() > 1 ? trace.marks.size() - 1 : 0;
    out.steps = int(n_steps);
    if (n_steps == 0) return out;
    std::vector<std::vector<const KernelSpan*>> per_step(n_steps);
    for (const KernelSpan& k : trace.spans) {
        const auto it = std::upper_bound(trace.marks.begin(), trace.marks.end(), k.start_ns);
        if (it == trace.marks.begin() || it == trace.marks.end()) continue;  // before the first mark or after the last
        per_step[size_t(it - trace.marks.begin()) - 1].push_back(&k);
    }
    std::vector<StepAnalysis> steps;
    struct Totals {
        double calls = 0, us = 0, charged_us = 0;
    };
    std::map<std::string, Totals> by_name;
    std::map<std::string, std::string, std::less<>> short_names;  // recorded name -> short name, demangled once
    auto short_name = [&](const std::string& recorded) -> const std::string& {
        auto it = short_names.find(recorded);
        if (it == short_names.end()) it = short_names.emplace(recorded, short_kernel_name(recorded)).first;
        return it->second;
    };
    for (size_t i = 0; i < n_steps; ++i) {
        std::sort(per_step[i].begin(), per_step[i].end(), [](const KernelSpan* x, const KernelSpan* y) {
            return x->start_ns != y->start_ns ? x->start_ns < y->start_ns : x->end_ns < y->end_ns;
        });
        steps.push_back(analyze_step(per_step[i], trace.marks[i], trace.marks[i + 1]));
        for (const KernelSpan* k : per_step[i]) {
            Totals& tot = by_name[short_name(k->name)];
            tot.calls += 1;
            tot.us += double(span_end(*k) - k->start_ns) / 1e3;
        }
        for (size_t j = 0; j < per_step[i].size(); ++j)
            by_name[short_name(per_step[i][j]->name)].charged_us += steps.back().charged_us[j];
    }
    auto field = [&](double TimelineStep::*f) {
        std::vector<double> v;
        for (const StepAnalysis& a : steps) v.push_back(a.step.*f);
        return median_of(v);
    };
    TimelineStep& m = out.median;
    m.wall_us = field(&TimelineStep::wall_us);
    m.lead_us = field(&TimelineStep::lead_us);
    m.span_us = field(&TimelineStep::span_us);
    m.busy_us = field(&TimelineStep::busy_us);
    m.idle_us = field(&TimelineStep::idle_us);
    m.tail_us = field(&TimelineStep::tail_us);
    m.kernel_us = field(&TimelineStep::kernel_us);
    std::vector<double> counts, gaps;
    for (const StepAnalysis& a : steps) {
        counts.push_back(a.step.kernels);
        gaps.push_back(a.step.gaps);
    }
    m.kernels = int(median_of(counts) + 0.5);
    m.gaps = int(median_of(gaps) + 0.5);
    // The gaps of the step whose wall time is the (lower) median.
    std::vector<size_t> order(n_steps);
    for (size_t i = 0; i < n_steps; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return steps[x].step.wall_us < steps[y].step.wall_us; });
    const size_t mid_index = order[(n_steps - 1) / 2];
    const StepAnalysis& mid = steps[mid_index];
    out.largest.assign(mid.gaps.begin(), mid.gaps.begin() + std::min<size_t>(mid.gaps.size(), size_t(largest_gaps)));
    const uint64_t mark = trace.marks[mid_index];
    for (const KernelSpan* k : per_step[mid_index])  // in start order
        out.median_step_spans.push_back(
            {short_name(k->name), k->stream, k->start_ns - mark, span_end(*k) - mark, k->graph});
    out.median_step_charged_us = mid.charged_us;
    const double n = double(n_steps);
    for (const auto& [name, tot] : by_name)
        out.kernels.push_back({name, tot.calls / n, tot.us / n, tot.us / tot.calls, tot.charged_us / n});
    std::stable_sort(out.kernels.begin(), out.kernels.end(), [](const TimelineKernel& x, const TimelineKernel& y) {
        return x.charged_us_per_step != y.charged_us_per_step ? x.charged_us_per_step > y.charged_us_per_step
                                                              : x.us_per_step > y.us_per_step;
    });
    return out;
}

PeriodSummary summarize_periods(const TimelineSummary& s, const std::vector<std::string>& marker_prefixes, int every) {
    PeriodSummary out;
    const std::vector<KernelSpan>& spans = s.median_step_spans;
    if (every < 1 || spans.empty() || s.median_step_charged_us.size() != spans.size()) return out;
    auto is_marker = [&](const std::string& name) {
        for (const std::string& p : marker_prefixes)
            if (!p.empty() && name.rfind(p, 0) == 0) return true;
        return false;
    };
    // The periods' first spans (indices into the start-ordered spans).
    std::vector<size_t> starts;
    int markers = 0;
    for (size_t i = 0; i < spans.size(); ++i)
        if (is_marker(spans[i].name) && markers++ % every == 0) starts.push_back(i);
    out.periods = int(starts.size());
    if (starts.empty()) return out;
    struct Position {
        double start, end, charged;
    };
    using Key = std::pair<std::string, int>;  // (name, occurrence)
    std::vector<std::map<Key, Position>> periods(starts.size());
    std::vector<double> lengths(starts.size());
    const uint64_t step_end = std::max_element(spans.begin(), spans.end(), [](const KernelSpan& a, const KernelSpan& b) {
                                  return a.end_ns < b.end_ns;
                              })->end_ns;
    for (size_t p = 0; p < starts.size(); ++p) {
        const size_t begin = starts[p], end = p + 1 < starts.size() ? starts[p + 1] : spans.size();
        const uint64_t origin = spans[begin].start_ns;
        lengths[p] = double((p + 1 < starts.size() ? spans[end].start_ns : step_end) - origin) / 1e3;
        std::map<std::string, int> seen;
        for (size_t i = begin; i < end; ++i) {
            const KernelSpan& k = spans[i];
            periods[p][{k.name, seen[k.name]++}] = {double(k.start_ns) / 1e3 - double(origin) / 1e3,
                                                    double(k.end_ns) / 1e3 - double(origin) / 1e3,
                                                    s.median_step_charged_us[i]};
        }
    }
    // The most common kind of period: the same positions (the first in step order among equally common kinds).
    std::map<std::vector<Key>, int> kinds;
    std::vector<std::vector<Key>> kind_of(periods.size());
    for (size_t p = 0; p < periods.size(); ++p) {
        for (const auto& [key, pos] : periods[p]) kind_of[p].push_back(key);
        ++kinds[kind_of[p]];
    }
    size_t best = 0;
    for (size_t p = 1; p < periods.size(); ++p)
        if (kinds[kind_of[p]] > kinds[kind_of[best]]) best = p;
    std::vector<double> alike_lengths;
    std::map<Key, std::vector<Position>> by_key;
    for (size_t p = 0; p < periods.size(); ++p) {
        if (kind_of[p] != kind_of[best]) continue;
        ++out.alike;
        alike_lengths.push_back(lengths[p]);
        for (const auto& [key, pos] : periods[p]) by_key[key].push_back(pos);
    }
    out.median_us = median_of(alike_lengths);
    for (const auto& [key, list] : by_key) {
        std::vector<double> st, en, ch;
        for (const Position& q : list) {
            st.push_back(q.start);
            en.push_back(q.end);
            ch.push_back(q.charged);
        }
        out.kernels.push_back({key.first, key.second, median_of(st), median_of(en), median_of(ch)});
        out.charged_us += out.kernels.back().charged_us;
    }
    std::stable_sort(out.kernels.begin(), out.kernels.end(), [](const PeriodKernel& a, const PeriodKernel& b) {
        return a.end_us != b.end_us ? a.end_us < b.end_us : a.start_us < b.start_us;
    });
    return out;
}

std::string format_periods(const PeriodSummary& p, const std::string& unit) {
    if (p.alike == 0) return fmt::format("  per {}: no marker in the median step\n", unit);
    std::string out = fmt::format(
        "  per {} (the median step's {} {}s, {} alike; medians over those: {:.1f} us from its first kernel's start to "
        "the next {}'s, {:.1f} us charged), kernels by end:\n",
        unit, p.periods, unit, p.alike, p.median_us, unit, p.charged_us);
    out += fmt::format("  {:<72} {:>9} {:>9} {:>11}\n", "kernel", "start us", "end us", "charged us");
    for (const PeriodKernel& k : p.kernels) {
        std::string name = k.occurrence > 0 ? fmt::format("{} #{}", k.name, k.occurrence + 1) : k.name;
        if (name.size() > 72) name = name.substr(0, 69) + "...";
        out += fmt::format("  {:<72} {:>9.1f} {:>9.1f} {:>11.1f}\n", name, k.start_us, k.end_us, k.charged_us);
    }
    return out;
}

std::string format_timeline(const TimelineSummary& s, int max_rows, const std::string& unit) {
    if (s.steps == 0) return fmt::format("kernel timeline: no traced {}\n", unit);
    const TimelineStep& m = s.median;
    std::string out = fmt::format(
        "kernel timeline ({} {}{}, device clock; medians per field): wall {:.3f} ms = before the first kernel {:.3f} "
        "+ first kernel start to last kernel end {:.3f} + after the last kernel {:.3f}\n",
        s.steps, unit, s.steps == 1 ? "" : (unit.ends_with("s") ? "es" : "s"), m.wall_us / 1e3, m.lead_us / 1e3,
        m.span_us / 1e3, m.tail_us / 1e3);
    out += fmt::format(
        "  in that span: a kernel running {:.3f} ms, none running {:.3f} ms ({:.1f}%) in {} gaps; {} kernels, "
        "{:.3f} ms of kernel time ({:.2f} running at once on average)\n",
        m.busy_us / 1e3, m.idle_us / 1e3, m.span_us > 0 ? 100.0 * m.idle_us / m.span_us : 0.0, m.gaps, m.kernels,
        m.kernel_us / 1e3, m.busy_us > 0 ? m.kernel_us / m.busy_us : 0.0);
    if (!s.largest.empty()) {
        out += fmt::format("  largest gaps with no kernel running (the median {}):\n", unit);
        for (const TimelineGap& g : s.largest)
            out += fmt::format("    {:8.1f} us after {} before {}\n", g.us, g.before, g.after);
    }
    out += fmt::format("  charged: the {}'s busy time, each instant charged to the running kernel that ends first (what "
                       "each adds along a chain of dependent kernels; early-launched kernels waiting are not charged)\n",
                       unit);
    out += fmt::format("  {:<72} {:>10} {:>10} {:>9} {:>11}\n", "kernel (durations on the device)", "calls/" + unit,
                       "us/" + unit, "us/call", "charged us");
    double rest_us = 0, rest_charged = 0;
    int rest = 0;
    for (size_t i = 0; i < s.kernels.size(); ++i) {
        const TimelineKernel& k = s.kernels[i];
        if (int(i) >= max_rows) {
            rest_us += k.us_per_step;
            rest_charged += k.charged_us_per_step;
            ++rest;
            continue;
        }
        const std::string name = k.name.size() > 72 ? k.name.substr(0, 69) + "..." : k.name;
        out += fmt::format("  {:<72} {:>10.1f} {:>10.1f} {:>9.2f} {:>11.1f}\n", name, k.calls_per_step, k.us_per_step,
                           k.us_per_call, k.charged_us_per_step);
    }
    if (rest > 0)
        out += fmt::format("  ... {} more kernels: {:.1f} us/{}, charged {:.1f}\n", rest, rest_us, unit, rest_charged);
    return out;
}

}  // namespace flashseek
