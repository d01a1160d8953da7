// The linear catalogue: every kernel variant of y = x W^T (linear.cuh), declared once with the architectures it
// exists on, what it supports (it computes this problem correctly on this device), where it is preferred (the
// shapes it was measured fastest on: docs/perf.md, kernel choice), its plan and its run. linear() and
// plan_linear() both go through choose_linear(), so what is planned is what runs. A new variant (the compute-bound
// GEMMs of prefill, a new architecture's kernel) is one more row in linear_variants(), at its priority.
// Internal to src/cuda/gemm and its tests.
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
    bool (*supports)(const LinearCall&);
    bool (*preferred)(const LinearCall&, const KernelPolicy&);
    LinearPlan (*plan)(const LinearCall&, const KernelPolicy&);
    void (*run)(const LinearCall&, const LinearPlan&, const KernelPolicy&, const LinearOut&, cudaStream_t);
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
FS_DECLARE_LINEAR_VARIANT(bulk_gemv)       // bulk_gemv.cu: sm_90+, release numerics, 2-16 tokens
FS_DECLARE_LINEAR_VARIANT(simt_gemv)       // gemv_simt.cu: one token
FS_DECLARE_LINEAR_VARIANT(mma_gemv)        // gemv.cu: f16 mma.sync, 1-16 tokens, raw activations too
FS_DECLARE_LINEAR_VARIANT(tile_gemm)       // linear.cu: f16 mma.sync tiles of 64 rows x 8-32 tokens, any M

// In priority order.
std::span<const LinearVariant> linear_variants();

// The variant linear() runs: the first forced variant that supports the call, else the first that supports it, is
// preferred for it and is not disabled. Throws Error naming the problem when none does.
const LinearVariant& choose_linear(const LinearCall& call, const KernelPolicy& policy);

// The variant of that name (tests); throws Error for an unknown name.
const LinearVariant& linear_variant(std::string_view name);

}  // namespace flashseek::cuda
