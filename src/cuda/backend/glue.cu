// Kernels behind glue.cuh. Memory-bound copies with 16-byte accesses where the row length allows.
#include <cfloat>

#include "cuda/backend/cuda_util.h"
#include "cuda/backend/glue.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/warp_reduce.cuh"

namespace flashseek::cuda {

namespace {

__global__ void embed_streams_kernel(const __nv_bfloat16* __restrict__ embed, int64_t vocab,
                                     const int32_t* __restrict__ tokens, int n_streams, int64_t dim,
                                     __nv_bfloat16* __restrict__ X) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int t = blockIdx.x;
    int64_t tok = tokens[t];
    if (tok < 0 || tok >= vocab) tok = 0;  // validated on the host; never read out of bounds
    const __nv_bfloat16* src = embed + tok * dim;
    __nv_bfloat16* dst = X + int64_t(t) * n_streams * dim;
    if (dim % 8 == 0) {
        const int64_t n16 = dim / 8;
        const uint4* s4 = reinterpret_cast<const uint4*>(src);
        for (int64_t i = threadIdx.x; i < n16; i += blockDim.x) {
            const uint4 v = s4[i];
            for (int j = 0; j < n_streams; ++j) reinterpret_cast<uint4*>(dst + j * dim)[i] = v;
        }
    } else {
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
            const __nv_bfloat16 v = src[i];
            for (int j = 0; j < n_streams; ++j) dst[j * dim + i] = v;
        }
    }
}

__global__ void gather_rows_kernel(const __nv_bfloat16* __restrict__ src, const int32_t* __restrict__ rows,
                                   int64_t row_elems, __nv_bfloat16* __restrict__ dst) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int i = blockIdx.x;
    const __nv_bfloat16* s = src + int64_t(rows[i]) * row_elems;
    __nv_bfloat16* d = dst + int64_t(i) * row_elems;
    if (row_elems % 8 == 0) {
        for (int64_t k = threadIdx.x; k < row_elems / 8; k += blockDim.x)
            reinterpret_cast<uint4*>(d)[k] = reinterpret_cast<const uint4*>(s)[k];
    } else {
        for (int64_t k = threadIdx.x; k < row_elems; k += blockDim.x) d[k] = s[k];
    }
}

__global__ void argmax_rows_kernel(const float* __restrict__ logits, int64_t vocab, int32_t* __restrict__ out) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const float* row = logits + int64_t(blockIdx.x) * vocab;
    float best = -FLT_MAX;
    int64_t best_i = vocab;  // sentinel larger than any index
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        const float v = row[j];
        if (v > best || (v == best && j < best_i)) {  // NaN compares false: never taken
            best = v;
            best_i = j;
        }
    }
    __shared__ float s_val[32];
    __shared__ int64_t s_idx[32];
    warp_argmax(best, best_i);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        s_val[warp] = best;
        s_idx[warp] = best_i;
    }
    __syncthreads();
    if (warp == 0) {
        const int n_warps = blockDim.x >> 5;
        best = lane < n_warps ? s_val[lane] : -FLT_MAX;
        best_i = lane < n_warps ? s_idx[lane] : vocab;
        warp_argmax(best, best_i);
        if (lane == 0) out[blockIdx.x] = int32_t(best_i < vocab ? best_i : 0);
    }
}

}  // namespace

void embed_streams(const __nv_bfloat16* embed, int64_t vocab, const int32_t* tokens, int n_tokens, int n_streams,
                   int64_t dim, __nv_bfloat16* X, cudaStream_t stream) {
    if (n_tokens <= 0) return;
    launch_pdl("embed_streams_kernel", embed_streams_kernel, dim3(n_tokens), dim3(256), 0, stream, embed, vocab, tokens,
               n_streams, dim, X);
    CUDA_CHECK_LAUNCH("embed_streams");
}

void gather_rows(const __nv_bfloat16* src, const int32_t* rows, int n_rows, int64_t row_elems, __nv_bfloat16* dst,
                 cudaStream_t stream) {
    if (n_rows <= 0) return;
    launch_pdl("gather_rows_kernel", gather_rows_kernel, dim3(n_rows), dim3(256), 0, stream, src, rows, row_elems, dst);
    CUDA_CHECK_LAUNCH("gather_rows");
}

void argmax_rows(const float* logits, int n_rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
    if (n_rows <= 0) return;
    launch_pdl("argmax_rows_kernel", argmax_rows_kernel, dim3(n_rows), dim3(1024), 0, stream, logits, vocab, out);
    CUDA_CHECK_LAUNCH("argmax_rows");
}

}  // namespace flashseek::cuda
