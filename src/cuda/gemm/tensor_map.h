// Host side of TMA for the sm_90a GEMMs: encoding a 2-D tensor map (CUtensorMap) of a row-major matrix, cheap
// enough (pure host encoding, no device call) to do on every launch, so kernels take their maps as
// __grid_constant__ parameters and a captured CUDA graph keeps the values of its capture.
// The driver's cuTensorMapEncodeTiled is reached through the runtime's driver entry point (no link against
// libcuda); its address is looked up once per process (a constant afterwards).
#pragma once
#include <cuda.h>

#include <cstdint>

namespace flashseek::cuda::tma {

enum class Element : uint8_t { U8, BF16, F32 };
enum class Swizzle : uint8_t { NONE, B128 };

// Map of `rows` x `cols` elements at `base` with `row_stride_bytes` between rows, read in boxes of box_rows x
// box_cols (box_cols * element size <= 128 bytes with the 128-byte swizzle). Elements outside the matrix read as
// zeros. Throws Error naming `what` when the driver refuses the arguments (alignment: base and row stride multiples
// of 16 bytes; box sides <= 256).
CUtensorMap make_2d(const void* base, Element element, uint64_t rows, uint64_t cols, uint64_t row_stride_bytes,
                    uint32_t box_rows, uint32_t box_cols, Swizzle swizzle, const char* what);

}  // namespace flashseek::cuda::tma
