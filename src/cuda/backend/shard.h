// The weights of one model shard on one device, bound in checkpoint formats: per layer the attention, compressor,
// indexer, router and expert linears as DeviceLinear views into the device tensor store, the expert pointer tables
// the MoE kernels index, the embedding, head and hc_head, and the bytes each op reads per pass (for the
// roofline). ShardSpec says which heads, output groups, experts and vocabulary rows the shard holds: today every
// CUDA backend holds the whole model (ShardSpec::whole); the tensor / expert parallel layouts give each rank a slice
// of the same structure. Immutable after construction; no global state.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "cuda/backend/cuda_util.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/weight_bytes.h"
#include "cuda/gemm/linear.cuh"
#include "cuda/moe/moe.cuh"
#include "cuda/rope/rope.cuh"
#include "model/config.h"
#include "model/sharding.h"
#include "model/weights.h"

namespace flashseek::cuda {

using bf16 = __nv_bfloat16;

// Which part of the model a shard holds: half-open ranges over query heads, wo_a output groups, routed experts, the
// routed and shared experts' intermediate columns and head (vocabulary) rows, and the rank among `ranks` shards.
// Everything else (embedding, norms, mHC, wq_a, wkv, compressors, indexer, router) every shard holds whole. An empty
// shared range: this shard computes no part of the shared expert.
struct ShardSpec {
    int rank = 0, ranks = 1;
    int tp = 1, ep = 1, tp_rank = 0, ep_rank = 0;  // rank = ep_rank * tp + tp_rank
    int head_begin = 0, head_end = 0;
    int group_begin = 0, group_end = 0;
    int expert_begin = 0, expert_end = 0;
    int64_t inter_begin = 0, inter_end = 0;
    int64_t shared_inter_begin = 0, shared_inter_end = 0;
    int64_t vocab_begin = 0, vocab_end = 0;

    static ShardSpec whole(const ModelConfig& cfg);
    static ShardSpec of(const RankSlice& rank);  // a rank of a parallel layout (model/sharding.h)
    bool holds_whole_model(const ModelConfig& cfg) const;
    int heads() const { return head_end - head_begin; }
    int groups() const { return group_end - group_begin; }
    int experts() const { return expert_end - expert_begin; }
    int64_t vocab_rows() const { return vocab_end - vocab_begin; }
    bool has_shared() const { return shared_inter_end > shared_inter_begin; }
};

// A checkpoint linear as the GPU kernels see it (formats and scale kinds checked).
DeviceLinear to_device_linear(const Linear& l);

struct CompressorLinears {
    bool present = false;
    int ratio = 0, dim = 0;
    DeviceLinear wkv, wgate;
    const float* ape = nullptr;
    const bf16* norm = nullptr;
};

struct ShardLayer {
    int ratio = 0;
    bool hash = false;
    RopeTable rope;
    const bf16 *attn_norm = nullptr, *ffn_norm = nullptr;
    const float *hc_attn_fn = nullptr, *hc_attn_base = nullptr, *hc_attn_scale = nullptr;
    const float *hc_ffn_fn = nullptr, *hc_ffn_base = nullptr, *hc_ffn_scale = nullptr;
    DeviceLinear wq_a, wq_b, wkv, wo_a, wo_b;
    const bf16 *q_norm = nullptr, *kv_norm = nullptr;
    const float* attn_sink = nullptr;
    CompressorLinears compressor, index_compressor;
    DeviceLinear index_wq_b, index_weights_proj;
    DeviceLinear gate;                 // bf16 [E, D]
    const float* gate_bias = nullptr;  // [E] or null (hash layers)
    const int64_t* tid2eid = nullptr;  // [vocab, K] or null
    std::vector<DeviceLinear> w1, w2, w3;  // routed experts
    DeviceLinear shared_w1, shared_w2, shared_w3;
    ExpertTable routed, shared;            // device pointer arrays (into ShardWeights' expert tables)
    LayerWeightBytes bytes;                // what each op of the layer reads per pass (the profiled step's bytes)
};

class ShardWeights {
public:
    // cfg.num_hidden_layers layers are bound from `store`; throws Error naming a missing or mistyped tensor.
    ShardWeights(const ModelConfig& cfg, const ShardSpec& spec, DeviceTensorStore store);

    const ShardSpec& spec() const { return spec_; }
    const std::vector<ShardLayer>& layers() const { return layers_; }
    const ShardLayer& layer(int l) const { return layers_[size_t(l)]; }
    const bf16* embed() const { return embed_; }
    const bf16* final_norm() const { return final_norm_; }
    const DeviceLinear& head() const { return head_; }
    const float* hc_head_fn() const { return hc_head_fn_; }
    const float* hc_head_base() const { return hc_head_base_; }
    const float* hc_head_scale() const { return hc_head_scale_; }
    double bytes_on_device() const { return double(store_.total_bytes); }
    // Head, final norm and hc_head: read in full by every pass with logits (the embedding only for the rows used).
    const HeadWeightBytes& head_bytes() const { return head_bytes_; }

private:
    void bind_expert_tables(const ModelConfig& cfg);

    ShardSpec spec_;
    DeviceTensorStore store_;
    ModelWeights weights_;
    std::vector<ShardLayer> layers_;
    const bf16 *embed_ = nullptr, *final_norm_ = nullptr;
    DeviceLinear head_;
    const float *hc_head_fn_ = nullptr, *hc_head_base_ = nullptr, *hc_head_scale_ = nullptr;
    DeviceBuffer expert_ptrs_;  // all layers' ExpertTable pointer arrays
    DeviceBuffer expert_extras_;  // all layers' ExpertTable::row_ref and w_maps (FP4 routed experts)
    HeadWeightBytes head_bytes_;
};

}  // namespace flashseek::cuda
