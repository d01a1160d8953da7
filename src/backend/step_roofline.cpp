// The roofline arithmetic and report lines of a profiled step (step_roofline.h).
#include "backend/step_roofline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace flashseek {

namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

}  // namespace

OpBandwidth op_bandwidth(const OpTime& op, double copy_bandwidth) {
    FS_CHECK(positive(copy_bandwidth),
             "per-op bandwidth: the copy bandwidth must be a positive number of bytes/s, got {}", copy_bandwidth);
    FS_CHECK(std::isfinite(op.bytes) && op.bytes >= 0, "per-op bandwidth: op '{}' has weight bytes {}", op.op,
             op.bytes);
    OpBandwidth b;
    if (op.bytes == 0) return b;
    FS_CHECK(positive(op.total_us), "per-op bandwidth: op '{}' read {} weight bytes in {} us (no positive time)", op.op,
             op.bytes, op.total_us);
    b.streams_weights = true;
    b.mb = op.bytes / 1e6;
    const double bytes_s = op.bytes / (op.total_us * 1e-6);
    b.gb_s = bytes_s / 1e9;
    b.copy_fraction = bytes_s / copy_bandwidth;
    return b;
}

StepBubble step_bubble(double step_ms, double bytes_per_step, double copy_bandwidth, int layers) {
    FS_CHECK(positive(step_ms), "bubble: the step time must be a positive number of ms, got {}", step_ms);
    FS_CHECK(std::isfinite(bytes_per_step) && bytes_per_step >= 0, "bubble: bytes/step must be >= 0, got {}",
             bytes_per_step);
    FS_CHECK(positive(copy_bandwidth), "bubble: the copy bandwidth must be a positive number of bytes/s, got {}",
             copy_bandwidth);
    FS_CHECK(layers > 0, "bubble: the layers run must be positive, got {}", layers);
    StepBubble b;
    b.step_ms = step_ms;
    b.transfer_ms = bytes_per_step / copy_bandwidth * 1e3;
    b.bubble_ms = step_ms - b.transfer_ms;
    b.per_layer_us = b.bubble_ms * 1e3 / layers;
    b.step_fraction = b.bubble_ms / step_ms;
    return b;
}

std::string format_bubble(const StepBubble& b, const std::string& step_kind) {
    return fmt::format("bubble: step time ({}, median) {:.3f} ms \u2212 bytes/step \u00f7 copy bandwidth {:.3f} ms = "
                       "{:.3f} ms per step = {:.1f} us per layer ({:.1f}% of the step)",
                       step_kind, b.step_ms, b.transfer_ms, b.bubble_ms, b.per_layer_us, 100.0 * b.step_fraction);
}

std::string format_op_table(const StepProfile& p, double copy_bandwidth, const std::string& what, size_t max_rows) {
    double bytes = 0;
    for (const OpTime& o : p.ops) bytes += o.bytes;
    std::string out =
        fmt::format("per-op GPU time of {} (events, no graph), total {:.1f} us, weight bytes {:.1f} MB:\n", what,
                    p.gpu_us, bytes / 1e6);
    out += fmt::format("  {:<40} {:<26} {:>6} {:>12} {:>7} {:>9} {:>9} {:>10}\n", "op", "variant", "calls", "total us",
                       "share", "MB", "GB/s", "% copy BW");
    for (size_t i = 0; i < p.ops.size() && i < max_rows; ++i) {
        const OpTime& o = p.ops[i];
        const OpBandwidth b = op_bandwidth(o, copy_bandwidth);
        const double share = 100.0 * o.total_us / std::max(p.gpu_us, 1e-9);
        out += fmt::format("  {:<40} {:<26} {:>6} {:>12.1f} {:>6.1f}%", o.op, o.variant, o.calls, o.total_us, share);
        if (b.streams_weights)
            out += fmt::format(" {:>9.2f} {:>9.1f} {:>9.1f}%\n", b.mb, b.gb_s, 100.0 * b.copy_fraction);
        else
            out += fmt::format(" {:>9} {:>9} {:>10}\n", "-", "-", "-");
    }
    if (p.ops.size() > max_rows) {  // say what the cut leaves out, so that no op silently disappears
        double rest_us = 0;
        for (size_t i = max_rows; i < p.ops.size(); ++i) rest_us += p.ops[i].total_us;
        out += fmt::format("  ... {} more op{} not shown: {:.1f} us ({:.1f}%)\n", p.ops.size() - max_rows,
                           p.ops.size() - max_rows == 1 ? "" : "s", rest_us,
                           100.0 * rest_us / std::max(p.gpu_us, 1e-9));
    }
    return out;
}

std::string format_per_op_sum_vs_step(double per_op_sum_us, double step_ms, const std::string& step_kind) {
    FS_CHECK(positive(step_ms), "per-op sum vs step: the step time must be a positive number of ms, got {}", step_ms);
    FS_CHECK(std::isfinite(per_op_sum_us) && per_op_sum_us >= 0,
             "per-op sum vs step: the sum of per-op times must be >= 0 us, got {}", per_op_sum_us);
    const double step_us = step_ms * 1e3, extra = per_op_sum_us - step_us;
    return fmt::format("sum of per-op times (eager, events) {:.1f} us vs {} step (median) {:.1f} us: {:+.1f} us "
                       "({:+.1f}%) of events, eager launches and serialized side branches",
                       per_op_sum_us, step_kind, step_us, extra, 100.0 * extra / step_us);
}

}  // namespace flashseek
