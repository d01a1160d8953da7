// Device memory one rank needs, estimated without CUDA: the per-sequence state the CUDA backend's StatePool
// allocates (src/cuda/backend/state_pool.h, make_state_pool in cuda_backend.cpp), an estimate of the per-step
// buffers (step_buffers.cpp), a fixed reserve, and the rank's weights from a ShardPlan; and the check that a layout
// fits a GPU, refused with the bytes it needs and has.
//
// The state pool's geometry, mirrored here (keep the two in step):
//  * fixed part, per sequence slot (max_sequences + 1: one padding slot for graph buckets), per layer: a window ring
//    of sliding_window + one prefill chunk (kDefaultPrefillChunkTokens by default) entries, and for compress layers the compressors' fp32 partial
//    state, 2 x (c * ratio) x (c * dim) floats (c = 2 for ratio 4, else 1; dim = head_dim, and index_head_dim for
//    the indexer's compressor of ratio-4 layers); each layer's region rounded up to 256 bytes;
//  * paged part, blocks of 256 tokens of context: per compress layer 256 / ratio compressed entries, and for
//    ratio-4 layers as many indexer keys, each layer's part rounded up to 256 bytes; one block per 256 tokens of
//    each sequence, plus the padding slot's block;
//  * entry sizes: release numerics store the KV as the 584-byte FP8 layout and indexer keys as 68-byte FP4 (for
//    V4-Flash's 512 / 64 / 128 dims; docs/model.md §2.11); exact numerics as bf16 (1024 and 256 bytes).
// The state is the same on every rank: the single KV head serves every query head, and each expert group computes
// attention for every token.
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/shard_plan.h"

namespace flashseek {

// The CUDA backend's prefill chunk (tokens of one sequence per pass) when none is configured. 20 V4-Flash layers on
// one H200 (docs/perf.md §1.2): a 4,096-token prompt prefills at 13.1k tok/s in passes of 2,048 tokens, 16.7k at
// 4,096 and 8,192; a 32,768-token one at 12.4k / 15.9k / 17.6k (the grouped expert GEMMs' 128-token tiles fill up:
// 48 / 96 / 192 tokens per expert and pass). Each slot's window rings hold one chunk more than the window, so larger
// chunks cost state memory: 1.65 / 3.21 / 6.32 GB of rings for 64 sequences at 20 layers. 4,096 takes most of the
// gain for twice the rings of 2,048.
inline constexpr int kDefaultPrefillChunkTokens = 4096;
// Logits rows of one CUDA pass at least (every sequence of the largest decode bucket has one): a pass with more
// all-logits rows is cut so that its head fits.
inline constexpr int kMinHeadRows = 256;

struct StateOptions {
    int max_sequences = 1;
    int64_t max_context = 4096;  // tokens per sequence
    bool release_numerics = true;  // FP8 KV and FP4 indexer keys (production); false: bf16 (exact numerics)
    int n_layers = 0;              // the first n_layers layers (0 = all)
    int prefill_chunk_tokens = kDefaultPrefillChunkTokens;  // the CUDA backend's prefill chunk (the rings hold one more)
};

struct StateEstimate {
    int64_t kv_entry_bytes = 0, index_entry_bytes = 0;
    int ring_entries = 0;
    int64_t ring_bytes = 0;              // every layer's window rings, all slots
    int64_t compressor_state_bytes = 0;  // every compress layer's compressor state, all slots
    int64_t block_tokens = 256;
    int64_t block_bytes = 0;  // one block: every layer's entries for block_tokens tokens
    int64_t blocks = 0;       // max_sequences x blocks per sequence + the padding slot's block
    int64_t paged_bytes = 0;
    int64_t table_bytes = 0;  // the block tables on the device

    int64_t total() const { return ring_bytes + compressor_state_bytes + paged_bytes + table_bytes; }
};

StateEstimate estimate_state(const ModelConfig& cfg, const StateOptions& opt);

// The largest per-step buffers for passes of max(prefill chunk, the decode bucket of max_sequences) rows: residual and
// head streams, queries and attention output, logits (max(256, the decode bucket) rows of all of the vocabulary: the
// conservative side of a vocabulary-parallel head), routed-expert outputs, the indexer's selection workspace (grows
// with the context), the prepared activations, the grouped expert GEMMs' workspace and wo_a widened to bf16 (prefill).
// An estimate, not the allocation list.
int64_t estimate_step_buffer_bytes(const ModelConfig& cfg, const StateOptions& opt);

// Held back for the CUDA context, the kernel images, CUDA graphs and allocator slack.
constexpr int64_t kDeviceReserveBytes = int64_t(1) << 30;

struct RankMemory {
    int rank = 0;
    int64_t weights = 0, state = 0, buffers = 0, reserve = kDeviceReserveBytes;
    int64_t total() const { return weights + state + buffers + reserve; }
};
struct MemoryPlan {
    StateEstimate state;
    int64_t buffers = 0;
    std::vector<RankMemory> ranks;  // one per rank of the plan
    const RankMemory& largest_rank() const;
};
MemoryPlan plan_memory(const ShardPlan& plan, const StateOptions& opt);

// "" when every rank fits gpu_memory_bytes; otherwise the refusal: the rank that needs the most, its bytes by part,
// and the bytes the GPU has.
std::string fit_problem(const ShardPlan& plan, const MemoryPlan& memory, int64_t gpu_memory_bytes);
// Throws Error with fit_problem's message when the layout does not fit.
void require_fit(const ShardPlan& plan, const MemoryPlan& memory, int64_t gpu_memory_bytes);

// "156.23 GB (156234567890 bytes)": decimal gigabytes and the exact count.
std::string format_bytes(int64_t bytes);

}  // namespace flashseek
