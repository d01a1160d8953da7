// The CUDA implementation of Backend (engine/backend.h): the whole V4 forward on one GPU with flashseek's own
// kernels, weights in checkpoint formats, per-sequence state in a block pool sized at start-up, CUDA graphs for
// decode per batch-size bucket. This header is host-only (no CUDA includes) so that the CLI (cmd_bench.cpp) and
// the engine's factory can use it from plain C++ translation units.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/factory.h"

namespace flashseek {

// Declared here as well as in engine/factory.h so that CUDA code does not depend on the factory's order.
std::unique_ptr<Backend> create_cuda_backend(const std::string& model_dir, const BackendOptions& opt);

namespace cuda {

// One row of the per-op GPU time table of a profiled step (events around every op, outside any graph).
struct OpTime {
    std::string op;   // e.g. "attn.wq_b gemm"
    int calls = 0;
    double total_us = 0;
};

struct StepProfile {
    std::vector<OpTime> ops;     // sorted by total_us, largest first
    double gpu_us = 0;           // sum of the op times
    double bytes_weights = 0;    // weight bytes the step read (dense + the experts actually routed, counted once)
    double bytes_state = 0;      // KV / index-key / compressor-state bytes read and written
    int distinct_experts = 0;    // summed over layers
};

struct CudaBackendExtras {
    virtual ~CudaBackendExtras() = default;
    // Runs `steps` once with an event pair around every op (no graph) and reports the table and the bytes.
    virtual StepProfile profile_step(std::span<const SequenceStep> steps) = 0;
    // Decode steps with a device sampler and no logits copy (what a server's decode loop does); returns tokens.
    virtual void decode_greedy(std::span<const SequenceStep> steps, std::vector<int32_t>& next_tokens) = 0;
    virtual std::string device_name() const = 0;
    virtual double weight_bytes_on_device() const = 0;
    virtual void set_use_graphs(bool on) = 0;
    // Independent parts of a sub-block (window KV, compressors, shared expert) on side streams (default on;
    // FLASHSEEK_BRANCHES=0 turns them off at start-up): off runs every op on one stream, for A/B runs and tests.
    virtual void set_use_branches(bool on) = 0;
};

// Throws Error ("no CUDA device ...", with the runtime's reason) when no usable GPU is present.
void require_cuda_device();

// Device-to-device copy bandwidth in bytes/s counting bytes read plus bytes written (median of `reps` copies of
// `bytes` each, after a warm-up): the memory roofline bench compares against.
double measure_copy_bandwidth(size_t bytes = size_t(2) << 30, int reps = 20);

}  // namespace cuda
}  // namespace flashseek
