// Per-rank checkpoint reading on a generated multi-file checkpoint (random weights, fresh seed): for every rank of
// TP1, TP2, TP4, EP2, EP4 and TP2xEP2 the bytes read equal the sum computed from the inventory by the layout's rules
// (sharding_test_util.h), each slice equals the corresponding bytes of the full tensor, the ranks together cover
// every split tensor exactly once (the attention's once per expert group) while every rank reads each replicated
// tensor, and no rank of a split layout reads the whole model. Also: FP8 experts with F32 scales, the stored expert
// format recognized where config.json does not name it, and damaged checkpoints refused by tensor name.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "model/checkpoint_gen.h"
#include "model/shard_reader.h"
#include "model_test_util.h"
#include "sharding_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

ModelConfig tiny_sharding() { return load_model_config(config_path("tiny-sharding.json")); }

// The bytes of `slice` of a full tensor, gathered element by element (independent of the loader's regions).
std::vector<uint8_t> expected_slice_bytes(const TensorView& t, const TensorSlice& slice) {
    const size_t es = dtype_size(t.dtype);
    const int64_t rows = t.shape.at(0);
    int64_t cols = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) cols *= t.shape[d];
    int64_t r0 = 0, r1 = rows, c0 = 0, c1 = cols;
    if (slice.kind == SliceKind::Rows) {
        r0 = slice.begin;
        r1 = slice.end;
    }
    if (slice.kind == SliceKind::Columns) {  // 2-D tensors only (weights, scales)
        c0 = slice.begin;
        c1 = slice.end;
    }
    std::vector<uint8_t> out;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
            for (size_t b = 0; b < es; ++b) out.push_back(t.data[size_t(r * cols + c) * es + b]);
    return out;
}

// Reads every rank of `l` and checks bytes, contents and coverage against `ckpt`'s full tensors.
void check_layout(const Checkpoint& ckpt, const ModelConfig& cfg, const ParallelLayout& l, const ShardScope& scope) {
    SCOPED_TRACE(l.name());
    size_t scope_bytes = 0;
    for (const auto& [name, t] : ckpt.all())
        if (tensor_in_scope(name, scope)) scope_bytes += t->nbytes;
    // Per tensor, how many ranks read each index of its split dim.
    std::map<std::string, std::pair<std::vector<int>, std::vector<int>>> coverage;  // rows, columns
    for (const auto& [name, t] : ckpt.all()) {
        if (!tensor_in_scope(name, scope)) continue;
        coverage[name] = {std::vector<int>(size_t(t->shape.at(0)), 0),
                          std::vector<int>(t->shape.size() > 1 ? size_t(t->shape[1]) : 0, 0)};
    }
    for (int r = 0; r < l.ranks(); ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const RankSlice slice = rank_slice(cfg, l, r);
        const ShardData d = read_shard(ckpt, cfg, slice, scope);
        size_t want = 0;
        for (const auto& [name, t] : ckpt.all())
            if (tensor_in_scope(name, scope)) want += size_t(expected_rank_bytes(name, int64_t(t->nbytes), cfg, l, r));
        EXPECT_EQ(d.bytes_read, want);
        if (l.ranks() > 1) {
            EXPECT_LT(d.bytes_read, scope_bytes);
        }
        size_t held = 0;
        ASSERT_EQ(d.tensors.size(), d.slices.size());
        for (size_t i = 0; i < d.tensors.size(); ++i) {
            const TensorData& t = d.tensors[i];
            const TensorSlice& s = d.slices[i];
            SCOPED_TRACE(t.name);
            held += t.bytes.size();
            const TensorView& full = ckpt.get(t.name);
            EXPECT_EQ(t.dtype, full.dtype);
            EXPECT_EQ(t.shape, sliced_shape(full.shape, s));
            ASSERT_EQ(t.bytes, expected_slice_bytes(full, s));
            auto& [rows, cols] = coverage.at(t.name);
            if (s.kind == SliceKind::Columns) {
                for (int64_t c = s.begin; c < s.end; ++c) ++cols.at(size_t(c));
            } else {
                const int64_t b = s.kind == SliceKind::Rows ? s.begin : 0;
                const int64_t e = s.kind == SliceKind::Rows ? s.end : full.shape[0];
                for (int64_t x = b; x < e; ++x) ++rows.at(size_t(x));
            }
            EXPECT_EQ(d.find(t.name), &t);
        }
        EXPECT_EQ(held, d.bytes_read);
    }
    for (const auto& [name, cov] : coverage) {
        SCOPED_TRACE(name);
        const int want = expected_coverage(name, l);
        const auto& [rows, cols] = cov;
        // A column-split tensor counts in `cols`, every other in `rows`.
        const bool by_columns = std::any_of(cols.begin(), cols.end(), [](int v) { return v > 0; });
        for (int v : by_columns ? cols : rows) ASSERT_EQ(v, want);
        if (by_columns) {
            EXPECT_TRUE(std::all_of(rows.begin(), rows.end(), [](int v) { return v == 0; }));
        }
    }
}

struct Generated {
    TempDir dir;
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;
};

std::unique_ptr<Generated> generate(const GenOptions& opt) {
    auto g = std::make_unique<Generated>();
    g->cfg = tiny_sharding();
    generate_checkpoint(g->cfg, g->dir.str(), opt);
    g->cfg = load_model_config(g->dir.file("config.json"));
    g->ckpt = Checkpoint::open(g->dir.str());
    return g;
}

}  // namespace

TEST(ShardReader, EveryRankReadsExactlyItsSlices) {
    GenOptions opt;
    opt.seed = fresh_seed();
    opt.shards = 3;
    opt.threads = 2;
    SCOPED_TRACE(opt.seed);
    const auto g = generate(opt);
    ASSERT_TRUE(std::filesystem::exists(g->dir.file("model.safetensors.index.json")));
    ShardScope all;
    all.include_mtp = true;
    for (const ParallelLayout l : {ParallelLayout{1, 1}, ParallelLayout{2, 1}, ParallelLayout{1, 2},
                                   ParallelLayout{2, 2}, ParallelLayout{4, 1}, ParallelLayout{1, 4}})
        check_layout(*g->ckpt, g->cfg, l, all);
    // A prefix of the layers, MTP left out: tensors of later layers are not read.
    ShardScope two;
    two.n_layers = 2;
    check_layout(*g->ckpt, g->cfg, {2, 2}, two);
    const ShardData d = read_shard(*g->ckpt, g->cfg, rank_slice(g->cfg, {2, 2}, 1), two);
    EXPECT_EQ(d.find("layers.2.attn.wq_b.weight"), nullptr);
    EXPECT_EQ(d.find("mtp.0.attn.wq_b.weight"), nullptr);
    EXPECT_NE(d.find("layers.1.attn.wq_b.weight"), nullptr);
    EXPECT_NE(d.find("layers.1.ffn.experts.0.w1.weight"), nullptr);  // rank 1 is in expert group 0: experts 0..3
    EXPECT_EQ(d.find("layers.1.ffn.experts.7.w1.weight"), nullptr);
}

TEST(ShardReader, Fp8ExpertsWithF32Scales) {
    GenOptions opt;
    opt.seed = fresh_seed();
    opt.shards = 2;
    opt.threads = 2;
    opt.expert_dtype = ExpertDtype::FP8;
    opt.f32_scales = true;
    SCOPED_TRACE(opt.seed);
    const auto g = generate(opt);
    ShardScope all;
    check_layout(*g->ckpt, g->cfg, {2, 2}, all);
    // config.json without expert_dtype (as in the initial official release): the format comes from the file.
    ModelConfig unnamed = g->cfg;
    unnamed.expert_dtype = ExpertDtype::FP4;
    unnamed.expert_dtype_explicit = false;
    const ShardSources src = locate_shard(*g->ckpt, unnamed, rank_slice(unnamed, {2, 1}, 1), all);
    EXPECT_EQ(src.config.expert_dtype, ExpertDtype::FP8);
    check_layout(*g->ckpt, src.config, {2, 1}, all);
}

TEST(ShardReader, DamagedCheckpointsAreRefusedByName) {
    GenOptions opt;
    opt.seed = fresh_seed();
    opt.threads = 2;
    const auto g = generate(opt);
    std::vector<TensorData> ts = copy_tensors(*g->ckpt);
    // One tensor missing, one with the wrong shape.
    ts.erase(std::find_if(ts.begin(), ts.end(),
                          [](const TensorData& t) { return t.name == "layers.1.attn.wo_b.scale"; }));
    TensorData* wq_b = find_tensor(ts, "layers.3.attn.wq_b.weight");
    ASSERT_NE(wq_b, nullptr);
    wq_b->shape = {wq_b->shape[0] / 2, wq_b->shape[1] * 2};
    TempDir damaged;
    std::filesystem::copy_file(g->dir.file("config.json"), damaged.file("config.json"));
    write_model(damaged.str(), ts);
    const auto ck = Checkpoint::open(damaged.str());
    expect_error([&] { read_shard(*ck, g->cfg, rank_slice(g->cfg, {2, 1}, 0), {}); },
                 {"rank 0 (TP2)", "2 problems", "missing tensor 'layers.1.attn.wo_b.scale'",
                  "tensor 'layers.3.attn.wq_b.weight': F8_E4M3 [512, 256], expected F8_E4M3 [1024, 128]"});
    expect_error([&] { read_shard(*g->ckpt, g->cfg, rank_slice(g->cfg, {2, 1}, 0), ShardScope{9, false, false}); },
                 {"layers 9", "num_hidden_layers 4"});
}
