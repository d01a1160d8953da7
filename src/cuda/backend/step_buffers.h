// The per-step device buffers of one CUDA backend instance, sized once at start-up for passes of up to max_rows
// rows: the step metadata (uploaded by one copy per pass), the residual streams, every sub-block's activations and
// workspaces, the MoE routing and grouping, the prepared-activation buffers of the linears, and the pinned host
// mirrors of the outputs. Plain storage: the forward (forward.h) decides what each buffer holds in a pass.
#pragma once
#include <cstdint>

#include "cuda/backend/cuda_util.h"
#include "cuda/gemm/linear.cuh"
#include "cuda/moe/moe.cuh"
#include "cuda/sample/sample.cuh"
#include "model/config.h"

namespace flashseek::cuda {

// Step metadata, laid out as one int32 array so that one copy uploads it (host side pinned).
class StepMeta {
public:
    // kHeadRows: the rows that need logits; kHeadSlot / kHeadPos: their sequence's state slot and position,
    // kHeadIndex: 0, 1, ..., kHeadOnes: 1 (the head rows as one-token sequences, ForwardPass::head_batch; these two
    // are filled once, at construction).
    enum Field {
        kTokens, kSeqSlot, kSeqFirstRow, kSeqNTokens, kSeqStartPos, kTokenSeq, kTokenPos,
        kHeadRows, kHeadSlot, kHeadPos, kHeadIndex, kHeadOnes, kCount
    };
    explicit StepMeta(int capacity);
    int32_t* h(Field f) const { return host_.as<int32_t>() + size_t(f) * size_t(capacity_); }
    const int32_t* d(Field f) const { return dev_.as<int32_t>() + size_t(f) * size_t(capacity_); }
    void upload(cudaStream_t s) const;
    void copy_host_from(const StepMeta& other);  // the same capacity

private:
    int capacity_;  // rows
    PinnedBuffer host_;
    DeviceBuffer dev_;
};

// A prepared-activation buffer with room for (max_rows, max_k), and what it holds, so that a second linear on the
// same input in the same sub-block reuses it (forward.cpp, prepare()).
struct PrepBuffer {
    DeviceBuffer values, scales;
    PreparedActivation act;
    const void* src = nullptr;
    int rows = 0;
    WeightKind layout = WeightKind::BF16;
    ActNumerics numerics = ActNumerics::EXACT;
    ActFormat format = ActFormat::MMA_F16;
    uint64_t generation = 0;
    void allocate(int64_t max_rows, int64_t max_k);
};

// Compressed entries per sequence the prefill attention's gather workspace holds (a 131k-token context at ratio 4).
inline constexpr int64_t kPrefillGatherEntries = 32768;

struct StepBufferSizes {
    int max_rows = 0;             // rows of the largest pass (a prefill chunk or the largest decode bucket)
    int max_head_rows = 0;        // rows of the largest head (logits) of a pass
    int64_t max_context = 0;      // the state pool's context bound (indexer and attention workspaces)
    int expert_begin = 0;         // the routed experts the shard holds: [expert_begin, expert_begin + experts)
    int experts = 0;              // 0: all of the model's
    bool sharded = false;         // a slice of the model: sub-block outputs are partial sums (sub_out_partial)
    int64_t expert_inter = 0;     // the held routed experts' intermediate columns (0 = the model's)
};

struct StepBuffers {
    StepBuffers(const ModelConfig& cfg, const StepBufferSizes& sizes);

    StepMeta meta;
    // residual streams and sub-block plumbing (bf16 unless noted)
    DeviceBuffer residual;      // [rows, hc_mult, hidden]
    DeviceBuffer head_streams;  // [rows, hc_mult, hidden]: the head's rows gathered
    DeviceBuffer sub_in;        // [rows, hidden]: mhc_pre's normed output, the sub-block input (BF16 linears read it)
    DeviceBuffer unit_scales;   // fp32 1.0 per (row, 128-block) of sub_in: the scales of its BF16 "prepared" form
    DeviceBuffer mhc_post, mhc_comb, mhc_workspace;  // fp32 [rows, hc_mult], [rows, hc_mult, hc_mult], scratch
    size_t mhc_workspace_bytes = 0;
    DeviceBuffer mhc_counter;   // one zeroed word for mhc_pre's one-launch form (main stream only)
    DeviceBuffer sub_out;       // [rows, hidden]: a sub-block's output before mhc_post
    DeviceBuffer sub_out_partial;  // fp32 [rows, hidden]: a shard's part of it, before the all-reduce
    // Where the last layer runs on the head rows only (forward.h): its attention input gathered to them ([head rows,
    // hidden] bf16) and the attention sub-block's mHC mixing (fp32 [.., hc_mult], [.., hc_mult, hc_mult])
    DeviceBuffer head_in, head_post, head_comb;
    // attention
    DeviceBuffer q_latent;      // [rows, q_lora_rank]
    DeviceBuffer q_latent_raw;  // [q_lora_rank]: wq_a's output before q_norm where the query chain runs (one token)
    DeviceBuffer queries;       // [rows, heads, head_dim]
    DeviceBuffer window_kv;     // [rows, head_dim]
    DeviceBuffer attn_out;      // [rows, heads, head_dim]
    DeviceBuffer wo_a_out;      // [rows, o_groups * o_lora_rank]
    DeviceBuffer wo_a_bf16;     // [o_groups * o_lora_rank, heads * head_dim / o_groups]: wo_a widened (prefill;
                                // decode from KernelPolicy::wo_a_widen_min_tokens rows)
    DeviceBuffer comp_kv, comp_gate;              // fp32 [rows, 2 * head_dim]: the attention compressor's projections
    DeviceBuffer index_comp_kv, index_comp_gate;  // fp32 [rows, 2 * index_head_dim]: the indexer compressor's
    DeviceBuffer index_q;        // [rows, index_heads, index_head_dim]
    DeviceBuffer index_weights;  // [rows, index_heads]
    DeviceBuffer index_selected; // int32 [rows, index_topk]
    DeviceBuffer index_workspace, attn_workspace;
    int index_workspace_entries = 1;  // visible ratio-4 entries per row the indexer workspace holds (a power of two)
    size_t attn_workspace_bytes = 0;
    // MoE
    DeviceBuffer router_logits;  // fp32 [rows, experts]
    DeviceBuffer expert_idx, expert_weight;  // [rows, top_k]
    DeviceBuffer grouping_memory, act_tiles_memory, expert_gemm_memory;  // expert_gemm: grouped_experts' workspace
    MoeGrouping grouping{};
    DeviceBuffer routed_out;     // fp32 [rows * top_k, hidden]
    DeviceBuffer shared_out;     // fp32 [rows, hidden]
    DeviceBuffer shared_gate_up; // bf16 [2, rows, inter]: the shared expert as linears (w1, w3 outputs)
    // prepared activations
    PrepBuffer prep_x, prep_x_bf16, prep_q_latent, prep_attn_out, prep_wo_a_out, prep_kv, prep_index_x;
    PrepBuffer prep_x_expert, moe_h, moe_h_shared;
    PrepBuffer prep_index_q;  // the q latent for the indexer's wq_b on its side branch (the main path reads prep_q_latent)
    PrepBuffer prep_index_weights;  // the query rows' input for the indexer's weights_proj on its lane (forward_attention)
    // outputs, per head row
    DeviceBuffer logits;         // fp32 [head rows, vocab]
    DeviceBuffer tokens;         // int32 [head rows]: argmax or sampled ids
    DeviceBuffer argmax_scratch; // argmax_rows' per-row slots and tickets: zeroed, left zeroed
    DeviceBuffer sample_params;  // DeviceSampleParams [head rows]
    DeviceBuffer sample_scratch; // sample_rows' spread passes: zeroed once, kept reusable by every call
    DeviceBuffer sample_logprob; // fp32 [head rows]
    PinnedBuffer logits_host, tokens_host, sample_params_host, sample_logprob_host;
};

}  // namespace flashseek::cuda
