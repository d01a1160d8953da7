// The expert op family (moe_expert_up / moe_expert_down of cuda/moe/moe.cuh, catalogue moe/moe_catalogue.h) for the
// op harness: one case type (a MoE layer: routed FP4 experts plus the shared FP8 expert), the case list of each
// harness mode and the per-variant thresholds. test_moe.cpp runs each case's layer through every variant of the
// expert catalogue against the CPU ops and compares the variants stage by stage; perf_moe.cpp times the V4-Flash
// layer. A new expert variant is picked up by iterating expert_variants(); a new shape class is one more
// case.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/common/kernel_policy.h"
#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {
struct ExpertCall;  // moe/moe_catalogue.h
}

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
    // The routing gives expert 0 exactly one token (token 0) and expert 1 none: a one-token and an empty group.
    bool pinned_groups = false;
};

// The cases of the current harness mode (test, its quick subset, or the V4-Flash perf shapes).
std::vector<ExpertCase> expert_cases();
std::string describe(const ExpertCase& c);

// ||gpu - cpu|| / ||cpu|| of a whole layer (route, group, up, down, combine) whose projections ran `variant`.
double expert_layer_threshold(std::string_view variant);
// Stage by stage against a base variant on the same inputs (gemv_experts at 1-16 tokens, else tile_experts): the
// up-projection's h (dequantized, whatever its format), and the down-projection from the same h values.
double expert_h_threshold(std::string_view variant);
double expert_y_threshold(std::string_view variant);

// The variant the policy chooses for the call (cuda::choose_experts), or "" where no variant is enabled, supports it
// and is preferred (e.g. a raw input above the GEMVs' 16 tokens and below grouped_experts' floor: callers prepare).
std::string chosen_expert_variant(const cuda::ExpertCall& call, const cuda::KernelPolicy& policy);

// Perf cases of at least this many tokens are prefill passes: perf_moe.cpp's "experts prefill" table (routed experts
// only, with cuBLASLt on the equivalent dense products); fewer go to the "experts" table.
inline constexpr int kPerfPrefillTokens = 1024;

}  // namespace flashseek::test
