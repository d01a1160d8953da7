// Per-op GPU timing for `flashseek bench`: when enabled, every op of a step is bracketed by a pair of CUDA events
// on the step's stream, and the elapsed times are summed per op name after the step, with the kernel variants
// that ran each op (KernelPolicy names) and the weight bytes it read (weight_bytes.h). Disabled (the default, and
// always inside graph capture) it records nothing and costs one branch per op.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <string_view>
#include <vector>

#include "backend/diagnostics.h"

namespace flashseek::cuda {

class OpProfiler {
public:
    ~OpProfiler();
    void enable(cudaStream_t s);
    void disable() { on_ = false; }
    bool enabled() const { return on_; }
    void begin(const char* op);
    // Names the kernel variant that ran (part of) the open op: the per-op table lists them.
    void variant(std::string_view name);
    // Adds weight bytes the open op reads: the per-op table's bandwidth columns.
    void bytes(double n);
    void end();
    // Waits for the stream and returns the table (sorted by time, largest first); clears the records.
    std::vector<OpTime> collect(double* total_us);

    class Scope {
    public:
        Scope(OpProfiler& p, const char* op) : p_(p) { p_.begin(op); }
        ~Scope() { p_.end(); }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

    private:
        OpProfiler& p_;
    };

private:
    struct Record {
        std::string op, variants;
        double bytes;
        cudaEvent_t start, stop;
    };
    cudaEvent_t take_event();
    bool on_ = false;
    cudaStream_t stream_ = nullptr;
    std::vector<Record> records_;
    std::vector<cudaEvent_t> pool_;
    size_t used_ = 0;
    const char* open_ = nullptr;
    std::string open_variants_;  // "a+b" when one op ran linears of two variants
    double open_bytes_ = 0;
    cudaEvent_t open_start_ = nullptr;
};

}  // namespace flashseek::cuda
