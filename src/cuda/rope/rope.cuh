// Interleaved partial RoPE with YaRN (docs/model.md §2.10): the pairs (v[nope+2i], v[nope+2i+1]) of the last
// rope_dim dims of each head vector are rotated by pos * inv_freq[i] (inverse: by -pos, the output de-rotation).
// The frequency table travels by value in the kernel parameters (no device memory, graph-friendly).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/kv_cache.cuh"
#include "model/config.h"

namespace flashseek::cuda {

constexpr int kMaxRopePairs = 64;  // rope_dim <= 128

struct RopeTable {
    int32_t n_pairs = 0;  // rope_dim / 2
    float inv_freq[kMaxRopePairs] = {};
};

// The table of a layer with compress ratio `ratio`: theta = compress_rope_theta with YaRN when ratio > 0, else
// rope_theta without scaling (§2.8). The fp32 values of model/rope.h rope_inv_freq.
RopeTable make_rope_table(const ModelConfig& cfg, int ratio);
RopeTable make_rope_table(int rope_dim, double theta, const RopeScaling* yarn);

// In place on x [n_tokens, n_heads, head_dim] (bf16, token rows `token_stride` elements apart): rotates the last
// rope_dim dims of every head at position positions[t] (inverse = rotate by -pos). fp32 math, bf16 result.
void rope_apply(__nv_bfloat16* x, int64_t token_stride, int n_tokens, int n_heads, int head_dim,
                const int32_t* positions, const RopeTable& rope, bool inverse, cudaStream_t stream);

}  // namespace flashseek::cuda
