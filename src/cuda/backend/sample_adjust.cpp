// SampleAdjustStaging (see sample_adjust.h). One edit per distinct token a row touches: the union of its banned
// ids, logit_bias tokens and (with penalties on) its prompt and output tokens, so the device applies each token's
// whole adjustment in one place, in the host sampler's order.
#include "cuda/backend/sample_adjust.h"

#include <algorithm>
#include <unordered_map>

#include "cuda/common/check.cuh"
#include "util/error.h"

namespace flashseek::cuda {

namespace {
// Device or pinned staging buffer: reallocated only when it is too small for this step.
template <typename Buffer>
void grow(Buffer& b, size_t bytes, const char* what) {
    if (b.bytes() < bytes) b.allocate(bytes, what);
}
}  // namespace

bool SampleAdjustStaging::prepare(std::span<const SampleParams* const> rows, int64_t vocab) {
    rows_ = int64_t(rows.size());
    vocab_ = vocab;
    adjust_.assign(rows.size(), DeviceLogitAdjust{});
    edits_.clear();
    masks_.clear();
    bool any = false;
    for (size_t h = 0; h < rows.size(); ++h) {
        const SampleParams* p = rows[h];
        if (!p || !p->adjusts_logits()) continue;
        any = true;
        if (p->allowed_tokens_ready.valid()) p->allowed_tokens_ready.wait();
        DeviceLogitAdjust& a = adjust_[h];
        a.repetition_penalty = p->repetition_penalty;
        a.frequency_penalty = p->frequency_penalty;
        a.presence_penalty = p->presence_penalty;
        if (p->allowed_tokens) {
            a.mask_index = int32_t(masks_.size());
            masks_.push_back(p->allowed_tokens);
        }
        std::unordered_map<int32_t, size_t> index;  // token -> its edit
        auto edit = [&](int32_t token) -> DeviceLogitEdit& {
            FS_CHECK(token >= 0 && token < vocab, "CUDA sampler: adjusted token {} is outside the vocabulary", token);
            auto [it, fresh] = index.emplace(token, edits_.size());
            if (fresh) edits_.push_back(DeviceLogitEdit{token, 0.f, 0, 0});
            return edits_[it->second];
        };
        a.edit_begin = int32_t(edits_.size());
        for (int32_t t : p->banned_tokens) edit(t).flags |= kEditBanned;
        for (const LogitBias& b : p->logit_bias) edit(b.token).bias += b.bias;
        if (p->repetition_penalty != 1.f)
            for (int32_t t : p->prompt_tokens) edit(t).flags |= kEditSeen;
        if (p->repetition_penalty != 1.f || p->frequency_penalty != 0.f || p->presence_penalty != 0.f)
            for (int32_t t : p->output_tokens) {
                DeviceLogitEdit& e = edit(t);
                e.flags |= kEditSeen;
                ++e.output_count;
            }
        a.edit_end = int32_t(edits_.size());
    }
    return any;
}

// Copies n elements (gathered by fill into the pinned staging) to the device buffer, both grown as needed.
template <typename T, typename Fill>
void SampleAdjustStaging::upload(PinnedBuffer& host, DeviceBuffer& dev, size_t n, const char* what, Fill fill,
                                 cudaStream_t stream) {
    if (n == 0) return;
    grow(host, n * sizeof(T), what);
    fill(host.as<T>());
    grow(dev, n * sizeof(T), what);
    CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.as<void>(), n * sizeof(T), cudaMemcpyHostToDevice, stream));
}

const float* SampleAdjustStaging::apply(const float* logits, int64_t ld, cudaStream_t stream) {
    FS_CHECK(rows_ > 0, "SampleAdjustStaging::apply without prepared rows");
    const size_t words = size_t(token_mask_words(vocab_));
    upload<DeviceLogitAdjust>(adjust_host_, adjust_dev_, adjust_.size(), "sampler adjustment headers",
                              [&](DeviceLogitAdjust* dst) { std::copy(adjust_.begin(), adjust_.end(), dst); }, stream);
    upload<DeviceLogitEdit>(edits_host_, edits_dev_, edits_.size(), "sampler logit edits",
                            [&](DeviceLogitEdit* dst) { std::copy(edits_.begin(), edits_.end(), dst); }, stream);
    upload<uint32_t>(masks_host_, masks_dev_, masks_.size() * words, "sampler token masks", [&](uint32_t* dst) {
        for (size_t m = 0; m < masks_.size(); ++m) std::copy(masks_[m], masks_[m] + words, dst + m * words);
    }, stream);
    grow(out_dev_, size_t(rows_) * size_t(vocab_) * sizeof(float), "adjusted logits");
    adjust_logits_rows(logits, ld, out_dev_.as<float>(), rows_, vocab_, adjust_dev_.as<DeviceLogitAdjust>(),
                       edits_dev_.as<DeviceLogitEdit>(), masks_dev_.as<uint32_t>(), stream);
    return out_dev_.as<float>();
}

}  // namespace flashseek::cuda
