// Perf mode's measurements and table. Every row is one op at one shape and token count M through one kernel variant,
// timed as the median of replays of a CUDA graph of many calls (so launch overhead is excluded, as under the
// backend's decode graphs); weight-streaming ops rotate over weight copies larger than the L2 cache so that every
// call reads DRAM. A row carries the bytes it must move and the FLOPs it must compute; its fraction is its roofline
// time (the larger of bytes / copy bandwidth and FLOPs / tensor-core GEMM rate, both measured by this binary:
// perf_ceilings.h) over its measured time, and the table names the bound that applies.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flashseek::test {

// The tensor-core rate a row's FLOPs are held against: FP8 (release numerics on FP8 / FP4 weights) or BF16 (the
// f16 / bf16 paths: exact numerics, BF16 weights, attention).
enum class FlopCeiling { FP8, BF16 };

struct PerfRow {
    std::string family;       // set by the report (the suite's family)
    std::string op;           // e.g. "wq_b", "routed experts up+down", "sparse attn CSA"
    std::string shape;        // e.g. "1024->32768 FP8", "C=16 ctx=8192"
    int64_t m = 0;            // tokens (rows) of the pass
    std::string variant;      // the catalogue name that ran (linear(), moe_expert_*(), sparse_attention() return it)
    bool is_default = false;  // the variant the default KernelPolicy picks for this problem
    double us = 0;            // median microseconds per call
    double bytes = 0;         // bytes the op must move (weights + scales + activations + outputs)
    double flops = 0;         // FLOPs it must compute (2 per multiply-add)
    FlopCeiling flop_ceiling = FlopCeiling::BF16;
    std::string note;         // plan details (k_splits, tokens per pass, ...)
};

// The roofline verdict of a row against the measured ceilings: fraction of the ceiling and which ceiling bounds it
// ("copy", "fp8", "bf16"); "copy?" when the row has FLOPs but no GEMM rate was measured (its copy fraction only).
struct Roofline {
    double fraction = 0;
    const char* bound = "none";
};
Roofline roofline(const PerfRow& row);

class PerfReport {
public:
    // The family of the rows added until the next call (the runner sets it per suite).
    void begin_family(const std::string& family) { family_ = family; }
    void add(PerfRow row);
    // One table per family: op, shape, M, variant (* = the default choice), us, GB/s, TFLOP/s, bound, fraction.
    void print_table(const std::string& family) const;
    // Every row with its verdict and the ceilings, as JSON.
    void write_json(const std::string& path) const;
    const std::vector<PerfRow>& rows() const { return rows_; }

private:
    std::string family_;
    std::vector<PerfRow> rows_;
};

// Median milliseconds of `reps` calls of op(stream), each between two events, after `warmups` untimed calls.
double median_call_ms(const std::function<void(cudaStream_t)>& op, int warmups, int reps, cudaStream_t stream);

// Median microseconds per call of `calls` calls call(stream, i) captured in one CUDA graph: warm-up outside the
// graph, then `replays` timed replays (median).
double time_graph_per_call(const std::function<void(cudaStream_t, int)>& call, int calls, int replays = 7);

// Bytes a rotation of weight copies must span so that no call finds its weights in L2: 4x the device's L2 and at
// least 400 MB (the H200's L2 is 60 MB).
size_t rotation_bytes();
// Copies of `bytes_per_copy` that span rotation_bytes() (at least 1).
int rotation_copies(size_t bytes_per_copy);

}  // namespace flashseek::test
