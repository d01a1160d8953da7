// copy_block_columns (copy_columns.cuh): one thread per element of a grid-stride loop over rows x cols, so that a
// warp reads and writes consecutive columns of a row.
#include "cuda/comm/copy_columns.cuh"

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kCopyThreads = 256;
constexpr int64_t kCopyMaxBlocks = 4096;

__global__ void __launch_bounds__(kCopyThreads)
    copy_columns_kernel(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int64_t total = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * kCopyThreads + threadIdx.x; i < total;
         i += int64_t(gridDim.x) * kCopyThreads) {
        const int64_t row = i / cols, col = i - row * cols;
        dst[row * ldd + col] = src[row * lds + col];
    }
}

}  // namespace

void copy_block_columns(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t cols,
                        cudaStream_t stream) {
    FS_REQUIRE(rows >= 0 && cols >= 0 && lds >= cols && ldd >= cols, "copy_block_columns: ", rows, " x ", cols,
               " with strides ", lds, " / ", ldd);
    if (rows == 0 || cols == 0) return;
    FS_REQUIRE(src && dst, "copy_block_columns: null ", src ? "destination" : "source");
    const int64_t blocks = std::min<int64_t>((rows * cols + kCopyThreads - 1) / kCopyThreads, kCopyMaxBlocks);
    launch_pdl("copy_columns_kernel", copy_columns_kernel, dim3(unsigned(blocks)), dim3(kCopyThreads), 0, stream, src,
               lds, dst, ldd, rows, cols);
}

}  // namespace flashseek::cuda
