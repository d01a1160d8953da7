// grouped_experts, the expert catalogue's variant (moe_catalogue.h) for prefill and large batches: the grouped FP4
// expert GEMMs of moe_gemm.cuh (wgmma on sm_90a, mma.sync elsewhere) over the grouping's per-expert slot groups.
//   up:   input = raw bf16 rows (PreparedActivation::raw, row stride raw_ld): the GEMM gathers and quantizes them
//         itself (act_quant per slot into the grouping's workspace), so the caller skips the preparation launch;
//         output h = an FP8_ROWS activation over the workspace's h_q (the up epilogue writes h's act_quant);
//   down: input = that h (the same workspace, checked), y fp32 per slot as every down variant, or rounded to bf16
//         (down_bf16: the staged epilogue's coalesced stores, half the bytes).
// Needs the grouping's GEMM workspace (moe_attach_gemm_workspace), routed FP4 experts with E8M0 scales, hidden and
// inter multiples of 128, release numerics for input and h. Forced in prefill passes; in decode passes preferred
// from KernelPolicy::grouped_experts_min_tokens tokens (default 32), which matters only past gemv_experts' routed
// range (routed_gemv_max_tokens, 128), as gemv_experts comes first in the catalogue. The sm_90a kernel's slot rows
// per tile: KernelPolicy::grouped_slot_rows.
#include "cuda/common/check.cuh"
#include "cuda/moe/moe_catalogue.h"
#include "cuda/moe/moe_gemm.cuh"

namespace flashseek::cuda {
namespace grouped_experts {
namespace {

// The parts both projections need: a grouping with its workspace made for these experts and slots.
bool grouping_fits(const ExpertCall& c) {
    if (c.grouping == nullptr) return false;  // dense mode (the shared expert) runs as linears at these sizes
    const MoeGrouping& g = *c.grouping;
    const int64_t slots = c.M * c.top_k;
    if (g.gemm_x.codes == nullptr || g.gemm_h.codes == nullptr) return false;
    if (g.gemm_x.k != c.t.hidden || g.gemm_h.k != c.t.inter || g.gemm_x.m < slots || g.gemm_h.m < slots) return false;
    return moe_gemm_eligible(c.t, g, c.M, c.top_k, GemmPath::AUTO);
}

}  // namespace

bool supports(const ExpertCall& c) {
    if (!grouping_fits(c) || c.x.numerics != ActNumerics::FP8_BLOCK128) return false;
    if (c.up)
        return c.x.raw && c.x.values != nullptr && c.x.k == c.t.hidden && c.x.m >= c.M && c.x.raw_ld >= c.t.hidden &&
               c.h_numerics == ActNumerics::FP8_BLOCK128;
    const Fp8Activation& h = c.x.fp8;
    return c.x.format == ActFormat::FP8_ROWS && h.codes == c.grouping->gemm_h.codes &&
           h.scales == c.grouping->gemm_h.scales && h.k == c.t.inter && h.m >= c.M * c.top_k &&
           h.order == moe_gemm_code_order();
}

bool preferred(const ExpertCall& c, const KernelPolicy& policy) { return c.M >= policy.grouped_experts_min_tokens; }

void up(const ExpertCall& c, const KernelPolicy& policy, float swiglu_limit, PreparedActivation& h,
        cudaStream_t stream) {
    const MoeGemmWorkspace ws = moe_gemm_workspace_of(*c.grouping);
    moe_gemm_up(c.x.values, c.x.raw_ld, c.M, c.top_k, c.t, *c.grouping, swiglu_limit, ws, stream, GemmPath::AUTO,
                policy.grouped_slot_rows);
    const int64_t slots = c.M * c.top_k;
    describe_prepared(h, c.t.kind, ActNumerics::FP8_BLOCK128, slots, c.t.inter);
    h.format = ActFormat::FP8_ROWS;
    h.fp8 = ws.h_q;
    h.fp8.m = slots;
    h.fp8.order = moe_gemm_code_order();
    h.values = reinterpret_cast<uint16_t*>(ws.h_q.codes);  // the storage h describes (not the caller's)
    h.scales = ws.h_q.scales;
}

void down(const ExpertCall& c, const KernelPolicy& policy, float* y, cudaStream_t stream) {
    moe_gemm_down(c.M, c.top_k, c.t, *c.grouping, moe_gemm_workspace_of(*c.grouping), y, stream, GemmPath::AUTO,
                  policy.grouped_slot_rows);
}

void down_bf16(const ExpertCall& c, const KernelPolicy& policy, uint16_t* y, cudaStream_t stream) {
    moe_gemm_down_bf16(c.M, c.top_k, c.t, *c.grouping, moe_gemm_workspace_of(*c.grouping), y, stream,
                       GemmPath::AUTO, policy.grouped_slot_rows);
}

}  // namespace grouped_experts
}  // namespace flashseek::cuda
