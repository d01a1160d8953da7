// Per-rank checkpoint reading (shard_reader.h): validate each tensor of the scope against the inventory, slice it
// for the rank, and locate or copy the slice's bytes.
#include "model/shard_reader.h"

#include "util/error.h"

namespace flashseek {

namespace {

bool is_scale_name(const std::string& name) {
    return name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0;
}

// The routed experts' stored format when config.json does not say (the first expert's weight dtype).
ModelConfig with_stored_expert_format(const ModelConfig& cfg, const Checkpoint& ckpt) {
    ModelConfig c = cfg;
    if (!c.quantized() || c.expert_dtype_explicit) return c;
    if (const TensorView* w = ckpt.find("layers.0.ffn.experts.0.w1.weight")) {
        if (w->dtype == DType::F8_E4M3) c.expert_dtype = ExpertDtype::FP8;
        if (w->dtype == DType::I8) c.expert_dtype = ExpertDtype::FP4;
    }
    return c;
}

ByteRegion region_of(const TensorView& t, const TensorSlice& s) {
    switch (s.kind) {
        case SliceKind::Rows: return tensor_rows(t, s.begin, s.end);
        case SliceKind::Columns: return tensor_columns(t, s.begin, s.end);
        case SliceKind::Whole:
        case SliceKind::None: break;
    }
    return tensor_whole(t);
}

}  // namespace

ShardSources locate_shard(const Checkpoint& ckpt, const ModelConfig& cfg_in, const RankSlice& rank,
                          const ShardScope& scope_in) {
    ShardSources out;
    out.config = with_stored_expert_format(cfg_in, ckpt);
    const ModelConfig& cfg = out.config;
    ShardScope scope = scope_in;
    scope.f32_block_scales = false;
    FS_CHECK(scope.n_layers >= 0 && scope.n_layers <= cfg.num_hidden_layers,
             "layers {}: must be in [0, num_hidden_layers {}] (0 = all)", scope.n_layers, cfg.num_hidden_layers);
    InventoryOptions inv;
    inv.include_mtp = scope.include_mtp;
    std::vector<std::string> problems;
    for (const TensorSpec& spec : expected_tensors(cfg, inv)) {
        if (!tensor_in_scope(spec.name, scope)) continue;
        const TensorSlice slice = tensor_slice(spec.name, cfg, rank);
        if (slice.kind == SliceKind::None) {
            ++out.tensors_skipped;
            continue;
        }
        const TensorView* t = ckpt.find(spec.name);
        if (!t) {
            problems.push_back(fmt::format("missing tensor '{}' ({} {})", spec.name, dtype_name(spec.dtype),
                                           shape_to_string(spec.shape)));
            continue;
        }
        const bool dtype_ok = t->dtype == spec.dtype ||
                              (is_scale_name(spec.name) && (t->dtype == DType::F8_E8M0 || t->dtype == DType::F32));
        if (!dtype_ok || t->shape != spec.shape) {
            problems.push_back(fmt::format("tensor '{}': {} {}, expected {} {}", spec.name, dtype_name(t->dtype),
                                           t->shape_str(), dtype_name(spec.dtype), shape_to_string(spec.shape)));
            continue;
        }
        ShardTensorSource s;
        s.name = spec.name;
        s.dtype = t->dtype;
        s.full_shape = t->shape;
        s.shape = sliced_shape(t->shape, slice);
        s.slice = slice;
        s.source = region_of(*t, slice);
        out.bytes += s.source.bytes();
        out.tensors.push_back(std::move(s));
    }
    if (!problems.empty()) {
        constexpr size_t kMaxListed = 50;
        std::string msg = fmt::format("{}: cannot read the shard of rank {} ({}): {} problem{}:", ckpt.dir(),
                                      rank.rank, rank.layout.name(), problems.size(), problems.size() == 1 ? "" : "s");
        for (size_t i = 0; i < problems.size() && i < kMaxListed; ++i) msg += "\n  " + problems[i];
        if (problems.size() > kMaxListed) msg += fmt::format("\n  ... and {} more", problems.size() - kMaxListed);
        throw Error(msg);
    }
    return out;
}

const TensorData* ShardData::find(const std::string& name) const {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &tensors[it->second];
}

ShardData read_shard(const Checkpoint& ckpt, const ModelConfig& cfg, const RankSlice& rank, const ShardScope& scope) {
    const ShardSources sources = locate_shard(ckpt, cfg, rank, scope);
    ShardData out;
    out.tensors.reserve(sources.tensors.size());
    for (const ShardTensorSource& s : sources.tensors) {
        TensorData d{s.name, s.dtype, s.shape, std::vector<uint8_t>(s.source.bytes())};
        copy_region(s.source, d.bytes.data());
        out.bytes_read += d.bytes.size();
        out.by_name[d.name] = out.tensors.size();
        out.tensors.push_back(std::move(d));
        out.slices.push_back(s.slice);
    }
    return out;
}

}  // namespace flashseek
