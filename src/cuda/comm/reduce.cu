// reduce_partials_to_bf16 (reduce.cuh): one thread per 4 elements, the partials read in rank order.
#include "cuda/comm/reduce.cuh"

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"

namespace flashseek::cuda {
namespace {

struct ReduceArgs {
    const float* partials[kMaxReduceRanks];
    uint16_t* outs[kMaxReduceRanks];
    int ranks;
    int64_t n;
};

__global__ void reduce_kernel(const ReduceArgs a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= a.n) return;
    float sum = a.partials[0][i];
    for (int r = 1; r < a.ranks; ++r) sum = __fadd_rn(sum, a.partials[r][i]);  // no contraction: the fixed order
    const uint16_t bits = f32_to_bf16_bits(sum);
    for (int r = 0; r < a.ranks; ++r) a.outs[r][i] = bits;
}

}  // namespace

void reduce_partials_to_bf16(const float* const* partials, uint16_t* const* outs, int ranks, int64_t n,
                             cudaStream_t stream) {
    FS_REQUIRE(ranks >= 1 && ranks <= kMaxReduceRanks, "reduce_partials_to_bf16: ", ranks, " ranks (1..",
               kMaxReduceRanks, ")");
    FS_REQUIRE(n >= 0, "reduce_partials_to_bf16: negative size ", n);
    if (n == 0) return;
    ReduceArgs a{};
    for (int r = 0; r < ranks; ++r) {
        FS_REQUIRE(partials[r] && outs[r], "reduce_partials_to_bf16: rank ", r, " has a null buffer");
        a.partials[r] = partials[r];
        a.outs[r] = outs[r];
    }
    a.ranks = ranks;
    a.n = n;
    launch_pdl("reduce_kernel", reduce_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, stream, a);
}

}  // namespace flashseek::cuda
