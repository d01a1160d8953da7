// The attention sub-block's graph for the persistent step's planner (decode_step_plan.h).
#include "backend/decode_step_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
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
    {"us_per_kweight_fp4", &SubblockCosts::us_per_kweight_fp4},
    {"mhc_finalize_us", &SubblockCosts::mhc_finalize_us},
    {"q_norm_us", &SubblockCosts::q_norm_us},
    {"q_head_norm_rope_us", &SubblockCosts::q_head_norm_rope_us},
    {"kv_store_us", &SubblockCosts::kv_store_us},
    {"compressor_us", &SubblockCosts::compressor_us},
    {"indexer_q_us", &SubblockCosts::indexer_q_us},
    {"indexer_select_us", &SubblockCosts::indexer_select_us},
    {"attention_us", &SubblockCosts::attention_us},
    {"route_group_us", &SubblockCosts::route_group_us},
    {"quantize_h_us", &SubblockCosts::quantize_h_us},
    {"combine_us", &SubblockCosts::combine_us},
    {"sample_us", &SubblockCosts::sample_us},
};

// The ops that run beside the main path (the CUDA backend's side branches today); every other op is the main path's.
// The indexer's query projection reads the normed q latent, so it belongs to the query path. Names in a whole step
// carry a layer label ("L3 wkv").
const char* const kBranchOps[] = {"wkv",
                                  "kv norm + rope + store",
                                  "compressor gemv",
                                  "compressor",
                                  "indexer.compressor gemv",
                                  "indexer.compressor",
                                  "indexer.weights_proj",
                                  "shared up",
                                  "shared down"};

bool is_branch(const std::string& name) {
    const std::string kind = op_kind(name);
    return std::any_of(std::begin(kBranchOps), std::end(kBranchOps), [&](const char* b) { return kind == b; });
}

// Bytes and logical weight counts of the model's tensors (every layer, no MTP), by name. Packed FP4 (I8) holds two
// weights per byte.
struct TensorSizes {
    struct Size {
        double bytes = 0, weights = 0;
        bool fp4 = false;  // packed e2m1 (I8): two weights per byte
    };
    std::map<std::string, Size> by_name;
    explicit TensorSizes(const ModelConfig& cfg) {
        InventoryOptions opt;
        opt.include_mtp = false;
        for (const TensorSpec& s : expected_tensors(cfg, opt)) {
            double n = 1;
            for (int64_t d : s.shape) n *= double(d);
            const bool fp4 = s.dtype == DType::I8;
            by_name[s.name] = {n * double(dtype_size(s.dtype)), fp4 ? 2 * n : n, fp4};
        }
    }
    const Size& get(const std::string& n) const {
        const auto it = by_name.find(n);
        FS_CHECK(it != by_name.end(), "decode step graph: the inventory has no tensor '{}'", n);
        return it->second;
    }
    double bytes(const std::string& n) const { return get(n).bytes; }
    double weights(const std::string& n) const { return get(n).weights; }
    bool has(const std::string& n) const { return by_name.count(n) != 0; }
    bool is_fp4(const std::string& n) const { return get(n).fp4; }
};

// Appends ops to a graph: weight-streaming ops as even tiles of at most tile_bytes (each tile's arithmetic by its
// weights), latency-bound ops as one tile; names carry `label` ("" or "L3 ").
class GraphBuilder {
public:
    GraphBuilder(StepGraph& g, const ModelConfig& cfg, const TensorSizes& t, const SubblockCosts& costs)
        : g_(g), cfg_(cfg), t_(t), c_(costs) {
        FS_CHECK(c_.tile_bytes >= 1, "decode step graph: tile_bytes must be >= 1, got {}", c_.tile_bytes);
    }

    // Layer `layer`'s attention sub-block, reading op `input` (-1: none); returns its last op (wo_b).
    int attention(int layer, int input, const std::string& label) {
        const std::string p = fmt::format("layers.{}.", layer);
        label_ = label;
        const int ratio = cfg_.ratio(layer);
        const int partial = streaming("mhc_pre partial", bytes_of(p, {"hc_attn_fn", "hc_attn_base", "hc_attn_scale"}),
                                      t_.weights(p + "hc_attn_fn"), deps(input), {});
        const int fin = latency("mhc_pre finalize", t_.bytes(p + "attn_norm.weight"), c_.mhc_finalize_us, {partial});
        // The query path.
        const int wq_a = linear("wq_a", p + "attn.wq_a", {fin});
        const int q_norm = latency("q_norm", t_.bytes(p + "attn.q_norm.weight"), c_.q_norm_us, {wq_a});
        const int wq_b = linear("wq_b", p + "attn.wq_b", {q_norm});
        const int q_rope = latency("q head norm + rope", 0, c_.q_head_norm_rope_us, {wq_b});
        // The branches and what the attention waits for.
        std::vector<int> attention_inputs = {q_rope};
        const int wkv = linear("wkv", p + "attn.wkv", {fin});
        attention_inputs.push_back(
            latency("kv norm + rope + store", t_.bytes(p + "attn.kv_norm.weight"), c_.kv_store_us, {wkv}));
        auto compressor = [&](const std::string& name, const std::string& prefix) {
            const int gemv = streaming(name + " gemv", bytes_of(prefix, {"wkv.weight", "wgate.weight"}),
                                       t_.weights(prefix + "wkv.weight") + t_.weights(prefix + "wgate.weight"), {fin}, {});
            return latency(name, bytes_of(prefix, {"ape", "norm.weight"}), c_.compressor_us, {gemv});
        };
        if (ratio > 0) attention_inputs.push_back(compressor("compressor", p + "attn.compressor."));
        if (ratio == 4) {
            const int icomp = compressor("indexer.compressor", p + "attn.indexer.compressor.");
            const int iwq_b = linear("indexer.wq_b", p + "attn.indexer.wq_b", {q_norm});
            const int iq = latency("indexer.q prepare", 0, c_.indexer_q_us, {iwq_b});
            const std::string wp = p + "attn.indexer.weights_proj.weight";
            const int iw = streaming("indexer.weights_proj", t_.bytes(wp), t_.weights(wp), {fin}, {});
            attention_inputs.push_back(latency("indexer.select", 0, c_.indexer_select_us, {iq, iw, icomp}));
        }
        const int att = latency("attention", t_.bytes(p + "attn.attn_sink"), c_.attention_us, attention_inputs);
        const int wo_a = linear("wo_a", p + "attn.wo_a", {att});
        return linear("wo_b", p + "attn.wo_b", {wo_a});
    }

    // Layer `layer`'s MoE sub-block (the attention's mHC post folded into its mHC pre, as the CUDA step runs it),
    // reading op `input`; returns its last op (the combine and mHC post). The routed experts' rows are known only
    // after the routing: their bytes wait for it (bytes_after); the shared expert's stream from the start.
    int moe(int layer, int input, const std::string& label) {
        const std::string p = fmt::format("layers.{}.", layer), f = p + "ffn.";
        label_ = label;
        const int partial = streaming("mhc_pre partial (ffn)", bytes_of(p, {"hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale"}),
                                      t_.weights(p + "hc_ffn_fn"), deps(input), {});
        const int fin = latency("mhc_pre finalize (ffn)", t_.bytes(p + "ffn_norm.weight"), c_.mhc_finalize_us, {partial});
        const int router = streaming("router", t_.bytes(f + "gate.weight"), t_.weights(f + "gate.weight"), {fin}, {});
        const double bias = t_.has(f + "gate.bias") ? t_.bytes(f + "gate.bias") : 0;  // hash layers: a table lookup
        const int route = latency("route + group", bias, c_.route_group_us, {router});
        const int k = cfg_.num_experts_per_tok;
        const std::string e0 = f + "experts.0.";
        const int up = streaming("routed up", k * linear_bytes(e0 + "w1") + k * linear_bytes(e0 + "w3"),
                                 k * (t_.weights(e0 + "w1.weight") + t_.weights(e0 + "w3.weight")), {route}, {route},
                                 expert_cost(e0 + "w1.weight"));
        const int h = latency("quantize h", 0, c_.quantize_h_us, {up});
        const int down = streaming("routed down", k * linear_bytes(e0 + "w2"), k * t_.weights(e0 + "w2.weight"), {h},
                                   {route}, expert_cost(e0 + "w2.weight"));
        const int sh_up = streaming("shared up", linear_bytes(f + "shared_experts.w1") + linear_bytes(f + "shared_experts.w3"),
                                    t_.weights(f + "shared_experts.w1.weight") + t_.weights(f + "shared_experts.w3.weight"),
                                    {fin}, {});
        const int sh_down = linear("shared down", f + "shared_experts.w2", {sh_up});
        return latency("combine + mhc_post", 0, c_.combine_us, {down, sh_down});
    }

    // The head after op `input`: its mHC and the final norm, the head GEMV, the sampling.
    int head(int input) {
        label_ = "";
        const int hc = latency("hc_head + norm", bytes_of("", {"hc_head_fn", "hc_head_base", "hc_head_scale", "norm.weight"}),
                               c_.mhc_finalize_us, deps(input));
        const int gemv = streaming("head", t_.bytes("head.weight"), t_.weights("head.weight"), {hc}, {});
        return latency("sample", 0, c_.sample_us, {gemv});
    }

private:
    static std::vector<int> deps(int input) { return input >= 0 ? std::vector<int>{input} : std::vector<int>{}; }
    double bytes_of(const std::string& prefix, std::initializer_list<const char*> names) const {
        double b = 0;
        for (const char* n : names) b += t_.bytes(prefix + n);
        return b;
    }
    // The routed experts' arithmetic: FP4 (packed I8) weights take their own cost.
    double expert_cost(const std::string& weight) const { return t_.is_fp4(weight) ? c_.us_per_kweight_fp4 : 0; }
    double linear_bytes(const std::string& tensor) const {
        return t_.bytes(tensor + ".weight") + (t_.has(tensor + ".scale") ? t_.bytes(tensor + ".scale") : 0);
    }
    // us_per_kweight: the tiles' arithmetic per 1,024 weights (0: the FP8 / BF16 / F32 cost).
    int streaming(const std::string& name, double bytes, double weights, std::vector<int> after,
                  std::vector<int> bytes_after, double us_per_kweight = 0) {
        ScheduleOp op;
        op.name = label_ + name;
        op.tiles = std::max(1, int(std::ceil(bytes / c_.tile_bytes)));
        op.tile_bytes = bytes / op.tiles;
        op.tile_compute_us = weights / op.tiles / 1024.0 * (us_per_kweight > 0 ? us_per_kweight : c_.us_per_kweight);
        op.after = std::move(after);
        op.bytes_after = std::move(bytes_after);
        return g_.add(std::move(op));
    }
    int linear(const std::string& name, const std::string& tensor, std::vector<int> after) {
        return streaming(name, linear_bytes(tensor), t_.weights(tensor + ".weight"), std::move(after), {});
    }
    // A latency-bound op: one tile (its small weights, e.g. a norm vector, ride along).
    int latency(const std::string& name, double bytes, double us, std::vector<int> after) {
        ScheduleOp op;
        op.name = label_ + name;
        op.tile_bytes = bytes;
        op.tile_compute_us = us;
        op.after = std::move(after);
        return g_.add(std::move(op));
    }

    StepGraph& g_;
    const ModelConfig& cfg_;
    const TensorSizes& t_;
    const SubblockCosts& c_;
    std::string label_;
};

}  // namespace

std::string op_kind(const std::string& name) {
    if (name.size() > 1 && name[0] == 'L' && std::isdigit(static_cast<unsigned char>(name[1])) &&
        name.find(' ') != std::string::npos)
        return name.substr(name.find(' ') + 1);
    return name;
}

void set_subblock_cost(SubblockCosts& c, const std::string& name, double value) {
    for (const CostField& f : kCostFields)
        if (name == f.name) {
            FS_CHECK(std::isfinite(value) && value >= 0 && (name != "tile_bytes" || value >= 1),
                     "sub-block cost '{}' must be a number >= 0 (tile_bytes >= 1), got {}", name, value);
            c.*f.field = value;
            return;
        }
    fail("unknown sub-block cost '{}'; the costs are: {}", name, fmt::join(subblock_cost_names(), ", "));
}

std::vector<std::string> subblock_cost_names() {
    std::vector<std::string> v;
    for (const CostField& f : kCostFields) v.emplace_back(f.name);
    return v;
}

StepGraph attention_subblock_graph(const ModelConfig& cfg, int layer, const SubblockCosts& costs) {
    FS_CHECK(layer >= 0 && layer < cfg.num_hidden_layers, "attention sub-block graph: layer {} is not in [0, {})", layer,
             cfg.num_hidden_layers);
    const TensorSizes t(cfg);
    StepGraph g;
    GraphBuilder(g, cfg, t, costs).attention(layer, -1, "");
    const std::string bad = graph_problem(g);
    FS_CHECK(bad.empty(), "attention sub-block graph: {}", bad);  // a defect of the builder, not of the input
    return g;
}

StepGraph decode_step_graph(const ModelConfig& cfg, int layers, const SubblockCosts& costs) {
    FS_CHECK(layers >= 1 && layers <= cfg.num_hidden_layers, "decode step graph: layers {} is not in [1, {}]", layers,
             cfg.num_hidden_layers);
    const TensorSizes t(cfg);
    StepGraph g;
    GraphBuilder b(g, cfg, t, costs);
    int last = -1;
    for (int l = 0; l < layers; ++l) {
        const std::string label = fmt::format("L{} ", l);
        last = b.moe(l, b.attention(l, last, label), label);
    }
    b.head(last);
    const std::string bad = graph_problem(g);
    FS_CHECK(bad.empty(), "decode step graph: {}", bad);  // a defect of the builder, not of the input
    return g;
}

std::vector<int> subblock_order(const StepGraph& g, bool query_first) {
    // The build order is already a dependency order; preferring one stream moves its ops ahead of the other's, and an
    // op that reads both (indexer.select) stays behind its last input.
    std::vector<int> order =
        dependency_order(g, [&](int op) { return is_branch(g.ops[size_t(op)].name) != query_first; });
    FS_CHECK(order.size() == g.ops.size(), "sub-block order: the graph has a dependency cycle");
    return order;
}

}  // namespace flashseek
