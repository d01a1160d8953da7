// Device memory estimates per rank (memory_estimate.h): the state pool's geometry formula, the step buffers'
// largest terms, and the fit check.
#include "model/memory_estimate.h"

#include <algorithm>

#include "util/error.h"

namespace flashseek {

namespace {

constexpr int64_t kBlockTokens = 256;  // the state pool's block (make_state_pool in cuda_backend.cpp)

int64_t align256(int64_t v) { return (v + 255) / 256 * 256; }
int64_t pow2_at_least(int64_t v) {
    int64_t p = 1;
    while (p < v) p *= 2;
    return p;
}

// Bytes of one stored KV entry / indexer key (src/cuda/attention/kv_cache.cuh, kv_entry_bytes / index_entry_bytes).
int64_t kv_entry_bytes(const ModelConfig& cfg, bool release) {
    if (!release) return int64_t(cfg.head_dim) * 2;
    const int64_t nope = cfg.nope_dim(), rope = cfg.rope_dim();
    return (nope + rope * 2 + nope / 64 + 7) / 8 * 8;
}
int64_t index_entry_bytes(const ModelConfig& cfg, bool release) {
    return release ? int64_t(cfg.index_head_dim) / 2 + cfg.index_head_dim / 32 : int64_t(cfg.index_head_dim) * 2;
}
// The compressor's per-slot partial state (src/cuda/compressor/compressor.cu, compressor_state_bytes).
int64_t compressor_state_bytes(int ratio, int64_t dim) {
    const int64_t c = ratio == 4 ? 2 : 1;
    return 2 * c * ratio * c * dim * 4;
}


void check_options(const ModelConfig& cfg, const StateOptions& opt) {
    FS_CHECK(opt.max_sequences >= 1 && opt.max_sequences <= (1 << 20), "max-sequences {}: must be in [1, {}]",
             opt.max_sequences, 1 << 20);
    FS_CHECK(opt.max_context >= 1 && opt.max_context <= cfg.max_position_embeddings,
             "max-context {}: must be in [1, max_position_embeddings {}]", opt.max_context,
             cfg.max_position_embeddings);
    FS_CHECK(opt.n_layers >= 0 && opt.n_layers <= cfg.num_hidden_layers,
             "layers {}: must be in [0, num_hidden_layers {}] (0 = all)", opt.n_layers, cfg.num_hidden_layers);
    FS_CHECK(opt.prefill_chunk_tokens >= 1 && opt.prefill_chunk_tokens <= (1 << 20),
             "prefill chunk {}: must be in [1, {}] tokens", opt.prefill_chunk_tokens, 1 << 20);
}

}  // namespace

StateEstimate estimate_state(const ModelConfig& cfg, const StateOptions& opt) {
    check_options(cfg, opt);
    const int n_layers = opt.n_layers == 0 ? cfg.num_hidden_layers : opt.n_layers;
    const int64_t slots = int64_t(opt.max_sequences) + 1;
    StateEstimate e;
    e.kv_entry_bytes = kv_entry_bytes(cfg, opt.release_numerics);
    e.index_entry_bytes = index_entry_bytes(cfg, opt.release_numerics);
    e.ring_entries = cfg.sliding_window + opt.prefill_chunk_tokens;
    e.block_tokens = kBlockTokens;
    for (int l = 0; l < n_layers; ++l) {
        const int ratio = cfg.ratio(l);
        e.ring_bytes += align256(slots * e.ring_entries * e.kv_entry_bytes);
        if (ratio == 0) continue;
        FS_CHECK(kBlockTokens % ratio == 0, "compress_ratios[{}] = {}: the state pool's blocks of {} tokens need a "
                 "ratio that divides {}", l, ratio, kBlockTokens, kBlockTokens);
        e.compressor_state_bytes += align256(slots * compressor_state_bytes(ratio, cfg.head_dim));
        const int64_t per_block = kBlockTokens / ratio;
        e.block_bytes += align256(per_block * e.kv_entry_bytes);
        if (ratio == 4) {
            e.compressor_state_bytes += align256(slots * compressor_state_bytes(4, cfg.index_head_dim));
            e.block_bytes += align256(per_block * e.index_entry_bytes);
        }
    }
    e.block_bytes = std::max<int64_t>(e.block_bytes, 256);
    const int64_t blocks_per_sequence = (opt.max_context + kBlockTokens - 1) / kBlockTokens;
    e.blocks = int64_t(opt.max_sequences) * blocks_per_sequence + 1;
    e.paged_bytes = e.blocks * e.block_bytes;
    e.table_bytes = slots * blocks_per_sequence * 4;
    return e;
}

int64_t estimate_step_buffer_bytes(const ModelConfig& cfg, const StateOptions& opt) {
    check_options(cfg, opt);
    const int64_t bucket = pow2_at_least(opt.max_sequences);
    const int64_t T = std::max<int64_t>(opt.prefill_chunk_tokens, bucket), D = cfg.hidden_size, N = cfg.hc_mult,
                  H = cfg.num_attention_heads, hd = cfg.head_dim, QL = cfg.q_lora_rank,
                  GO = int64_t(cfg.o_groups) * cfg.o_lora_rank, V = cfg.vocab_size, nI = cfg.index_n_heads,
                  dI = cfg.index_head_dim, E = cfg.n_routed_experts, K = cfg.num_experts_per_tok,
                  I = cfg.moe_intermediate_size;
    int64_t b = 0;
    b += 2 * T * N * D * 2;                    // residual and head streams
    b += 2 * T * D * 2;                        // sub-block input and output
    b += T * (QL + 2 * H * hd + hd + GO) * 2;  // q latent, queries, attention output, window KV, wo_a output
    b += 2 * T * 2 * hd * 4 + 2 * T * 2 * dI * 4;  // compressor projections (fp32)
    b += T * nI * dI * 2 + T * nI * 4 + T * cfg.index_topk * 4;
    b += T * pow2_at_least(std::max<int64_t>(1, opt.max_context / 4)) * 4;  // indexer selection workspace
    b += T * E * 4 + T * K * D * 4 + T * D * 4;  // router logits, routed and shared expert outputs (fp32)
    b += T * K * std::max(D, I) * 2;              // expert activation tiles
    b += T * (5 * D + QL + H * hd + GO + K * I + I) * 2;  // prepared activations
    b += 2 * T * I * 2;                                   // the shared expert's w1 / w3 outputs (linear path)
    b += T * K * (D + I) + T * K * ((D + I) / 128) * 4;   // the grouped expert GEMMs' act_quant (codes, scales)
    if (cfg.quantized()) b += GO * (H * hd / cfg.o_groups) * 2;  // wo_a widened to bf16 (prefill)
    b += std::max<int64_t>(kMinHeadRows, bucket) * V * 4;          // logits
    return b;
}

const RankMemory& MemoryPlan::largest_rank() const {
    FS_CHECK(!ranks.empty(), "memory plan: no ranks");
    return *std::max_element(ranks.begin(), ranks.end(),
                             [](const RankMemory& a, const RankMemory& b) { return a.total() < b.total(); });
}

MemoryPlan plan_memory(const ShardPlan& plan, const StateOptions& opt_in) {
    StateOptions opt = opt_in;
    opt.n_layers = plan.n_layers;
    MemoryPlan m;
    m.state = estimate_state(plan.config, opt);
    m.buffers = estimate_step_buffer_bytes(plan.config, opt);
    for (const RankPlan& rp : plan.ranks) {
        RankMemory r;
        r.rank = rp.slice.rank;
        r.weights = rp.total();
        r.state = m.state.total();
        r.buffers = m.buffers;
        m.ranks.push_back(r);
    }
    return m;
}

std::string format_bytes(int64_t bytes) { return fmt::format("{:.2f} GB ({} bytes)", double(bytes) / 1e9, bytes); }

std::string fit_problem(const ShardPlan& plan, const MemoryPlan& memory, int64_t gpu_memory_bytes) {
    const RankMemory& r = memory.largest_rank();
    if (r.total() <= gpu_memory_bytes) return "";
    return fmt::format("layout {} does not fit: rank {} needs {} (weights {} + state {} + step buffers {} + reserve "
                       "{}) but the GPU has {}",
                       plan.layout.name(), r.rank, format_bytes(r.total()), format_bytes(r.weights),
                       format_bytes(r.state), format_bytes(r.buffers), format_bytes(r.reserve),
                       format_bytes(gpu_memory_bytes));
}

void require_fit(const ShardPlan& plan, const MemoryPlan& memory, int64_t gpu_memory_bytes) {
    const std::string problem = fit_problem(plan, memory, gpu_memory_bytes);
    FS_CHECK(problem.empty(), "{}", problem);
}

}  // namespace flashseek
