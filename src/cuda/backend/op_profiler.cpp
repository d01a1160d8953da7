// OpProfiler (see op_profiler.h). Events are pooled and reused between profiled steps.
#include "cuda/backend/op_profiler.h"

#include <algorithm>
#include <map>

#include "cuda/backend/cuda_util.h"

namespace flashseek::cuda {

OpProfiler::~OpProfiler() {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

void OpProfiler::enable(cudaStream_t s) {
    on_ = true;
    stream_ = s;
    records_.clear();
    used_ = 0;
}

cudaEvent_t OpProfiler::take_event() {
    if (used_ == pool_.size()) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        pool_.push_back(e);
    }
    return pool_[used_++];
}

void OpProfiler::begin(const char* op) {
    if (!on_) return;
    open_ = op;
    open_variants_.clear();
    open_bytes_ = 0;
    open_start_ = take_event();
    CUDA_CHECK(cudaEventRecord(open_start_, stream_));
}

void OpProfiler::variant(std::string_view name) {
    if (!on_ || !open_ || name.empty()) return;
    for (size_t at = 0; at <= open_variants_.size();) {  // already listed?
        const size_t plus = std::min(open_variants_.find('+', at), open_variants_.size());
        if (std::string_view(open_variants_).substr(at, plus - at) == name) return;
        at = plus + 1;
    }
    if (!open_variants_.empty()) open_variants_ += '+';
    open_variants_ += name;
}

void OpProfiler::bytes(double n) {
    if (on_ && open_) open_bytes_ += n;
}

void OpProfiler::end() {
    if (!on_ || !open_) return;
    cudaEvent_t stop = take_event();
    CUDA_CHECK(cudaEventRecord(stop, stream_));
    records_.push_back({open_, open_variants_, open_bytes_, open_start_, stop});
    open_ = nullptr;
    open_variants_.clear();
}

std::vector<OpTime> OpProfiler::collect(double* total_us) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::map<std::string, OpTime> by;
    double total = 0;
    for (const Record& r : records_) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
        OpTime& t = by[r.op];
        t.op = r.op;
        if (t.variant.empty()) t.variant = r.variants;
        t.calls += 1;
        t.total_us += ms * 1e3;
        t.bytes += r.bytes;
        total += ms * 1e3;
    }
    records_.clear();
    used_ = 0;
    std::vector<OpTime> out;
    for (auto& [k, v] : by) out.push_back(v);
    std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.total_us > b.total_us; });
    if (total_us) *total_us = total;
    return out;
}

}  // namespace flashseek::cuda
