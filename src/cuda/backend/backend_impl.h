// Internals of the CUDA backend shared by its translation units: the model on the device (weights bound in
// checkpoint formats, RoPE tables), the per-step activation buffers, and the CudaBackendImpl class. Not a public
// interface: the rest of the program sees Backend and BackendDiagnostics (src/backend).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <set>
#include <memory>
#include <tuple>
#include <vector>

#include "cuda/attention/kv_cache.cuh"
#include "backend/diagnostics.h"
#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/cuda_util.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/op_profiler.h"
#include "cuda/backend/sample_adjust.h"
#include "cuda/backend/state_pool.h"
#include "cuda/gemm/linear.cuh"
#include "cuda/moe/moe.cuh"
#include "cuda/rope/rope.cuh"
#include "cuda/sample/sample.cuh"

namespace flashseek::cuda {

using bf16 = __nv_bfloat16;

DeviceLinear to_device_linear(const Linear& l);

struct CompressorLinears {
    bool present = false;
    int ratio = 0, dim = 0;
    DeviceLinear wkv, wgate;
    const float* ape = nullptr;
    const bf16* norm = nullptr;
};

struct LayerDev {
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
    DeviceLinear gate;                // bf16 [E, D]
    const float* gate_bias = nullptr;  // [E] or null (hash layers)
    const int64_t* tid2eid = nullptr;  // [vocab, K] or null
    std::vector<DeviceLinear> w1, w2, w3;  // routed experts
    DeviceLinear shared_w1, shared_w2, shared_w3;
    ExpertTable routed, shared;            // device pointer arrays (into CudaBackendImpl::expert_ptrs_)
    double dense_bytes = 0;                // every weight byte of the layer except the routed experts
    double expert_bytes = 0;               // one routed expert (w1, w2, w3 and scales)
};

// A prepared-activation buffer with room for (max_rows, max_k).
struct PrepBuffer {
    DeviceBuffer values, scales;
    PreparedActivation act;
    // What act holds, so a second linear on the same input in the same sub-block reuses it.
    const void* src = nullptr;
    int rows = 0;
    WeightKind layout = WeightKind::BF16;
    ActNumerics numerics = ActNumerics::EXACT;
    uint64_t generation = 0;
    void allocate(int64_t max_rows, int64_t max_k);
};

// Where an op is enqueued: a stream and the split-K workspace its linears use (linears running at the same time on
// two streams must not share partial sums and counters).
struct Lane {
    cudaStream_t stream = nullptr;
    const GemmWorkspace* ws = nullptr;
};

// A side stream for one independent branch of a sub-block (the window KV, the compressors, the shared expert):
// forked from the main stream by an event and joined back by another, so that a captured graph holds the branch as
// parallel nodes and its latency-bound kernels overlap the main path's.
struct SideStream {
    cudaStream_t stream = nullptr;
    cudaEvent_t forked = nullptr, done = nullptr;
    GemmWorkspace ws{};
    bool open = false;  // forked and not yet joined
    void create();
    void destroy() noexcept;
};

// Step metadata, laid out as one int32 array so that one copy uploads it (host side pinned).
struct StepMeta {
    int capacity = 0;  // rows
    int32_t *host = nullptr, *dev = nullptr;
    // offsets into the arrays, each `capacity` long
    enum Field { kTokens, kSeqSlot, kSeqFirstRow, kSeqNTokens, kSeqStartPos, kTokenSeq, kTokenPos, kHeadRows, kCount };
    int32_t* h(Field f) const { return host + size_t(f) * size_t(capacity); }
    int32_t* d(Field f) const { return dev + size_t(f) * size_t(capacity); }
};

// One pass of the forward: rows [0, n_rows) from n_seqs sequences, head on n_head_rows rows.
struct PassShape {
    int n_rows = 0, n_seqs = 0, n_head_rows = 0, max_seq_tokens = 0;
    bool need_indexer = true;  // some sequence has more compressed entries than index_topk
    int max_entries = 1;       // power-of-two bound on visible ratio-4 entries (indexer grid and workspace)
    int max_context = 1;       // power-of-two bound on positions + 1 (attention grid)
    bool operator<(const PassShape& o) const {
        return std::tie(n_rows, n_seqs, n_head_rows, max_seq_tokens, need_indexer, max_entries, max_context) <
               std::tie(o.n_rows, o.n_seqs, o.n_head_rows, o.max_seq_tokens, o.need_indexer, o.max_entries,
                        o.max_context);
    }
};

class CudaBackendImpl final : public Backend, public BackendDiagnostics {
public:
    CudaBackendImpl(const ModelConfig& cfg, const BackendOptions& opt, DeviceTensorStore store);
    ~CudaBackendImpl() override;

    // Backend
    const ModelConfig& config() const override { return cfg_; }
    std::string name() const override { return "cuda"; }
    StateMemoryStats memory() const override { return pool_->stats(); }
    int64_t blocks_for(int64_t n) const override { return pool_->blocks_for(n); }
    int max_sequences() const override { return pool_->max_sequences(); }
    int create_sequence() override;
    void free_sequence(int seq_id) override;
    int64_t sequence_length(int seq_id) const override;
    void forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override;
    // Samples on the device (sample/sample.cuh) unless an entry asks for top logprobs (then the host sampler).
    void forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                        std::vector<SampleResult>& out) override;

    BackendDiagnostics* diagnostics() override { return this; }

    // BackendDiagnostics
    StepProfile profile_step(std::span<const SequenceStep> steps) override;
    void decode_greedy(std::span<const SequenceStep> steps, std::vector<int32_t>& next_tokens) override;
    std::string device_name() const override { return facts_.name; }
    double weight_bytes_on_device() const override { return double(store_.total_bytes); }
    double measure_copy_bandwidth(size_t bytes, int reps) override { return cuda::measure_copy_bandwidth(bytes, reps); }
    void set_use_graphs(bool on) override { use_graphs_ = on; }
    void set_use_branches(bool on) override {
        branches_ = on;
        for (auto& [shape, exec] : graphs_) cudaGraphExecDestroy(exec);  // captured with the other setting
        graphs_.clear();
    }

private:
    friend struct LayerRunner;
    enum class Output { Logits, Argmax, Sample };
    void validate(std::span<const SequenceStep> steps) const;
    void run_steps(std::span<const SequenceStep> steps, Output out, std::vector<float>* logits,
                   std::vector<int32_t>* tokens, std::span<const SampleParams> sample_params = {},
                   std::vector<float>* logprobs = nullptr);
    // Enqueues the whole forward of one pass on stream_ (graph-capturable).
    void enqueue_pass(const PassShape& shape);
    void enqueue_attention(int l, const PassShape& shape);
    // combine = false: the sub-block output is left as its terms (y_routed_, grouping_, y_shared_) for the next
    // mhc_pre, which fuses this sub-block's mhc_post and computes the combine itself (MhcPreParams::prev_y_routed).
    void enqueue_moe(int l, const PassShape& shape, bool combine);
    void enqueue_head(const PassShape& shape);
    void enqueue_sparse_attention(int l, const PassShape& shape);
    void init_moe_buffers();
    void init_byte_counts();
    void launch_pass(const PassShape& shape, bool graph_ok);
    TokenBatch token_batch(const PassShape& shape) const;
    RingView ring_view(int l) const;
    PagedEntries comp_entries(int l) const;
    PagedEntries index_entries(int l) const;
    // Prepares x [rows, K] for weight w into buf (EXACT for BF16 weights, else the backend's numerics).
    // force_exact: no activation quantization whatever the numerics (wo_a: the reference's bf16 einsum).
    // allow_raw: the consumer takes a raw activation when w's small-M GEMV serves rows (no preparation launch).
    const PreparedActivation& prep(PrepBuffer& buf, const void* x, bool x_f32, int rows, int64_t K, int64_t ld,
                                   const DeviceLinear& w, bool force_exact = false, bool allow_raw = true,
                                   const Lane* lane = nullptr);
    // lane null: the main stream.
    void lin(const PreparedActivation& x, const DeviceLinear& w, void* y, OutKind kind, int64_t ld,
             const Lane* lane = nullptr);
    // The kind a sub-block's fused producer (mhc_pre's norm) can also write y_ prepared for: its FP8 / FP4 first
    // linear (sub 0: wq_a, sub 1: the routed experts); BF16 weights read y_ itself (see prep).
    PrepBuffer* fused_prep_target(const LayerDev& L, int sub, WeightKind& kind);
    // Records that src [rows, K] is prepared for kind with `numerics` in this sub-block (by a producer kernel, or in
    // place for BF16): in buf's own storage, or at values / scales when given.
    void adopt_prepared(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind, ActNumerics numerics,
                        uint16_t* values = nullptr, float* scales = nullptr);
    Lane main_lane() const { return {stream_, &gemm_ws_}; }
    // Starts a branch on s (after everything enqueued on the main stream so far) and returns its lane; with
    // branches off (FLASHSEEK_BRANCHES=0, or a profiled step, whose per-op events need one stream) the main lane.
    Lane fork(SideStream& s);
    // Makes the main stream wait for everything enqueued on s since fork (no-op when s was not forked).
    void join(SideStream& s);
    void enqueue_shared_expert(int l, int rows, const PreparedActivation& routed_x, const Lane& lane);
    void account_bytes(const PassShape& shape);

    ModelConfig cfg_;
    BackendOptions opt_;
    DeviceFacts facts_;
    DeviceTensorStore store_;
    ModelWeights weights_;
    std::vector<LayerDev> layers_;
    const bf16 *embed_ = nullptr, *final_norm_ = nullptr;
    DeviceLinear head_;
    const float *hc_head_fn_ = nullptr, *hc_head_base_ = nullptr, *hc_head_scale_ = nullptr;
    ActNumerics act_numerics_ = ActNumerics::EXACT;
    KvFormat kv_format_ = KvFormat::BF16;
    IndexFormat index_format_ = IndexFormat::BF16;
    // Release (production) numerics simulate the reference's FP8 KV and Hadamard + FP4 indexer quantization; the
    // exact (reference) configuration does not, like the CPU exact numerics it is compared against.
    bool quant_sim_ = true;
    std::unique_ptr<StatePool> pool_;
    std::vector<int> seq_slot_of_id_;  // seq id == slot

    cudaStream_t stream_ = nullptr;
    GemmWorkspace gemm_ws_{};
    // window KV; the indexer's compressor; the attention compressor (attention) and the shared expert (MoE)
    SideStream kv_side_, index_side_, aux_side_;
    bool branches_ = true;
    int max_rows_ = 0, chunk_tokens_ = 0;
    StepMeta meta_;
    DeviceBuffer meta_dev_;
    // activations
    DeviceBuffer ones_;  // 1.0f per (row, 128-block) of y_: the scales of its BF16 "prepared" form, which is y_ itself
    DeviceBuffer X_, Xh_, y_, post_, comb_, mhc_ws_, qr_, q_, kv_, o_, z_, sub_out_, logits_, argmax_;
    DeviceBuffer ca_, cz_, ica_, icz_, iq_, iw_;
    DeviceBuffer selected_, indexer_ws_;  // indexer top-k [rows, index_topk] and its scoring workspace
    DeviceBuffer attn_ws_;
    DeviceBuffer expert_ptrs_;                      // all layers' ExpertTable pointer arrays
    DeviceBuffer router_logits_, expert_idx_, expert_weight_, grouping_mem_, act_tiles_mem_, y_routed_, y_shared_,
        shared_gu_;
    PrepBuffer moe_h_, moe_h_shared_, prep_x_expert_;
    MoeGrouping grouping_{};
    size_t attn_ws_bytes_ = 0;
    int distinct_experts_ = 0;   // summed over layers in a profiled pass
    double global_bytes_ = 0;    // head, final norm, hc_head (read every step)
    size_t mhc_ws_bytes_ = 0;
    PrepBuffer prep_x_, prep_x_bf16_, prep_qr_, prep_o_, prep_z_, prep_kv_, prep_index_x_;
    float* logits_host_ = nullptr;
    int32_t* argmax_host_ = nullptr;
    DeviceBuffer sample_params_, sample_logprob_;  // per head row: the entry's sampling parameters, its result
    DeviceSampleParams* sample_params_host_ = nullptr;
    float* sample_logprob_host_ = nullptr;
    SampleAdjustStaging sample_adjust_;  // masks and penalties of the sampled rows

    uint64_t prep_generation_ = 1;  // bumped whenever a sub-block starts (its inputs are rewritten)
    bool use_graphs_ = true;
    std::map<PassShape, cudaGraphExec_t> graphs_;
    std::map<PassShape, int> seen_;
    std::set<PassShape> no_graph_;  // shapes whose capture failed: run eagerly
    OpProfiler prof_;
    bool profiling_ = false;
    StepProfile last_profile_;
};

}  // namespace flashseek::cuda
