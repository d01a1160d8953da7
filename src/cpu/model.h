// The CPU reference model: a checkpoint's weights prepared for the fp32 forward (linear layers dequantized to
// fp32 once at load, norms and hyper-connection parameters as fp32 vectors), plus the per-layer RoPE tables.
// Embedding rows are converted on lookup and the head is kept in its stored bf16 form, so that a model with the
// real 129280-token vocabulary does not hold two extra fp32 copies of [vocab, hidden].
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "model/weights.h"

namespace flashseek::cpu {

// A linear layer in fp32 [out, in]; `format` is the stored format (release numerics quantize the activation of
// FP8/FP4 layers and round bf16 layers' outputs).
struct DenseLinear {
    WeightFormat format = WeightFormat::F32;
    int64_t out = 0, in = 0;
    std::vector<float> w;
};

struct HcParams {
    std::vector<float> fn, base, scale;
};

struct CompressorParams {
    bool present = false;
    int ratio = 0;  // 4 (overlapping, two halves per token) or 128 (any other ratio: non-overlapping)
    int dim = 0;    // d_c of one entry
    int halves = 1; // 2 when overlapping
    DenseLinear wkv, wgate;  // [halves*dim, D], run in fp32
    std::vector<float> ape;  // [ratio, halves*dim]
    std::vector<float> norm; // [dim]
};

struct ExpertParams {
    DenseLinear w1, w2, w3;
};

struct LayerParams {
    int ratio = 0;
    std::vector<float> attn_norm, ffn_norm;
    HcParams hc_attn, hc_ffn;
    DenseLinear wq_a, wq_b, wkv, wo_a, wo_b;
    std::vector<float> q_norm, kv_norm, attn_sink;
    CompressorParams compressor;
    bool has_indexer = false;
    DenseLinear index_wq_b, index_weights_proj;
    CompressorParams index_compressor;
    DenseLinear gate;              // [E, D], run in fp32
    std::vector<float> gate_bias;  // [E]; empty on hash layers
    std::vector<int32_t> tid2eid;  // [vocab, top_k]; hash layers only
    std::vector<ExpertParams> experts;
    ExpertParams shared;
    std::vector<float> inv_freq;   // RoPE table of this layer (compress theta + YaRN when ratio > 0)
};

struct CpuModel {
    ModelConfig cfg;
    bool release = false;  // release numerics (bf16 activations, FP8/FP4 simulations) instead of exact fp32
    std::unique_ptr<Checkpoint> ckpt;
    TensorView embed;                // [vocab, D] as stored
    TensorView head;                 // [vocab, D] as stored
    std::vector<float> head_f32;     // used when the head is not a 2-byte-aligned bf16 tensor
    std::vector<float> norm;
    HcParams hc_head;
    std::vector<LayerParams> layers;
    int n_layers = 0;                // layers the forward runs (a prefix, for debugging)
};

struct CpuModelOptions {
    bool release = false;
    int layers = 0;  // 0 = all
    ThreadPool* pool = nullptr;
};

// Opens model_dir (config.json + safetensors), validates it with bind_weights and prepares the CPU weights.
// Throws Error naming the file or tensor on any problem.
std::unique_ptr<CpuModel> load_cpu_model(const std::string& model_dir, const CpuModelOptions& opt);

// Applies a linear layer to rows x [rows, in] -> y [rows, out] with the model's numerics.
void apply_linear(const DenseLinear& lin, const float* x, int64_t rows, float* y, bool release, ThreadPool* pool);

}  // namespace flashseek::cpu
