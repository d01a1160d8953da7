// Per-sequence GPU state of the V4 forward, allocated at start-up and handed out in blocks.
//  * Fixed per sequence slot: each layer's sliding-window ring (ring_entries x kv_entry_bytes) and each
//    compress layer's compressor partial state (opaque bytes sized by the compressor kernels).
//  * Paged: compressed KV entries of every compress layer and the indexer keys of ratio-4 layers, in blocks of
//    block_tokens tokens of context. A block holds, for every layer, the entries its block_tokens tokens produce,
//    so one block table per sequence serves every layer: entry e of layer l lives in block
//    table[e / entries_per_block(l)] at slot e % entries_per_block(l).
// One extra slot (padding_slot) is reserved for the padding rows of a graph bucket; it never holds a sequence.
// All bookkeeping is host-side; the block tables are mirrored to the device before each step.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/backend/cuda_util.h"
#include "backend/backend.h"

namespace flashseek::cuda {

struct LayerStateGeometry {
    int ratio = 0;                  // 0, 4 or 128
    int64_t comp_entry_bytes = 0;   // bytes of one compressed KV entry (0 when ratio == 0)
    int64_t index_key_bytes = 0;    // bytes of one indexer key (ratio 4 only)
    int64_t compressor_state_bytes = 0;        // per slot, attention compressor
    int64_t index_compressor_state_bytes = 0;  // per slot, indexer compressor
};

struct StateGeometry {
    int64_t block_tokens = 256;     // multiple of every ratio
    int ring_entries = 256;         // window ring slots per layer (>= window + the largest prefill chunk)
    int64_t kv_entry_bytes = 1024;  // window ring entry (bf16 512 = 1024 B, or the 584 B FP8 layout)
    std::vector<LayerStateGeometry> layers;
};

class StatePool {
public:
    // max_sequences slots (+1 padding slot); the paged part gets as many blocks as fit in pool_bytes after the
    // fixed part (at least one per slot); max_context caps a sequence.
    StatePool(const StateGeometry& g, int max_sequences, int64_t max_context, int64_t pool_bytes);

    const StateGeometry& geometry() const { return g_; }
    int max_sequences() const { return max_seqs_; }
    int padding_slot() const { return max_seqs_; }
    int64_t max_context() const { return max_context_; }
    int64_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
    int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + g_.block_tokens - 1) / g_.block_tokens; }
    StateMemoryStats stats() const;

    int create();                      // a free slot; throws Error when none
    void release(int slot);
    bool live(int slot) const { return slot >= 0 && slot < max_seqs_ && live_[size_t(slot)]; }
    int64_t length(int slot) const { return length_[size_t(slot)]; }
    // Ensures capacity for new_length tokens; throws OutOfStateMemory (and changes nothing) when the pool is short.
    void reserve_all(const std::vector<std::pair<int, int64_t>>& slot_new_length);
    void set_length(int slot, int64_t n) { length_[size_t(slot)] = n; }
    void reset_padding_slot();  // the padding slot's state is scratch: its length is always 0

    // Device addresses.
    uint8_t* ring(int layer) const { return ring_base_ + ring_layer_off_[size_t(layer)]; }  // [slots][ring][entry]
    int64_t ring_slot_stride() const { return int64_t(g_.ring_entries) * g_.kv_entry_bytes; }
    uint8_t* compressor_state(int layer, bool indexer) const;  // [slots][state bytes]
    int64_t compressor_state_stride(int layer, bool indexer) const;
    uint8_t* blocks() const { return blocks_.as<uint8_t>(); }
    int64_t block_bytes() const { return block_bytes_; }
    int64_t comp_offset(int layer) const { return comp_off_[size_t(layer)]; }    // within a block
    int64_t index_offset(int layer) const { return index_off_[size_t(layer)]; }  // within a block
    int64_t entries_per_block(int layer) const;
    const int32_t* device_block_tables() const { return tables_dev_.as<int32_t>(); }  // [slots+1][max_blocks]
    // Copies the host block tables to the device (stream-ordered); call before a step that uses them.
    void upload_tables(cudaStream_t s);
    void clear_slot_state(int slot, cudaStream_t s);  // zeroes a slot's ring and compressor state

private:
    StateGeometry g_;
    int max_seqs_;
    int64_t max_context_, max_blocks_per_seq_, block_bytes_ = 0, total_blocks_ = 0;
    std::vector<int64_t> ring_layer_off_, comp_off_, index_off_, cstate_off_, istate_off_;
    DeviceBuffer fixed_, blocks_, tables_dev_;
    uint8_t* ring_base_ = nullptr;
    std::vector<int32_t> tables_host_;  // pinned-free copy, [slots+1][max_blocks]
    std::vector<std::vector<int32_t>> owned_;
    std::vector<int32_t> free_blocks_;
    std::vector<int64_t> length_;
    std::vector<char> live_;
    bool tables_dirty_ = true;
};

}  // namespace flashseek::cuda
