// A strided block copy on one device: dst[row * ldd + c] = src[row * lds + c] for rows x cols fp32 elements. The
// same-device and NCCL communicators place the head's vocabulary blocks into the gathered logits with it (and the
// NCCL one packs / unpacks its point-to-point messages). One launch; graph-capturable, PDL.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashseek::cuda {

void copy_block_columns(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols,
                        cudaStream_t stream);

}  // namespace flashseek::cuda
