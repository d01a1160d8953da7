// StepBuffers (step_buffers.h): every per-step device buffer sized for the largest pass.
#include "cuda/backend/step_buffers.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/attention/sparse_attention.cuh"
#include "cuda/attention/sparse_attention_prefill.cuh"
#include "cuda/backend/glue.cuh"
#include "cuda/indexer/indexer.cuh"
#include "cuda/indexer/indexer_prefill.cuh"
#include "cuda/mhc/mhc.cuh"
#include "cuda/moe/moe_gemm.cuh"
#include "util/error.h"

namespace flashseek::cuda {

namespace {
int64_t pow2_at_least(int64_t v) {
    int64_t p = 1;
    while (p < v) p *= 2;
    return p;
}
}  // namespace

StepMeta::StepMeta(int capacity)
    : capacity_(capacity),
      host_(size_t(kCount) * size_t(capacity) * sizeof(int32_t), "step metadata"),
      dev_(size_t(kCount) * size_t(capacity) * sizeof(int32_t), "step metadata") {
    // The fields that are the same in every step (uploaded with the rest).
    for (int i = 0; i < capacity; ++i) {
        h(kHeadIndex)[i] = i;
        h(kHeadOnes)[i] = 1;
    }
}

void StepMeta::upload(cudaStream_t s) const {
    CUDA_CHECK(cudaMemcpyAsync(dev_.get(), host_.as<void>(), dev_.bytes(), cudaMemcpyHostToDevice, s));
}

void StepMeta::copy_host_from(const StepMeta& other) {
    FS_CHECK(other.capacity_ == capacity_, "step metadata of {} rows copied into {} rows", other.capacity_, capacity_);
    std::memcpy(host_.as<void>(), other.host_.as<void>(), host_.bytes());
}

void PrepBuffer::allocate(int64_t max_rows, int64_t max_k) {
    values.allocate(prepared_values_bytes(max_rows, max_k), "prepared activations");
    scales.allocate(prepared_scales_bytes(max_rows, max_k), "prepared activation scales");
    act.values = values.as<uint16_t>();
    act.scales = scales.as<float>();
}

StepBuffers::StepBuffers(const ModelConfig& cfg, const StepBufferSizes& sizes) : meta(sizes.max_rows) {
    const int64_t T = sizes.max_rows, D = cfg.hidden_size, N = cfg.hc_mult, H = cfg.num_attention_heads,
                  hd = cfg.head_dim, QL = cfg.q_lora_rank, GO = int64_t(cfg.o_groups) * cfg.o_lora_rank,
                  V = cfg.vocab_size, nI = cfg.index_n_heads, dI = cfg.index_head_dim,
                  E = sizes.experts > 0 ? sizes.experts : cfg.n_routed_experts, K = cfg.num_experts_per_tok,
                  I = cfg.moe_intermediate_size;
    residual.allocate(size_t(T * N * D) * 2, "residual streams");
    head_streams.allocate(size_t(T * N * D) * 2, "head streams");
    sub_in.allocate(size_t(T * D) * 2, "sub-block input");
    // Zeroed once: BF16 linears read sub_in in place, including the rows up to the next multiple of 8 past a pass's
    // rows, whose outputs are discarded; those rows then hold zeros or earlier finite values, never garbage.
    CUDA_CHECK(cudaMemset(sub_in.get(), 0, sub_in.bytes()));
    {  // sub_in's width, or the attention output's where prefill widens wo_a to bf16 (both read in place)
        const int64_t widest = cfg.quantized() ? std::max<int64_t>(D, H * hd) : D;
        const std::vector<float> ones(size_t(T) * size_t((widest + 127) / 128), 1.f);
        unit_scales.allocate(ones.size() * 4, "unit activation scales");
        CUDA_CHECK(cudaMemcpy(unit_scales.get(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    }
    mhc_post.allocate(size_t(T * N) * 4, "mHC post");
    mhc_comb.allocate(size_t(T * N * N) * 4, "mHC comb");
    mhc_workspace_bytes = std::max(mhc_pre_workspace_bytes(int(T), int(N), int(D), false),
                                   mhc_pre_workspace_bytes(int(T), int(N), int(D), true));
    mhc_workspace.allocate(mhc_workspace_bytes, "mHC workspace");
    mhc_counter.allocate(16, "mHC one-launch counter");  // MhcPreParams::one_launch_counter: zeroed, left zeroed
    CUDA_CHECK(cudaMemset(mhc_counter.get(), 0, mhc_counter.bytes()));
    sub_out.allocate(size_t(T * D) * 2, "sub-block output");
    {
        const int64_t HR = std::max(1, sizes.max_head_rows);
        head_in.allocate(size_t(HR * D) * 2, "head rows' attention input");
        head_post.allocate(size_t(HR * N) * 4, "head rows' mHC post");
        head_comb.allocate(size_t(HR * N * N) * 4, "head rows' mHC comb");
    }
    if (sizes.sharded) sub_out_partial.allocate(size_t(T * D) * 4, "sub-block output of the shard");

    q_latent.allocate(size_t(T * QL) * 2, "q latent");
    q_latent_raw.allocate(size_t(QL) * 2, "q latent before its norm");
    queries.allocate(size_t(T * H * hd) * 2, "queries");
    window_kv.allocate(size_t(T * hd) * 2, "window kv");
    attn_out.allocate(size_t(T * H * hd) * 2, "attention output");
    CUDA_CHECK(cudaMemset(attn_out.get(), 0, attn_out.bytes()));  // read in place like sub_in (rows past a pass's)
    wo_a_out.allocate(size_t(T * GO) * 2, "wo_a output");
    if (cfg.quantized()) wo_a_bf16.allocate(size_t(GO * (H * hd / cfg.o_groups)) * 2, "wo_a widened to bf16");
    comp_kv.allocate(size_t(T * 2 * hd) * 4, "compressor kv");
    comp_gate.allocate(size_t(T * 2 * hd) * 4, "compressor gate");
    index_comp_kv.allocate(size_t(T * 2 * dI) * 4, "indexer compressor kv");
    index_comp_gate.allocate(size_t(T * 2 * dI) * 4, "indexer compressor gate");
    index_q.allocate(size_t(T * nI * dI) * 2, "indexer queries");
    index_weights.allocate(size_t(T * nI) * 4, "indexer head weights");
    index_selected.allocate(size_t(T) * size_t(cfg.index_topk) * 4, "indexer selection");
    const int64_t entries = pow2_at_least(std::max<int64_t>(1, sizes.max_context / 4));
    index_workspace_entries = int(entries);
    index_workspace.allocate(std::max<size_t>({indexer_select_workspace_bytes(int(T), int(entries)),
                                               indexer_select_prefill_workspace_bytes(int(T), int(entries)), 256}),
                             "indexer workspace");
    const int64_t ctx2 = pow2_at_least(sizes.max_context);
    const int max_cand = cfg.sliding_window + int(std::max<int64_t>(cfg.index_topk, ctx2 / 128 + 1));
    // The prefill kernel gathers every KV row a pass can read (about 1 KB a row): sized for a pass of max_rows rows
    // in up to 16 sequences with up to kPrefillGatherEntries compressed entries each; a larger pass takes the decode
    // kernels (ForwardPass::enqueue_sparse_attention).
    const int prefill_seqs = int(std::min<int64_t>(T, 16));
    const int prefill_entries = int(std::min<int64_t>(std::max<int64_t>(sizes.max_context / 4, 1), kPrefillGatherEntries));
    attn_workspace_bytes = std::max<size_t>(
        {sparse_attention_workspace_bytes(int(T), int(H), int(hd), max_cand),
         sparse_attention_prefill_workspace_bytes(int(T), prefill_seqs, cfg.sliding_window, prefill_entries, int(hd)),
         256});
    attn_workspace.allocate(attn_workspace_bytes, "attention workspace");

    router_logits.allocate(size_t(T * cfg.n_routed_experts) * 4, "router logits");
    expert_idx.allocate(size_t(T * K) * 4, "expert ids");
    expert_weight.allocate(size_t(T * K) * 4, "expert weights");
    grouping_memory.allocate(moe_grouping_bytes(int(E), T * K), "expert grouping");
    grouping = moe_grouping_view(grouping_memory.get(), int(E), T * K);
    grouping.expert_begin = sizes.expert_begin;
    grouping.experts_total = int(cfg.n_routed_experts);
    const int64_t tile_k = (std::max(D, I) + 127) / 128 * 128;
    act_tiles_memory.allocate(moe_act_tile_bytes(int(E), T * K, tile_k), "expert activation tiles");
    moe_attach_act_tiles(grouping, act_tiles_memory.get(), tile_k);
    // The grouped expert GEMMs' scratch (gathered act_quant of the input and of h), where they can run here: the
    // expert catalogue's grouped_experts needs it (prefill passes, KernelPolicy::for_pass).
    const int64_t expert_inter = sizes.expert_inter > 0 ? sizes.expert_inter : I;
    if (moe_gemm_supported() && cfg.expert_dtype == ExpertDtype::FP4 && cfg.quantized() && D % 128 == 0 &&
        expert_inter % 128 == 0) {
        expert_gemm_memory.allocate(moe_gemm_workspace_bytes(T * K, D, expert_inter), "grouped expert GEMM workspace");
        moe_attach_gemm_workspace(grouping, expert_gemm_memory.get(), D, expert_inter);
    }
    routed_out.allocate(size_t(T * K * D) * 4, "routed expert outputs");
    shared_out.allocate(size_t(T * D) * 4, "shared expert output");
    // The shared expert's linear path (the wgmma GEMV in decode passes, the FP8 GEMMs in prefill passes).
    shared_gate_up.allocate(size_t(2 * T * I) * 2, "shared expert w1 / w3 outputs");

    prep_x.allocate(T, D);
    prep_x_bf16.allocate(T, D);
    prep_q_latent.allocate(T, QL);
    prep_index_q.allocate(T, QL);
    prep_index_weights.allocate(T, D);
    prep_attn_out.allocate(T, H * hd);
    prep_wo_a_out.allocate(T, GO);
    prep_kv.allocate(T, D);
    prep_index_x.allocate(T, D);
    prep_x_expert.allocate(T, D);
    moe_h.allocate(T * K, I);
    moe_h_shared.allocate(T, I);

    const int64_t Hr = sizes.max_head_rows;
    logits.allocate(size_t(Hr * V) * 4, "logits");
    tokens.allocate(size_t(Hr) * 4, "output tokens");
    argmax_scratch.allocate(argmax_rows_scratch_bytes(int(Hr)), "argmax slots");
    CUDA_CHECK(cudaMemset(argmax_scratch.get(), 0, argmax_scratch.bytes()));
    sample_params.allocate(size_t(Hr) * sizeof(DeviceSampleParams), "sampling parameters");
    sample_scratch.allocate(sample_rows_scratch_bytes(Hr), "sampling passes");
    CUDA_CHECK(cudaMemset(sample_scratch.get(), 0, sample_scratch.bytes()));
    sample_logprob.allocate(size_t(Hr) * 4, "sampled logprobs");
    logits_host.allocate(size_t(Hr * V) * 4, "logits");
    tokens_host.allocate(size_t(Hr) * 4, "output tokens");
    sample_params_host.allocate(size_t(Hr) * sizeof(DeviceSampleParams), "sampling parameters");
    sample_logprob_host.allocate(size_t(Hr) * 4, "sampled logprobs");
}

}  // namespace flashseek::cuda
