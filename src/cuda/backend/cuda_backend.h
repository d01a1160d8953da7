// The CUDA backend's entry point: the whole V4 forward on one GPU with flashseek's own kernels (weights in
// checkpoint formats, per-sequence state in a block pool sized at start-up, CUDA graphs for decode per batch-size
// bucket). Host-only header (no CUDA includes): src/backends registers create_cuda_backend; tools reach the
// backend's profiling and device ceilings through Backend::diagnostics() (backend/diagnostics.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/options.h"

namespace flashseek {

std::unique_ptr<Backend> create_cuda_backend(const std::string& model_dir, const BackendOptions& opt);

namespace cuda {

// Throws Error ("no CUDA device ...", with the runtime's reason) when no usable GPU is present.
void require_cuda_device();

// Device-to-device copy bandwidth in bytes/s counting bytes read plus bytes written (median of `reps` copies of
// `bytes` each, after a warm-up): the memory roofline bench compares against.
double measure_copy_bandwidth(size_t bytes = size_t(2) << 30, int reps = 20);

// The dense FP8 tensor-core rate in FLOP/s (cuBLASLt, e4m3 -> bf16, a size^3 product, median of reps): the ceiling
// of prefill. 0 when cuBLASLt cannot be opened or has no algorithm.
double measure_fp8_gemm_rate(int64_t size = 8192, int reps = 10);

}  // namespace cuda
}  // namespace flashseek
