// The all-reduce of tensor / expert parallel shards that share one device (virtual ranks): the fp32 partial sums of
// the shards of a group are added element by element in a fixed order, ((p0 + p1) + p2) + ..., and the sum, rounded
// to bf16, is written to every shard's output. The order is the reference order of every all-reduce flashseek
// runs, so a result does not depend on which shards share a device. One launch per call; graph-capturable, PDL.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashseek::cuda {

inline constexpr int kMaxReduceRanks = 16;

// partials[r] and outs[r]: device pointers of [n] fp32 / bf16 (uint16 bits) on the current device, r < ranks.
void reduce_partials_to_bf16(const float* const* partials, uint16_t* const* outs, int ranks, int64_t n,
                             cudaStream_t stream);

}  // namespace flashseek::cuda
