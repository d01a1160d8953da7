// What tools (flashseek bench, tests) may ask of a device backend beyond the Backend interface: a profiled step
// with per-op times and bytes, greedy decode without a logits copy, the device's measured ceilings, the kernel
// timeline and A/B switches. Plain C++ (no device headers), so the CLI needs no CUDA includes.
// Backend::diagnostics() returns null for backends without them (the CPU reference).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/kernel_timeline.h"

namespace flashseek {

// One row of the per-op time table of a profiled step (events around every op, outside any graph).
struct OpTime {
    std::string op;       // e.g. "attn.wq_b gemm"
    std::string variant;  // the kernel-catalogue variant that ran it, where the op is a catalogue op
    int calls = 0;
    double total_us = 0;
    double bytes = 0;  // weight bytes (weights + scales) the op read over its calls; 0 for ops that stream none
};

// How the passes that may run as CUDA graphs (decode passes outside a profiled step) ran, counted since the backend
// was made: a pass shape's first pass runs eagerly, its second is captured (slower than either), every later one
// is a replay. A step whose time stands out (a benchmark's p99) is explained by the shapes that first appeared in
// it.
struct GraphCounts {
    int64_t first_eager = 0;  // passes of a shape seen for the first time
    int64_t captured = 0;     // passes captured into a graph (and then launched)
    int64_t replayed = 0;     // passes launched from an existing graph
    int64_t eager = 0;        // later passes run without a graph: graphs switched off, or a shape whose capture failed
};
// The passes counted between two readings (`later - earlier`).
inline GraphCounts operator-(const GraphCounts& a, const GraphCounts& b) {
    return {a.first_eager - b.first_eager, a.captured - b.captured, a.replayed - b.replayed, a.eager - b.eager};
}

struct StepProfile {
    std::vector<OpTime> ops;     // sorted by total_us, largest first
    double gpu_us = 0;           // sum of the op times
    double bytes_weights = 0;    // weight bytes the step read (dense + the experts actually routed, counted once)
    double bytes_state = 0;      // KV / index-key / compressor-state bytes read and written
    std::vector<double> bytes_per_rank;  // weights + state per rank of a parallel layout (one entry: the whole model)
    int distinct_experts = 0;    // summed over layers
};

class BackendDiagnostics {
public:
    virtual ~BackendDiagnostics() = default;
    // Runs `steps` once with an event pair around every op (no graph) and reports the table and the bytes.
    virtual StepProfile profile_step(std::span<const SequenceStep> steps) = 0;
    // Decode steps with a device sampler and no logits copy (what a server's decode loop does); returns tokens.
    virtual void decode_greedy(std::span<const SequenceStep> steps, std::vector<int32_t>& next_tokens) = 0;
    virtual std::string device_name() const = 0;
    virtual double weight_bytes_on_device() const = 0;
    // Device-to-device copy bandwidth in bytes/s counting bytes read plus bytes written (median of `reps` copies of
    // `bytes` each, after a warm-up): the memory roofline.
    virtual double measure_copy_bandwidth(size_t bytes = size_t(2) << 30, int reps = 20) = 0;
    // The dense FP8 tensor-core rate in FLOP/s measured on the device (0 when it cannot be measured): the
    // ceiling of prefill.
    virtual double measure_gemm_rate() = 0;
    // Host seconds the last forward call (decode_greedy, forward, ...) spent enqueuing its passes: building and
    // uploading step metadata, choosing and launching every kernel (a captured graph: its launch), summed over the
    // call's passes. Against the call's wall time it says whether the host or the device bounds an eager pass.
    virtual double last_host_enqueue_seconds() const = 0;
    // The kernel timeline on the device's own clock (CUPTI where it is found; backend/kernel_timeline.h). Enable it
    // before the graphs to be traced are captured; "" on success, else why it cannot trace.
    virtual std::string enable_kernel_trace() = 0;
    // Before each traced step and once after the last (waits for the device first).
    virtual void mark_kernel_trace() = 0;
    // The kernels that started between the first and the last mark since the previous take, and the marks.
    virtual KernelTrace take_kernel_trace() = 0;
    virtual void set_use_graphs(bool on) = 0;
    virtual GraphCounts graph_counts() const = 0;
    // Independent parts of a sub-block on side streams (default on); off runs every op on one stream.
    virtual void set_use_branches(bool on) = 0;
};

}  // namespace flashseek
