// Fills device memory with random values of one number format, on the GPU (no host traffic): the CUDA backend's
// dummy weights (device_weights.cpp chooses a distribution per tensor) and the operands of the perf suites and the
// cuBLASLt ceiling. Every value is a function of (seed, element index) alone, through one counter-based hash
// (splitmix64(seed ^ splitmix64(index))), so a seed always gives the same bytes whatever the launch shape, and a
// fill runs at memory bandwidth. Never produces NaN or inf codes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashseek::cuda {

// u below is uniform in [-1, 1) on a 2^-23 grid.
enum class FillKind : uint8_t {
    BYTES,         // uniform bytes (packed FP4 e2m1 pairs, I8)
    E4M3,          // uniform e4m3fn codes without the NaN codes 0x7f / 0xff (every exponent occurs)
    E4M3_UNIFORM,  // e4m3fn(scale * u), round to nearest even, saturating at +-448
    BF16,          // bf16(center + scale * u), round to nearest even
    F32,           // center + scale * u
    E8M0,          // UE8M0 scale bytes uniform in [e8m0_lo, e8m0_hi]
    I64_ROUTE,     // hash-routing rows (tid2eid): top_k distinct experts in [0, n_experts) per row of top_k
};

struct FillParams {
    FillKind kind = FillKind::F32;
    float center = 0.f, scale = 1.f;     // BF16, F32 (center), E4M3_UNIFORM (scale only)
    int e8m0_lo = 127, e8m0_hi = 127;    // E8M0: 0 <= lo <= hi <= 254 (255 is NaN)
    int n_experts = 1, top_k = 1;        // I64_ROUTE: 1 <= top_k <= n_experts
};

// n_elements of the format p.kind names, starting at dst, on `stream`; deterministic for (seed, index).
void fill_random(void* dst, size_t n_elements, const FillParams& p, uint64_t seed, cudaStream_t stream);

// The short form for BYTES, E4M3, E4M3_UNIFORM, BF16 and F32 with centre 0, and E8M0 with the range packed into
// `scale` as lo + 256 * hi.
void fill_random(void* dst, size_t n_elements, FillKind kind, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace flashseek::cuda
