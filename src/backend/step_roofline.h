// The roofline arithmetic of a profiled step (diagnostics.h) and the lines `flashseek bench` prints from it: each
// op's bandwidth on the weight bytes it read against the measured copy bandwidth (the per-op table), the step's
// bubble (the step time beyond what its bytes take at the copy bandwidth, per step and per layer) and the eager
// per-op sum against the step a server runs. Plain host arithmetic, so the CPU tests check it.
#pragma once
#include <cstddef>
#include <string>

#include "backend/diagnostics.h"

namespace flashseek {

struct OpBandwidth {
    bool streams_weights = false;  // false: the op read no weight bytes, its columns read "-"
    double mb = 0;                 // weight bytes / 1e6
    double gb_s = 0;               // weight bytes over the op's summed time, in GB/s
    double copy_fraction = 0;      // gb_s against the copy bandwidth
};
// copy_bandwidth: bytes/s (> 0). An op with bytes needs a positive time (an Error naming the op otherwise).
OpBandwidth op_bandwidth(const OpTime& op, double copy_bandwidth);

struct StepBubble {
    double step_ms = 0;        // the measured step
    double transfer_ms = 0;    // its bytes at the copy bandwidth (the roofline)
    double bubble_ms = 0;      // step_ms - transfer_ms: the time the memory system is not streaming the step's bytes
    double per_layer_us = 0;   // the bubble divided by the layers run
    double step_fraction = 0;  // bubble_ms / step_ms
};
// step_ms > 0, bytes_per_step >= 0, copy_bandwidth > 0 (bytes/s), layers > 0; an Error naming the argument otherwise.
StepBubble step_bubble(double step_ms, double bytes_per_step, double copy_bandwidth, int layers);

// "bubble: step time (graph, median) − bytes/step ÷ copy bandwidth = X ms per step = Y us per layer (Z% of the
// step)"; step_kind says how the step ran ("graph" or "eager").
std::string format_bubble(const StepBubble& b, const std::string& step_kind);
// The per-op table of `p` (its first max_rows ops) with the columns op, variant, calls, total us, share, MB, GB/s
// and % of copy BW; `what` names the step in its title line. Where ops are cut, a last line counts them and their
// time.
std::string format_op_table(const StepProfile& p, double copy_bandwidth, const std::string& what, size_t max_rows);
// The eager profiled step's per-op sum beside the measured step: the difference is the events', the eager
// launches' and the serialized side branches' cost, which the per-op times include and the step does not.
std::string format_per_op_sum_vs_step(double per_op_sum_us, double step_ms, const std::string& step_kind);

}  // namespace flashseek
