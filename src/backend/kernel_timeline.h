// The kernel timeline of decode steps as the device ran them: every kernel's start and end on the GPU's clock
// (collected by the CUDA backend through CUPTI, BackendDiagnostics::take_kernel_trace), cut into steps by host marks
// on the same clock. Unlike the per-op table (events around each op of an eager step), it sees the CUDA graph the
// server replays: kernels overlapping on the side streams, and the time no kernel runs at all — the gaps that
// launches, dependencies and the host leave in a step, which no per-kernel tuning removes. Plain C++ (no device
// headers): the summary is tested on synthetic traces.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashseek {

struct KernelSpan {
    std::string name;  // as the device reports it (mangled for C++ kernels)
    uint32_t stream = 0;
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t graph = 0;  // the CUDA graph that launched it; 0 for a launch outside any graph
};

struct KernelTrace {
    std::vector<KernelSpan> spans;
    // Host marks on the spans' clock: before each traced step, and once after the last (steps = marks - 1).
    std::vector<uint64_t> marks;
};

// A stretch of a step in which no kernel runs, and the kernels on either side of it.
struct TimelineGap {
    double us = 0;
    std::string before, after;  // short kernel names
};

// Per kernel name (short form), over the traced steps.
struct TimelineKernel {
    std::string name;
    double calls_per_step = 0;
    double us_per_step = 0;  // summed durations (kernels on other streams may run meanwhile)
    double us_per_call = 0;
    // The step's busy time charged to this kernel: each instant in which kernels run goes to the running kernel that
    // ends first. A kernel launched early (programmatic dependent launch) that waits for its predecessor is not
    // charged while the predecessor runs, so along a chain of dependent kernels this is what each adds to the step;
    // a side-stream kernel is charged only while it is the first to end. The kernels' charges sum to the busy time.
    double charged_us_per_step = 0;
};

struct TimelineStep {
    double wall_us = 0;    // mark to mark: what the host saw
    double lead_us = 0;    // mark to the first kernel's start (host enqueue, graph launch)
    double span_us = 0;    // first kernel's start to last kernel's end
    double busy_us = 0;    // time in the span with at least one kernel running
    double idle_us = 0;    // span - busy: no kernel running
    double tail_us = 0;    // last kernel's end to the next mark (result copy, host)
    double kernel_us = 0;  // summed kernel durations (busy x the mean number running at once)
    int kernels = 0;
    int gaps = 0;          // stretches with no kernel running
};

struct TimelineSummary {
    int steps = 0;
    TimelineStep median;                // per field, the median over the steps
    std::vector<TimelineGap> largest;   // the median-wall step's largest gaps, largest first
    std::vector<TimelineKernel> kernels;  // by charged_us_per_step, then us_per_step, largest first
    // The median-wall step's kernels as recorded (short names; start and end relative to the step's mark), in start
    // order: the raw material for analyses the summary does not make (flashseek bench writes them to its JSON).
    std::vector<KernelSpan> median_step_spans;
    std::vector<double> median_step_charged_us;  // each of those spans' charge (TimelineKernel's rule), same order
};

// One position of a period (a model layer: what repeats between markers): a kernel name and its occurrence among
// the period's spans of that name, with medians over the periods alike.
struct PeriodKernel {
    std::string name;
    int occurrence = 0;      // 0 for the period's first span of this name, 1 for the second, ...
    double start_us = 0;     // from the period's first marker's start
    double end_us = 0;
    double charged_us = 0;   // what it adds along the period's chain (the step's charging rule)
};

// The median step cut into periods at every `every`-th span whose short name starts with one of the marker prefixes
// (the first period at the first marker; spans before it are left out, and the last period runs to the step's end).
// Periods are alike when they hold the same (name, occurrence) positions; the most common kind (the first in step
// order among equals) is summarized, its positions by median end.
struct PeriodSummary {
    int periods = 0;          // in the median step
    int alike = 0;            // of the summarized kind
    double median_us = 0;     // its periods' length: first marker's start to the next period's (or the step's end)
    double charged_us = 0;    // the sum of its positions' median charges
    std::vector<PeriodKernel> kernels;
};
PeriodSummary summarize_periods(const TimelineSummary& s, const std::vector<std::string>& marker_prefixes, int every);
// The period table's lines for `flashseek bench`; `unit` names a period ("layer").
std::string format_periods(const PeriodSummary& p, const std::string& unit = "layer");

// Steps with no kernel are kept (wall only). Spans outside the marks are ignored. `largest_gaps`: how many gaps to
// list.
TimelineSummary summarize_timeline(const KernelTrace& trace, int largest_gaps = 8);

// "wgmma_expert_ws_kernel<true, false, false>" from "_ZN9flashseek4cuda13wgmma_experts...": demangled, without the
// return type, the parameter list and the namespaces (anonymous ones included); the name itself where it does not
// demangle.
std::string short_kernel_name(const std::string& name);

// The summary's lines for `flashseek bench`: the step's decomposition, the largest gaps, the `max_rows` kernels with
// the most time per step (and a count of the rest). `unit` names what lies between two marks in the text ("step" for
// decode steps, "pass" for traced prefill passes).
std::string format_timeline(const TimelineSummary& s, int max_rows = 30, const std::string& unit = "step");

}  // namespace flashseek
