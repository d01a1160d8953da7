// The linear op family (cuda/gemm/linear.cuh, catalogue gemm/linear_catalogue.h) for the op harness: one case type,
// the case list of each harness mode (test, --quick, --perf) and the per-variant error thresholds. test_linear.cpp
// runs the test / quick lists through every catalogue variant that supports each case (each variant from the
// activation format it takes: ActFormat) against the CPU op; perf_linear.cpp times the perf list. A new linear
// variant needs no change here to be exercised (the runners iterate linear_variants()); a new shape class is one
// more case.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/gemm/linear.cuh"

namespace flashseek::test {

struct LinearCase {
    std::string what;                  // why the case exists (a model shape, a kernel edge)
    cuda::WeightKind kind;
    cuda::ScaleKind scale;
    cuda::ActNumerics numerics;
    int64_t M = 0;                     // tokens
    int64_t N = 0;                     // weight rows, all groups together (groups x R)
    int64_t K = 0;                     // weight columns (per group); the activation has K x groups columns
    int groups = 1;                    // > 1: grouped_linear (attention wo_a)
    cuda::OutKind out = cuda::OutKind::F32;
    bool f32_input = false;            // fp32 activation (rounded when prepared) instead of bf16
    bool quick = false;                // also in the --quick list
    int layer_count = 0;               // perf: times one V4-Flash layer runs this linear (the prefill table's sum)
    int64_t x_width() const { return K * groups; }
};

// Perf cases of at least this many rows are prefill passes: perf_linear.cpp's "linear prefill" table (with
// cuBLASLt on the same shapes); fewer rows go to the "linear" table.
inline constexpr int64_t kPerfPrefillRows = 512;

// The cases of the current harness mode: the full test list, or (--quick) its quick subset, or (--perf) the
// V4-Flash shapes at decode and prefill token counts.
std::vector<LinearCase> linear_cases();
std::string describe(const LinearCase& c);

// Largest ||gpu - cpu|| / ||cpu|| accepted for the case through `variant` (reasons at the definition).
double linear_threshold(const LinearCase& c, std::string_view variant);

}  // namespace flashseek::test
