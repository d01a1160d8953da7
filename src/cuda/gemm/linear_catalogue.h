// The linear catalogue: every kernel variant of y = x W^T (linear.cuh), declared once with the architectures it
// exists on, what it supports (it computes this problem correctly on this device), where it is preferred (the
// shapes it was measured fastest on: docs/perf.md, kernel choice), its plan and its run. linear() and
// plan_linear() both go through choose_linear(), so what is planned is what runs. A new variant (the compute-bound
// GEMMs of prefill, a new architecture's kernel) is one more row in linear_variants(), at its priority.
// Internal to src/cuda/gemm and its tests.
// Activation formats (linear.cuh, ActFormat): a variant takes one format; its catalogue supports() refuses the
// other, and linear_input_format() tells a caller which format the chosen variant will want, from shapes alone
// (supports_shape: supports() on an activation of that shape whose storage is assumed well aligned).
// Batch invariance (issue 15 item 6): each variant computes a row's result in an order that does not depend on the
// other rows (no split-K across rows of different requests, K order fixed), so a token's result does not depend on
// which tokens share its pass *as long as the same variant runs*. The variant depends on the pass's row count (the
// GEMVs up to 16 rows, the compute-bound GEMMs from KernelPolicy::gemm_min_tokens, tile_gemm between), and the
// variants sum in different orders (tensor-core FP8 block sums, f16 products, split-K): a prompt prefilled in
// chunks whose sizes fall on different sides of those floors (a short last chunk) can differ in the last bits
// from the same prompt in one pass. What holds: a given (row count, weight, numerics, policy) always takes the same
// variant, so identical chunkings give identical bits, and a decode step's rows are independent of each other.
#pragma once
#include <span>
#include <string_view>

#include "cuda/common/kernel_policy.h"
#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {

// One linear problem: the prepared (or raw) activation, the weight, the group count and the split-K workspace.
struct LinearCall {
    const PreparedActivation& x;
    const DeviceLinear& w;
    int groups = 1;
    const GemmWorkspace* ws = nullptr;
};

// Where the result goes.
struct LinearOut {
    void* y = nullptr;
    OutKind kind = OutKind::BF16;
    int64_t ld = 0;
};

struct LinearVariant {
    std::string_view name;
    std::string_view archs;  // where it exists ("sm_80+", "sm_90+", "sm_90a"); supports() checks the device
    ActFormat format;        // the activation format it takes
    bool (*supports)(const LinearCall&);  // the variant's own checks and the format
    // The same question from shapes alone: M tokens of this weight, groups, numerics, raw or prepared (no pointer of
    // w is looked at).
    bool (*supports_shape)(int64_t M, const DeviceLinear& w, int groups, ActNumerics numerics, bool raw);
    bool (*preferred)(const LinearCall&, const KernelPolicy&);
    LinearPlan (*plan)(const LinearCall&, const KernelPolicy&);
    void (*run)(const LinearCall&, const LinearPlan&, const KernelPolicy&, const LinearOut&, cudaStream_t);
    // Optional (null: the variant writes only y): the act_quant rows of the bf16 output instead of the output
    // (grouped_linear_to_fp8_rows), where supports_fp8_rows_out says it can for this call and y.
    bool (*supports_fp8_rows_out)(const LinearCall&, const Fp8Activation& y);
    void (*run_fp8_rows_out)(const LinearCall&, const Fp8Activation& y, cudaStream_t);
};

// Each variant's implementation is a namespace with these four functions (its .cu file); the catalogue rows point at
// them.
#define FS_DECLARE_LINEAR_VARIANT(ns)                                                                            \
    namespace ns {                                                                                                \
    bool supports(const LinearCall& call);                                                                        \
    bool preferred(const LinearCall& call, const KernelPolicy& policy);                                           \
    LinearPlan plan(const LinearCall& call, const KernelPolicy& policy);                                          \
    void run(const LinearCall& call, const LinearPlan& plan, const KernelPolicy& policy, const LinearOut& out,     \
             cudaStream_t stream);                                                                                \
    }

FS_DECLARE_LINEAR_VARIANT(generic_linear)  // linear_generic.cu: element-wise, any shape (odd grouped shapes)
FS_DECLARE_LINEAR_VARIANT(wgmma_gemv)      // wgmma_gemv.cu: sm_90a, release numerics, 2-16 tokens
FS_DECLARE_LINEAR_VARIANT(wgmma_f16_gemv)  // wgmma_f16_gemv.cu: sm_90a, f16 (exact) activations, 2-256 tokens
FS_DECLARE_LINEAR_VARIANT(bulk_gemv)       // bulk_gemv.cu: sm_90+, release numerics, 2-16 tokens
FS_DECLARE_LINEAR_VARIANT(ring_gemv)       // ring_gemv.cu: sm_90+, 1-8 tokens
FS_DECLARE_LINEAR_VARIANT(simt_gemv)       // gemv_simt.cu: one token
FS_DECLARE_LINEAR_VARIANT(mma_gemv)        // gemv.cu: f16 mma.sync, 1-16 tokens, raw activations too
FS_DECLARE_LINEAR_VARIANT(bf16_gemv)       // bf16_gemv.cu: BF16 weights, bf16 mma.sync, 1-16 tokens
FS_DECLARE_LINEAR_VARIANT(fp8_gemm)        // linear_gemm.cu: sm_90a wgmma FP8 GEMM, FP8_ROWS, release numerics
FS_DECLARE_LINEAR_VARIANT(fp8_gemm_splitk) // linear_gemm.cu: the same with K split, 2-16 rows (decode)
FS_DECLARE_LINEAR_VARIANT(fp8_gemm_mma)    // linear_gemm.cu: the same GEMM on mma.sync (sm_80+: e4m3 on sm_89+)
FS_DECLARE_LINEAR_VARIANT(bf16_gemm)       // linear_gemm.cu: BF16 weights, wgmma (sm_90a) or mma.sync
namespace bf16_gemm {
// LinearVariant::supports_fp8_rows_out / run_fp8_rows_out: on the wgmma path.
bool supports_fp8_rows_out(const LinearCall& call, const Fp8Activation& y);
void run_fp8_rows_out(const LinearCall& call, const Fp8Activation& y, cudaStream_t stream);
}  // namespace bf16_gemm
FS_DECLARE_LINEAR_VARIANT(tile_gemm)       // linear.cu: f16 mma.sync tiles of 64 rows x 8-32 tokens, any M

// In priority order.
std::span<const LinearVariant> linear_variants();

// The variant linear() runs: the first forced variant that supports the call (format included), else the first
// that supports it, is preferred for it and is not disabled. Throws Error naming the problem when none does.
const LinearVariant& choose_linear(const LinearCall& call, const KernelPolicy& policy);

// The variant of that name (tests); throws Error for an unknown name.
const LinearVariant& linear_variant(std::string_view name);

}  // namespace flashseek::cuda
