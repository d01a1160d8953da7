// Two dependent one-token FP8 GEMVs in one persistent kernel (sm_90+): y = B · prepare(bf16(A · x)), where A may be
// grouped (attention wo_a: G groups of rows, group g reading columns g·Kg .. of x) and B reads A's whole output; or,
// with a norm weight, y = B · prepare(rmsnorm(bf16(A · x))) (the query path: wq_a, q_norm, wq_b).
// Stage 1 of the persistent decode step (docs/decode-step-design.md): today's one-token path runs A and B as two
// simt_gemv launches with an activation preparation between them, and the weight stream stops at each boundary;
// here one loader warp per SM streams A's and then B's weight tiles through a ring of shared-memory stages without
// waiting for A to finish, and B's compute begins as soon as every 128-block of A's output is prepared.
//
// Numerics: bit for bit those of simt_gemv for A (bf16 output), rmsnorm of that output where a norm is given (its
// vector path's per-lane order, norm/rms_row.cuh), prepare_activation of the result for B's weight layout and
// numerics, and simt_gemv for B, given the same K splits (the caller passes the k_splits that plan_linear chose for
// simt_gemv on each op). Which warp or CTA computes a row does not enter a simt_gemv result;
// the lane's column order, the warp reduction and the split order do, and the kernel keeps all three.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {

struct GemvChain {
    const PreparedActivation* x = nullptr;  // A's input: MMA_F16, FP8 layout, one row
    DeviceLinear a;                         // FP8_BLOCK128 [G * R, Kg]
    int groups = 1;
    int splits_a = 1;                       // simt_gemv's K splits of A (plan_linear)
    DeviceLinear b;                         // FP8_BLOCK128 [N, G * R]
    int splits_b = 1;
    ActNumerics numerics_b = ActNumerics::EXACT;  // B's input preparation
    uint16_t* mid = nullptr;         // A's output as bf16 [G * R] (written, as simt_gemv writes it)
    uint16_t* mid_values = nullptr;  // and (normed where norm_weight is given) prepared for B: prepare_activation's
    float* mid_scales = nullptr;     // row 0 (values [G * R] and one scale per 128 columns)
    // Optional RMSNorm of A's output before its preparation (groups 1, at most 2,048 rows): bf16 weight [R], eps;
    // the normed row is written as bf16 to mid_normed (rmsnorm's output; not the same storage as mid).
    const uint16_t* norm_weight = nullptr;
    float norm_eps = 1e-6f;
    uint16_t* mid_normed = nullptr;
    void* y = nullptr;               // B's output [N], bf16 or fp32
    OutKind y_kind = OutKind::BF16;
    uint32_t* counters = nullptr;    // >= gemv_chain_counters() zeroed words; left zeroed
    int n_counters = 0;
    // SMs the grid leaves to other grids (the step's side branches run beside the query path); the same bits at any
    // grid (the rows' arithmetic does not depend on which CTA computes them).
    int free_sms = 0;
    // Diagnostics (perf mode): null, or kGemvChainTracePoints %globaltimer stamps (ns) per CTA of the grid
    // (gemv_chain_grid()): 0 start (after the dependency wait), 1 A's input staged, 2 A's tiles done, 3 handover
    // passed, 4 B's input prepared and staged, 5 B's tiles done, 6 the loader's last copy issued; warp 0's first A
    // tile 7 landed, 8 computed; its first B tile 9 landed, 10 computed.
    int64_t* trace = nullptr;
};

inline constexpr int kGemvChainTracePoints = 11;

// Counter words the chain needs (the grid-wide handover between A and B).
inline int gemv_chain_counters(const GemvChain&) { return 2; }
// CTAs of the chain's grid on the current device.
int gemv_chain_grid(const GemvChain& c);

// Empty when the chain runs this problem on the current device, else why not (the field named).
std::string gemv_chain_refusal(const GemvChain& c);
inline bool gemv_chain_supports(const GemvChain& c) { return gemv_chain_refusal(c).empty(); }

// Runs the chain; throws Error naming the reason when gemv_chain_supports() is false. Allocates nothing; safe to
// capture in a CUDA graph (launched with programmatic dependent launch where enabled: common/pdl.cuh).
void gemv_chain(const GemvChain& c, cudaStream_t stream);

}  // namespace flashseek::cuda
