// Weight upload, on-device dummy weight generation and binding (see device_weights.h for the why).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/backend/device_weights.h"
#include "cuda/backend/dummy_fill.cuh"
#include "model/shard_reader.h"
#include "model/sharding.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::cuda {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// How to fill one tensor so that the forward sees unit-scale activations (see file comment).
FillParams fill_params_for(const TensorSpec& t, const std::map<std::string, const TensorSpec*>& by_name,
                           const ModelConfig& cfg) {
    FillParams p;
    const auto& n = t.name;
    const int64_t cols = t.shape.size() >= 2 ? t.shape.back() : 0;
    switch (t.dtype) {
        case DType::BF16:
            p.kind = FillKind::Bf16Uniform;
            if (t.shape.size() == 1) {  // norm weights: around 1
                p.center = 1.f;
                p.a = 0.2f;
            } else if (n == "embed.weight") {
                p.a = 1.f;
            } else {  // [out, in] matrices: var 1/in
                p.a = std::sqrt(3.f / float(cols));
            }
            return p;
        case DType::F32:
            p.kind = FillKind::F32Uniform;
            if (ends_with(n, "_fn")) {
                p.a = std::sqrt(3.f / float(cols));
            } else if (ends_with(n, "_scale")) {  // hc scales
                p.center = 1.f;
                p.a = 0.5f;
            } else if (ends_with(n, "_base")) {
                p.a = 0.5f;
            } else if (ends_with(n, "attn_sink")) {
                p.a = 1.f;
            } else if (ends_with(n, "gate.bias")) {
                p.a = 0.1f;
            } else if (ends_with(n, ".scale")) {  // F32 block scales (Base checkpoints)
                p.center = 0.05f;
                p.a = 0.01f;
            } else {  // ape and anything else
                p.a = 0.5f;
            }
            return p;
        case DType::F8_E4M3: {
            // Paired with a power-of-two scale 2^-k, k = round(log2(sqrt(in))); values ~ U(-c, c), var(W) = 1/in.
            const float in = float(cols);
            const float k = std::round(std::log2(std::sqrt(in)));
            p.kind = FillKind::E4m3Uniform;
            p.a = std::sqrt(3.f) * std::exp2(k) / std::sqrt(in);
            return p;
        }
        case DType::F8_E8M0: {
            p.kind = FillKind::E8m0Jitter;
            const std::string wname = n.substr(0, n.size() - std::string("scale").size()) + "weight";
            auto it = by_name.find(wname);
            FS_CHECK(it != by_name.end(), "dummy weights: scale tensor {} has no weight {}", n, wname);
            const TensorSpec& w = *it->second;
            const float in = float(w.dtype == DType::I8 ? w.shape.back() * 2 : w.shape.back());
            // Jitter subtracts 0 or 1, so a block's scale is the unit-variance scale or half of it.
            if (w.dtype == DType::I8) {  // e2m1 codes uniform: E[v^2] = 8.5625
                p.base = 127 + int(std::lround(-std::log2(std::sqrt(8.5625f * in))));
            } else {  // the e4m3 values carry var 2^(2k)/in against the scale 2^-k
                p.base = 127 - int(std::lround(std::log2(std::sqrt(in))));
            }
            return p;
        }
        case DType::I8:
            p.kind = FillKind::Fp4Bytes;
            return p;
        case DType::I64:
            p.kind = FillKind::I64Route;
            p.n_experts = cfg.n_routed_experts;
            p.top_k = int(t.shape.back());
            return p;
        default:
            fail("dummy weights: tensor {} has dtype {}, which no V4 tensor uses", n, dtype_name(t.dtype));
    }
}

int layer_of(const std::string& name) {  // -1 when not a per-layer tensor
    if (name.rfind("layers.", 0) != 0) return -1;
    size_t dot = name.find('.', 7);
    if (dot == std::string::npos) return -1;
    return std::stoi(name.substr(7, dot - 7));
}

}  // namespace

const TensorView* DeviceTensorStore::find(const std::string& name) const {
    auto it = views.find(name);
    return it == views.end() ? nullptr : &it->second;
}
const TensorView& DeviceTensorStore::get(const std::string& name) const {
    const TensorView* v = find(name);
    FS_CHECK(v != nullptr, "GPU weights: tensor {} is missing", name);
    return *v;
}

bool tensor_needed(const std::string& name, int n_layers) {
    if (name.rfind("mtp.", 0) == 0) return false;
    const int l = layer_of(name);
    if (name.rfind("layers.", 0) == 0) return l >= 0 && l < n_layers;
    return true;
}

DeviceTensorStore upload_checkpoint(const Checkpoint& ckpt, int n_layers,
                                    const std::function<bool(size_t, size_t)>& progress) {
    DeviceTensorStore store;
    std::vector<const TensorView*> pending_uploads;
    size_t total = 0;
    for (const auto& [name, view] : ckpt.all()) {
        if (!tensor_needed(name, n_layers)) continue;
        pending_uploads.push_back(view);
        total = align_up(total, 256) + view->nbytes;
    }
    store.arena.allocate(std::max<size_t>(total, 1), "model weights");
    store.total_bytes = total;
    // Copies go through a pinned staging buffer in 64 MB pieces so that pages of the mapped file are read once.
    const size_t chunk = size_t(64) << 20;
    void* staging = nullptr;
    FS_CUDA_TRY(cudaMallocHost(&staging, chunk));
    size_t off = 0, done = 0;
    try {
        for (const TensorView* v : pending_uploads) {
            off = align_up(off, 256);
            uint8_t* dst = store.arena.as<uint8_t>() + off;
            for (size_t pos = 0; pos < v->nbytes; pos += chunk) {
                const size_t n = std::min(chunk, v->nbytes - pos);
                std::memcpy(staging, v->data + pos, n);
                FS_CUDA_TRY(cudaMemcpy(dst + pos, staging, n, cudaMemcpyHostToDevice));
            }
            TensorView dv = *v;
            dv.data = dst;
            store.views.emplace(v->name, std::move(dv));
            off += v->nbytes;
            done += v->nbytes;
            if (progress && !progress(done, total)) fail("model loading cancelled");
        }
    } catch (...) {
        cudaFreeHost(staging);
        throw;
    }
    FS_CUDA_TRY(cudaFreeHost(staging));
    return store;
}

DeviceTensorStore generate_dummy_weights(const ModelConfig& cfg, int n_layers, uint64_t seed, const RankSlice* rank) {
    InventoryOptions inv;
    inv.include_mtp = false;
    const std::vector<TensorSpec> specs = expected_tensors(cfg, inv);
    std::map<std::string, const TensorSpec*> by_name;
    for (const auto& s : specs) by_name[s.name] = &s;
    // The shapes the store holds: the whole tensors, or a rank's slices of them (tensors it does not hold left out).
    std::map<std::string, std::vector<int64_t>> held;
    if (rank) {
        ShardScope scope;
        scope.n_layers = n_layers;
        for (const ShardTensorSpec& t : shard_inventory(cfg, *rank, scope)) held[t.full.name] = t.shape;
    }
    struct Placed {
        const TensorSpec* spec;
        std::vector<int64_t> shape;
        size_t offset;
        uint64_t index;  // the tensor's fill stream: the same for a tensor whatever the rank, so replicas agree
    };
    DeviceTensorStore store;
    size_t total = 0;
    std::vector<Placed> placed;
    uint64_t index = 0;
    for (const auto& s : specs) {
        if (!tensor_needed(s.name, n_layers)) continue;
        ++index;
        std::vector<int64_t> shape = s.shape;
        if (rank) {
            auto it = held.find(s.name);
            if (it == held.end()) continue;
            shape = it->second;
        }
        size_t n = dtype_size(s.dtype);
        for (int64_t d : shape) n *= size_t(d);
        total = align_up(total, 256);
        placed.push_back({&s, shape, total, index});
        total += n;
    }
    store.arena.allocate(std::max<size_t>(total, 1), "dummy model weights");
    store.total_bytes = total;
    for (const Placed& t : placed) {
        TensorView v;
        v.name = t.spec->name;
        v.dtype = t.spec->dtype;
        v.shape = t.shape;
        v.nbytes = dtype_size(t.spec->dtype);
        for (int64_t d : t.shape) v.nbytes *= size_t(d);
        v.data = store.arena.as<uint8_t>() + t.offset;
        const int64_t n_elems = int64_t(v.nbytes / dtype_size(t.spec->dtype));
        const FillParams p = fill_params_for(*t.spec, by_name, cfg);  // the whole tensor's fan-in
        launch_dummy_fill(const_cast<uint8_t*>(v.data), n_elems, p, seed * 0x2545f4914f6cdd1dull + t.index * 0x9e37ull,
                          nullptr);
        store.views.emplace(t.spec->name, std::move(v));
    }
    FS_CUDA_TRY(cudaDeviceSynchronize());
    return store;
}

DeviceTensorStore upload_shard(const Checkpoint& ckpt, const ModelConfig& cfg, int n_layers, const RankSlice& rank,
                               const std::function<bool(size_t, size_t)>& progress) {
    ShardScope scope;
    scope.n_layers = n_layers;
    const ShardSources src = locate_shard(ckpt, cfg, rank, scope);
    DeviceTensorStore store;
    size_t total = 0;
    std::vector<size_t> offsets;
    for (const ShardTensorSource& t : src.tensors) {
        total = align_up(total, 256);
        offsets.push_back(total);
        total += t.source.bytes();
    }
    store.arena.allocate(std::max<size_t>(total, 1), "model weights of the shard");
    store.total_bytes = total;
    size_t done = 0;
    for (size_t i = 0; i < src.tensors.size(); ++i) {
        const ShardTensorSource& t = src.tensors[i];
        uint8_t* dst = store.arena.as<uint8_t>() + offsets[i];
        // Straight from the mapping: one run (a whole tensor or a row range) or one run per row (a column range).
        FS_CUDA_TRY(cudaMemcpy2D(dst, t.source.run_bytes, t.source.data, std::max(t.source.pitch, t.source.run_bytes),
                                 t.source.run_bytes, t.source.runs, cudaMemcpyHostToDevice));
        TensorView v;
        v.name = t.name;
        v.dtype = t.dtype;
        v.shape = t.shape;
        v.nbytes = t.source.bytes();
        v.data = dst;
        store.views.emplace(t.name, std::move(v));
        done += t.source.bytes();
        if (progress && !progress(done, total)) fail("model loading cancelled");
    }
    return store;
}

namespace {

struct Binder {
    const DeviceTensorStore& store;
    std::vector<std::string> missing;

    TensorView view(const std::string& name) {
        const TensorView* v = store.find(name);
        if (!v) {
            missing.push_back(name);
            return {};
        }
        return *v;
    }
    TensorView optional(const std::string& name) {
        const TensorView* v = store.find(name);
        return v ? *v : TensorView{};
    }
    Linear linear(const std::string& prefix) {
        Linear l;
        l.weight = view(prefix + ".weight");
        if (l.weight.empty()) return l;
        l.out = l.weight.shape.at(0);
        switch (l.weight.dtype) {
            case DType::F8_E4M3:
                l.format = WeightFormat::FP8_BLOCK128;
                l.in = l.weight.shape.at(1);
                l.scale = view(prefix + ".scale");
                break;
            case DType::I8:
            case DType::U8:
                l.format = WeightFormat::FP4_BLOCK32;
                l.in = l.weight.shape.at(1) * 2;
                l.scale = view(prefix + ".scale");
                break;
            case DType::BF16:
                l.format = WeightFormat::BF16;
                l.in = l.weight.shape.at(1);
                break;
            case DType::F32:
                l.format = WeightFormat::F32;
                l.in = l.weight.shape.at(1);
                break;
            default:
                fail("GPU weights: tensor {}.weight has unsupported dtype {}", prefix, dtype_name(l.weight.dtype));
        }
        return l;
    }
    HyperConnection hc(const std::string& prefix) {
        return {view(prefix + "_fn"), view(prefix + "_base"), view(prefix + "_scale")};
    }
    CompressorWeights compressor(const std::string& prefix, int ratio, int dim) {
        CompressorWeights c;
        c.present = true;
        c.ratio = ratio;
        c.dim = dim;
        c.wkv = view(prefix + ".wkv.weight");
        c.wgate = view(prefix + ".wgate.weight");
        c.ape = view(prefix + ".ape");
        c.norm = view(prefix + ".norm.weight");
        return c;
    }
};

}  // namespace

ModelWeights bind_device_weights(const ModelConfig& cfg, const DeviceTensorStore& store, int n_layers,
                                 int expert_begin, int expert_end, bool shared) {
    if (expert_end < 0) expert_end = cfg.n_routed_experts;
    FS_CHECK(0 <= expert_begin && expert_begin <= expert_end && expert_end <= cfg.n_routed_experts,
             "GPU weights: expert range [{}, {}) outside [0, {})", expert_begin, expert_end, cfg.n_routed_experts);
    Binder b{store, {}};
    ModelWeights w;
    w.embed = b.view("embed.weight");
    w.head = b.view("head.weight");
    w.norm = b.view("norm.weight");
    w.hc_head = b.hc("hc_head");
    for (int l = 0; l < n_layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".";
        LayerWeights lw;
        lw.ratio = cfg.ratio(l);
        lw.attn_norm = b.view(p + "attn_norm.weight");
        lw.ffn_norm = b.view(p + "ffn_norm.weight");
        lw.hc_attn = b.hc(p + "hc_attn");
        lw.hc_ffn = b.hc(p + "hc_ffn");
        AttentionWeights& a = lw.attn;
        a.wq_a = b.linear(p + "attn.wq_a");
        a.wq_b = b.linear(p + "attn.wq_b");
        a.wkv = b.linear(p + "attn.wkv");
        a.wo_a = b.linear(p + "attn.wo_a");
        a.wo_b = b.linear(p + "attn.wo_b");
        a.q_norm = b.view(p + "attn.q_norm.weight");
        a.kv_norm = b.view(p + "attn.kv_norm.weight");
        a.attn_sink = b.view(p + "attn.attn_sink");
        if (lw.ratio > 0) a.compressor = b.compressor(p + "attn.compressor", lw.ratio, cfg.head_dim);
        if (lw.ratio == 4) {
            a.indexer.present = true;
            a.indexer.wq_b = b.linear(p + "attn.indexer.wq_b");
            a.indexer.weights_proj = b.view(p + "attn.indexer.weights_proj.weight");
            a.indexer.compressor = b.compressor(p + "attn.indexer.compressor", 4, cfg.index_head_dim);
        }
        MoeWeights& m = lw.ffn;
        m.gate_weight = b.view(p + "ffn.gate.weight");
        if (cfg.is_hash_layer(l)) {
            m.tid2eid = b.view(p + "ffn.gate.tid2eid");
        } else {
            m.gate_bias = b.view(p + "ffn.gate.bias");
        }
        m.experts.resize(size_t(expert_end - expert_begin));
        for (int e = expert_begin; e < expert_end; ++e) {
            const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
            m.experts[size_t(e - expert_begin)] = {b.linear(ep + "w1"), b.linear(ep + "w2"), b.linear(ep + "w3")};
        }
        if (shared) {
            const std::string sp = p + "ffn.shared_experts.";
            m.shared = {b.linear(sp + "w1"), b.linear(sp + "w2"), b.linear(sp + "w3")};
        }
        w.layers.push_back(std::move(lw));
    }
    if (!b.missing.empty()) {
        std::string list;
        for (size_t i = 0; i < b.missing.size() && i < 20; ++i) list += (i ? ", " : "") + b.missing[i];
        fail("GPU weights: {} tensor(s) missing: {}{}", b.missing.size(), list, b.missing.size() > 20 ? ", ..." : "");
    }
    return w;
}

}  // namespace flashseek::cuda
