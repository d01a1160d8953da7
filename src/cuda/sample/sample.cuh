// Token sampling on the GPU with the semantics of the host sampler (src/backend/sampling.cpp, sample_logits):
// temperature 0 = greedy (argmax, ties -> lower id); otherwise top-k over the logits (ties -> lower id), then
// top-p over the kept candidates' renormalized temperature-1 probabilities (smallest prefix in descending order
// whose mass reaches top_p, at least one token), then temperature on what is left, and one draw with the same
// counter-based uniform u = f(seed, draw_index); min-p keeps tokens whose logit is >= max + log(min_p) (the host's
// float threshold). The device draws in token-id order instead of descending order, so it samples the same
// distribution but not necessarily the same token for a given u.
// Logit adjustments (grammar mask, banned ids, logit_bias, repetition / frequency / presence penalties) run as a
// separate kernel into a copy of the rows (adjust_logits_rows), with the host's per-token arithmetic; the sampler
// then reports the logprob of the raw row it is given beside the adjusted one.
// Thresholds come from a radix selection over order-preserving keys, counting tokens for top-k and summing
// probability mass for top-p; masses, weights and their sums are fixed-point integers (sample_fixed.cuh), so a row's
// token depends on the row and its parameters alone. The probabilities are the host's quantized to 2^-40 of the most
// likely token's: a token below 2^-41 of it is never drawn.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashseek::cuda {

struct DeviceSampleParams {
    float temperature = 0.f;  // 0 = greedy
    float top_p = 1.f;        // (0, 1]
    int32_t top_k = 0;        // 0 = off
    float min_p = 0.f;        // [0, 1]; 0 = off
    uint64_t seed = 0;
    uint64_t draw_index = 0;
};

// logits: [rows, vocab] fp32, row stride ld (ld = 0 broadcasts one row to every draw). params: device array of
// `rows` entries. out_token [rows]; out_logprob [rows] (log-softmax at temperature 1 of the chosen token) may be
// null. raw_logits (stride raw_ld, may be null = logits): the rows the logprob is reported from, when `logits` are
// adjusted copies. Rows with invalid parameters (temperature < 0 or not finite, top_p outside (0, 1], top_k < 0,
// min_p outside [0, 1]) or without any finite logit produce token -1.
// scratch (optional, sample_rows_scratch_bytes(rows) or more, zeroed before its first use; every call leaves it
// ready for the next: the per-row max keys, tickets and histograms zeroed again, the rest rewritten by each call):
// the max and the normalizer's passes over each row (and over each raw row, for the reported logprob) run spread over
// many CTAs first, then, for the drawn rows
// (temperature > 0), the top-k and top-p selections and the draw; the same results. `passes` says which of the
// drawn rows' passes to launch (sample_passes_for of the rows' parameters on the host); a row that needs a pass the
// call did not launch is drawn by the one-CTA sampler instead. The scratch is laid out for all the rows it holds, so
// calls on one scratch may pass any row count up to that. Calls sharing a scratch must not overlap.
struct SamplePasses {
    bool drawn = true;  // some row has a temperature
    bool top_k = true;  // some drawn row has 0 < top_k < vocab
    bool top_p = true;  // some drawn row has top_p < 1
};
SamplePasses sample_passes_for(const DeviceSampleParams* host_params, int64_t rows, int64_t vocab);
size_t sample_rows_scratch_bytes(int64_t rows);
void sample_rows(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DeviceSampleParams* params,
                 int32_t* out_token, float* out_logprob, cudaStream_t stream, const float* raw_logits = nullptr,
                 int64_t raw_ld = 0, void* scratch = nullptr, size_t scratch_bytes = 0, SamplePasses passes = {});

// One token's adjustment in a row (tokens unique within a row).
struct DeviceLogitEdit {
    int32_t token = 0;
    float bias = 0.f;         // logit_bias
    int32_t output_count = 0; // occurrences in the generated tokens (frequency / presence penalties)
    int32_t flags = 0;        // kEditSeen: in prompt or output (repetition penalty); kEditBanned: -inf
};
constexpr int32_t kEditSeen = 1;
constexpr int32_t kEditBanned = 2;

struct DeviceLogitAdjust {
    float repetition_penalty = 1.f;
    float frequency_penalty = 0.f;
    float presence_penalty = 0.f;
    int32_t edit_begin = 0, edit_end = 0;  // this row's edits: edits[edit_begin, edit_end)
    int32_t mask_index = -1;               // allowed-token bitmask: masks + mask_index * mask_words; -1 = none
};

// out[r] = logits[r] with tokens outside the row's mask at -inf, then each edit applied in the host's order
// (banned -> -inf; + bias; repetition penalty if seen; - (frequency x count + presence) if count > 0).
// logits / out strides ld / vocab; masks: (vocab + 31) / 32 words each.
void adjust_logits_rows(const float* logits, int64_t ld, float* out, int64_t rows, int64_t vocab,
                        const DeviceLogitAdjust* adjust, const DeviceLogitEdit* edits, const uint32_t* masks,
                        cudaStream_t stream);

}  // namespace flashseek::cuda
