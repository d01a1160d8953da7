// Tensor-map encoding for the sm_90a GEMMs (see tensor_map.h).
#include "cuda/gemm/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "cuda/common/check.cuh"

namespace flashseek::cuda::tma {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
        FS_REQUIRE(q == cudaDriverEntryPointSuccess && p != nullptr,
                   "tensor map: the CUDA driver has no cuTensorMapEncodeTiled (driver too old for TMA)");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

}  // namespace

CUtensorMap make_2d(const void* base, Element element, uint64_t rows, uint64_t cols, uint64_t row_stride_bytes,
                    uint32_t box_rows, uint32_t box_cols, Swizzle swizzle, const char* what) {
    const uint64_t elem = element == Element::U8 ? 1 : element == Element::BF16 ? 2 : 4;
    FS_REQUIRE(base != nullptr && rows > 0 && cols > 0, what, ": tensor map of an empty or null matrix (", rows, " x ",
               cols, ")");
    FS_REQUIRE(reinterpret_cast<uintptr_t>(base) % 16 == 0, what, ": base address must be 16-byte aligned for TMA");
    FS_REQUIRE(row_stride_bytes % 16 == 0 && row_stride_bytes >= cols * elem, what, ": row stride ", row_stride_bytes,
               " bytes must be a multiple of 16 and hold ", cols, " elements");
    FS_REQUIRE(swizzle == Swizzle::NONE || box_cols * elem <= 128, what, ": a 128-byte-swizzled box row holds at most 128 bytes");
    const CUtensorMapDataType type = element == Element::U8     ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                     : element == Element::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    const cuuint64_t dims[2] = {cols, rows};
    const cuuint64_t strides[1] = {row_stride_bytes};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUtensorMap map{};
    const CUresult r = encode_fn()(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   swizzle == Swizzle::B128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    FS_REQUIRE(r == CUDA_SUCCESS, what, ": cuTensorMapEncodeTiled failed (CUresult ", int(r), ") for ", rows, " x ",
               cols, " elements, row stride ", row_stride_bytes, " bytes, box ", box_rows, " x ", box_cols);
    return map;
}

}  // namespace flashseek::cuda::tma
