// Creating a Backend for a model directory (or the embedded default model) on a chosen device.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "engine/backend.h"

namespace flashseek {

enum class Numerics {
    Exact,    // fp32 math on dequantized weights (CPU default; matches HF transformers in fp32)
    Release,  // the official reference's bf16 activations and FP8/FP4 quantization simulations
};

struct BackendOptions {
    std::string backend = "cpu";     // "cpu" or "cuda"
    Numerics numerics = Numerics::Exact;
    int max_sequences = 64;
    int64_t max_context = 0;         // 0 = the model's max_position_embeddings, capped by the pool
    int64_t state_memory_bytes = 0;  // 0 = backend default; the block pool is sized from it at start-up
    int threads = 0;                 // CPU threads, 0 = hardware concurrency
    int layers = 0;                  // run only the first N layers (0 = all)
    bool dummy_weights = false;      // CUDA: random weights generated on the device, no checkpoint read
    // Model-load progress: called with (bytes done, bytes total); returning false cancels loading.
    std::function<bool(size_t, size_t)> progress;
};

// model_dir must hold config.json and safetensors weights. Throws Error naming the problem. opt.backend "cpu"
// gives the CPU reference; "cuda" calls create_cuda_backend, which exists only in builds with FLASHSEEK_HAVE_CUDA
// (otherwise "cuda" is an Error saying this build has no CUDA).
std::unique_ptr<Backend> create_backend(const std::string& model_dir, const BackendOptions& opt);

// Defined by the CUDA backend (src/cuda/backend) in builds with FLASHSEEK_HAVE_CUDA.
std::unique_ptr<Backend> create_cuda_backend(const std::string& model_dir, const BackendOptions& opt);

// Parses "exact" / "release" (Error naming the value otherwise).
Numerics parse_numerics(const std::string& name);

}  // namespace flashseek
