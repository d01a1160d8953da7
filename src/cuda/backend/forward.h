// One pass of the DeepSeek-V4 forward on one shard, enqueued on the backend's streams (graph-capturable): the
// embedding, per layer the attention and MoE sub-blocks between mHC pre/post, and the head. The CPU forward's order
// (src/cpu), kernel by kernel. ForwardPass owns no memory: it wires the shard's weights, the step buffers, the
// streams, the state pool, the kernel policy and the profiler together, and keeps the bookkeeping of a pass (which
// buffer holds which prepared activation). forward.cpp: the pass, mHC, the head and the linear helpers;
// forward_attention.cpp and forward_moe.cpp: the sub-blocks; step_bytes.cpp: the bytes a profiled pass moves.
#pragma once
#include <cstdint>

#include "backend/diagnostics.h"
#include "backend/options.h"
#include "cuda/attention/kv_cache.cuh"
#include "cuda/backend/op_profiler.h"
#include "cuda/backend/pass_shape.h"
#include "cuda/backend/shard.h"
#include "cuda/backend/state_pool.h"
#include "cuda/backend/step_buffers.h"
#include "cuda/backend/streams.h"
#include "cuda/common/kernel_policy.h"

namespace flashseek::cuda {

struct GemvChain;    // gemm/gemv_chain.cuh
struct NormedInput;  // gemm/normed_gemv.cuh

// Release (production) numerics quantize activations to FP8 per 128 columns and simulate the reference's FP8 KV
// and Hadamard + FP4 indexer keys; the exact (reference) configuration does none of it, like the CPU exact numerics
// it is compared against.
struct ForwardNumerics {
    ActNumerics act = ActNumerics::EXACT;
    KvFormat kv = KvFormat::BF16;
    IndexFormat index = IndexFormat::BF16;
    bool quant_sim = false;
    static ForwardNumerics of(Numerics n);
};

class ForwardPass {
public:
    ForwardPass(const ModelConfig& cfg, const ShardWeights& shard, StepBuffers& buffers, StreamSet& streams,
                StatePool& pool, const KernelPolicy& policy, ForwardNumerics numerics, OpProfiler& profiler);

    // Enqueues the whole forward of one pass on the main stream; the step metadata must describe it. A whole-model
    // shard only; a sharded one is driven piece by piece (below) with an all-reduce after every sub-block.
    void enqueue(const PassShape& shape);

    // The pieces of a pass: begin (embedding), then for every layer l the attention (sub 0) and MoE (sub 1)
    // sub-blocks in order, then end (the last mhc_post and the head). A sub-block's mhc_pre runs the previous
    // sub-block's mhc_post. A sharded shard leaves each sub-block's output as its partial sum in fp32
    // (StepBuffers::sub_out_partial); the caller reduces the partials of all shards into every shard's sub_out
    // before the next piece.
    void begin(const PassShape& shape);
    void sub_block(const PassShape& shape, int l, int sub);
    void end(const PassShape& shape);
    bool sharded() const { return sharded_; }
    // Where the head writes its logits: [head rows, ld] fp32 with this shard's vocabulary rows at its columns
    // (default: the step buffers' logits, ld = the shard's vocabulary rows).
    void set_logits_target(float* logits, int64_t ld) {
        logits_ = logits;
        logits_ld_ = ld;
    }

    // Profiling (eager passes only): count the routed experts each MoE sub-block touched (a sync per layer), and add
    // a pass's bytes to `profile` (weights read once, state read and written; step_bytes.cpp).
    void set_profiling(bool on) { profiling_ = on; }
    void account_bytes(const PassShape& shape, StepProfile& profile);

private:
    // head_queries: the query path (and the sub-block's output) on the head rows only (last_layer_on_head_rows).
    void enqueue_attention(int l, const PassShape& s, bool head_queries);
    // Where the attention's merge also writes its output prepared for wo_a ("prepare_in_merge"): the buffer, wo_a's
    // layout and input numerics (buf null: nowhere).
    struct MergePrep {
        PrepBuffer* buf = nullptr;
        WeightKind kind = WeightKind::BF16;
        ActNumerics numerics = ActNumerics::EXACT;
    };
    // merge_launches_next_early: SparseAttentionParams::merge_launches_next_early (ring_launched_early). Returns
    // whether the merge wrote the output prepared into merge_prep.buf (only where the step merges splits).
    bool enqueue_sparse_attention(int l, const PassShape& s, const TokenBatch& qbatch, bool merge_launches_next_early,
                                  const MergePrep& merge_prep);
    // A decode pass's wo_a input prepared by the attention's merge (the forced-only "prepare_in_merge"): where wo_a
    // takes a prepared MMA_F16 input (wo_a_unprepared: it is widened or takes the raw row instead), FP8 or FP4
    // weights, head_dim % 128 == 0.
    MergePrep merge_prep_target(const ShardLayer& L, int Tq, bool prefill, bool wo_a_unprepared, int groups);
    // One token, where w runs ring_gemv: whether the kernels before the ring let their successors launch at their
    // entry (the forced-only compositions "early_wo_a": the attention's merge and wo_a's preparation; "early_wo_b":
    // wo_b's preparation).
    bool ring_launched_early(std::string_view name, const DeviceLinear& w, bool force_exact, int Tq, bool prefill,
                             int groups) const;
    // wq_a -> q_norm -> wq_b as one persistent kernel at one token (gemm/gemv_chain.cuh with its norm): the normed
    // q latent in buf_.q_latent and prepared in buf_.prep_q_latent as q_norm leaves them, the queries in
    // buf_.queries; false (nothing run) where it does not apply.
    bool run_query_chain(const ShardLayer& L, const PreparedActivation& ax, int Tq, bool prefill);
    // One token: whether q_norm runs inside wq_b's staging (normed_gemv), and that launch (wq_a has written
    // q_latent_raw): the normed latent in buf_.q_latent and prepared in buf_.prep_q_latent as q_norm leaves them.
    bool q_norm_into_wq_b(const ShardLayer& L, int Tq, bool prefill, bool index_branch) const;
    void run_q_norm_in_wq_b(const ShardLayer& L, int Tq);
    // prep_q_latent's storage described as q_norm's prepared copy for wq_b, and q_norm's input to normed_gemv.
    PreparedActivation q_latent_prepared_for(const DeviceLinear& wq_b, ActFormat fmt) const;
    NormedInput q_norm_input(const ShardLayer& L, PreparedActivation* prepared) const;
    // One token's bf16 input row of a linear as a raw_activation where simt_gemv would prepare and run it (raw set),
    // else an activation with raw false: the caller prepares.
    PreparedActivation raw_input(int Tq, const void* x, int64_t K, const DeviceLinear& w, bool force_exact, int groups,
                                 bool prefill) const;
    // A chain's K splits, prepared-input storage and counters from the per-kernel path (false: not applicable), and
    // its launch under profiler op name `op`.
    bool plan_gemv_chain(GemvChain& c, const PreparedActivation& bx, const Lane& main);
    void launch_gemv_chain(const GemvChain& c, const char* op, double bytes, const Lane& main);
    // wo_a -> wo_b as one persistent kernel at one token (gemm/gemv_chain.cuh); false where it does not apply.
    bool run_out_proj_chain(const ShardLayer& L, const PreparedActivation& ao, const DeviceLinear& wo_a, int G,
                            int Tq, bool prefill);
    // Where the policy forces "weight_prefetch" in a decode pass: requests w's weight codes into L2 on a
    // side branch that starts after what the main stream has so far (closing the previous such branch first), so
    // that the matrix streams while the latency-bound ops before its GEMV run. sub_block() joins the branch. No
    // result changes: nothing waits for the prefetch or reads anything it writes.
    void prefetch_weights(const DeviceLinear& w, const PassShape& s);
    // combine = false: the sub-block output is left as its terms (routed_out, grouping, shared_out) for the next
    // mhc_pre, which fuses this sub-block's mhc_post and computes the combine itself (MhcPreParams::prev_y_routed).
    void enqueue_moe(int l, const PassShape& s, bool combine);
    bool enqueue_shared_expert(int l, int rows, const PreparedActivation& routed_x, const Lane& lane);
    void enqueue_head(const PassShape& s);
    // mhc_pre's counter for its one-launch form (one token) where the policy forces mhc_one_launch, else null.
    uint32_t* mhc_one_launch_counter() const {
        return pol_->takes_forced_only("mhc_one_launch") ? buf_.mhc_counter.as<uint32_t>() : nullptr;
    }
    void run_pending_post(const PassShape& s);  // mhc_post of the sub-block before, on its own
    // The last layer's output feeds only the head, so where a pass has fewer rows that need logits (a prompt's last
    // token, every decode token: the head rows) than rows, the last layer computes for those rows only what they
    // need: its attention sub-block writes the window KV and compressed entries of every row but runs the query
    // path (q projections, indexer scoring, attention, output projections) on the head rows, and its MoE sub-block
    // runs on them alone. Not on a shard (the caller reduces its partial sums over all rows) nor in a hash-routed
    // last layer (it routes by the rows' token ids). Disabling "head_rows_last_layer" in the kernel policy runs it
    // on every row (A/B). The head rows take the kernels of the whole pass (PassShape::prefill; to the prefill
    // attention a head row is a one-token chunk), so their results are the same bits.
    bool last_layer_on_head_rows(const PassShape& s, int l) const;
    // The head rows as one-token sequences at their positions (StepMeta's kHead* fields).
    TokenBatch head_batch(const PassShape& s) const;
    // Gathers the residual streams (into head_streams, the residual from then on) and the attention mhc_post's
    // mixing (head_post, head_comb) to the head rows; runs that post there when it is not fused.
    void gather_head_rows(const PassShape& s);

    // Prepares x [rows, K] for weight w into buf (EXACT for BF16 weights, else the pass's numerics), in the format
    // the linear catalogue's choice for this pass takes (input_format). force_exact: no activation quantization
    // whatever the numerics (wo_a: the reference's bf16 einsum). groups: a grouped linear's group count.
    const PreparedActivation& prepare(PrepBuffer& buf, const void* x, bool x_f32, int rows, int64_t K, int64_t ld,
                                      const DeviceLinear& w, bool force_exact = false, const Lane* lane = nullptr,
                                      int groups = 1, bool launch_next_early = false);
    // The same in a given format (the expert kernels take MMA_F16 whatever the linear catalogue would choose).
    const PreparedActivation& prepare_as(ActFormat format, PrepBuffer& buf, const void* x, bool x_f32, int rows,
                                         int64_t K, int64_t ld, const DeviceLinear& w, bool force_exact,
                                         const Lane* lane, bool launch_next_early = false);
    ActNumerics input_numerics(const DeviceLinear& w, bool force_exact = false) const;
    ActFormat input_format(int rows, const DeviceLinear& w, bool force_exact = false, int groups = 1) const;
    // The routed experts take sub_in raw (grouped_experts: its own act_quant of the gathered rows) in this pass.
    bool routed_experts_take_raw(const ShardLayer& L, int rows) const;
    // y = x W^T on `lane` (null: the main stream); names the variant in the profile.
    void lin(const PreparedActivation& x, const DeviceLinear& w, void* y, OutKind kind, int64_t ld,
             const Lane* lane = nullptr);
    // The prepared buffer a sub-block's fused producer (mhc_pre's norm) can also write sub_in into, for the first
    // FP8 / FP4 linear that reads sub_in (sub 0: wq_a, or wkv where the query path reads the gathered head rows;
    // sub 1: the routed experts, or the shared expert's w1 where the routed experts take sub_in raw), in the
    // format that linear takes (MMA_F16, or FP8_ROWS for the compute-bound FP8 GEMMs); BF16 weights read sub_in
    // itself (see prepare). Null: none.
    struct FusedPrep {
        PrepBuffer* buf = nullptr;
        WeightKind kind = WeightKind::BF16;
        ActFormat format = ActFormat::MMA_F16;
    };
    FusedPrep fused_prep_target(const ShardLayer& L, int sub, int rows, bool head_rows);
    // Records that src [rows, K] is prepared for kind with `numerics` in this sub-block (by a producer kernel, or in
    // place for BF16): in buf's own storage, or at values / scales when given.
    void adopt_prepared(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind, ActNumerics numerics,
                        uint16_t* values = nullptr, float* scales = nullptr);
    // The same for the FP8_ROWS form (act_quant, release numerics) in buf's own storage.
    void adopt_prepared_fp8_rows(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind);
    // Whether a producer of w's input (mhc_pre's norm, q_norm) writes it prepared in `format` (the format w takes)
    // beside its output: for FP8 / FP4 weights; FP8_ROWS unless "norm_fp8_rows" is disabled (A/B).
    bool producer_prepares(const DeviceLinear& w, ActFormat format) const;
    // adopt_prepared / adopt_prepared_fp8_rows, by format, for what such a producer wrote into buf.
    void adopt_produced(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind, ActFormat format);

    TokenBatch token_batch(const PassShape& s) const;
    RingView ring_view(int l) const;
    PagedEntries comp_entries(int l) const;
    PagedEntries index_entries(int l) const;

    const ModelConfig& cfg_;
    const ShardWeights& shard_;
    StepBuffers& buf_;
    StreamSet& streams_;
    StatePool& pool_;
    const KernelPolicy& policy_;
    // The backend's policy for prefill and for decode passes (KernelPolicy::for_pass), and the one of the pass
    // being enqueued (set by begin and sub_block from PassShape::prefill).
    const KernelPolicy prefill_policy_, decode_policy_;
    const KernelPolicy* pol_;
    const ForwardNumerics num_;
    OpProfiler& prof_;
    const bool sharded_;
    float* logits_;
    int64_t logits_ld_;
    int post_pending_ = -1;         // the sub-block (0 attention, 1 MoE) whose mhc_post the next mhc_pre runs, or -1
    bool shared_out_bf16_ = false;  // the last MoE sub-block's shared_out holds bf16 (enqueue_shared_expert)
    bool routed_out_bf16_ = false;  // ... and its routed_out (the grouped experts' down-projection wrote bf16)
    bf16* residual_ = nullptr;      // the residual streams of the pass: buf_.residual, or head_streams once gathered
    int residual_rows_ = 0;         // the rows they hold
    uint64_t prep_generation_ = 1;  // bumped whenever a sub-block starts (its inputs are rewritten)
    bool profiling_ = false;
    int distinct_experts_ = 0;      // summed over layers in a profiled pass
};

}  // namespace flashseek::cuda
