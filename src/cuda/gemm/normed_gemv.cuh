// One token's RMSNorm applied inside the staging of the GEMV that reads it: y = W · prepare(rmsnorm(x)), with the
// bits of rmsnorm (with its prepared copy for W) followed by simt_gemv, in one launch (issue #19: a norm in the next
// GEMV's prologue). The query path's q_norm before wq_b is the user: at one sequence the norm was a launch of its own
// on the critical path between wq_a and wq_b (~8 us per layer on an H100, its few loads queued behind wq_b's early
// weight requests), for 2 KB of data.
// Every CTA of the GEMV loads the raw row, computes 1 / rms in rmsnorm's per-lane order (norm/rms_row.cuh: every
// warp the same bits), normalizes, rounds to bf16, quantizes each 128-block as prepare_activation does and stages
// the values as simt_gemv stages a prepared activation: the products and sums are simt_gemv's, so y is bit for bit
// that of the two launches. The CTAs of the first row block also write the normed row and its prepared copy (the
// indexer's query path reads them after the GEMV).
// Implemented in gemv_simt.cu (the simt_gemv kernel with a normed staging).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {

struct NormedInput {
    const __nv_bfloat16* x = nullptr;       // the raw row [dim], dim = the weight's in; 16-byte aligned
    const __nv_bfloat16* weight = nullptr;  // the norm's weight [dim] (16-byte aligned) or nullptr (unweighted)
    float eps = 1e-6f;
    ActNumerics numerics = ActNumerics::EXACT;  // the preparation's numerics for the GEMV's weight layout
    // Optional outputs, neither may overlap x: the normed row (bf16 [dim], as rmsnorm writes it) and its prepared
    // copy (values and scales set by the caller, as for rmsnorm's `prepared`; the shape fields are filled in).
    __nv_bfloat16* normed_out = nullptr;
    PreparedActivation* prepared_out = nullptr;
};

// Whether normed_gemv serves this input and weight: one token, FP8 / FP4 weights, in % 128 == 0 and at most 2,048
// columns, aligned storage. The caller decides whether simt_gemv is the variant it wants (the fused launch computes
// what simt_gemv computes); the result names what is missing, empty where supported.
const char* normed_gemv_unsupported(const NormedInput& in, const DeviceLinear& w);

// y [1, w.out] (row stride ld_y) = w · prepare(rmsnorm(in.x)). ws: the split-K workspace (as for linear()).
void normed_gemv(const NormedInput& in, const DeviceLinear& w, void* y, OutKind y_kind, int64_t ld_y,
                 const GemmWorkspace* ws, cudaStream_t stream);

}  // namespace flashseek::cuda
