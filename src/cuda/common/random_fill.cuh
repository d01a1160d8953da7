// Fills device memory with random values of a given number format, on the GPU (counter-based hash, no host
// traffic): used for dummy weights in benchmarks and tests. Never produces NaN or inf codes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashseek::cuda {

enum class FillKind : uint8_t {
    BYTES,      // uniform bytes (packed FP4 codes, I8)
    E4M3,       // e4m3fn bytes without the NaN codes 0x7f / 0xff
    BF16,       // bf16 values ~ uniform(-scale, scale)
    F32,        // fp32 values ~ uniform(-scale, scale)
    E8M0,       // scale bytes uniform in [lo, hi] (lo/hi from `scale` packed as lo + 256*hi)
};

// n_elements of the format starting at dst; deterministic for (seed, index).
void fill_random(void* dst, size_t n_elements, FillKind kind, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace flashseek::cuda
