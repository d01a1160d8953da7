// The expert op family (moe_expert_up / moe_expert_down of cuda/moe/moe.cuh, catalogue moe/moe_catalogue.h) for the
// op harness: one case type (a MoE layer: routed FP4 experts plus the shared FP8 expert), the case list of each
// harness mode and the per-variant thresholds. test_moe.cpp runs each case's layer through every variant of the
// expert catalogue against the CPU ops and compares the decode variants stage by stage; perf_moe.cpp times the
// V4-Flash layer. A new expert variant is picked up by iterating expert_variants(); a new shape class is one more
// case.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/gemm/linear.cuh"

namespace flashseek::test {

struct ExpertCase {
    std::string what;
    int M = 0;          // tokens
    int E = 0;          // routed experts
    int top_k = 0;      // experts per token
    int64_t D = 0;      // hidden
    int64_t I = 0;      // expert intermediate size
    cuda::ActNumerics numerics = cuda::ActNumerics::FP8_BLOCK128;
    bool quick = false;  // also in the --quick list
};

// The cases of the current harness mode (test, its quick subset, or the V4-Flash perf shapes).
std::vector<ExpertCase> expert_cases();
std::string describe(const ExpertCase& c);

// ||gpu - cpu|| / ||cpu|| of a whole layer (route, group, up, down, combine), any variant.
double expert_layer_threshold();
// Stage by stage against the GEMV variant (gemv_experts) on the same inputs: the up-projection's prepared h, and the
// down-projection from the same h.
double expert_h_threshold(std::string_view variant);
double expert_y_threshold(std::string_view variant);

}  // namespace flashseek::test
