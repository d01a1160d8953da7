// The backend interface: a loaded model with sequences whose incremental state is held in a block pool, and a
// batched step that appends tokens (a prefill chunk or one decode token) to many sequences at once. The step
// loop, scheduler and CLI see only this interface; the CPU reference and the CUDA backend implement it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"

namespace flashseek {

class BackendDiagnostics;  // backend/diagnostics.h

// One sequence's work in a step: append tokens[0..n_tokens) to sequence seq_id.
struct SequenceStep {
    int seq_id = -1;
    const int32_t* tokens = nullptr;
    int n_tokens = 0;
    bool all_logits = false;  // logits for every appended token, else only for the last one
    // The tokens are (part of) a prompt or a recomputation: computed as a prefill whatever their count. Steps of
    // more than one token are prefills anyway; the flag matters for a one-token piece of a chunked prompt, which
    // the CUDA backend then computes with the same kernels as the rest of the prompt (batch invariance: a
    // sequence's logits do not depend on how its prompt was chunked).
    bool prefill = false;
};

struct SampleParams {
    float temperature = 0.f;  // 0 = greedy
    float top_p = 1.f;
    int top_k = 0;            // 0 = off
    uint64_t seed = 0;
    uint64_t draw_index = 0;  // which draw of this request (the RNG is counter-based: seed x draw_index)
    int n_logprobs = 0;       // how many top logprobs to return (0 = none)
};

struct SampleResult {
    int32_t token = -1;
    float logprob = 0.f;  // log-softmax of the chosen token (temperature 1 distribution)
    std::vector<std::pair<int32_t, float>> top_logprobs;
};

struct StateMemoryStats {
    int64_t block_tokens = 0;  // tokens of context per block
    int64_t total_blocks = 0;
    int64_t used_blocks = 0;
    int64_t bytes_per_block = 0;
    int live_sequences = 0;
};

class OutOfStateMemory : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const ModelConfig& config() const = 0;
    virtual std::string name() const = 0;

    // State memory pool. A sequence of n tokens holds blocks_for(n) blocks.
    virtual StateMemoryStats memory() const = 0;
    virtual int64_t blocks_for(int64_t n_tokens) const = 0;
    virtual int max_sequences() const = 0;

    virtual int create_sequence() = 0;               // throws Error when max_sequences() are live
    virtual void free_sequence(int seq_id) = 0;      // releases all of its blocks immediately
    virtual int64_t sequence_length(int seq_id) const = 0;

    // Runs one step. Logits are written as consecutive [rows, vocab] float32 blocks, one per step entry in order
    // (rows = n_tokens when all_logits, else 1). Throws OutOfStateMemory before changing any state when the pool
    // cannot hold the new tokens.
    virtual void forward(std::span<const SequenceStep> steps, std::vector<float>& logits) = 0;

    // One step plus sampling of the next token of each entry (from its last logits row). The default runs
    // forward() and samples on the host; a device backend samples on the device.
    virtual void forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                                std::vector<SampleResult>& out);

    // Profiling, device ceilings and A/B switches for tools; null where the backend has none.
    virtual BackendDiagnostics* diagnostics() { return nullptr; }
};

// Host sampler over one logits row (greedy, temperature, top-k, top-p; counter-based RNG for reproducibility).
SampleResult sample_logits(const float* logits, int64_t vocab, const SampleParams& p);

}  // namespace flashseek
