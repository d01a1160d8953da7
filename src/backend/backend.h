// The backend interface: a loaded model with sequences whose incremental state is held in a block pool, and a
// batched step that appends tokens (a prefill chunk or one decode token) to many sequences at once. The step
// loop, scheduler and CLI see only this interface; the CPU reference and the CUDA backend implement it.
#pragma once
#include <cstdint>
#include <future>
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

// One additive logit bias (OpenAI logit_bias: token id -> bias in [-100, 100]).
struct LogitBias {
    int32_t token = -1;
    float bias = 0.f;
};

// Words of an allowed-token bitmask over a vocabulary of `vocab` tokens: bit t % 32 of word t / 32 = token t.
inline int64_t token_mask_words(int64_t vocab) { return (vocab + 31) / 32; }

// One logprob of a scored token (echo / prompt logprobs): its log-softmax at temperature 1 over the model's raw
// logits, its rank (1 = the most likely token) and the top alternatives.
struct ScoredToken {
    int32_t token = -1;
    float logprob = 0.f;
    int64_t rank = 0;
    std::vector<std::pair<int32_t, float>> top;
};

struct SampleParams {
    float temperature = 0.f;  // 0 = greedy
    float top_p = 1.f;
    int top_k = 0;            // 0 = off
    float min_p = 0.f;        // [0, 1]: keeps tokens whose temperature-1 probability is >= min_p x the largest one
    uint64_t seed = 0;
    uint64_t draw_index = 0;  // which draw of this request (the RNG is counter-based: seed x draw_index)
    int n_logprobs = 0;       // how many top logprobs to return (0 = none)

    // Logit adjustments before the filters, in vLLM's order: tokens outside allowed_tokens and in banned_tokens
    // get -inf; logit_bias is added; then the repetition penalty (> 0, 1 = off) divides positive and multiplies
    // negative logits of every token seen in prompt_tokens or output_tokens, and the frequency / presence
    // penalties subtract count x frequency_penalty + presence_penalty for tokens that occur c > 0 times in
    // output_tokens. Reported logprobs stay those of the raw logits (the model's distribution). The spans point
    // into the caller's storage and are read only during the call that receives them.
    float repetition_penalty = 1.f;
    float frequency_penalty = 0.f;
    float presence_penalty = 0.f;
    std::span<const int32_t> prompt_tokens;
    std::span<const int32_t> output_tokens;
    std::span<const LogitBias> logit_bias;
    std::span<const int32_t> banned_tokens;    // min_tokens: stop ids that may not be sampled yet
    const uint32_t* allowed_tokens = nullptr;  // token_mask_words(vocab) words; null = every token allowed
    // Set when another thread is still filling allowed_tokens as forward_sample starts (grammar masks computed
    // while the forward pass runs): the backend waits for it after its forward pass, before it reads the mask.
    std::shared_future<void> allowed_tokens_ready;

    // Scoring of the entry's own tokens (echo, prompt logprobs): with SequenceStep::all_logits, logits row j of
    // the entry is scored against score_targets[j] for j < score_targets.size(), with score_top_n alternatives.
    std::span<const int32_t> score_targets;
    int score_top_n = 0;

    bool adjusts_logits() const {
        return allowed_tokens || !banned_tokens.empty() || !logit_bias.empty() || repetition_penalty != 1.f ||
               frequency_penalty != 0.f || presence_penalty != 0.f;
    }
};

struct SampleResult {
    int32_t token = -1;
    float logprob = 0.f;  // log-softmax of the chosen token (temperature 1 distribution of the raw logits)
    std::vector<std::pair<int32_t, float>> top_logprobs;
    std::vector<ScoredToken> scored;  // one per SampleParams::score_targets entry
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

    // One step plus sampling of the next token of each entry (from its last logits row), and the scores of
    // SampleParams::score_targets. The default runs forward() and samples on the host; a device backend samples
    // on the device. Waits for SampleParams::allowed_tokens_ready before it reads a mask, also when it throws.
    virtual void forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                                std::vector<SampleResult>& out);

    // Profiling, device ceilings and A/B switches for tools; null where the backend has none.
    virtual BackendDiagnostics* diagnostics() { return nullptr; }
};

// Host sampler over one logits row (adjustments, greedy, temperature, top-k, top-p, min-p; counter-based RNG
// for reproducibility). Throws Error when a parameter is out of range or the adjustments exclude every token.
SampleResult sample_logits(const float* logits, int64_t vocab, const SampleParams& p);

// The logprob, rank and top_n alternatives of `target` in one raw logits row (echo / prompt logprobs).
ScoredToken score_token(const float* logits, int64_t vocab, int32_t target, int top_n);

// Waits until every entry's allowed_tokens is filled (see SampleParams::allowed_tokens_ready).
void wait_for_allowed_tokens(std::span<const SampleParams> params);

// wait_for_allowed_tokens when the scope ends, also by an exception: a mask still being filled must be finished
// before the caller may release it (forward_sample implementations).
struct WaitForAllowedTokensOnExit {
    std::span<const SampleParams> params;
    ~WaitForAllowedTokensOnExit() { wait_for_allowed_tokens(params); }
};

}  // namespace flashseek
