// Where the attention-side kernels find a step's tokens and each sequence's GPU state, and how a KV entry or an
// indexer key is laid out in bytes. Host-visible plain structs (raw device pointers, no ownership), shared by
// every kernel family of src/cuda/{attention,compressor,indexer}; the backend fills them from its StatePool.
//
// Entry formats (docs/model.md §2.11):
//  * KvFormat::BF16: dim bf16 values (1024 B for dim 512). The reference ("exact") configuration.
//  * KvFormat::FP8 (the 584-byte layout for dim 512 / rope 64): bytes [0, nope) e4m3 no-rope dims, then rope_dim
//    bf16 rope dims, then nope/64 UE8M0 scale bytes (one per 64 no-rope dims, value 2^(b-127)), zero padding to a
//    multiple of 8 bytes: 448 + 128 + 7 + 1 = 584. Entries are self-contained (the scales sit at the end of each
//    entry, not in a per-page scale area). nope = 448 FP8-simulated values dequantize exactly to what the
//    reference keeps in bf16, so this format loses nothing.
//  * IndexFormat::BF16: dim bf16 values (256 B for the indexer's 128).
//  * IndexFormat::FP4 (68 B for dim 128): dim/2 bytes of packed e2m1 (low nibble = even element), then dim/32
//    UE8M0 scales. Indexer keys are FP4-simulated by the reference, so this format is lossless too.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#ifdef __CUDACC__
#define FS_ATTN_HD __host__ __device__
#else
#define FS_ATTN_HD
#endif

namespace flashseek::cuda {

enum class KvFormat : int32_t { BF16 = 0, FP8 = 1 };
enum class IndexFormat : int32_t { BF16 = 0, FP4 = 1 };

// Bytes of one entry. kv: dim = head_dim, rope_dim = qk_rope_head_dim ((dim - rope_dim) % 64 == 0 for FP8).
FS_ATTN_HD inline int64_t kv_entry_bytes(KvFormat f, int dim, int rope_dim) {
    if (f == KvFormat::BF16) return int64_t(dim) * 2;
    const int64_t nope = dim - rope_dim;
    const int64_t raw = nope + int64_t(rope_dim) * 2 + nope / 64;
    return (raw + 7) / 8 * 8;
}
FS_ATTN_HD inline int64_t index_entry_bytes(IndexFormat f, int dim) {
    return f == IndexFormat::BF16 ? int64_t(dim) * 2 : int64_t(dim) / 2 + dim / 32;
}

// The rows of one step. Sequence s appends seq_n_tokens[s] tokens at positions seq_start_pos[s] ... to its state
// slot seq_slot[s]; its rows in every [n_tokens, ...] activation are seq_first_row[s] ... (consecutive).
// token_seq / token_pos give each row's sequence index (into these arrays) and absolute position.
struct TokenBatch {
    int n_seqs = 0;
    int n_tokens = 0;
    int max_seq_tokens = 0;                  // host bound on seq_n_tokens (grid sizing)
    const int32_t* seq_slot = nullptr;       // [n_seqs] state slot (ring, compressor state, block-table row)
    const int32_t* seq_first_row = nullptr;  // [n_seqs]
    const int32_t* seq_n_tokens = nullptr;   // [n_seqs]
    const int32_t* seq_start_pos = nullptr;  // [n_seqs] tokens already in the sequence before this step
    const int32_t* token_seq = nullptr;      // [n_tokens]
    const int32_t* token_pos = nullptr;      // [n_tokens]
};

// A layer's sliding-window ring: slot k holds position p at ring index p % ring_entries, at
// base + k * slot_stride + (p % ring_entries) * entry_bytes. ring_entries >= window + the largest chunk, so a
// whole chunk can be written before attention reads the window.
struct RingView {
    uint8_t* base = nullptr;
    int64_t slot_stride = 0;  // bytes per state slot
    int32_t ring_entries = 0;
    int32_t entry_bytes = 0;
    KvFormat format = KvFormat::BF16;
    // false (BF16 format only): entries are stored without the FP8 simulation of the no-rope dims (the reference
    // configuration, compared against the CPU exact numerics, which have none).
    bool fp8_sim = true;
};

// Paged entries of one layer (compressed KV or indexer keys): entry e of state slot k lives at
// base + block_tables[k * table_stride + e / entries_per_block] * block_bytes + offset
//      + (e % entries_per_block) * entry_bytes.
struct PagedEntries {
    uint8_t* base = nullptr;
    int64_t block_bytes = 0;
    int64_t offset = 0;
    int32_t entries_per_block = 0;
    int32_t entry_bytes = 0;
    const int32_t* block_tables = nullptr;
    int32_t table_stride = 0;
    int32_t format = 0;  // KvFormat or IndexFormat, by the kind of entries
};

#ifdef __CUDACC__
__device__ __forceinline__ uint8_t* ring_entry(const RingView& r, int slot, int64_t pos) {
    return r.base + int64_t(slot) * r.slot_stride + (pos % r.ring_entries) * int64_t(r.entry_bytes);
}
__device__ __forceinline__ uint8_t* paged_entry(const PagedEntries& p, int slot, int64_t e) {
    const int32_t block = p.block_tables[int64_t(slot) * p.table_stride + e / p.entries_per_block];
    return p.base + int64_t(block) * p.block_bytes + p.offset + (e % p.entries_per_block) * int64_t(p.entry_bytes);
}
#endif

}  // namespace flashseek::cuda
