// mhc_pre's tiled partial kernel (mhc_partial_tiled.cu), shaped for prefill passes; mhc.cu launches it or the
// split kernel by pass size. Internal to src/cuda/mhc.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/mhc/mhc_chunk.cuh"

namespace flashseek::cuda {

// The split-K partial sums of one mhc_pre call: ws [n_tokens][splits][n_mix + 1] (mhc_chunk::ws_index; row n_mix:
// the sums of squares).
struct MhcPartialArgs {
    __nv_bfloat16* x = nullptr;  // [n_tokens, N, D]; rewritten in place when pin carries the previous mhc_post
    const float* fn = nullptr;   // [n_mix, N * D]
    int n_tokens = 0;
    int n_streams = 0;
    int64_t dim = 0;
    int n_mix = 0;
    bool aligned = false;      // K % 4 == 0, x 8-byte and fn 16-byte aligned: vector loads
    bool interleaved = false;  // mhc_chunk::interleaved_chunks
    mhc_chunk::PostIn pin{};
    bool stage16 = false;      // pin's post, comb and pair slots 16-byte aligned: copied in 16-byte pieces
    float* ws = nullptr;
    int splits = 0;
};

void mhc_partial_tiled(const MhcPartialArgs& a, cudaStream_t stream);

}  // namespace flashseek::cuda
