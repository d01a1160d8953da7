// Internals shared by the forward's translation units: the flattened batch (one row per appended token) and the
// per-layer sub-blocks. Not part of the public CPU interface.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/model.h"
#include "cpu/state.h"
#include "cpu/thread_pool.h"

namespace flashseek::cpu::detail {

struct Batch {
    int64_t rows = 0;
    std::vector<int> row_seq;          // which step entry a row belongs to
    std::vector<int64_t> row_pos;      // absolute position of the row's token
    std::vector<int32_t> row_token;
    std::vector<int64_t> seq_first;    // first row of each entry
    std::vector<int> seq_count;        // rows of each entry
    std::vector<SequenceState*> states;
};

// Attention sub-block of layer l on the normed inputs x [rows, D] -> out [rows, D]. Advances the layer's window
// ring and compressor states (not the sequence length).
void attention_block(const CpuModel& m, int l, const Batch& b, const float* x, float* out, ThreadPool* pool);

// MoE sub-block of layer l on x [rows, D] -> out [rows, D].
void moe_block(const CpuModel& m, int l, const Batch& b, const float* x, float* out, ThreadPool* pool);

}  // namespace flashseek::cpu::detail
