// Parallel layouts of one DeepSeek-V4 model over several GPUs: which part of the model each rank holds, and for
// every checkpoint tensor (weights and their scale tensors) which part of it a rank needs.
//
// A layout is `tp` x `ep` ranks. Rank r = ep_rank * tp + tp_rank: the tp ranks of one expert group are consecutive,
// so a tensor-parallel all-reduce group is a run of neighbouring ranks (on one host, the GPUs with the fastest links
// between them when the GPU order follows the topology).
//
//  * Attention, tensor-parallel over the tp ranks of an expert group: query heads [head_begin, head_end) (rows of
//    `wq_b`, entries of `attn_sink`) and the `wo_a` output groups [group_begin, group_end) those heads feed (rows of
//    `wo_a`, columns of `wo_b`). The heads of group g are heads [g * H / G, (g + 1) * H / G) (docs/model.md §2.4
//    step 8), so tp must divide o_groups and a rank's heads are exactly its groups' heads. Each rank's `wo_b` gives a
//    partial sum of the attention output: the first all-reduce of a layer (over the tp ranks). The expert groups all
//    compute the same attention for every token (redundantly), so the attention's all-reduce never crosses them.
//  * Replicated on every rank: the single KV head (`wkv`, `kv_norm`), `wq_a` and `q_norm`, the compressors, the
//    indexer (its head sum needs every index head, and it is small), the norms, mHC, the router (`gate` weight,
//    bias, `tid2eid`), `hc_head` and the embedding.
//  * Routed experts, expert-parallel over the ep groups (experts [expert_begin, expert_end), contiguous; ep must
//    divide n_routed_experts) and tensor-parallel inside each expert over the tp ranks (intermediate columns
//    [inter_begin, inter_end): rows of `w1` / `w3`, columns of `w2`).
//  * The shared expert: its intermediate dimension is split over ALL ranks ([shared_inter_begin, shared_inter_end),
//    rank order), so no byte of it is held twice and every rank does 1 / ranks of its work. Its partial output joins
//    the routed experts' partial outputs in the MoE all-reduce (over all ranks), the second all-reduce of a layer.
//  * The head, vocabulary-parallel over all ranks: rows [vocab_begin, vocab_end) (the logits of those tokens; the
//    argmax / sampling combines per-rank results).
//
// Weight formats decide where a split may fall (docs/model.md §3.4); a layout that breaks a rule is refused with the
// key and the numbers. In a quantized checkpoint every split boundary of an FP8 matrix lies on a multiple of 128
// (its 128 x 128 scale blocks), and the routed experts' intermediate split lies on a multiple of 128 too: the packed
// FP4 `w2` needs multiples of 32 for its scales, and the `w2` input is quantized per 128 columns, which a split
// elsewhere would change. Unquantized (BF16) checkpoints have no such rule. The vocabulary split has no rule (BF16).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace flashseek {

constexpr int kMaxParallelRanks = 1024;

struct ParallelLayout {
    int tp = 1, ep = 1;

    int ranks() const { return tp * ep; }
    int tp_rank(int rank) const { return rank % tp; }
    int ep_rank(int rank) const { return rank / tp; }
    // "TP1", "TP2", "EP8", "TP2xEP2".
    std::string name() const;
};

// One degree given on the command line (`--tp 2`): a whole number in [1, kMaxParallelRanks]; the error names `flag`.
int parse_parallel_degree(const std::string& flag, const std::string& text);
// `--tp` and `--ep` together; also refuses a product above kMaxParallelRanks.
ParallelLayout parse_parallel_layout(const std::string& tp_text, const std::string& ep_text);

// Which part of the model rank `rank` holds (half-open ranges; see the top of this file).
struct RankSlice {
    ParallelLayout layout;
    int rank = 0, tp_rank = 0, ep_rank = 0;
    int head_begin = 0, head_end = 0;      // query heads
    int group_begin = 0, group_end = 0;    // wo_a output groups
    int expert_begin = 0, expert_end = 0;  // routed experts
    int64_t inter_begin = 0, inter_end = 0;                // intermediate columns of each held routed expert
    int64_t shared_inter_begin = 0, shared_inter_end = 0;  // intermediate columns of the shared expert
    int64_t vocab_begin = 0, vocab_end = 0;                // head rows

    bool holds_expert(int e) const { return e >= expert_begin && e < expert_end; }
};

// Validates the layout against the config and returns rank `rank`'s part; throws Error naming the key and the
// numbers when the model cannot be split this way (e.g. "tp 3 does not divide o_groups 8").
RankSlice rank_slice(const ModelConfig& cfg, const ParallelLayout& layout, int rank);
// Only the validation (rank_slice of rank 0 does the same).
void validate_layout(const ModelConfig& cfg, const ParallelLayout& layout);

// What a rank needs of one checkpoint tensor, in the tensor's own stored elements: for a packed FP4 weight a column
// is a byte (two values), for a scale tensor a row / column is a scale row / column.
enum class SliceKind {
    Whole,    // every byte
    Rows,     // dim 0 range [begin, end): one contiguous byte range of a row-major tensor
    Columns,  // dim 1 range [begin, end): a strided gather, one run per row
    None,     // nothing (another rank's experts)
};
struct TensorSlice {
    SliceKind kind = SliceKind::Whole;
    int64_t begin = 0, end = 0;  // Rows / Columns only

    bool operator==(const TensorSlice&) const = default;
};
const char* slice_kind_name(SliceKind k);

// The slice of checkpoint tensor `tensor_name` (a name of expected_tensors(), MTP included) that `rank` needs.
// Linear formats follow the config (quantization_config, expert_dtype). Throws Error naming the tensor when the
// name is no DeepSeek-V4 tensor.
TensorSlice tensor_slice(const std::string& tensor_name, const ModelConfig& cfg, const RankSlice& rank);
// The stored shape of `shape` after the slice (None: a zero-size dim 0).
std::vector<int64_t> sliced_shape(const std::vector<int64_t>& shape, const TensorSlice& slice);

// Whether every rank of every layout holds the tensor whole (true), or some layout divides it (false).
bool tensor_is_replicated(const std::string& tensor_name, const ModelConfig& cfg);

// The weight categories of a sharding plan.
enum class WeightCategory {
    Attention,           // wq_a, wq_b, wkv, wo_a, wo_b (+ scales), attn_sink
    CompressorsIndexer,  // attn.compressor.*, attn.indexer.* (its compressor included)
    RoutedExperts,       // ffn.experts.*
    SharedExpert,        // ffn.shared_experts.*
    RouterMhcNorms,      // ffn.gate.*, hc_*, every norm weight outside the compressors (q_norm, kv_norm included)
    Embedding,           // embed.weight
    Head,                // head.weight
    Mtp,                 // the MTP layers' own input projections, norms and hc_head (e_proj, h_proj, ...)
    kCount,
};
const char* weight_category_name(WeightCategory c);
WeightCategory weight_category(const std::string& tensor_name, const ModelConfig& cfg);

// One tensor's category, its slice for each of `ranks`, and whether each of them holds it whole (the name parsed
// once: what a plan over every tensor and rank uses).
struct TensorSharding {
    WeightCategory category;
    bool replicated = false;          // every entry of `ranks` holds the whole tensor
    std::vector<TensorSlice> slices;  // one per entry of `ranks`
};
TensorSharding tensor_sharding(const std::string& tensor_name, const ModelConfig& cfg,
                               const std::vector<RankSlice>& ranks);

// Which tensors a rank reads: the first n_layers layers (0 = all) and the globals, MTP layers on request.
struct ShardScope {
    int n_layers = 0;
    bool include_mtp = false;
    bool f32_block_scales = false;  // the stored scale dtype, for the byte counts only (shapes do not change)
};
// One checkpoint tensor as a rank holds it.
struct ShardTensorSpec {
    TensorSpec full;             // the checkpoint tensor
    TensorSlice slice;           // never None: tensors a rank does not hold are left out
    std::vector<int64_t> shape;  // its stored shape on the rank
    int64_t bytes = 0;           // of the slice
};
// The inventory (expected_tensors) of the scope, sliced for `rank`; tensors the rank does not hold are left out.
std::vector<ShardTensorSpec> shard_inventory(const ModelConfig& cfg, const RankSlice& rank, const ShardScope& scope);
// True when `name` is a global tensor, a layer below n_layers (0 = all), or (include_mtp) an MTP tensor.
bool tensor_in_scope(const std::string& name, const ShardScope& scope);

}  // namespace flashseek
