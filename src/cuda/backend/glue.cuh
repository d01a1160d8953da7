// Small kernels the backend needs between the op families: the embedding lookup into hc_mult identical residual
// streams, a row gather (rows that need logits), and a greedy argmax over logits rows (the bench's device
// sampler when no other sampler is wired). All graph-safe: sizes by value, data through device pointers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashseek::cuda {

// X [n_tokens, n_streams, dim] = embed[tokens[t]] copied into every stream. embed [vocab, dim] bf16.
void embed_streams(const __nv_bfloat16* embed, int64_t vocab, const int32_t* tokens, int n_tokens, int n_streams,
                   int64_t dim, __nv_bfloat16* X, cudaStream_t stream);

// dst[i] = src[rows[i]] for i < n_rows, rows of row_elems bf16 values.
void gather_rows(const __nv_bfloat16* src, const int32_t* rows, int n_rows, int64_t row_elems, __nv_bfloat16* dst,
                 cudaStream_t stream);

// out[r] = argmax_j logits[r, j] (lowest index on ties; NaN and -inf never win, 0 when nothing else is in the row),
// r < n_rows. scratch: argmax_rows_scratch_bytes(n_rows) or more, zeroed before the first call; every call leaves it
// zeroed (so it may be captured in a graph and replayed). Calls sharing a scratch must not overlap.
size_t argmax_rows_scratch_bytes(int max_rows);
void argmax_rows(const float* logits, int n_rows, int64_t vocab, int32_t* out, void* scratch, size_t scratch_bytes,
                 cudaStream_t stream);

}  // namespace flashseek::cuda
