// Sharding plans of the 43-layer V4-Flash config: per-rank bytes by category against sums computed from the
// inventory by the layout's rules (sharding_test_util.h), the communication per step, the state pool estimate
// against numbers derived by hand from docs/model.md §2.11, and the fit check's refusal naming the bytes.
#include <gtest/gtest.h>

#include "model/memory_estimate.h"
#include "model/shard_plan.h"
#include "model_test_util.h"
#include "sharding_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

ModelConfig v4() { return load_model_config(config_path("v4-flash.json")); }

// The category of a tensor, from its name (docs: src/model/sharding.h lists what each category holds).
WeightCategory category_by_name(const std::string& n) {
    if (n == "embed.weight") return WeightCategory::Embedding;
    if (n == "head.weight") return WeightCategory::Head;
    if (name_has(n, "ffn.experts.")) return WeightCategory::RoutedExperts;
    if (name_has(n, "shared_experts")) return WeightCategory::SharedExpert;
    if (name_has(n, "attn.compressor.") || name_has(n, "attn.indexer.")) return WeightCategory::CompressorsIndexer;
    for (const char* a : {"attn.wq_a.", "attn.wq_b.", "attn.wkv.", "attn.wo_a.", "attn.wo_b.", "attn.attn_sink"})
        if (name_has(n, a)) return WeightCategory::Attention;
    return WeightCategory::RouterMhcNorms;
}

int64_t spec_bytes(const TensorSpec& t) {
    int64_t n = int64_t(dtype_size(t.dtype));
    for (int64_t d : t.shape) n *= d;
    return n;
}

// Expected per-rank category bytes of `l` over the first n_layers layers (no MTP); `replicated`: per rank, the bytes
// of tensors every rank holds whole.
std::vector<CategoryBytes> expected_plan(const ModelConfig& c, const ParallelLayout& l, int n_layers,
                                         int64_t* model_bytes, std::vector<int64_t>* replicated = nullptr) {
    std::vector<CategoryBytes> out(size_t(l.ranks()));
    if (replicated) replicated->assign(size_t(l.ranks()), 0);
    *model_bytes = 0;
    InventoryOptions inv;
    inv.include_mtp = false;
    for (const TensorSpec& t : expected_tensors(c, inv)) {
        if (t.name.rfind("layers.", 0) == 0 && std::stoi(t.name.substr(7)) >= n_layers) continue;
        *model_bytes += spec_bytes(t);
        for (int r = 0; r < l.ranks(); ++r) {
            out[size_t(r)][category_by_name(t.name)] += expected_rank_bytes(t.name, spec_bytes(t), c, l, r);
            if (replicated && expected_coverage(t.name, l) == l.ranks()) (*replicated)[size_t(r)] += spec_bytes(t);
        }
    }
    return out;
}

}  // namespace

TEST(ShardPlan, V4FlashBytesPerRankAndCategory) {
    const ModelConfig c = v4();
    for (const ParallelLayout l : {ParallelLayout{1, 1}, ParallelLayout{2, 1}, ParallelLayout{1, 2},
                                   ParallelLayout{4, 1}, ParallelLayout{1, 8}, ParallelLayout{2, 2},
                                   ParallelLayout{8, 1}}) {
        SCOPED_TRACE(l.name());
        const ShardPlan p = plan_layout(c, l, 0);
        int64_t model_bytes = 0;
        std::vector<int64_t> replicated;
        const auto want = expected_plan(c, l, 43, &model_bytes, &replicated);
        EXPECT_EQ(p.n_layers, 43);
        EXPECT_EQ(p.model_bytes, model_bytes);
        ASSERT_EQ(p.ranks.size(), size_t(l.ranks()));
        for (int r = 0; r < l.ranks(); ++r) {
            SCOPED_TRACE(r);
            const RankPlan& rp = p.ranks[size_t(r)];
            for (int k = 0; k < int(WeightCategory::kCount); ++k)
                EXPECT_EQ(rp.held.bytes[size_t(k)], want[size_t(r)].bytes[size_t(k)])
                    << weight_category_name(WeightCategory(k));
            EXPECT_EQ(rp.replicated_bytes, replicated[size_t(r)]);
            EXPECT_EQ(rp.replicated_bytes + rp.sharded_bytes, rp.total());
            EXPECT_EQ(rp.held[WeightCategory::Mtp], 0);
            // One routed expert (w1, w3: [2048, 2048] I8 + [2048, 128] scales; w2: [4096, 1024] + [4096, 64]) is
            // 13 369 344 bytes, split over tp.
            EXPECT_EQ(rp.routed_expert_bytes, 13369344 / l.tp);
            EXPECT_EQ(rp.experts_per_layer, 256 / l.ep);
        }
        if (l.ranks() > 1) {
            EXPECT_LT(p.largest_rank().total(), p.model_bytes);
        }
    }
    // The whole model without MTP is the official 159 609 485 896 tensor bytes less the MTP layer.
    const ShardPlan whole = plan_layout(c, {1, 1}, 0);
    int64_t mtp = 0;
    for (const TensorSpec& t : expected_tensors(c))
        if (t.name.rfind("mtp.", 0) == 0) mtp += spec_bytes(t);
    EXPECT_EQ(whole.model_bytes, 159609485896 - mtp);
}

TEST(ShardPlan, PrefixOfLayers) {
    const ModelConfig c = v4();
    const ShardPlan p = plan_layout(c, {2, 1}, 20);
    int64_t model_bytes = 0;
    const auto want = expected_plan(c, {2, 1}, 20, &model_bytes);
    EXPECT_EQ(p.n_layers, 20);
    EXPECT_EQ(p.model_bytes, model_bytes);
    EXPECT_EQ(p.ranks[1].total(), want[1].total());
    expect_error([&] { plan_layout(c, {2, 1}, 44); }, {"layers 44", "num_hidden_layers 43"});
    expect_error([&] { plan_layout(c, {3, 1}, 0); }, {"tp 3 does not divide o_groups 8"});
}

TEST(ShardPlan, CommunicationPerStep) {
    const ModelConfig c = v4();
    const CommunicationPlan tp1 = communication_plan(c, {1, 1}, 43);
    EXPECT_EQ(tp1.allreduces_per_step, 0);
    EXPECT_EQ(tp1.allreduce_bytes_per_token(43), 0);
    EXPECT_EQ(tp1.head_gather_bytes, 0);
    // TP2: two all-reduces per layer of 4096 bf16 values; the head gathers (logit, id) from 2 ranks.
    const CommunicationPlan tp2 = communication_plan(c, {2, 1}, 43);
    EXPECT_EQ(tp2.attention_bytes, 8192);
    EXPECT_EQ(tp2.moe_bytes, 8192);
    EXPECT_EQ(tp2.attention_group, 2);
    EXPECT_EQ(tp2.moe_group, 2);
    EXPECT_EQ(tp2.allreduces_per_step, 86);
    EXPECT_EQ(tp2.allreduce_bytes_per_token(43), 43 * 16384);
    EXPECT_EQ(tp2.head_gather_bytes, 16);
    // EP2: the attention is replicated, only the MoE output is reduced.
    const CommunicationPlan ep2 = communication_plan(c, {1, 2}, 43);
    EXPECT_EQ(ep2.attention_bytes, 0);
    EXPECT_EQ(ep2.moe_bytes, 8192);
    EXPECT_EQ(ep2.allreduces_per_step, 43);
    const CommunicationPlan tp2ep2 = communication_plan(c, {2, 2}, 43);
    EXPECT_EQ(tp2ep2.attention_group, 2);
    EXPECT_EQ(tp2ep2.moe_group, 4);
    EXPECT_EQ(tp2ep2.allreduces_per_step, 86);
    EXPECT_EQ(tp2ep2.head_gather_bytes, 32);
    EXPECT_EQ(communication_plan(c, {2, 1}, 43, 4).moe_bytes, 16384);
    expect_error([&] { communication_plan(c, {2, 1}, 43, 3); }, {"2 (bf16) or 4 (fp32)", "got 3"});
    // plan_layout carries it for its layers.
    PlanOptions fp32;
    fp32.comm_element_bytes = 4;
    const ShardPlan p = plan_layout(c, {2, 1}, 20, fp32);
    EXPECT_EQ(p.comm.allreduces_per_step, 40);
    EXPECT_EQ(p.comm.attention_bytes, 16384);
}

// The state pool of V4-Flash (43 layers: 2 window-only, 21 ratio-4, 20 ratio-128), one sequence of 4096 tokens,
// two slots (the sequence and the padding slot):
//  * KV entry 448 + 2 x 64 + 7 = 583 -> 584 B (release) or 1024 B (exact); indexer key 64 + 4 = 68 B or 256 B;
//  * rings: 43 layers x 2 slots x (128 + 128) entries x 584 = 43 x 299 008;
//  * compressor state per slot: ratio 4: 2 x 8 x 1024 x 4 = 65 536, its indexer 2 x 8 x 256 x 4 = 16 384; ratio 128:
//    2 x 128 x 512 x 4 = 524 288; times 2 slots: 21 x (131 072 + 32 768) + 20 x 1 048 576 = 24 412 160;
//  * a block of 256 tokens: ratio 4: 64 x 584 = 37 376 + 64 x 68 = 4 352; ratio 128: 2 x 584 = 1 168 -> 1 280 (256
//    alignment); 21 x 41 728 + 20 x 1 280 = 901 888 bytes; 4096 tokens = 16 blocks, + 1 padding block = 17;
//  * block tables: 2 slots x 16 x 4 bytes.
TEST(MemoryEstimate, V4FlashStatePool) {
    const ModelConfig c = v4();
    StateOptions o;
    o.max_sequences = 1;
    o.max_context = 4096;
    // The default chunk is the CUDA backend's: rings of window + kDefaultPrefillChunkTokens (4,096) entries.
    EXPECT_EQ(estimate_state(c, o).ring_entries, 128 + kDefaultPrefillChunkTokens);
    o.prefill_chunk_tokens = 128;  // the figures below are worked out for 128-token chunks
    const StateEstimate e = estimate_state(c, o);
    EXPECT_EQ(e.kv_entry_bytes, 584);
    EXPECT_EQ(e.index_entry_bytes, 68);
    EXPECT_EQ(e.ring_entries, 256);
    EXPECT_EQ(e.ring_bytes, 43 * 299008);
    EXPECT_EQ(e.compressor_state_bytes, 24412160);
    EXPECT_EQ(e.block_bytes, 901888);
    EXPECT_EQ(e.blocks, 17);
    EXPECT_EQ(e.paged_bytes, 17 * 901888);
    EXPECT_EQ(e.table_bytes, 2 * 16 * 4);
    EXPECT_EQ(e.total(), 43 * 299008 + 24412160 + 17 * 901888 + 128);
    // Exact numerics: bf16 entries. Block: 21 x (64 x 1024 + 64 x 256) + 20 x 2 x 1024.
    o.release_numerics = false;
    const StateEstimate x = estimate_state(c, o);
    EXPECT_EQ(x.kv_entry_bytes, 1024);
    EXPECT_EQ(x.index_entry_bytes, 256);
    EXPECT_EQ(x.block_bytes, 21 * (65536 + 16384) + 20 * 2048);
    // 16 sequences of 8192 tokens: 17 slots; 32 blocks each + 1.
    o.release_numerics = true;
    o.max_sequences = 16;
    o.max_context = 8192;
    const StateEstimate m = estimate_state(c, o);
    EXPECT_EQ(m.ring_bytes, 43 * ((17 * 256 * 584 + 255) / 256 * 256));
    EXPECT_EQ(m.blocks, 16 * 32 + 1);
    // The first 20 layers only.
    o.n_layers = 20;
    EXPECT_LT(estimate_state(c, o).total(), m.total());
    // A larger prefill chunk widens every window ring (window + one chunk).
    o.prefill_chunk_tokens = 256;
    EXPECT_EQ(estimate_state(c, o).ring_entries, 128 + 256);
    o.prefill_chunk_tokens = 0;
    expect_error([&] { estimate_state(c, o); }, {"prefill chunk 0"});
    o.prefill_chunk_tokens = 128;
    o.max_context = 0;
    expect_error([&] { estimate_state(c, o); }, {"max-context 0"});
    o.max_context = 8192;
    o.max_sequences = 0;
    expect_error([&] { estimate_state(c, o); }, {"max-sequences 0"});
}

TEST(MemoryEstimate, FitCheckNamesTheBytes) {
    const ModelConfig c = v4();
    StateOptions o;
    o.max_sequences = 16;
    o.max_context = 8192;
    const ShardPlan tp1 = plan_layout(c, {1, 1}, 0);
    const MemoryPlan m1 = plan_memory(tp1, o);
    ASSERT_EQ(m1.ranks.size(), 1u);
    EXPECT_EQ(m1.ranks[0].weights, tp1.model_bytes);
    EXPECT_EQ(m1.ranks[0].state, m1.state.total());
    EXPECT_GT(m1.ranks[0].buffers, 0);
    const std::string problem = fit_problem(tp1, m1, 80000000000);
    EXPECT_NE(problem.find("layout TP1 does not fit"), std::string::npos) << problem;
    EXPECT_NE(problem.find(fmt::format("needs {}", format_bytes(m1.ranks[0].total()))), std::string::npos) << problem;
    EXPECT_NE(problem.find("the GPU has 80.00 GB (80000000000 bytes)"), std::string::npos) << problem;
    expect_error([&] { require_fit(tp1, m1, 80000000000); }, {"does not fit", "80000000000 bytes"});
    // TP2 of the whole model fits two 141 GB H200s; the 43 layers fit no single one.
    const ShardPlan tp2 = plan_layout(c, {2, 1}, 0);
    EXPECT_EQ(fit_problem(tp2, plan_memory(tp2, o), 141000000000), "");
    EXPECT_NE(fit_problem(tp1, m1, 141000000000), "");
    EXPECT_EQ(format_bytes(1234567890), "1.23 GB (1234567890 bytes)");
}
