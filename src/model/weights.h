// The DeepSeek-V4 tensor inventory: which tensors a checkpoint must hold for a config (names, dtypes, shapes,
// spec §3), and typed views of them bound from a Checkpoint. One list serves both gen-checkpoint and the
// loader's validation, so the two can never disagree.
#pragma once
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "model/config.h"

namespace flashseek {

// How a linear layer's weight [out, in] is stored.
enum class WeightFormat {
    BF16,          // plain bf16
    F32,           // plain f32
    FP8_BLOCK128,  // F8_E4M3 weight + scale [ceil(out/128), ceil(in/128)] (E8M0 or F32)
    FP4_BLOCK32,   // I8 packed e2m1 [out, in/2] (low nibble first) + scale [out, in/32] (E8M0 or F32)
};

struct Linear {
    WeightFormat format = WeightFormat::BF16;
    int64_t out = 0, in = 0;
    TensorView weight;
    TensorView scale;  // empty for BF16/F32
};

struct HyperConnection {  // mHC unit: fn [24, N*D] f32, base [24] f32, scale [3] f32 (head: [4,N*D],[4],[1])
    TensorView fn, base, scale;
};

struct CompressorWeights {
    bool present = false;
    int ratio = 0;       // 4 (overlapping, 2 halves) or 128
    int dim = 0;         // d_c: 512 (attention) or index_head_dim (indexer)
    TensorView wkv, wgate;  // bf16 [c*d_c, D]
    TensorView ape;         // f32 [ratio, c*d_c]
    TensorView norm;        // bf16 [d_c]
};

struct IndexerWeights {
    bool present = false;
    Linear wq_b;              // [index_n_heads*index_head_dim, q_lora_rank]
    TensorView weights_proj;  // bf16 [index_n_heads, D]
    CompressorWeights compressor;
};

struct AttentionWeights {
    Linear wq_a, wq_b, wkv, wo_a, wo_b;
    TensorView q_norm, kv_norm;  // bf16
    TensorView attn_sink;        // f32 [H]
    CompressorWeights compressor;
    IndexerWeights indexer;
};

struct ExpertWeights {
    Linear w1, w2, w3;  // w1 = gate, w3 = up, w2 = down
};

struct MoeWeights {
    TensorView gate_weight;  // bf16 [E, D]
    TensorView gate_bias;    // f32 [E]; empty on hash layers
    TensorView tid2eid;      // I64 [vocab, top_k]; hash layers only
    std::vector<ExpertWeights> experts;
    ExpertWeights shared;
};

struct LayerWeights {
    int ratio = 0;
    TensorView attn_norm, ffn_norm;
    HyperConnection hc_attn, hc_ffn;
    AttentionWeights attn;
    MoeWeights ffn;
};

// One multi-token-prediction layer (`mtp.{i}.*`, spec §2.13): a full block plus its input projections and head.
struct MtpWeights {
    LayerWeights layer;       // sliding or compressed attention per its trailing compress_ratios entry; gate has bias
    Linear e_proj, h_proj;    // [D, D]
    TensorView enorm, hnorm, norm;  // bf16 [D]
    HyperConnection hc_head;  // [hc, hc*D], [hc], [1]
};

struct ModelWeights {
    TensorView embed, head, norm;  // head aliases embed when tie_word_embeddings
    HyperConnection hc_head;
    std::vector<LayerWeights> layers;
    std::vector<MtpWeights> mtp;   // num_nextn_predict_layers entries (the forward may ignore them)
};

// One expected tensor.
struct TensorSpec {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
};

struct InventoryOptions {
    bool include_mtp = true;       // mtp.{i}.* tensors (accepted by the loader, ignored by the forward)
    bool f32_block_scales = false; // scales stored as F32 instead of F8_E8M0 (Base checkpoints)
};

// Every tensor a checkpoint of `cfg` holds, in a stable order (global, then layers, then MTP).
std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg, const InventoryOptions& opt = {});

// Binds views for every tensor the forward needs and validates the whole checkpoint against the inventory:
// missing, unexpected, wrongly typed or mis-shaped tensors are reported together, by name, in one Error.
// Expert format (FP4 vs FP8) and scale dtype (E8M0 vs F32) are read from the tensor headers.
// The returned views point into the checkpoint's mappings: keep the Checkpoint alive while they are used.
// Scale tensors are scanned for NaN-coded E8M0 bytes (255) and non-positive/non-finite F32 values, and hash
// tables (tid2eid) for ids outside [0, n_routed_experts) or repeated within a row.
ModelWeights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt);

struct BindOptions {
    bool check_values = true;  // the scale and tid2eid scans above (reads those tensors' bytes)
};
ModelWeights bind_weights(const ModelConfig& cfg, const Checkpoint& ckpt, const BindOptions& opt);

// The logical [out, in] shape of a linear's weight and its storage shapes, per format (spec §3.4).
std::vector<int64_t> linear_weight_shape(WeightFormat f, int64_t out, int64_t in);
std::vector<int64_t> linear_scale_shape(WeightFormat f, int64_t out, int64_t in);  // empty for BF16/F32
const char* weight_format_name(WeightFormat f);

}  // namespace flashseek
