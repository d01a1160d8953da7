// What a caller chooses when it creates a backend: numerics, limits of the state pool, the device and the
// layer count. Plain data, shared by every backend and by the CLI.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace flashseek {

enum class Numerics {
    Exact,    // fp32 math on dequantized weights (CPU default; matches HF transformers in fp32)
    Release,  // the official reference's bf16 activations and FP8/FP4 quantization simulations
};

struct BackendOptions {
    std::string backend = "cpu";     // a registered backend name (backend/registry.h): "cpu", "cuda"
    Numerics numerics = Numerics::Exact;
    int max_sequences = 64;
    int64_t max_context = 0;         // 0 = the model's max_position_embeddings, capped by the pool
    int64_t state_memory_bytes = 0;  // 0 = backend default; the block pool is sized from it at start-up
    int threads = 0;                 // CPU threads, 0 = hardware concurrency
    int layers = 0;                  // run only the first N layers (0 = all)
    int prefill_chunk = 0;           // CUDA: tokens of one sequence per forward pass (0 = the backend's default)
    int tp = 1, ep = 1;              // CUDA: parallel layout (model/sharding.h); ranks beyond the devices share one
    bool dummy_weights = false;      // CUDA: random weights generated on the device, no checkpoint read
    // Model-load progress: called with (bytes done, bytes total); returning false cancels loading.
    std::function<bool(size_t, size_t)> progress;
};

// Parses "exact" / "release" (Error naming the value otherwise).
Numerics parse_numerics(const std::string& name);

}  // namespace flashseek
