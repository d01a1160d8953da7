// KernelTracer (kernel_trace.h): CUPTI's entry points resolved from the library found at run time, its activity
// buffers turned into KernelSpans.
#include "cuda/backend/kernel_trace.h"

#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "cuda/common/runtime_library.h"

namespace flashseek::cuda {

struct KernelTracer::Api {
    std::string path;
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
    CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
    CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
    CUptiResult (*flush_all)(uint32_t) = nullptr;
    CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
    CUptiResult (*timestamp)(uint64_t*) = nullptr;
    CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
};

namespace {

// Activity buffers: large enough that a decode step's records (a few thousand) rarely need a second one.
constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI's requirement for activity buffers

using ResultString = CUptiResult (*)(CUptiResult, const char**);
std::string cupti_error(ResultString result_string, CUptiResult r) {
    const char* s = nullptr;
    if (result_string && result_string(r, &s) == CUPTI_SUCCESS && s) return s;
    return fmt::format("CUPTI error {}", int(r));
}

}  // namespace

struct KernelTracerCallbacks {
    static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
        *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
        *size = *buffer ? kBufferBytes : 0;
        *max_records = 0;
    }
    static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
        KernelTracer::instance().record_buffer(buffer, valid_bytes);
        std::free(buffer);
    }
};

KernelTracer& KernelTracer::instance() {
    static KernelTracer* const tracer = new KernelTracer;  // leaked on purpose (kernel_trace.h)
    return *tracer;
}

std::string KernelTracer::enable() {
    std::lock_guard lock(mu_);
    if (api_) return "";
    RuntimeLibrarySpec spec;
    // The record layouts compiled in here are this CUDA major's.
    spec.file = fmt::format("libcupti.so.{}", CUDART_VERSION / 1000);
    spec.override_variable = "FLASHSEEK_CUPTI_LIBRARY";
    // The nvidia-cuda-cupti wheel: CUDA 13's puts it in nvidia/cu13/lib, earlier ones in nvidia/cuda_cupti/lib.
    spec.wheel_folder = CUDART_VERSION >= 13000 ? "nvidia/cu13/lib" : "nvidia/cuda_cupti/lib";
    const std::string here = executable_folder();
    if (!here.empty()) spec.first_folders.push_back(here);  // a device bundle carries it beside the binaries
    spec.first_folders.push_back("/usr/local/cuda/extras/CUPTI/lib64");
    const RuntimeLibrary lib = load_runtime_library(spec);
    if (!lib.handle) return fmt::format("CUPTI ({}) was not found; looked at:{}", spec.file, looked_lines(lib));
    auto api = std::make_unique<Api>();
    api->path = lib.path;
    auto resolve = [&](const char* symbol, auto& fn) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib.handle, symbol));
        return fn != nullptr;
    };
    if (!resolve("cuptiActivityRegisterCallbacks", api->register_callbacks) ||
        !resolve("cuptiActivityEnable", api->enable) || !resolve("cuptiActivityDisable", api->disable) ||
        !resolve("cuptiActivityFlushAll", api->flush_all) ||
        !resolve("cuptiActivityGetNextRecord", api->next_record) || !resolve("cuptiGetTimestamp", api->timestamp) ||
        !resolve("cuptiGetResultString", api->result_string))
        return fmt::format("CUPTI: {} lacks an activity API entry point", lib.path);
    CUptiResult r = api->register_callbacks(KernelTracerCallbacks::requested, KernelTracerCallbacks::completed);
    if (r != CUPTI_SUCCESS) return fmt::format("CUPTI: registering the buffer callbacks: {}", cupti_error(api->result_string, r));
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                        CUPTI_ACTIVITY_KIND_MEMCPY};
    for (size_t i = 0; i < std::size(kinds); ++i) {
        r = api->enable(kinds[i]);
        if (r != CUPTI_SUCCESS) {
            // Nothing would collect what the kinds already enabled record: stop them.
            for (size_t j = 0; j < i; ++j) api->disable(kinds[j]);
            return fmt::format("CUPTI: enabling activity kind {}: {}", int(kinds[i]),
                               cupti_error(api->result_string, r));
        }
    }
    api_ = api.release();  // CUPTI keeps calling back for the life of the process
    return "";
}

bool KernelTracer::enabled() const {
    std::lock_guard lock(mu_);
    return api_ != nullptr;
}

void KernelTracer::record_buffer(unsigned char* buffer, size_t valid_bytes) {
    const Api* api = nullptr;
    {
        std::lock_guard lock(mu_);
        // No trace open: what ran meanwhile started before any later mark, so no trace will want it.
        if (!api_ || !buffer || trace_.marks.empty()) return;
        api = api_;  // set once, never changed
    }
    std::vector<KernelSpan> spans;
    CUpti_Activity* rec = nullptr;
    while (api->next_record(buffer, valid_bytes, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
            spans.push_back({k->name ? k->name : "(unnamed kernel)", k->streamId, k->start, k->end, k->graphId});
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
            if (m->graphId != 0) spans.push_back({"memset", m->streamId, m->start, m->end, m->graphId});
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
            if (m->graphId != 0) spans.push_back({"memcpy", m->streamId, m->start, m->end, m->graphId});
        }
    }
    std::lock_guard lock(mu_);
    trace_.spans.insert(trace_.spans.end(), std::make_move_iterator(spans.begin()),
                        std::make_move_iterator(spans.end()));
}

void KernelTracer::flush() {
    const Api* api = nullptr;
    {
        std::lock_guard lock(mu_);
        api = api_;
    }
    // The completion callback takes the lock: flush without holding it.
    if (api) api->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void KernelTracer::mark() {
    const Api* api = nullptr;
    bool first = false;
    {
        std::lock_guard lock(mu_);
        if (!api_) return;
        api = api_;
        first = trace_.marks.empty();
    }
    if (first) flush();  // what ran before the trace (dropped: no trace is open yet)
    uint64_t t = 0;
    if (api->timestamp(&t) != CUPTI_SUCCESS) return;
    std::lock_guard lock(mu_);
    if (first) trace_.spans.clear();
    trace_.marks.push_back(t);
}

KernelTrace KernelTracer::take() {
    flush();
    std::lock_guard lock(mu_);
    KernelTrace out;
    out.marks = std::move(trace_.marks);
    if (out.marks.size() >= 2)
        for (KernelSpan& k : trace_.spans)
            if (k.start_ns >= out.marks.front() && k.start_ns < out.marks.back()) out.spans.push_back(std::move(k));
    trace_ = KernelTrace{};
    return out;
}

}  // namespace flashseek::cuda
