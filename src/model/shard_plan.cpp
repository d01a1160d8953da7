// plan_layout (shard_plan.h): one walk over the inventory, each tensor sliced for every rank.
#include "model/shard_plan.h"

#include <algorithm>

#include "util/error.h"

namespace flashseek {

int64_t CategoryBytes::total() const {
    int64_t n = 0;
    for (int64_t b : bytes) n += b;
    return n;
}

const RankPlan& ShardPlan::largest_rank() const {
    FS_CHECK(!ranks.empty(), "sharding plan {}: no ranks", layout.name());
    return *std::max_element(ranks.begin(), ranks.end(),
                             [](const RankPlan& a, const RankPlan& b) { return a.total() < b.total(); });
}

CommunicationPlan communication_plan(const ModelConfig& cfg, const ParallelLayout& layout, int n_layers,
                                     int element_bytes) {
    FS_CHECK(element_bytes == 2 || element_bytes == 4,
             "sharding plan: the all-reduce element must be 2 (bf16) or 4 (fp32) bytes, got {}", element_bytes);
    const int R = layout.ranks();
    CommunicationPlan c;
    c.element_bytes = element_bytes;
    c.attention_group = layout.tp;
    c.moe_group = R;
    const int64_t message = cfg.hidden_size * element_bytes;
    c.attention_bytes = layout.tp > 1 ? message : 0;
    c.moe_bytes = R > 1 ? message : 0;
    c.allreduces_per_step = n_layers * ((layout.tp > 1 ? 1 : 0) + (R > 1 ? 1 : 0));
    c.head_gather_bytes = R > 1 ? int64_t(R) * 8 : 0;  // fp32 logit + int32 token id per rank
    return c;
}

ShardPlan plan_layout(const ModelConfig& cfg, const ParallelLayout& layout, int n_layers, const PlanOptions& opt) {
    FS_CHECK(n_layers >= 0 && n_layers <= cfg.num_hidden_layers,
             "layers {}: must be in [0, num_hidden_layers {}] (0 = all)", n_layers, cfg.num_hidden_layers);
    ShardPlan plan;
    plan.layout = layout;
    plan.config = cfg;
    plan.n_layers = n_layers == 0 ? cfg.num_hidden_layers : n_layers;
    const int R = layout.ranks();
    for (int r = 0; r < R; ++r) {
        RankPlan rp;
        rp.slice = rank_slice(cfg, layout, r);
        rp.experts_per_layer = rp.slice.expert_end - rp.slice.expert_begin;
        plan.ranks.push_back(rp);
    }
    std::vector<RankSlice> slices;
    for (const RankPlan& rp : plan.ranks) slices.push_back(rp.slice);

    ShardScope scope;
    scope.n_layers = plan.n_layers;
    scope.include_mtp = opt.include_mtp;
    InventoryOptions inv;
    inv.include_mtp = opt.include_mtp;
    for (const TensorSpec& t : expected_tensors(cfg, inv)) {
        if (!tensor_in_scope(t.name, scope)) continue;
        int64_t numel = 1;
        for (int64_t d : t.shape) numel *= d;
        plan.model_bytes += numel * int64_t(dtype_size(t.dtype));
        const TensorSharding sh = tensor_sharding(t.name, cfg, slices);
        for (size_t r = 0; r < plan.ranks.size(); ++r) {
            const TensorSlice& s = sh.slices[r];
            if (s.kind == SliceKind::None) continue;
            int64_t bytes = int64_t(dtype_size(t.dtype));
            for (int64_t d : sliced_shape(t.shape, s)) bytes *= d;
            RankPlan& rp = plan.ranks[r];
            rp.held[sh.category] += bytes;
            (sh.replicated ? rp.replicated_bytes : rp.sharded_bytes) += bytes;
        }
    }
    for (RankPlan& rp : plan.ranks) {
        const int64_t held_experts = int64_t(plan.n_layers) * rp.experts_per_layer;
        rp.routed_expert_bytes = held_experts ? rp.held[WeightCategory::RoutedExperts] / held_experts : 0;
    }

    plan.comm = communication_plan(cfg, layout, plan.n_layers, opt.comm_element_bytes);
    return plan;
}

}  // namespace flashseek
