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

uint32_t element_bytes(Element e) { return e == Element::U8 ? 1 : e == Element::BF16 ? 2 : 4; }

std::string check_2d(const Map2d& m) {
    const uint64_t elem = element_bytes(m.element);
    const uint64_t box_row_bytes = uint64_t(m.box_cols) * elem;
    if (m.base == nullptr) return "null base address";
    if (reinterpret_cast<uintptr_t>(m.base) % 16 != 0) return "base address not 16-byte aligned";
    if (m.rows < 1 || m.rows > (uint64_t(1) << 32) || m.cols < 1 || m.cols > (uint64_t(1) << 32))
        return fs_cat("matrix of ", m.rows, " x ", m.cols, " elements: each side must be in [1, 2^32]");
    if (m.row_stride_bytes % 16 != 0 || m.row_stride_bytes < m.cols * elem || m.row_stride_bytes >= (uint64_t(1) << 40))
        return fs_cat("row stride of ", m.row_stride_bytes, " bytes: must be a multiple of 16, hold a row of ", m.cols,
                      " x ", elem, " bytes and stay below 2^40");
    if (m.box_rows < 1 || m.box_rows > 256 || m.box_cols < 1 || m.box_cols > 256)
        return fs_cat("box of ", m.box_rows, " x ", m.box_cols, ": each side must be in [1, 256]");
    if (box_row_bytes % 16 != 0) return fs_cat("box row of ", box_row_bytes, " bytes: must be a multiple of 16");
    if (m.swizzle == Swizzle::B128 && box_row_bytes > 128)
        return fs_cat("box row of ", box_row_bytes, " bytes: at most 128 with the 128-byte swizzle");
    if (m.swizzle == Swizzle::B64 && box_row_bytes > 64)
        return fs_cat("box row of ", box_row_bytes, " bytes: at most 64 with the 64-byte swizzle");
    return {};
}

CUtensorMap make_2d(const void* base, Element element, uint64_t rows, uint64_t cols, uint64_t row_stride_bytes,
                    uint32_t box_rows, uint32_t box_cols, Swizzle swizzle, const char* what) {
    const Map2d m{base, element, rows, cols, row_stride_bytes, box_rows, box_cols, swizzle};
    const auto describe = [&] {
        return fs_cat(rows, " x ", cols, " elements of ", element_bytes(element), " bytes, row stride ",
                      row_stride_bytes, " bytes, box ", box_rows, " x ", box_cols,
                      swizzle == Swizzle::B128 ? ", 128-byte swizzle"
                      : swizzle == Swizzle::B64 ? ", 64-byte swizzle"
                                                : ", no swizzle");
    };
    const std::string bad = check_2d(m);
    FS_REQUIRE(bad.empty(), what, ": invalid tensor map (", bad, "; ", describe(), ")");
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
                                   swizzle == Swizzle::B128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                   : swizzle == Swizzle::B64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                             : CU_TENSOR_MAP_SWIZZLE_NONE,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    FS_REQUIRE(r == CUDA_SUCCESS, what, ": cuTensorMapEncodeTiled failed (CUresult ", int(r), ") for ", describe());
    return map;
}

}  // namespace flashseek::cuda::tma
