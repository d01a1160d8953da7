// Host side of TMA for the sm_90a GEMMs: encoding a 2-D tensor map (CUtensorMap) of a row-major matrix, cheap
// enough (pure host encoding, no device call) to do on every launch, so kernels take their maps as
// __grid_constant__ parameters and a captured CUDA graph keeps the values of its capture.
// The driver's cuTensorMapEncodeTiled is reached through the runtime's driver entry point (no link against
// libcuda); its address is looked up once per process (a constant afterwards).
#pragma once
#include <cuda.h>

#include <cstdint>
#include <string>

namespace flashseek::cuda::tma {

enum class Element : uint8_t { U8, BF16, F32 };
enum class Swizzle : uint8_t { NONE, B64, B128 };

// The parameters of one 2-D map, checked on the host before encoding (check_2d) with the rules of
// cuTensorMapEncodeTiled and of the copy engine: base 16-byte aligned; 1 <= rows, cols <= 2^32; row stride a
// multiple of 16 bytes, at least one row, below 2^40; box sides 1..256; a box row (box_cols x element) a multiple of
// 16 bytes, and at most 64 / 128 bytes with the 64- / 128-byte swizzle. The driver accepts some maps the copy engine then
// refuses at run time with an illegal instruction, so every rule is checked here and named in the error.
// A rule no map can check (the kernels' part, tma.cuh): the box's start column times the element size must be a
// multiple of 16 bytes.
struct Map2d {
    const void* base = nullptr;
    Element element = Element::U8;
    uint64_t rows = 0, cols = 0, row_stride_bytes = 0;
    uint32_t box_rows = 0, box_cols = 0;
    Swizzle swizzle = Swizzle::NONE;
};
uint32_t element_bytes(Element e);
// Empty when the parameters are valid, else what is wrong (with the values).
std::string check_2d(const Map2d& m);

// Map of `rows` x `cols` elements at `base` with `row_stride_bytes` between rows, read in boxes of box_rows x
// box_cols. Elements outside the matrix read as zeros. Throws Error naming `what` and every parameter when check_2d
// refuses them or the driver's encoding fails.
CUtensorMap make_2d(const void* base, Element element, uint64_t rows, uint64_t cols, uint64_t row_stride_bytes,
                    uint32_t box_rows, uint32_t box_cols, Swizzle swizzle, const char* what);

}  // namespace flashseek::cuda::tma
