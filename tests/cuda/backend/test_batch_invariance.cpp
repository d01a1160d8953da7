// Batch invariance of prefill on the CUDA backend (PassShape::prefill, KernelPolicy::for_pass): a prompt token runs
// the prefill kernels (tensor-core GEMMs, grouped experts, prefill attention and indexer) whatever the size of its
// pass, and each of them computes a row independently of the others, so a sequence's logits are bit-identical
// however its prompt was chunked (by the caller or by the backend) and whichever prompts share its passes. Checked
// on full-size V4-Flash layers with dummy weights (the tiny configurations fall off the 128 grid, where the
// element-wise fallbacks run), release numerics, with every layer kind: window-only, ratio 4 (compressor, indexer)
// and ratio 128, and a prompt long enough for the indexer to select (more than 4 x index_topk tokens); also with the
// model split over virtual ranks (TP2, TP4, EP2, EP4, TP2 x EP2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <tuple>
#include <utility>

#include "backend/backend.h"
#include "backend/registry.h"
#include "model/config.h"
#include "scoped_env.h"
#include "test_support.h"

namespace flashseek {
namespace {

// A CUDA backend on `layers` full-size V4-Flash layers with dummy weights, release numerics, 4 GB of state.
std::unique_ptr<Backend> v4_flash_backend(int layers, int max_sequences, int max_context, int prefill_chunk = 0,
                                          std::pair<int, int> layout = {1, 1}) {
    BackendOptions o;
    o.backend = "cuda";
    o.numerics = Numerics::Release;
    o.dummy_weights = true;
    o.layers = layers;
    o.max_sequences = max_sequences;
    o.max_context = max_context;
    o.prefill_chunk = prefill_chunk;  // 0: the backend's default
    o.state_memory_bytes = int64_t(4) << 30;
    std::tie(o.tp, o.ep) = layout;
    return create_backend(test::source_dir() + "/tests/data/configs/v4-flash.json", o);
}

class CudaPrefillInvariance : public ::testing::Test {
protected:
    // The parallel layout (tp, ep) of the backend under test: the whole model on one rank here.
    virtual std::pair<int, int> layout() const { return {1, 1}; }
    virtual int layers() const { return 4; }  // ratios 0, 0, 4, 128 in V4-Flash's list; the first 3 hash-routed

    void SetUp() override {
        if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
        seed_ = test::fresh_seed();
        // Prefill chunks of 1,024: the backend's own chunking cuts the 2,300-token prompt in three passes.
        be_ = v4_flash_backend(layers(), 4, 4096, 1024, layout());
        V_ = be_->config().vocab_size;
        std::mt19937_64 rng(seed_);
        for (auto* p : {&prompt_, &other_}) {
            p->resize(2300);
            for (auto& t : *p) t = int32_t(2 + rng() % 120000);
        }
    }

    // Prefills `prompt` in caller-side pieces (the last pieces flagged as prompt tokens), then decodes three tokens
    // teacher-forced; returns the last prompt token's logits and the three decode steps' logits.
    std::vector<float> run(const std::vector<int>& pieces, const std::vector<int32_t>* mate = nullptr) {
        const int id = be_->create_sequence();
        const int mate_id = mate ? be_->create_sequence() : -1;
        std::vector<float> out, l;
        int done = 0;
        for (size_t i = 0; i < pieces.size(); ++i) {
            std::vector<SequenceStep> steps{{id, prompt_.data() + done, pieces[i], false, /*prefill=*/true}};
            // The batch-mate's prompt shares the first piece's passes.
            if (mate && i == 0) steps.push_back({mate_id, mate->data(), int(mate->size()), false, true});
            be_->forward(steps, l);
            done += pieces[i];
            if (done == int(prompt_.size())) out.assign(l.begin(), l.begin() + long(V_));
        }
        EXPECT_EQ(done, int(prompt_.size()));
        for (int t = 0; t < 3; ++t) {
            std::vector<SequenceStep> steps{{id, &decode_tokens_[size_t(t)], 1, false}};
            be_->forward(steps, l);
            out.insert(out.end(), l.begin(), l.begin() + long(V_));
        }
        be_->free_sequence(id);
        if (mate) be_->free_sequence(mate_id);
        return out;
    }

    // Logits of a prefill in one piece and in pieces with a batch-mate (and the decode steps after them) with this
    // backend, then bit for bit the same with the policy variants `names` disabled (a new backend, same prompts).
    void expect_same_with_disabled(const char* names) { expect_same_with_env("FLASHSEEK_DISABLE", names); }

    // The same with the environment variable `var` set to `value` for the second backend; `also` runs on that
    // backend too (further checks of its own).
    void expect_same_with_env(const char* var, const char* value, const std::function<void()>& also = {}) {
        const std::vector<int32_t> short_mate(other_.begin(), other_.begin() + 77);
        const std::vector<float> whole = run({2300}), pieces = run({1000, 1300}, &short_mate);
        for (float v : whole) ASSERT_TRUE(std::isfinite(v));
        std::vector<float> whole_off, pieces_off;
        {
            be_.reset();  // one full-size backend on the device at a time
            test_support::ScopedEnv off(var, value);
            const std::vector<int32_t> prompt = prompt_;
            SetUp();  // a new backend (it reads the policy at construction), then the same prompt as before
            prompt_ = prompt;
            whole_off = run({2300});
            pieces_off = run({1000, 1300}, &short_mate);
            if (also) also();
        }
        EXPECT_TRUE(bit_identical(whole, whole_off)) << var << "=" << value << ": one piece";
        EXPECT_TRUE(bit_identical(pieces, pieces_off))
            << var << "=" << value << ": pieces 1000/1300 with a 77-token batch-mate";
    }

    static bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    }

    uint64_t seed_ = 0;
    std::unique_ptr<Backend> be_;
    int64_t V_ = 0;
    std::vector<int32_t> prompt_, other_;
    const int32_t decode_tokens_[3] = {17, 4242, 99999};
};

TEST_F(CudaPrefillInvariance, ChunkingDoesNotChangeLogits) {
    SCOPED_TRACE("seed=" + std::to_string(seed_));
    const std::vector<float> whole = run({2300});
    for (float v : whole) ASSERT_TRUE(std::isfinite(v));
    // Caller-side pieces of odd sizes, down to a one-token piece flagged as a prompt token.
    EXPECT_TRUE(bit_identical(run({700, 1, 1000, 598, 1}), whole)) << "pieces 700/1/1000/598/1";
    EXPECT_TRUE(bit_identical(run({37, 2263}), whole)) << "pieces 37/2263";
}

TEST_F(CudaPrefillInvariance, BatchMatesDoNotChangeLogits) {
    SCOPED_TRACE("seed=" + std::to_string(seed_));
    const std::vector<float> alone = run({2300});
    // Another prompt in the same passes (two sequences' rows in every GEMM, the grouped experts' groups shared).
    EXPECT_TRUE(bit_identical(run({2300}, &other_), alone));
    const std::vector<int32_t> short_mate(other_.begin(), other_.begin() + 77);
    EXPECT_TRUE(bit_identical(run({1000, 1300}, &short_mate), alone));
}

// The grouped experts' slot tile width chosen by each pass (FLASHSEEK_GROUPED_SLOT_ROWS=0: 32 slot rows where a pass
// gives V4-Flash's 256 experts at most 16 slots each on average, 64 up to 64, else 128) gives the logits of the
// 128-row tiles, and chunkings whose passes take different widths (the backend's 1,024-token chunks 64 and its
// 252-token remainder 32; pieces of 700 / 1 / 1,000 / 598 / 1 tokens 64 / 32 / 64 / 32 / 32; 37 / 2,263 tokens)
// the same logits as one another.
TEST_F(CudaPrefillInvariance, SlotTileWidthByPassKeepsLogits) {
    SCOPED_TRACE("seed=" + std::to_string(seed_));
    expect_same_with_env("FLASHSEEK_GROUPED_SLOT_ROWS", "0", [&] {
        const std::vector<float> whole = run({2300});
        EXPECT_TRUE(bit_identical(run({700, 1, 1000, 598, 1}), whole)) << "pieces 700/1/1000/598/1";
        EXPECT_TRUE(bit_identical(run({37, 2263}), whole)) << "pieces 37/2263";
    });
}

// The forms taken only where forced keep the logits of the prefills and the decode steps after them, bit for bit
// (FLASHSEEK_FORCE=name): the L2 prefetch of wq_b's and wo_a's matrices on a side branch of decode passes reads
// weights only (weight_prefetch; prefills skip it); wq_b's one-token GEMV stages q_norm's output itself
// (norm_into_gemv; prefills do not take it); the routed experts' one-token tile packed ahead joins before the routing
// instead of before the up-projection (moe_pack_join_routing: another graph shape, the same kernels); the indexer's
// query path on its side branch in prefill passes too, beside weights_proj on its own (indexer_branch: another graph
// shape); the attention's merge and the preparations before wo_a's and wo_b's one-token rings launching their
// successors at entry (early_wo_a,early_wo_b: the same kernels, launched earlier under PDL; full-size wo_a and wo_b
// take ring_gemv at one token on Hopper, so the three decode steps run them); the attention's merge writing its
// output prepared for wo_a (prepare_in_merge: one preparation launch fewer per decode layer).
class CudaForcedFormsKeepLogits : public CudaPrefillInvariance, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaForcedFormsKeepLogits, SameLogits) {
    SCOPED_TRACE("seed=" + std::to_string(seed_) + " forced=" + GetParam());
    expect_same_with_env("FLASHSEEK_FORCE", GetParam());
}

INSTANTIATE_TEST_SUITE_P(Forms, CudaForcedFormsKeepLogits,
                         ::testing::Values("weight_prefetch", "norm_into_gemv", "moe_pack_join_routing",
                                           "indexer_branch", "early_wo_a,early_wo_b", "prepare_in_merge"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                             std::string name = info.param;  // a test name takes no commas
                             for (char& c : name) c = c == ',' ? '_' : c;
                             return name;
                         });

// The side streams at the greatest priority (FLASHSEEK_BRANCH_PRIORITY=1) change when kernels start, not what they
// compute.
TEST_F(CudaPrefillInvariance, BranchPriorityKeepsLogits) {
    SCOPED_TRACE("seed=" + std::to_string(seed_));
    expect_same_with_env("FLASHSEEK_BRANCH_PRIORITY", "1");
}

// Decode passes of 32 rows running wo_a as prefill does (FLASHSEEK_WO_A_WIDEN_MIN_TOKENS=32: widened to bf16 once
// per pass on a side branch, the bf16 GEMM over all groups in one launch, its act_quant rows for wo_b) instead of
// wgmma_f16_gemv: 32 prompts prefilled in one pass keep their logits bit for bit (prefill widens anyway), and two
// decode steps of all 32 move only by the two kernels' sums (bf16 against f16-rounded activations, another sum
// order): within 2e-2 relative error per row, the envelope criterion's floor (the largest row on an H100 in run 218:
// 1.1e-2; CudaBackendBatch.WidenedWoAInDecodeStaysInTheEnvelope judges the same path by the envelope). One layer
// (window attention, hash routing): no decision depends on the values, so a sum-order difference stays a rounding
// difference (with four layers, a flipped e4m3 code of wo_b's input changed later routings and rows by 2-8% on an
// H100). A row may keep its bits (wo_b's act_quant of the output absorbs most sum-order differences), so a profiled
// step's op table shows which path ran.
TEST(CudaDecodeWoAWidened, StaysCloseToTheF16Gemv) {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    constexpr int kSeqs = 32, kPrompt = 40;
    std::mt19937_64 rng(seed);
    std::vector<std::vector<int32_t>> prompts(kSeqs, std::vector<int32_t>(kPrompt));
    for (auto& p : prompts)
        for (auto& t : p) t = int32_t(2 + rng() % 120000);
    auto run = [&] {
        auto be = v4_flash_backend(1, kSeqs, 256);
        std::vector<int> ids;
        std::vector<SequenceStep> steps;
        for (int i = 0; i < kSeqs; ++i) {
            ids.push_back(be->create_sequence());
            steps.push_back({ids.back(), prompts[size_t(i)].data(), kPrompt, false, /*prefill=*/true});
        }
        std::vector<float> out, l;
        be->forward(steps, l);
        out = l;
        std::vector<int32_t> next(kSeqs);
        for (int t = 0; t < 2; ++t) {
            steps.clear();
            for (int i = 0; i < kSeqs; ++i) {
                next[size_t(i)] = int32_t(17 + 1000 * i + t);
                steps.push_back({ids[size_t(i)], &next[size_t(i)], 1, false});
            }
            be->forward(steps, l);
            out.insert(out.end(), l.begin(), l.end());
        }
        // One more decode step, profiled: its op table says whether the widening ran (rows may keep their bits, so
        // the logits alone cannot show that the widened path was taken).
        for (int i = 0; i < kSeqs; ++i) next[size_t(i)] = int32_t(5 + 1000 * i);
        const bool widened_ran = test::profiled_step_has_op(*be, steps, "attn.wo_a widen to bf16");
        return std::make_tuple(out, int64_t(be->config().vocab_size), widened_ran);
    };
    // Both floors pinned: the comparison must not depend on the caller's environment.
    test_support::ScopedEnv gemm_floor("FLASHSEEK_GEMM_MIN_TOKENS", "32");
    std::tuple<std::vector<float>, int64_t, bool> base_run;
    {
        test_support::ScopedEnv never("FLASHSEEK_WO_A_WIDEN_MIN_TOKENS", "1073741824");
        base_run = run();
    }
    const auto& [base, V, base_widened] = base_run;
    EXPECT_FALSE(base_widened) << "wo_a widened in a 32-row decode pass with FLASHSEEK_WO_A_WIDEN_MIN_TOKENS=2^30";
    std::vector<float> widened;
    {
        test_support::ScopedEnv widen("FLASHSEEK_WO_A_WIDEN_MIN_TOKENS", "32");
        bool ran = false;
        std::tie(widened, std::ignore, ran) = run();
        EXPECT_TRUE(ran) << "FLASHSEEK_WO_A_WIDEN_MIN_TOKENS=32 did not widen wo_a in a 32-row decode pass";
    }
    ASSERT_EQ(base.size(), widened.size());
    ASSERT_EQ(base.size(), size_t(3 * kSeqs) * size_t(V));
    const size_t rowsz = size_t(V);
    EXPECT_EQ(std::memcmp(base.data(), widened.data(), kSeqs * rowsz * sizeof(float)), 0)
        << "the prompts' logits changed";
    for (size_t row = kSeqs; row < 3 * size_t(kSeqs); ++row) {
        double num = 0, den = 0;
        for (size_t i = row * rowsz; i < (row + 1) * rowsz; ++i) {
            ASSERT_TRUE(std::isfinite(widened[i])) << "decode row " << row;
            num += (double(widened[i]) - base[i]) * (double(widened[i]) - base[i]);
            den += double(base[i]) * base[i];
        }
        EXPECT_LE(std::sqrt(num / den), 2e-2) << "decode row " << row - kSeqs;
    }
}

// The last layer computes its query path and MoE sub-block on the rows that need logits only (head_rows_last_layer;
// the non-final chunks of the backend's own chunking need none): logits after a prefill in one piece, in pieces
// with a batch-mate, and the decode steps after them, bit-identical with it switched off. Last layers of ratio 128
// (4 layers) and of ratio 4 with the indexer scoring (5 layers; the prompt has more than 4 x index_topk tokens).
class CudaHeadRowsLastLayer : public CudaPrefillInvariance, public ::testing::WithParamInterface<int> {
protected:
    int layers() const override { return GetParam(); }
};

TEST_P(CudaHeadRowsLastLayer, MatchesAllRows) {
    SCOPED_TRACE("seed=" + std::to_string(seed_) + " layers=" + std::to_string(GetParam()));
    expect_same_with_disabled("head_rows_last_layer");
}

// Each output a producer writes in the form its consumer reads, in place of a separate step, gives the logits of that
// step (switched off by name): the shared expert's w2 and the routed experts' grouped down-projection writing bf16
// where the MoE combine (separate or fused into the next mhc_pre) rounds their terms to bf16 (shared_bf16_out,
// routed_bf16_out); mhc_pre's norm and q_norm writing the act_quant rows of the first FP8 GEMM that reads their
// output (norm_fp8_rows: wq_a, or wkv in a last layer on the head rows, the shared expert's w1, wq_b); the widened
// wo_a GEMM writing wo_b's act_quant rows instead of its bf16 output (wo_a_fp8_rows); wo_a's and wo_b's one-token
// GEMVs preparing their bf16 inputs while staging (prepare_in_gemv: the three decode steps); the compressors'
// gate GEMVs on streams of their own (compressor_gate_lane: the same kernels in another graph shape); and the routed
// experts' one-token tile packed beside the routing (moe_pack_ahead: the three decode steps); the routing and
// grouping in the router's launch (route_in_router: the three decode steps); and the indexer's weights_proj on a
// lane of its own from the sub-block's start (indexer_weights_lane: the same kernel in another graph shape); and
// mhc_pre's post and comb in a launch of their own on a side stream (mhc_mix_lane: the decode steps); and the
// indexer's query path on a side branch (indexer_branch: the decode steps, another graph shape).
class CudaProducerFormsMatchSeparateSteps : public CudaPrefillInvariance,
                                            public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaProducerFormsMatchSeparateSteps, SameLogits) {
    SCOPED_TRACE("seed=" + std::to_string(seed_) + " switch=" + GetParam());
    expect_same_with_disabled(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Switches, CudaProducerFormsMatchSeparateSteps,
                         ::testing::Values("shared_bf16_out", "routed_bf16_out", "norm_fp8_rows", "wo_a_fp8_rows",
                                           "compressor_gate_lane", "prepare_in_gemv", "moe_pack_ahead",
                                           "route_in_router", "indexer_weights_lane", "mhc_mix_lane",
                                           "indexer_branch"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

INSTANTIATE_TEST_SUITE_P(LastLayerRatios, CudaHeadRowsLastLayer, ::testing::Values(4, 5),
                         [](const ::testing::TestParamInfo<int>& info) {
                             return "layers" + std::to_string(info.param);
                         });

// The same properties with the model split over virtual ranks on the one GPU (heads, output groups, each expert's
// intermediate dim or the experts divided; the partial sums reduced in rank order): a sharded prompt token runs the
// same per-rank kernels whatever its pass, so sharding keeps the invariance. Every layout of issue 16.
class CudaPrefillInvarianceSharded : public CudaPrefillInvariance,
                                     public ::testing::WithParamInterface<std::pair<int, int>> {
protected:
    std::pair<int, int> layout() const override { return GetParam(); }
};

TEST_P(CudaPrefillInvarianceSharded, ChunkingAndBatchMatesDoNotChangeLogits) {
    SCOPED_TRACE("seed=" + std::to_string(seed_) + " tp=" + std::to_string(GetParam().first) +
                 " ep=" + std::to_string(GetParam().second));
    const std::vector<float> whole = run({2300});
    for (float v : whole) ASSERT_TRUE(std::isfinite(v));
    EXPECT_TRUE(bit_identical(run({700, 1, 1000, 598, 1}), whole)) << "pieces 700/1/1000/598/1";
    EXPECT_TRUE(bit_identical(run({1000, 1300}, &other_), whole)) << "a batch-mate in the first piece's passes";
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaPrefillInvarianceSharded,
                         ::testing::Values(std::pair{2, 1}, std::pair{4, 1}, std::pair{1, 2}, std::pair{1, 4},
                                           std::pair{2, 2}),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& info) {
                             return "tp" + std::to_string(info.param.first) + "_ep" +
                                    std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace flashseek
