// Token sampling on the GPU with the semantics of the host sampler (src/backend/sampling.cpp, sample_logits):
// temperature 0 = greedy (argmax, ties -> lower id); otherwise top-k over the logits (ties -> lower id), then
// top-p over the kept candidates' renormalized temperature-1 probabilities (smallest prefix in descending order
// whose mass reaches top_p, at least one token), then temperature on what is left, and one draw with the same
// counter-based uniform u = f(seed, draw_index). The device draws in token-id order instead of descending
// order, so it samples the same distribution but not necessarily the same token for a given u.
// One CTA per row; thresholds come from 8-bit radix selection (4 passes) over order-preserving keys, counting
// tokens for top-k and summing probability mass for top-p.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashseek::cuda {

struct DeviceSampleParams {
    float temperature = 0.f;  // 0 = greedy
    float top_p = 1.f;        // (0, 1]
    int32_t top_k = 0;        // 0 = off
    int32_t pad = 0;
    uint64_t seed = 0;
    uint64_t draw_index = 0;
};

// logits: [rows, vocab] fp32, row stride ld (ld = 0 broadcasts one row to every draw). params: device array of
// `rows` entries. out_token [rows]; out_logprob [rows] (log-softmax at temperature 1 of the chosen token) may be
// null. Rows with invalid parameters (temperature < 0 or not finite, top_p outside (0, 1], top_k < 0) produce
// token -1.
void sample_rows(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DeviceSampleParams* params,
                 int32_t* out_token, float* out_logprob, cudaStream_t stream);

}  // namespace flashseek::cuda
