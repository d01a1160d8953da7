// Parallel layouts: parsing, each rank's part of V4-Flash (rank order, ranges that tile the model), the refusals
// (key and numbers), and the per-tensor slices of weights and scale tensors in every stored format, checked against
// values derived by hand from docs/model.md §3.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/sharding.h"
#include "model_test_util.h"
#include "sharding_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

ModelConfig v4() { return load_model_config(config_path("v4-flash.json")); }

TensorSlice whole() { return {}; }
TensorSlice rows(int64_t b, int64_t e) { return {SliceKind::Rows, b, e}; }
TensorSlice cols(int64_t b, int64_t e) { return {SliceKind::Columns, b, e}; }
TensorSlice none() { return {SliceKind::None, 0, 0}; }

void expect_slice(const std::string& name, const ModelConfig& c, const RankSlice& r, TensorSlice want) {
    const TensorSlice got = tensor_slice(name, c, r);
    EXPECT_EQ(got, want) << name << ": got " << slice_kind_name(got.kind) << " [" << got.begin << ", " << got.end
                         << "), want " << slice_kind_name(want.kind) << " [" << want.begin << ", " << want.end << ")";
}

}  // namespace

TEST(Sharding, ParsesLayouts) {
    const ParallelLayout l = parse_parallel_layout("2", "4");
    EXPECT_EQ(l.tp, 2);
    EXPECT_EQ(l.ep, 4);
    EXPECT_EQ(l.ranks(), 8);
    EXPECT_EQ(l.name(), "TP2xEP4");
    EXPECT_EQ(parse_parallel_layout("1", "1").name(), "TP1");
    EXPECT_EQ(parse_parallel_layout("4", "1").name(), "TP4");
    EXPECT_EQ(parse_parallel_layout("1", "8").name(), "EP8");
    for (const char* bad : {"0", "-1", "abc", "2.5", "", "1025", " 2", "2x"})
        expect_error([&] { parse_parallel_layout(bad, "1"); }, {"--tp", std::string("'") + bad + "'"});
    expect_error([&] { parse_parallel_layout("1", "0"); }, {"--ep", "'0'"});
    expect_error([&] { parse_parallel_layout("64", "32"); }, {"--tp 64", "--ep 32", "2048 ranks"});
}

TEST(Sharding, RankOrderAndRangesOfV4Flash) {
    const ModelConfig c = v4();
    // TP2xEP2: rank = ep_rank * tp + tp_rank.
    const ParallelLayout l{2, 2};
    const int want_tp[] = {0, 1, 0, 1}, want_ep[] = {0, 0, 1, 1};
    for (int r = 0; r < 4; ++r) {
        const RankSlice s = rank_slice(c, l, r);
        EXPECT_EQ(s.tp_rank, want_tp[r]);
        EXPECT_EQ(s.ep_rank, want_ep[r]);
    }
    const RankSlice s3 = rank_slice(c, l, 3);
    EXPECT_EQ(s3.head_begin, 32);
    EXPECT_EQ(s3.head_end, 64);
    EXPECT_EQ(s3.group_begin, 4);
    EXPECT_EQ(s3.group_end, 8);
    EXPECT_EQ(s3.expert_begin, 128);
    EXPECT_EQ(s3.expert_end, 256);
    EXPECT_EQ(s3.inter_begin, 1024);
    EXPECT_EQ(s3.inter_end, 2048);
    EXPECT_EQ(s3.shared_inter_begin, 1536);
    EXPECT_EQ(s3.shared_inter_end, 2048);
    EXPECT_EQ(s3.vocab_begin, 96960);
    EXPECT_EQ(s3.vocab_end, 129280);

    const RankSlice e5 = rank_slice(c, {1, 8}, 5);
    EXPECT_EQ(e5.head_begin, 0);
    EXPECT_EQ(e5.head_end, 64);
    EXPECT_EQ(e5.expert_begin, 160);
    EXPECT_EQ(e5.expert_end, 192);
    EXPECT_EQ(e5.inter_begin, 0);
    EXPECT_EQ(e5.inter_end, 2048);
    EXPECT_EQ(e5.shared_inter_begin, 5 * 256);
    EXPECT_EQ(e5.shared_inter_end, 6 * 256);
}

// For every accepted layout: within each expert group the heads, groups and expert-intermediate ranges tile their
// dims; the expert groups tile the experts; over all ranks the shared-expert and vocabulary ranges tile theirs.
TEST(Sharding, RangesTileTheModel) {
    const ModelConfig c = v4();
    for (const ParallelLayout l : {ParallelLayout{1, 1}, ParallelLayout{2, 1}, ParallelLayout{4, 1},
                                   ParallelLayout{8, 1}, ParallelLayout{1, 2}, ParallelLayout{1, 8},
                                   ParallelLayout{2, 2}, ParallelLayout{2, 4}, ParallelLayout{4, 2},
                                   ParallelLayout{1, 16}}) {
        SCOPED_TRACE(l.name());
        int64_t next_shared = 0, next_vocab = 0;
        int next_expert = 0;
        for (int e = 0; e < l.ep; ++e) {
            int next_head = 0, next_group = 0;
            int64_t next_inter = 0;
            for (int t = 0; t < l.tp; ++t) {
                const RankSlice s = rank_slice(c, l, e * l.tp + t);
                EXPECT_EQ(s.head_begin, next_head);
                EXPECT_EQ(s.group_begin, next_group);
                EXPECT_EQ(s.inter_begin, next_inter);
                EXPECT_EQ(s.shared_inter_begin, next_shared);
                EXPECT_EQ(s.vocab_begin, next_vocab);
                EXPECT_EQ(s.expert_begin, next_expert);
                // A rank's heads are exactly the heads of its output groups (8 consecutive heads per group).
                EXPECT_EQ(s.head_begin, s.group_begin * c.num_attention_heads / c.o_groups);
                EXPECT_EQ(s.head_end, s.group_end * c.num_attention_heads / c.o_groups);
                next_head = s.head_end;
                next_group = s.group_end;
                next_inter = s.inter_end;
                next_shared = s.shared_inter_end;
                next_vocab = s.vocab_end;
                if (t == l.tp - 1) next_expert = s.expert_end;
            }
            EXPECT_EQ(next_head, c.num_attention_heads);
            EXPECT_EQ(next_group, c.o_groups);
            EXPECT_EQ(next_inter, c.moe_intermediate_size);
        }
        EXPECT_EQ(next_expert, c.n_routed_experts);
        EXPECT_EQ(next_shared, c.moe_intermediate_size);
        EXPECT_EQ(next_vocab, c.vocab_size);
    }
}

TEST(Sharding, RefusesWhatCannotBeSplit) {
    const ModelConfig c = v4();
    expect_error([&] { rank_slice(c, {3, 1}, 0); }, {"TP3", "tp 3 does not divide o_groups 8"});
    expect_error([&] { rank_slice(c, {16, 1}, 0); }, {"tp 16 does not divide o_groups 8"});
    expect_error([&] { rank_slice(c, {1, 3}, 0); }, {"EP3", "ep 3 does not divide n_routed_experts 256"});
    // EP32: the shared expert's 2048 columns over 32 ranks = 64, off the 128 grid of its FP8 blocks.
    expect_error([&] { rank_slice(c, {1, 32}, 0); }, {"EP32", "2048", "32 ranks = 64", "128"});
    expect_error([&] { rank_slice(c, {2, 1}, 2); }, {"rank 2", "[0, 2)"});
    expect_error([&] { rank_slice(c, {2, 1}, -1); }, {"rank -1"});

    // The tiny goldens: o_lora_rank 32 puts a TP2 split inside an FP8 block of wo_a.
    const ModelConfig g = load_model_config(config_path("golden-a.json"));
    expect_error([&] { rank_slice(g, {2, 1}, 0); }, {"TP2", "1 output groups x o_lora_rank 32 = 32 rows", "attn.wo_a"});
}

TEST(Sharding, SharedExpertAlignmentUnderExpertParallelism) {
    // EP2 splits whole routed experts, but the shared expert is split over every rank: golden-a's 64 intermediate
    // columns give 32 per rank, off the grid of its FP8 blocks.
    const ModelConfig g = load_model_config(config_path("golden-a.json"));
    expect_error([&] { validate_layout(g, {1, 2}); }, {"EP2", "shared expert", "64 over 2 ranks = 32"});
    // Without quantization_config nothing is block-aligned, so the same splits are accepted.
    auto j = config_json("golden-a.json");
    j.erase("quantization_config");
    j.erase("expert_dtype");
    const ModelConfig plain = parse_model_config(j.dump(), "golden-a.json without quantization");
    EXPECT_NO_THROW(validate_layout(plain, {2, 2}));
    const RankSlice s = rank_slice(plain, {2, 1}, 1);
    expect_slice("layers.1.attn.wo_a.weight", plain, s, rows(32, 64));
    expect_error([&] { tensor_slice("layers.1.attn.wo_a.scale", plain, s); }, {"layers.1.attn.wo_a.scale", "no scale"});
}

TEST(Sharding, TensorSlicesOfV4FlashTp2) {
    const ModelConfig c = v4();
    const RankSlice s = rank_slice(c, {2, 1}, 1);
    // Attention: heads 32..63 = rows 16384..32767 of wq_b (512 per head), scale rows / 128.
    expect_slice("layers.5.attn.wq_b.weight", c, s, rows(16384, 32768));
    expect_slice("layers.5.attn.wq_b.scale", c, s, rows(128, 256));
    expect_slice("layers.5.attn.attn_sink", c, s, rows(32, 64));
    // wo_a groups 4..7 = rows 4096..8191 (1024 per group); wo_b the same as columns.
    expect_slice("layers.5.attn.wo_a.weight", c, s, rows(4096, 8192));
    expect_slice("layers.5.attn.wo_a.scale", c, s, rows(32, 64));
    expect_slice("layers.5.attn.wo_b.weight", c, s, cols(4096, 8192));
    expect_slice("layers.5.attn.wo_b.scale", c, s, cols(32, 64));
    // Routed FP4 expert: intermediate 1024..2047; w1 / w3 rows (one scale row per row), w2 columns: 2 values per
    // byte, one scale per 32 columns.
    expect_slice("layers.5.ffn.experts.7.w1.weight", c, s, rows(1024, 2048));
    expect_slice("layers.5.ffn.experts.7.w1.scale", c, s, rows(1024, 2048));
    expect_slice("layers.5.ffn.experts.255.w3.weight", c, s, rows(1024, 2048));
    expect_slice("layers.5.ffn.experts.7.w2.weight", c, s, cols(512, 1024));
    expect_slice("layers.5.ffn.experts.7.w2.scale", c, s, cols(32, 64));
    // Shared FP8 expert over both ranks: 1024..2047.
    expect_slice("layers.5.ffn.shared_experts.w1.weight", c, s, rows(1024, 2048));
    expect_slice("layers.5.ffn.shared_experts.w1.scale", c, s, rows(8, 16));
    expect_slice("layers.5.ffn.shared_experts.w2.weight", c, s, cols(1024, 2048));
    expect_slice("layers.5.ffn.shared_experts.w2.scale", c, s, cols(8, 16));
    expect_slice("head.weight", c, s, rows(64640, 129280));
    for (const char* replicated :
         {"embed.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale", "layers.5.attn_norm.weight",
          "layers.5.hc_attn_fn", "layers.5.hc_ffn_scale", "layers.5.attn.q_norm.weight", "layers.5.attn.kv_norm.weight",
          "layers.5.attn.wq_a.weight", "layers.5.attn.wq_a.scale", "layers.5.attn.wkv.weight",
          "layers.5.attn.compressor.wkv.weight", "layers.5.attn.compressor.ape", "layers.4.attn.indexer.wq_b.weight",
          "layers.4.attn.indexer.wq_b.scale", "layers.4.attn.indexer.weights_proj.weight",
          "layers.4.attn.indexer.compressor.norm.weight", "layers.5.ffn.gate.weight", "layers.5.ffn.gate.bias",
          "layers.0.ffn.gate.tid2eid", "mtp.0.e_proj.weight", "mtp.0.hc_head_fn", "mtp.0.norm.weight"}) {
        expect_slice(replicated, c, s, whole());
        EXPECT_TRUE(tensor_is_replicated(replicated, c)) << replicated;
    }
    // The MTP block is sliced like any layer.
    expect_slice("mtp.0.attn.wq_b.weight", c, s, rows(16384, 32768));
    expect_slice("mtp.0.ffn.experts.3.w2.weight", c, s, cols(512, 1024));
    EXPECT_FALSE(tensor_is_replicated("layers.5.attn.wq_b.weight", c));
    EXPECT_FALSE(tensor_is_replicated("layers.5.ffn.experts.1.w2.scale", c));
}

TEST(Sharding, TensorSlicesUnderExpertParallelism) {
    const ModelConfig c = v4();
    const RankSlice s = rank_slice(c, {1, 2}, 0);  // experts 0..127, whole attention
    expect_slice("layers.9.ffn.experts.127.w1.weight", c, s, whole());
    expect_slice("layers.9.ffn.experts.127.w2.scale", c, s, whole());
    expect_slice("layers.9.ffn.experts.128.w1.weight", c, s, none());
    expect_slice("layers.9.ffn.experts.200.w2.scale", c, s, none());
    expect_slice("layers.9.attn.wq_b.weight", c, s, whole());
    expect_slice("layers.9.attn.wo_b.scale", c, s, whole());
    expect_slice("layers.9.ffn.shared_experts.w3.weight", c, s, rows(0, 1024));
    expect_slice("head.weight", c, s, rows(0, 64640));
    // tensor_sharding: every rank at once; the attention is whole on both ranks (replicated under EP2), an expert
    // on one.
    const std::vector<RankSlice> ep2 = {s, rank_slice(c, {1, 2}, 1)};
    const TensorSharding a = tensor_sharding("layers.9.attn.wq_b.scale", c, ep2);
    EXPECT_TRUE(a.replicated);
    EXPECT_EQ(a.category, WeightCategory::Attention);
    EXPECT_EQ(a.slices, (std::vector<TensorSlice>{whole(), whole()}));
    const TensorSharding e = tensor_sharding("layers.9.ffn.experts.200.w1.weight", c, ep2);
    EXPECT_FALSE(e.replicated);
    EXPECT_EQ(e.category, WeightCategory::RoutedExperts);
    EXPECT_EQ(e.slices, (std::vector<TensorSlice>{none(), whole()}));
    EXPECT_EQ(weight_category("layers.4.attn.indexer.compressor.ape", c), WeightCategory::CompressorsIndexer);
    EXPECT_EQ(weight_category("layers.4.attn.kv_norm.weight", c), WeightCategory::RouterMhcNorms);
    EXPECT_EQ(weight_category("mtp.0.h_proj.scale", c), WeightCategory::Mtp);

    // FP8 routed experts (expert_dtype fp8): TP2 splits w2 on the 128 grid, scale columns / 128.
    auto j = config_json("v4-flash.json");
    j["expert_dtype"] = "fp8";
    const ModelConfig f = parse_model_config(j.dump(), "v4-flash.json with fp8 experts");
    const RankSlice t = rank_slice(f, {2, 2}, 3);
    expect_slice("layers.9.ffn.experts.200.w1.weight", f, t, rows(1024, 2048));
    expect_slice("layers.9.ffn.experts.200.w1.scale", f, t, rows(8, 16));
    expect_slice("layers.9.ffn.experts.200.w2.weight", f, t, cols(1024, 2048));
    expect_slice("layers.9.ffn.experts.200.w2.scale", f, t, cols(8, 16));
    expect_slice("layers.9.ffn.experts.3.w2.scale", f, t, none());
}

TEST(Sharding, UnknownTensorNamesAreRefused) {
    const ModelConfig c = v4();
    const RankSlice s = rank_slice(c, {2, 1}, 0);
    for (const char* bad : {"layers.x.attn.wq_b.weight", "layers.1.attn.wq_c.weight", "model.embed.weight",
                            "layers.1.ffn.experts.1.w4.weight", "layers.1.ffn.experts..w1.weight", "mtp.0.bogus",
                            "layers.1.hc_head_fn", "layers.1.norm.weight"})
        expect_error([&] { tensor_slice(bad, c, s); }, {std::string("'") + bad + "'", "no sharding rule"});
    expect_error([&] { tensor_slice("layers.1.ffn.experts.256.w1.weight", c, s); },
                 {"expert 256", "n_routed_experts 256"});
}

TEST(Sharding, SlicedShapes) {
    EXPECT_EQ(sliced_shape({8, 6}, whole()), (std::vector<int64_t>{8, 6}));
    EXPECT_EQ(sliced_shape({8, 6}, rows(2, 5)), (std::vector<int64_t>{3, 6}));
    EXPECT_EQ(sliced_shape({8, 6, 2}, cols(1, 3)), (std::vector<int64_t>{8, 2, 2}));
    EXPECT_EQ(sliced_shape({8, 6}, none()), (std::vector<int64_t>{0, 6}));
    EXPECT_EQ(sliced_shape({64}, rows(32, 64)), (std::vector<int64_t>{32}));
}

// Every tensor of the inventory, every rank of each accepted layout: the ranks' slices of a tensor cover it
// as many times as the layout says (every rank for replicated tensors, once per expert group for the attention's
// tensor-parallel tensors, once in all for experts, the shared expert and the head), with no gaps or overlaps.
TEST(Sharding, SlicesCoverEveryTensorAsTheLayoutSays) {
    const ModelConfig c = load_model_config(config_path("tiny-sharding.json"));
    // tiny-sharding's shared expert (512 columns) cannot be split over 8 ranks on the 128 grid.
    expect_error([&] { validate_layout(c, {1, 8}); }, {"EP8", "512 over 8 ranks = 64"});
    expect_error([&] { validate_layout(c, {4, 2}); }, {"TP4xEP2", "512 over 8 ranks = 64"});
    for (const ParallelLayout l : {ParallelLayout{1, 1}, ParallelLayout{2, 1}, ParallelLayout{4, 1},
                                   ParallelLayout{1, 2}, ParallelLayout{1, 4}, ParallelLayout{2, 2}}) {
        SCOPED_TRACE(l.name());
        std::vector<RankSlice> slices;
        for (int r = 0; r < l.ranks(); ++r) slices.push_back(rank_slice(c, l, r));
        for (const TensorSpec& t : expected_tensors(c)) {
            SCOPED_TRACE(t.name);
            const int want = expected_coverage(t.name, l);
            // Coverage count along the split dim (dim 0 for whole tensors).
            std::vector<int> rows_cov(size_t(t.shape[0]), 0), cols_cov(t.shape.size() > 1 ? size_t(t.shape[1]) : 0, 0);
            int whole_count = 0;
            for (const RankSlice& s : slices) {
                const TensorSlice ts = tensor_slice(t.name, c, s);
                if (ts.kind == SliceKind::Whole) ++whole_count;
                if (ts.kind == SliceKind::Rows)
                    for (int64_t i = ts.begin; i < ts.end; ++i) ++rows_cov.at(size_t(i));
                if (ts.kind == SliceKind::Columns)
                    for (int64_t i = ts.begin; i < ts.end; ++i) ++cols_cov.at(size_t(i));
            }
            for (int& v : rows_cov) v += whole_count;
            for (int& v : cols_cov) v += whole_count;
            const bool by_columns =
                std::any_of(cols_cov.begin(), cols_cov.end(), [&](int v) { return v != whole_count; });
            for (int v : by_columns ? cols_cov : rows_cov) ASSERT_EQ(v, want);
        }
    }
}
