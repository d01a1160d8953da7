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
    ~SampleAdjustStaging();
    SampleAdjustStaging(const SampleAdjustStaging&) = delete;
    SampleAdjustStaging& operator=(const SampleAdjustStaging&) = delete;

    // rows[h]: the parameters of head row h, or null for a padding row. Waits for their masks
    // (SampleParams::allowed_tokens_ready). Returns whether any row adjusts its logits.
    bool prepare(std::span<const SampleParams* const> rows, int64_t vocab);
    // Enqueues the upload and the adjustment of the prepared rows of `logits` (stride ld) on `stream`; returns the
    // adjusted rows ([rows, vocab], valid until the next apply).
    const float* apply(const float* logits, int64_t ld, cudaStream_t stream);

private:
    template <typename T>
    struct Pinned {
        T* ptr = nullptr;
        size_t capacity = 0;
        void reserve(size_t n);
        ~Pinned();
    };
    template <typename T, typename Fill>
    static void upload(Pinned<T>& host, DeviceBuffer& dev, size_t n, const char* what, Fill fill,
                       cudaStream_t stream);
    int64_t rows_ = 0, vocab_ = 0;
    std::vector<DeviceLogitAdjust> adjust_;
    std::vector<DeviceLogitEdit> edits_;
    std::vector<const uint32_t*> masks_;
    Pinned<DeviceLogitAdjust> adjust_host_;
    Pinned<DeviceLogitEdit> edits_host_;
    Pinned<uint32_t> masks_host_;
    DeviceBuffer adjust_dev_, edits_dev_, masks_dev_, out_dev_;
};

}  // namespace flashseek::cuda
