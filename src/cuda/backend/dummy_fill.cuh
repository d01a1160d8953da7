// On-device random fill for dummy weights: one grid-stride pass per tensor, values from a counter-based hash
// (splitmix64 of a per-tensor seed and the element index), so generation runs at memory bandwidth and a seed
// always gives the same weights. The distribution per tensor is chosen by device_weights.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashseek::cuda {

enum class FillKind : int {
    Bf16Uniform,  // center + a*u, u in [-1,1)
    F32Uniform,
    E4m3Uniform,  // e4m3(a*u), saturating
    E8m0Jitter,   // byte = base - (hash & 1): scales of 2^(base-127) or half that
    Fp4Bytes,     // random packed e2m1 pairs
    I64Route,     // tid2eid rows: k distinct experts in [0, n_experts)
};

struct FillParams {
    FillKind kind = FillKind::F32Uniform;
    float center = 0.f, a = 1.f;
    int base = 127;
    int n_experts = 1, top_k = 1;
};

// Fills n elements of dst (element type implied by p.kind) on stream s.
void launch_dummy_fill(void* dst, int64_t n, const FillParams& p, uint64_t seed, cudaStream_t s);

}  // namespace flashseek::cuda
