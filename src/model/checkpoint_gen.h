// Random DeepSeek-V4 checkpoints in exactly the official layout and dtypes (spec §3), for tests and demos.
// Deterministic: the bytes depend only on (config, seed, expert dtype, scale dtype), never on the machine, the
// thread count or the number of shards, so committed golden logits stay valid when a checkpoint is regenerated.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "model/config.h"

namespace flashseek {

struct GenOptions {
    uint64_t seed = 0;
    int shards = 1;                            // > 1: model-0000i-of-0000K.safetensors + index.json
    std::optional<ExpertDtype> expert_dtype;   // overrides the config's expert_dtype (written to config.json)
    bool f32_scales = false;                   // F32 block scales (amax / qmax, not powers of two) instead of E8M0
    int threads = 0;                           // 0 = hardware concurrency
};

struct GenSummary {
    size_t n_tensors = 0;
    size_t n_bytes = 0;  // tensor bytes
};

// Writes config.json and the safetensors file(s) into out_dir (created if needed; existing model files are
// replaced). Values keep activations O(1): weights ~ N(0, 1/in) after dequantization with per-block scales that
// vary, norms ~ 1 + noise, hc/ape/sink/bias random non-zero, tid2eid random distinct expert ids per row.
GenSummary generate_checkpoint(const ModelConfig& cfg, const std::string& out_dir, const GenOptions& opt);

}  // namespace flashseek
