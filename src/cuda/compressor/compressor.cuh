// KV compressors (docs/model.md §2.5) for the attention (d_c = head_dim, FP8-simulated entries) and for the
// indexer (d_c = index_head_dim, Hadamard + FP4-simulated keys). Handles prefill chunks and decode alike.
//
// Inputs per token row (the bf16 compressor weights are applied by the GEMM in fp32): kv = wkv x and
// gate = wgate x, both [n_tokens, c*d_c] fp32 (c = 2 for ratio 4, else 1; channels [0, d_c) are the "A" half that
// feeds the next window, [d_c, 2 d_c) the "B" half). The score of a token is gate + ape[pos % ratio].
// Entry w pools, per channel, with a softmax over slots: ratio 4 -> the A halves of tokens [4(w-1), 4w) and the
// B halves of tokens [4w, 4w+4) (8 slots; w = 0 has no A slots); ratio 128 -> tokens [128w, 128w+128).
// Entry w is emitted by the step that appends token (w+1)*ratio - 1: pooled -> bf16 -> RMSNorm(norm) -> bf16 ->
// RoPE at position w*ratio -> bf16 -> FP8 simulation + store (attention) or Hadamard -> bf16 -> FP4 simulation +
// store (indexer), into entry w of the layer's paged entries.
//
// State (per sequence slot, compressor_state_bytes(): fp32 kv[c*ratio][c*d_c] then score[c*ratio][c*d_c]): a ring
// of the last c*ratio tokens' rows (slot t % (c*ratio)), score with ape added. Tokens of the current chunk are
// read from the inputs; older ones from the state. After the emission the chunk's last c*ratio tokens are saved.
// A new sequence needs no clearing: slots of positions < 0 are never read.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/attention/kv_cache.cuh"
#include "cuda/rope/rope.cuh"

namespace flashseek::cuda {

struct CompressorParams {
    TokenBatch batch;
    int ratio = 0;     // 4 (overlapping) or 128 (any ratio >= 1 works; overlap iff ratio == 4)
    int dim = 0;       // d_c
    int rope_dim = 0;  // qk_rope_head_dim
    bool indexer = false;  // true: Hadamard + FP4 keys (IndexFormat); false: FP8-simulated KV (KvFormat)
    // false (BF16 entry formats only, the reference configuration): no FP8 simulation of KV entries and neither
    // Hadamard nor FP4 simulation of indexer keys, as in the CPU exact numerics; the entry is the bf16 vector.
    bool quant_sim = true;
    const float* kv = nullptr;    // [n_tokens, c*dim], rows kv_stride floats apart
    int64_t kv_stride = 0;
    const float* gate = nullptr;  // [n_tokens, c*dim], rows gate_stride floats apart
    int64_t gate_stride = 0;
    const float* ape = nullptr;   // [ratio, c*dim]
    const __nv_bfloat16* norm_weight = nullptr;  // [dim]
    float norm_eps = 1e-6f;
    RopeTable rope;               // the layer's table (compress theta + YaRN)
    uint8_t* state = nullptr;     // state of slot k at state + k * state_stride
    int64_t state_stride = 0;
    PagedEntries out;             // entries (format: KvFormat when !indexer, IndexFormat when indexer)
};

size_t compressor_state_bytes(int ratio, int dim);
// Emits every entry completed by this step, then saves the chunk's tail into the state (two launches).
void compressor_forward(const CompressorParams& p, cudaStream_t stream);

}  // namespace flashseek::cuda
