// Shared pieces of the micro-benchmark mode (bench_linear.cpp, bench_moe.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flashseek::test {

struct BenchRow {
    std::string name;
    int64_t m = 0;
    double bytes = 0, us = 0, gbps = 0, fraction = 0;
    std::string note;
};

// Median microseconds per call of `calls` calls captured in one CUDA graph (call(stream, i)).
double time_graph_per_call(const std::function<void(cudaStream_t, int)>& call, int calls);
void print_row(const BenchRow& r);
void bench_moe(double copy_bw, std::vector<BenchRow>& rows);  // bench_moe.cpp
// Compute-bound GEMMs at prefill sizes against cuBLASLt (bench_gemm.cpp); rows carry TFLOP/s in `gbps` and the
// fraction of the FP8 ceiling in `fraction`.
void bench_prefill(std::vector<BenchRow>& rows);

}  // namespace flashseek::test
