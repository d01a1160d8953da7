// A checkpoint-format weight matrix widened to bf16 on the device: e4m3 x its 128x128 block scale (or e2m1 x its
// per-32 scale), rounded to bf16, row-major [out, in]. Why: the reference dequantizes attention wo_a to bf16 and runs
// a bf16 grouped einsum (docs/model.md §2.4 and pitfall 23); prefill passes reproduce it on the bf16 tensor-core GEMM
// from a copy widened once per pass (the FP8 copy stays for decode, which streams half the bytes). With E8M0 scales
// the product is exact in bf16 (3 mantissa bits times a power of two); F32 scales round once, as the reference's
// conversion does.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {

// out: w.out * w.in bf16 values (16-byte aligned with w.in % 8 == 0: the 8-wide kernel; else element-wise). Throws
// Error for a null weight or output.
void dequantize_weight_bf16(const DeviceLinear& w, uint16_t* out, cudaStream_t stream);

}  // namespace flashseek::cuda
