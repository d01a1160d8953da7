// Kernels behind glue.cuh. Memory-bound copies with 16-byte accesses where the row length allows; the argmax spread
// over many CTAs per row.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "cuda/backend/cuda_util.h"
#include "cuda/backend/glue.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/row_pass.cuh"
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

// The greedy argmax of one logits row over many CTAs: grid (ctas per row, rows). Each CTA reduces its slice of the
// row to one 64-bit key (the value's order-preserving bits above the complement of its index, so the largest key is
// the largest value at the lowest index: a total order, the same winner whatever order the keys meet in) and merges
// it into the row's slot with atomicMax; the CTA that arrives last at the row's ticket reads the slot, writes the
// token and leaves slot and ticket zeroed for the next launch. Why: one 1,024-thread CTA per row took 31 us for a
// 129,280-entry row at one sequence (one SM's loads), on the decode step's critical path.
// Values below -FLT_MAX (-inf) and NaN never win; a row with no other value gives 0.
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxPerThread = 8;  // loads in flight per thread
__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(const float* __restrict__ logits, int64_t vocab,
                                                                     int64_t slice, int32_t* __restrict__ out,
                                                                     unsigned long long* __restrict__ slots,
                                                                     unsigned* __restrict__ tickets) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t row = blockIdx.y;
    const unsigned long long best = slice_max_key<kArgmaxThreads, kArgmaxPerThread>(
        logits + row * vocab, vocab, slice,
        [](float v, uint32_t j) { return v >= -FLT_MAX ? value_index_key(order_key(v), j) : 0ull; });
    __shared__ bool s_last;
    if (threadIdx.x == 0) {
        if (best) atomicMax(slots + row, best);
        __threadfence();  // the slot's update before the ticket: the last CTA reads every CTA's key
        s_last = atomicAdd(tickets + row, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (threadIdx.x == 0 && s_last) {
        __threadfence();
        const unsigned long long top = atomicExch(slots + row, 0ull);
        tickets[row] = 0;
        out[row] = top ? int32_t(key_index(top)) : 0;
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

size_t argmax_rows_scratch_bytes(int max_rows) {
    return size_t(std::max(max_rows, 0)) * (sizeof(unsigned long long) + sizeof(unsigned));
}

void argmax_rows(const float* logits, int n_rows, int64_t vocab, int32_t* out, void* scratch, size_t scratch_bytes,
                 cudaStream_t stream) {
    if (n_rows <= 0) return;
    FS_REQUIRE(vocab >= 1 && vocab < (int64_t(1) << 31), "argmax_rows: vocabulary size ", vocab, " out of range");
    FS_REQUIRE(n_rows <= 65535, "argmax_rows: ", n_rows, " rows exceed one launch's grid");
    FS_REQUIRE(scratch && scratch_bytes >= argmax_rows_scratch_bytes(n_rows), "argmax_rows: scratch of ", scratch_bytes,
               " bytes is smaller than the ", argmax_rows_scratch_bytes(n_rows), " needed for ", n_rows, " rows");
    // Slices of ~8 loads per thread: 64 CTAs for a 129,280-entry row, one for a small vocabulary.
    const int64_t per_cta = int64_t(kArgmaxThreads) * kArgmaxPerThread;
    const int64_t ctas = std::min<int64_t>((vocab + per_cta - 1) / per_cta, 1024);
    const int64_t slice = (vocab + ctas - 1) / ctas;
    auto* slots = static_cast<unsigned long long*>(scratch);
    auto* tickets = reinterpret_cast<unsigned*>(slots + n_rows);
    launch_pdl("argmax_rows_kernel", argmax_rows_kernel, dim3(unsigned(ctas), unsigned(n_rows)),
               dim3(kArgmaxThreads), 0, stream, logits, vocab, slice, out, slots, tickets);
    CUDA_CHECK_LAUNCH("argmax_rows");
}

}  // namespace flashseek::cuda
