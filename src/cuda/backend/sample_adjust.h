// Device inputs of the sampler's logit adjustments (allowed-token masks, min_tokens bans, logit_bias, repetition /
// frequency / presence penalties): built on the host from each head row's SampleParams as per-row
// DeviceLogitAdjust headers, one DeviceLogitEdit per distinct adjusted token, and the mask words; uploaded through
// pinned staging; applied by adjust_logits_rows into a copy of the rows that the sampler draws from (the raw rows
// stay for the reported logprobs). Buffers grow on demand, outside any graph capture.
#pragma once
#include <cuda_runtime.h>

#include <span>
#include <vector>

#include "backend/backend.h"
#include "cuda/backend/cuda_util.h"
#include "cuda/sample/sample.cuh"

namespace flashseek::cuda {

class SampleAdjustStaging {
public:
    SampleAdjustStaging() = default;
    SampleAdjustStaging(const SampleAdjustStaging&) = delete;
    SampleAdjustStaging& operator=(const SampleAdjustStaging&) = delete;

    // rows[h]: the parameters of head row h, or null for a padding row. Waits for their masks
    // (SampleParams::allowed_tokens_ready). Returns whether any row adjusts its logits.
    bool prepare(std::span<const SampleParams* const> rows, int64_t vocab);
    // Enqueues the upload and the adjustment of the prepared rows of `logits` (stride ld) on `stream`; returns the
    // adjusted rows ([rows, vocab], valid until the next apply).
    const float* apply(const float* logits, int64_t ld, cudaStream_t stream);

private:
    template <typename T, typename Fill>
    static void upload(PinnedBuffer& host, DeviceBuffer& dev, size_t n, const char* what, Fill fill,
                       cudaStream_t stream);
    int64_t rows_ = 0, vocab_ = 0;
    std::vector<DeviceLogitAdjust> adjust_;
    std::vector<DeviceLogitEdit> edits_;
    std::vector<const uint32_t*> masks_;
    PinnedBuffer adjust_host_, edits_host_, masks_host_;  // staging of the three uploads
    DeviceBuffer adjust_dev_, edits_dev_, masks_dev_, out_dev_;
};

}  // namespace flashseek::cuda
