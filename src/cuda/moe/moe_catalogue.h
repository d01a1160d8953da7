// The expert catalogue: every kernel variant of the expert projections (moe_expert_up / moe_expert_down of
// moe.cuh), declared once with the architectures it exists on, what it supports, where it is preferred (measured
// fastest: docs/perf.md, kernel choice) and its two runs. Up and down choose independently from the same table:
// the down-projection's input is what the chosen up-projection wrote (a prepared h, raw bf16 rows from
// gemv_experts, which only gemv_experts reads back, or grouped_experts' FP8_ROWS h in the grouping's GEMM
// workspace, which only grouped_experts reads back: a variant's `format` is the form of h it writes and reads).
// Internal to src/cuda/moe and its tests.
#pragma once
#include <span>
#include <string_view>

#include "cuda/common/kernel_policy.h"
#include "cuda/moe/moe.cuh"

namespace flashseek::cuda {

// One projection: x is the up-projection's input [M, hidden] or the down-projection's h [rows, inter].
struct ExpertCall {
    bool up = true;
    const PreparedActivation& x;
    const ExpertTable& t;
    const MoeGrouping* grouping = nullptr;  // null: dense mode (the shared expert)
    int64_t M = 0;
    int top_k = 1;
    ActNumerics h_numerics = ActNumerics::EXACT;  // up: the numerics h is written with
};

struct ExpertVariant {
    std::string_view name;
    std::string_view archs;
    ActFormat format;  // of h: what up writes and down takes (every up-projection input is MMA_F16, raw or not)
    bool (*supports)(const ExpertCall&);  // the variant's own checks and, for down, the format
    bool (*preferred)(const ExpertCall&, const KernelPolicy&);
    // h: storage with its fields already described (moe_expert_up); y: [rows, hidden] fp32.
    void (*up)(const ExpertCall&, const KernelPolicy&, float swiglu_limit, PreparedActivation& h, cudaStream_t);
    void (*down)(const ExpertCall&, const KernelPolicy&, float* y, cudaStream_t);
    // The same output rounded to bf16 (null: the variant writes fp32 only): moe_expert_down's y_bf16.
    void (*down_bf16)(const ExpertCall&, const KernelPolicy&, uint16_t* y, cudaStream_t);
};

#define FS_DECLARE_EXPERT_VARIANT(ns)                                                                             \
    namespace ns {                                                                                                \
    bool supports(const ExpertCall& call);                                                                        \
    bool preferred(const ExpertCall& call, const KernelPolicy& policy);                                           \
    void up(const ExpertCall& call, const KernelPolicy& policy, float swiglu_limit, PreparedActivation& h,         \
            cudaStream_t stream);                                                                                 \
    void down(const ExpertCall& call, const KernelPolicy& policy, float* y, cudaStream_t stream);                 \
    }

FS_DECLARE_EXPERT_VARIANT(generic_experts)  // moe.cu: element-wise, shapes off the 128 grid (tiny configs)
FS_DECLARE_EXPERT_VARIANT(wgmma_experts)    // moe_wgmma.cu: sm_90a, routed FP4, release numerics, 8-256 tokens
FS_DECLARE_EXPERT_VARIANT(bulk_experts)     // moe_bulk.cu: sm_90+, routed FP4, release numerics, 1-16 tokens
FS_DECLARE_EXPERT_VARIANT(simt_experts)     // moe_simt.cu: SIMT GEMV (gemm/gemv_core.cuh), one token
FS_DECLARE_EXPERT_VARIANT(gemv_experts)     // moe_gemv.cu: f16 mma.sync GEMV, 1-16 tokens (routed: any),
                                            // raw inputs too
FS_DECLARE_EXPERT_VARIANT(grouped_experts)  // moe_grouped_variant.cpp: grouped FP4 GEMMs (moe_gemm.cuh), raw input
namespace grouped_experts {
void down_bf16(const ExpertCall& call, const KernelPolicy& policy, uint16_t* y, cudaStream_t stream);
}
namespace wgmma_experts {
// One token's up-projection tile, packed before the routing (moe_expert_up_pack_ahead, which checks the call).
void pack_ahead(const ExpertCall& call, cudaStream_t stream);
}
FS_DECLARE_EXPERT_VARIANT(tile_experts)     // moe.cu: f16 mma.sync tiles, any M

// The weights and sizes of one projection in a variant's kernel arguments (any struct with these fields): up w1
// (w_a) and w3 (w_b), N = inter rows of length K = hidden; down w2 (w_a), N = hidden rows of length K = inter.
template <class Args>
void set_projection(Args& a, const ExpertTable& t, bool up) {
    a.w_a = up ? t.w1 : t.w2;
    a.s_a = up ? t.w1_scale : t.w2_scale;
    if (up) {
        a.w_b = t.w3;
        a.s_b = t.w3_scale;
    }
    a.N = decltype(a.N)(up ? t.inter : t.hidden);
    a.K = decltype(a.K)(up ? t.hidden : t.inter);
}

// The token -> expert grouping in a variant's kernel arguments (any struct with these fields); a null grouping leaves
// them null: dense mode, one expert for every token (the shared expert).
template <class Args>
void set_grouping(Args& a, const MoeGrouping* g) {
    if (g == nullptr) return;
    a.active = g->active;
    a.n_active = g->n_active;
    a.count = g->expert_count;
    a.offset = g->expert_offset;
    a.slot_token = g->slot_token;
    a.slot_weight = g->slot_weight;
}

// In priority order.
std::span<const ExpertVariant> expert_variants();
// The first forced variant that supports the call, else the first that supports it, is preferred and is not
// disabled; throws Error when none does.
const ExpertVariant& choose_experts(const ExpertCall& call, const KernelPolicy& policy);

}  // namespace flashseek::cuda
