// Parallel layouts (sharding.h): layout parsing and validation, each rank's part of the model, and the per-tensor
// slices. A tensor name maps to one rule (how the tensor is divided, its weight category, whether it is a linear's
// weight or scale); the rule and the rank's ranges give the logical range, which the tensor's stored format turns
// into stored rows / columns (scale blocks, packed FP4 bytes).
#include "model/sharding.h"

#include <charconv>

#include "util/error.h"

namespace flashseek {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Parses a non-negative decimal integer; false when `text` is anything else.
bool parse_index(const std::string& text, int64_t* out) {
    if (text.empty() || text.size() > 9) return false;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), *out);
    return r.ec == std::errc() && r.ptr == text.data() + text.size() && *out >= 0;
}

// How a tensor is divided among ranks.
enum class Split {
    Replicated,
    HeadEntries,    // a per-head vector (attn_sink): entries [head_begin, head_end)
    HeadRows,       // rows [head_begin, head_end) x head_dim of a linear (wq_b)
    GroupRows,      // rows [group_begin, group_end) x o_lora_rank (wo_a)
    GroupColumns,   // columns [group_begin, group_end) x o_lora_rank (wo_b)
    ExpertRows,     // a routed expert's w1 / w3: rows [inter_begin, inter_end) when the rank holds the expert
    ExpertColumns,  // a routed expert's w2: columns [inter_begin, inter_end)
    SharedRows,     // the shared expert's w1 / w3: rows [shared_inter_begin, shared_inter_end)
    SharedColumns,  // the shared expert's w2
    VocabRows,      // head rows [vocab_begin, vocab_end)
};

enum class Part { Plain, Weight, Scale };

struct Rule {
    Split split = Split::Replicated;
    WeightCategory category = WeightCategory::RouterMhcNorms;
    Part part = Part::Plain;
    bool routed_expert = false;
    int expert = -1;
};

Part linear_part(const std::string& name) {
    if (ends_with(name, ".weight")) return Part::Weight;
    if (ends_with(name, ".scale")) return Part::Scale;
    return Part::Plain;
}

[[noreturn]] void unknown_tensor(const std::string& name) {
    fail("tensor '{}' is not a DeepSeek-V4 checkpoint tensor: no sharding rule for it", name);
}

// A linear `prefix.weight` / `prefix.scale` inside `suffix`, or nullopt.
bool is_linear(const std::string& suffix, const std::string& prefix) {
    return suffix == prefix + ".weight" || suffix == prefix + ".scale";
}

// Rule of a tensor inside a block (`layers.{L}.` or `mtp.{i}.`), by its suffix.
Rule block_rule(const std::string& name, const std::string& suffix, bool mtp, const ModelConfig& cfg) {
    using C = WeightCategory;
    if (suffix == "attn_norm.weight" || suffix == "ffn_norm.weight" || suffix == "attn.q_norm.weight" ||
        suffix == "attn.kv_norm.weight")
        return {Split::Replicated, C::RouterMhcNorms};
    for (const char* hc : {"hc_attn_", "hc_ffn_"})
        for (const char* leaf : {"fn", "base", "scale"})
            if (suffix == std::string(hc) + leaf) return {Split::Replicated, C::RouterMhcNorms};
    if (suffix == "attn.attn_sink") return {Split::HeadEntries, C::Attention};
    if (is_linear(suffix, "attn.wq_a") || is_linear(suffix, "attn.wkv")) return {Split::Replicated, C::Attention};
    if (is_linear(suffix, "attn.wq_b")) return {Split::HeadRows, C::Attention, linear_part(suffix)};
    if (is_linear(suffix, "attn.wo_a")) return {Split::GroupRows, C::Attention, linear_part(suffix)};
    if (is_linear(suffix, "attn.wo_b")) return {Split::GroupColumns, C::Attention, linear_part(suffix)};
    if (starts_with(suffix, "attn.compressor.") || starts_with(suffix, "attn.indexer."))
        return {Split::Replicated, C::CompressorsIndexer};
    if (suffix == "ffn.gate.weight" || suffix == "ffn.gate.bias" || suffix == "ffn.gate.tid2eid")
        return {Split::Replicated, C::RouterMhcNorms};
    if (is_linear(suffix, "ffn.shared_experts.w1") || is_linear(suffix, "ffn.shared_experts.w3"))
        return {Split::SharedRows, C::SharedExpert, linear_part(suffix)};
    if (is_linear(suffix, "ffn.shared_experts.w2")) return {Split::SharedColumns, C::SharedExpert, linear_part(suffix)};
    if (starts_with(suffix, "ffn.experts.")) {
        const std::string rest = suffix.substr(std::string("ffn.experts.").size());
        const size_t dot = rest.find('.');
        int64_t e = -1;
        if (dot == std::string::npos || !parse_index(rest.substr(0, dot), &e)) unknown_tensor(name);
        FS_CHECK(e < cfg.n_routed_experts, "tensor '{}': expert {} is outside [0, n_routed_experts {})", name, e,
                 cfg.n_routed_experts);
        const std::string leaf = rest.substr(dot + 1);
        Rule r;
        if (is_linear(leaf, "w1") || is_linear(leaf, "w3")) r.split = Split::ExpertRows;
        else if (is_linear(leaf, "w2")) r.split = Split::ExpertColumns;
        else unknown_tensor(name);
        r.category = C::RoutedExperts;
        r.part = linear_part(leaf);
        r.routed_expert = true;
        r.expert = int(e);
        return r;
    }
    if (mtp) {
        if (is_linear(suffix, "e_proj") || is_linear(suffix, "h_proj") || suffix == "enorm.weight" ||
            suffix == "hnorm.weight" || suffix == "norm.weight" || suffix == "hc_head_fn" ||
            suffix == "hc_head_base" || suffix == "hc_head_scale")
            return {Split::Replicated, C::Mtp};
    }
    unknown_tensor(name);
}

// Splits "layers.{L}.rest" / "mtp.{i}.rest": the block index and the rest; -1 for a global tensor.
struct BlockName {
    bool mtp = false;
    int64_t index = -1;
    std::string suffix;
};
BlockName split_block_name(const std::string& name) {
    BlockName b;
    for (const char* prefix : {"layers.", "mtp."}) {
        if (!starts_with(name, prefix)) continue;
        const size_t start = std::string(prefix).size();
        const size_t dot = name.find('.', start);
        if (dot == std::string::npos || !parse_index(name.substr(start, dot - start), &b.index)) unknown_tensor(name);
        b.mtp = prefix[0] == 'm';
        b.suffix = name.substr(dot + 1);
        return b;
    }
    b.suffix = name;
    return b;
}

Rule rule_of(const std::string& name, const ModelConfig& cfg) {
    using C = WeightCategory;
    const BlockName b = split_block_name(name);
    if (b.index >= 0) return block_rule(name, b.suffix, b.mtp, cfg);
    if (name == "embed.weight") return {Split::Replicated, C::Embedding};
    if (name == "head.weight") return {Split::VocabRows, C::Head};
    if (name == "norm.weight" || name == "hc_head_fn" || name == "hc_head_base" || name == "hc_head_scale")
        return {Split::Replicated, C::RouterMhcNorms};
    unknown_tensor(name);
}

// The stored format of a linear's tensors under this config (the inventory's rule, model/weights.cpp).
WeightFormat linear_format(const ModelConfig& cfg, bool routed_expert) {
    if (!cfg.quantized()) return WeightFormat::BF16;
    return routed_expert && cfg.expert_dtype == ExpertDtype::FP4 ? WeightFormat::FP4_BLOCK32
                                                                 : WeightFormat::FP8_BLOCK128;
}

struct LogicalRange {
    bool held = true;
    bool rows = true;  // dim 0 (else dim 1)
    int64_t begin = 0, end = 0, full = 0;
};

LogicalRange logical_range(const Rule& r, const ModelConfig& cfg, const RankSlice& s) {
    const int64_t hd = cfg.head_dim, olr = cfg.o_lora_rank;
    const int64_t shared = cfg.moe_intermediate_size * cfg.n_shared_experts;
    switch (r.split) {
        case Split::Replicated: return {true, true, 0, 0, 0};
        case Split::HeadEntries: return {true, true, s.head_begin, s.head_end, cfg.num_attention_heads};
        case Split::HeadRows:
            return {true, true, s.head_begin * hd, s.head_end * hd, int64_t(cfg.num_attention_heads) * hd};
        case Split::GroupRows: return {true, true, s.group_begin * olr, s.group_end * olr, cfg.o_groups * olr};
        case Split::GroupColumns: return {true, false, s.group_begin * olr, s.group_end * olr, cfg.o_groups * olr};
        case Split::ExpertRows:
        case Split::ExpertColumns:
            return {s.holds_expert(r.expert), r.split == Split::ExpertRows, s.inter_begin, s.inter_end,
                    cfg.moe_intermediate_size};
        case Split::SharedRows: return {true, true, s.shared_inter_begin, s.shared_inter_end, shared};
        case Split::SharedColumns: return {true, false, s.shared_inter_begin, s.shared_inter_end, shared};
        case Split::VocabRows: return {true, true, s.vocab_begin, s.vocab_end, cfg.vocab_size};
    }
    return {};
}

int64_t per_rank(int64_t total, int parts) { return total / parts; }

}  // namespace

std::string ParallelLayout::name() const {
    if (ep == 1) return fmt::format("TP{}", tp);
    if (tp == 1) return fmt::format("EP{}", ep);
    return fmt::format("TP{}xEP{}", tp, ep);
}

int parse_parallel_degree(const std::string& flag, const std::string& text) {
    int64_t v = 0;
    FS_CHECK(parse_index(text, &v) && v >= 1 && v <= kMaxParallelRanks,
             "{} '{}': expected a whole number of GPUs in [1, {}]", flag, text, kMaxParallelRanks);
    return int(v);
}

ParallelLayout parse_parallel_layout(const std::string& tp_text, const std::string& ep_text) {
    ParallelLayout l;
    l.tp = parse_parallel_degree("--tp", tp_text);
    l.ep = parse_parallel_degree("--ep", ep_text);
    FS_CHECK(l.ranks() <= kMaxParallelRanks, "--tp {} x --ep {} = {} ranks, more than the {} supported", l.tp, l.ep,
             l.ranks(), kMaxParallelRanks);
    return l;
}

void validate_layout(const ModelConfig& cfg, const ParallelLayout& l) {
    const std::string n = l.name();
    FS_CHECK(l.tp >= 1 && l.ep >= 1 && l.ranks() <= kMaxParallelRanks,
             "layout {}: tp {} and ep {} must be >= 1 with at most {} ranks", n, l.tp, l.ep, kMaxParallelRanks);
    FS_CHECK(cfg.o_groups % l.tp == 0, "layout {}: tp {} does not divide o_groups {} (each wo_a output group and its "
             "{} query heads must lie on one rank)", n, l.tp, cfg.o_groups, cfg.num_attention_heads / cfg.o_groups);
    FS_CHECK(cfg.n_routed_experts % l.ep == 0, "layout {}: ep {} does not divide n_routed_experts {}", n, l.ep,
             cfg.n_routed_experts);
    FS_CHECK(cfg.moe_intermediate_size % l.tp == 0, "layout {}: tp {} does not divide moe_intermediate_size {}", n,
             l.tp, cfg.moe_intermediate_size);
    const int64_t shared = cfg.moe_intermediate_size * cfg.n_shared_experts;
    FS_CHECK(shared % l.ranks() == 0, "layout {}: the {} ranks do not divide the shared expert's intermediate size {} "
             "(moe_intermediate_size {} x n_shared_experts {}), which is split over every rank", n, l.ranks(), shared,
             cfg.moe_intermediate_size, cfg.n_shared_experts);
    FS_CHECK(cfg.vocab_size >= l.ranks(), "layout {}: vocab_size {} is smaller than the {} ranks of the "
             "vocabulary-parallel head", n, cfg.vocab_size, l.ranks());
    if (!cfg.quantized()) return;
    // Quantized checkpoints: every split boundary on the 128 grid (see sharding.h). All ranks get equal parts, so
    // checking one part's size checks every boundary.
    constexpr int64_t kBlock = 128;
    if (l.tp > 1) {
        const int64_t heads = cfg.num_attention_heads / l.tp, groups = cfg.o_groups / l.tp;
        const int64_t q_rows = heads * cfg.head_dim, o_rows = groups * cfg.o_lora_rank;
        const int64_t inter = cfg.moe_intermediate_size / l.tp;
        FS_CHECK(q_rows % kBlock == 0, "layout {}: each rank's {} query heads x head_dim {} = {} rows of attn.wq_b are "
                 "not a multiple of {} (the FP8 weight block)", n, heads, cfg.head_dim, q_rows, kBlock);
        FS_CHECK(o_rows % kBlock == 0, "layout {}: each rank's {} output groups x o_lora_rank {} = {} rows of "
                 "attn.wo_a (columns of attn.wo_b) are not a multiple of {} (the FP8 weight block)", n, groups,
                 cfg.o_lora_rank, o_rows, kBlock);
        FS_CHECK(inter % kBlock == 0, "layout {}: moe_intermediate_size {} / tp {} = {} intermediate columns per rank "
                 "are not a multiple of {} ({})", n, cfg.moe_intermediate_size, l.tp, inter, kBlock,
                 cfg.expert_dtype == ExpertDtype::FP4
                     ? "the routed experts' w2 input is quantized in blocks of 128 columns"
                     : "the FP8 weight block");
    }
    if (l.ranks() > 1) {
        const int64_t part = shared / l.ranks();
        FS_CHECK(part % kBlock == 0, "layout {}: the shared expert's intermediate size {} over {} ranks = {} per rank "
                 "is not a multiple of {} (the FP8 weight block)", n, shared, l.ranks(), part, kBlock);
    }
}

RankSlice rank_slice(const ModelConfig& cfg, const ParallelLayout& layout, int rank) {
    validate_layout(cfg, layout);
    FS_CHECK(rank >= 0 && rank < layout.ranks(), "layout {}: rank {} is outside [0, {})", layout.name(), rank,
             layout.ranks());
    RankSlice s;
    s.layout = layout;
    s.rank = rank;
    s.tp_rank = layout.tp_rank(rank);
    s.ep_rank = layout.ep_rank(rank);
    const int heads = int(per_rank(cfg.num_attention_heads, layout.tp));
    const int groups = int(per_rank(cfg.o_groups, layout.tp));
    s.head_begin = s.tp_rank * heads;
    s.head_end = s.head_begin + heads;
    s.group_begin = s.tp_rank * groups;
    s.group_end = s.group_begin + groups;
    const int experts = int(per_rank(cfg.n_routed_experts, layout.ep));
    s.expert_begin = s.ep_rank * experts;
    s.expert_end = s.expert_begin + experts;
    const int64_t inter = per_rank(cfg.moe_intermediate_size, layout.tp);
    s.inter_begin = s.tp_rank * inter;
    s.inter_end = s.inter_begin + inter;
    const int64_t shared = per_rank(cfg.moe_intermediate_size * cfg.n_shared_experts, layout.ranks());
    s.shared_inter_begin = rank * shared;
    s.shared_inter_end = s.shared_inter_begin + shared;
    // Balanced contiguous vocabulary ranges (the BF16 head has no alignment rule); sizes differ by at most one row.
    s.vocab_begin = cfg.vocab_size * rank / layout.ranks();
    s.vocab_end = cfg.vocab_size * (rank + 1) / layout.ranks();
    return s;
}

const char* slice_kind_name(SliceKind k) {
    switch (k) {
        case SliceKind::Whole: return "whole";
        case SliceKind::Rows: return "rows";
        case SliceKind::Columns: return "columns";
        case SliceKind::None: return "none";
    }
    return "?";
}

namespace {

TensorSlice apply_rule(const Rule& r, const std::string& name, const ModelConfig& cfg, const RankSlice& rank) {
    if (r.split == Split::Replicated) return {};
    const LogicalRange g = logical_range(r, cfg, rank);
    if (!g.held) return {SliceKind::None, 0, 0};
    if (g.begin == 0 && g.end == g.full) return {};
    const SliceKind kind = g.rows ? SliceKind::Rows : SliceKind::Columns;
    if (r.part == Part::Plain) return {kind, g.begin, g.end};
    const WeightFormat f = linear_format(cfg, r.routed_expert);
    FS_CHECK(!(r.part == Part::Scale && f == WeightFormat::BF16),
             "tensor '{}': this config has no quantization_config, so its linears have no scale tensors", name);
    // Logical [begin, end) -> stored elements (docs/model.md §3.4).
    if (r.part == Part::Weight) {
        if (g.rows || f != WeightFormat::FP4_BLOCK32) return {kind, g.begin, g.end};
        return {kind, g.begin / 2, g.end / 2};  // two FP4 values per byte along the input dim
    }
    if (f == WeightFormat::FP8_BLOCK128) return {kind, g.begin / 128, ceil_div(g.end, 128)};
    if (g.rows) return {kind, g.begin, g.end};  // FP4: one scale row per weight row
    return {kind, g.begin / 32, g.end / 32};     // FP4: one scale per 32 inputs
}

}  // namespace

TensorSlice tensor_slice(const std::string& name, const ModelConfig& cfg, const RankSlice& rank) {
    return apply_rule(rule_of(name, cfg), name, cfg, rank);
}

TensorSharding tensor_sharding(const std::string& name, const ModelConfig& cfg, const std::vector<RankSlice>& ranks) {
    const Rule r = rule_of(name, cfg);
    TensorSharding t{r.category, true, {}};
    t.slices.reserve(ranks.size());
    for (const RankSlice& rank : ranks) {
        t.slices.push_back(apply_rule(r, name, cfg, rank));
        t.replicated = t.replicated && t.slices.back().kind == SliceKind::Whole;
    }
    return t;
}

std::vector<int64_t> sliced_shape(const std::vector<int64_t>& shape, const TensorSlice& slice) {
    std::vector<int64_t> s = shape;
    switch (slice.kind) {
        case SliceKind::Whole: break;
        case SliceKind::Rows: s.at(0) = slice.end - slice.begin; break;
        case SliceKind::Columns: s.at(1) = slice.end - slice.begin; break;
        case SliceKind::None: s.at(0) = 0; break;
    }
    return s;
}

bool tensor_is_replicated(const std::string& name, const ModelConfig& cfg) {
    return rule_of(name, cfg).split == Split::Replicated;
}

const char* weight_category_name(WeightCategory c) {
    switch (c) {
        case WeightCategory::Attention: return "attention";
        case WeightCategory::CompressorsIndexer: return "compressors + indexer";
        case WeightCategory::RoutedExperts: return "routed experts";
        case WeightCategory::SharedExpert: return "shared expert";
        case WeightCategory::RouterMhcNorms: return "router + mHC + norms";
        case WeightCategory::Embedding: return "embedding";
        case WeightCategory::Head: return "head";
        case WeightCategory::Mtp: return "MTP projections";
        case WeightCategory::kCount: break;
    }
    return "?";
}

WeightCategory weight_category(const std::string& name, const ModelConfig& cfg) { return rule_of(name, cfg).category; }

bool tensor_in_scope(const std::string& name, const ShardScope& scope) {
    if (starts_with(name, "mtp.")) return scope.include_mtp;
    if (!starts_with(name, "layers.")) return true;
    if (scope.n_layers == 0) return true;
    const BlockName b = split_block_name(name);
    return b.index < scope.n_layers;
}

std::vector<ShardTensorSpec> shard_inventory(const ModelConfig& cfg, const RankSlice& rank, const ShardScope& scope) {
    FS_CHECK(scope.n_layers >= 0 && scope.n_layers <= cfg.num_hidden_layers,
             "layers {}: must be in [0, num_hidden_layers {}] (0 = all)", scope.n_layers, cfg.num_hidden_layers);
    InventoryOptions inv;
    inv.include_mtp = scope.include_mtp;
    inv.f32_block_scales = scope.f32_block_scales;
    std::vector<ShardTensorSpec> out;
    for (TensorSpec& t : expected_tensors(cfg, inv)) {
        if (!tensor_in_scope(t.name, scope)) continue;
        ShardTensorSpec s;
        s.slice = tensor_slice(t.name, cfg, rank);
        if (s.slice.kind == SliceKind::None) continue;
        s.shape = sliced_shape(t.shape, s.slice);
        s.bytes = int64_t(dtype_size(t.dtype));
        for (int64_t d : s.shape) s.bytes *= d;
        s.full = std::move(t);
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace flashseek
