// Per-sequence incremental state of the CPU forward (docs/model.md §2.5, §2.11, §2.14): for each layer the
// sliding-window ring of the last `sliding_window` KV vectors, the compressor's partial window (fp32 kv and
// score slots; for ratio 4 also the previous window's A halves), the compressed KV entries and, on CSA layers,
// the indexer's own compressor state and keys. Everything a later token needs, nothing it does not.
#pragma once
#include <cstdint>
#include <vector>

namespace flashseek::cpu {

struct CompressorState {
    std::vector<float> kv, score;            // [ratio, halves*dim]: slot (position % ratio) of the current window
    std::vector<float> prev_kv, prev_score;  // ratio 4: the previous complete window's A halves [ratio, dim]
    bool has_prev = false;
    std::vector<float> entries;              // [n_entries, dim], entry w pools window w
    int64_t n_entries = 0;
};

struct LayerState {
    std::vector<float> window;  // ring [sliding_window, head_dim]; position p lives in slot p % sliding_window
    CompressorState compressor;
    CompressorState index_compressor;
};

struct SequenceState {
    int64_t length = 0;  // tokens consumed so far (= position of the next token)
    std::vector<LayerState> layers;
};

}  // namespace flashseek::cpu
