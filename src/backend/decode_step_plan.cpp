// The attention sub-block's graph for the persistent step's planner (decode_step_plan.h).
#include "backend/decode_step_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "loader/safetensors.h"
#include "model/weights.h"
#include "util/error.h"

namespace flashseek {

namespace {

struct CostField {
    const char* name;
    double SubblockCosts::*field;
};
constexpr CostField kCostFields[] = {
    {"tile_bytes", &SubblockCosts::tile_bytes},
    {"us_per_kweight", &SubblockCosts::us_per_kweight},
    {"mhc_finalize_us", &SubblockCosts::mhc_finalize_us},
    {"q_norm_us", &SubblockCosts::q_norm_us},
    {"q_head_norm_rope_us", &SubblockCosts::q_head_norm_rope_us},
    {"kv_store_us", &SubblockCosts::kv_store_us},
    {"compressor_us", &SubblockCosts::compressor_us},
    {"indexer_q_us", &SubblockCosts::indexer_q_us},
    {"indexer_select_us", &SubblockCosts::indexer_select_us},
    {"attention_us", &SubblockCosts::attention_us},
};

// The ops that run beside the query path (the CUDA backend's side branches today); every other op is the query
// path's. The indexer's query projection reads the normed q latent, so it belongs to the query path.
const char* const kBranchOps[] = {"wkv",
                                  "kv norm + rope + store",
                                  "compressor gemv",
                                  "compressor",
                                  "indexer.compressor gemv",
                                  "indexer.compressor",
                                  "indexer.weights_proj"};

bool is_branch(const std::string& name) {
    return std::any_of(std::begin(kBranchOps), std::end(kBranchOps), [&](const char* b) { return name == b; });
}

// Bytes and element counts of the layer's tensors, by name without the "layers.{L}." prefix.
struct TensorSizes {
    std::map<std::string, std::pair<double, double>> by_name;  // bytes, elements
    double bytes(const std::string& n) const { return get(n).first; }
    double elements(const std::string& n) const { return get(n).second; }
    const std::pair<double, double>& get(const std::string& n) const {
        const auto it = by_name.find(n);
        FS_CHECK(it != by_name.end(), "attention sub-block graph: the inventory has no tensor '{}'", n);
        return it->second;
    }
    bool has(const std::string& n) const { return by_name.count(n) != 0; }
};

TensorSizes layer_tensors(const ModelConfig& cfg, int layer) {
    InventoryOptions opt;
    opt.include_mtp = false;
    const std::string prefix = fmt::format("layers.{}.", layer);
    TensorSizes t;
    for (const TensorSpec& s : expected_tensors(cfg, opt)) {
        if (s.name.compare(0, prefix.size(), prefix) != 0) continue;
        double n = 1;
        for (int64_t d : s.shape) n *= double(d);
        t.by_name[s.name.substr(prefix.size())] = {n * double(dtype_size(s.dtype)), n};
    }
    return t;
}

}  // namespace

void set_subblock_cost(SubblockCosts& c, const std::string& name, double value) {
    for (const CostField& f : kCostFields)
        if (name == f.name) {
            FS_CHECK(std::isfinite(value) && value >= 0 && (name != "tile_bytes" || value >= 1),
                     "sub-block cost '{}' must be a number >= 0 (tile_bytes >= 1), got {}", name, value);
            c.*f.field = value;
            return;
        }
    std::string known;
    for (const CostField& f : kCostFields) known += std::string(known.empty() ? "" : ", ") + f.name;
    fail("unknown sub-block cost '{}'; the costs are: {}", name, known);
}

std::vector<std::string> subblock_cost_names() {
    std::vector<std::string> v;
    for (const CostField& f : kCostFields) v.emplace_back(f.name);
    return v;
}

StepGraph attention_subblock_graph(const ModelConfig& cfg, int layer, const SubblockCosts& costs) {
    FS_CHECK(layer >= 0 && layer < cfg.num_hidden_layers, "attention sub-block graph: layer {} is not in [0, {})", layer,
             cfg.num_hidden_layers);
    FS_CHECK(costs.tile_bytes >= 1, "attention sub-block graph: tile_bytes must be >= 1, got {}", costs.tile_bytes);
    const TensorSizes t = layer_tensors(cfg, layer);
    const int ratio = cfg.ratio(layer);
    StepGraph g;
    // A weight-streaming op: its bytes in even tiles of at most tile_bytes, each tile's arithmetic by its weights.
    auto streaming = [&](const std::string& name, double bytes, double weights, std::vector<int> after) {
        ScheduleOp op;
        op.name = name;
        op.tiles = std::max(1, int(std::ceil(bytes / costs.tile_bytes)));
        op.tile_bytes = bytes / op.tiles;
        op.tile_compute_us = weights / op.tiles / 1024.0 * costs.us_per_kweight;
        op.after = std::move(after);
        return g.add(std::move(op));
    };
    // A latency-bound op: one tile (its small weights, e.g. a norm vector, ride along).
    auto latency = [&](const std::string& name, double bytes, double us, std::vector<int> after) {
        ScheduleOp op;
        op.name = name;
        op.tile_bytes = bytes;
        op.tile_compute_us = us;
        op.after = std::move(after);
        return g.add(std::move(op));
    };
    auto linear = [&](const std::string& name, const std::string& tensor, std::vector<int> after) {
        const double bytes = t.bytes(tensor + ".weight") + (t.has(tensor + ".scale") ? t.bytes(tensor + ".scale") : 0);
        return streaming(name, bytes, t.elements(tensor + ".weight"), std::move(after));
    };

    const int partial = streaming("mhc_pre partial", t.bytes("hc_attn_fn") + t.bytes("hc_attn_base") + t.bytes("hc_attn_scale"),
                                  t.elements("hc_attn_fn"), {});
    const int fin = latency("mhc_pre finalize", t.bytes("attn_norm.weight"), costs.mhc_finalize_us, {partial});
    // The query path.
    const int wq_a = linear("wq_a", "attn.wq_a", {fin});
    const int q_norm = latency("q_norm", t.bytes("attn.q_norm.weight"), costs.q_norm_us, {wq_a});
    const int wq_b = linear("wq_b", "attn.wq_b", {q_norm});
    const int q_rope = latency("q head norm + rope", 0, costs.q_head_norm_rope_us, {wq_b});
    // The branches and what the attention waits for.
    std::vector<int> attention_inputs = {q_rope};
    const int wkv = linear("wkv", "attn.wkv", {fin});
    attention_inputs.push_back(latency("kv norm + rope + store", t.bytes("attn.kv_norm.weight"), costs.kv_store_us, {wkv}));
    auto compressor = [&](const std::string& name, const std::string& prefix) {
        const double gemv_bytes = t.bytes(prefix + "wkv.weight") + t.bytes(prefix + "wgate.weight");
        const double gemv_weights = t.elements(prefix + "wkv.weight") + t.elements(prefix + "wgate.weight");
        const int gemv = streaming(name + " gemv", gemv_bytes, gemv_weights, {fin});
        return latency(name, t.bytes(prefix + "ape") + t.bytes(prefix + "norm.weight"), costs.compressor_us, {gemv});
    };
    if (ratio > 0) attention_inputs.push_back(compressor("compressor", "attn.compressor."));
    if (ratio == 4) {
        const int icomp = compressor("indexer.compressor", "attn.indexer.compressor.");
        const int iwq_b = linear("indexer.wq_b", "attn.indexer.wq_b", {q_norm});
        const int iq = latency("indexer.q prepare", 0, costs.indexer_q_us, {iwq_b});
        const int iw = streaming("indexer.weights_proj", t.bytes("attn.indexer.weights_proj.weight"),
                                 t.elements("attn.indexer.weights_proj.weight"), {fin});
        attention_inputs.push_back(latency("indexer.select", 0, costs.indexer_select_us, {iq, iw, icomp}));
    }
    const int attention = latency("attention", t.bytes("attn.attn_sink"), costs.attention_us, attention_inputs);
    const int wo_a = linear("wo_a", "attn.wo_a", {attention});
    linear("wo_b", "attn.wo_b", {wo_a});
    const std::string bad = graph_problem(g);
    FS_CHECK(bad.empty(), "attention sub-block graph: {}", bad);  // a defect of the builder above, not of the input
    return g;
}

std::vector<int> subblock_order(const StepGraph& g, bool query_first) {
    // Stable partition of the build order (already a dependency order) by stream, then repaired: an op that reads a
    // later op of the other stream (indexer.select reads both) moves behind it. Kahn over the graph with the
    // preferred stream first gives exactly that.
    const int n = int(g.ops.size());
    std::vector<int> pending(size_t(n), 0);
    std::vector<std::vector<int>> consumers(g.ops.size());
    for (int i = 0; i < n; ++i)
        for (int d : g.ops[size_t(i)].after) {
            ++pending[size_t(i)];
            consumers[size_t(d)].push_back(i);
        }
    auto preferred = [&](int op) { return is_branch(g.ops[size_t(op)].name) != query_first; };
    std::vector<int> order;
    std::vector<bool> placed(size_t(n), false);
    while (int(order.size()) < n) {
        int pick = -1;
        for (int pass = 0; pass < 2 && pick < 0; ++pass)
            for (int i = 0; i < n && pick < 0; ++i)
                if (!placed[size_t(i)] && pending[size_t(i)] == 0 && (pass == 1 || preferred(i))) pick = i;
        FS_CHECK(pick >= 0, "sub-block order: the graph has a dependency cycle");
        placed[size_t(pick)] = true;
        order.push_back(pick);
        for (int c : consumers[size_t(pick)]) --pending[size_t(c)];
    }
    return order;
}

}  // namespace flashseek
