// The device's kernel timeline through CUPTI's activity API (BackendDiagnostics' kernel trace, summarized by
// backend/kernel_timeline.h): every kernel's start and end on the GPU clock, the kernels of replayed CUDA graphs and
// of the side streams included (concurrent-kernel records, which do not serialize kernels), plus the memset and
// memcpy nodes of graphs (not the step's own host copies: its metadata upload and its result's copy stay outside the
// kernels' span). CUPTI is loaded at run time (cuda/common/runtime_library.h: FLASHSEEK_CUPTI_LIBRARY, else
// libcupti.so.<CUDA major> beside the executable — a device bundle carries it —, in
// /usr/local/cuda/extras/CUPTI/lib64, the loader's search, the toolkit and the nvidia-cuda-cupti wheel), so flashseek
// builds and runs without it. CUPTI's activity buffers are per process: one tracer per process.
#pragma once
#include <mutex>
#include <string>

#include "backend/kernel_timeline.h"

namespace flashseek::cuda {

class KernelTracer {
public:
    // Never destroyed: CUPTI may deliver a buffer from its own thread while the process exits.
    static KernelTracer& instance();
    // Loads CUPTI and starts recording; "" on success (also when already recording), else why not. Enable it before
    // the graphs to be traced are captured: with some CUDA versions, graphs captured earlier report no kernels.
    std::string enable();
    bool enabled() const;
    // A host mark on the records' clock: before each traced step and once after the last (the step must have
    // finished on the device). The first mark of a trace drops what was recorded before it.
    void mark();
    // The records that started between the first and the last mark since the previous take, with the marks.
    KernelTrace take();

private:
    friend struct KernelTracerCallbacks;  // CUPTI's buffer callbacks (kernel_trace.cpp)
    KernelTracer() = default;
    struct Api;
    void record_buffer(unsigned char* buffer, size_t valid_bytes);  // CUPTI's thread or the flushing one
    void flush();

    mutable std::mutex mu_;
    const Api* api_ = nullptr;
    KernelTrace trace_;
};

}  // namespace flashseek::cuda
