// The bytes of a profiled step (BackendDiagnostics::profile_step, the numbers behind `flashseek bench`'s roofline,
// bubble and per-op bandwidth columns): the weight bytes the profiler attributes op by op sum to the step's weight
// total, and that total equals the weight bytes summed independently from the checkpoint's own tensors (head and
// hc_head, one embedding row per pass row, every layer tensor but the routed experts and tid2eid, the indexer's
// query projections only when the pass scores, one routed expert per distinct expert routed to). Prefill and
// decode passes, with and without indexer scoring, and parallel layouts as virtual ranks on one device.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/diagnostics.h"
#include "cuda/backend/device_weights.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "test_support.h"

namespace flashseek {
namespace {

class CudaStepBytes : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    }
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The weight bytes a whole-model pass reads, from the checkpoint's tensor sizes.
struct CheckpointBytes {
    double head = 0;       // every global tensor but the embedding: head, final norm, hc_head
    double embed_row = 0;  // one embedding row
    double dense = 0;      // every layer tensor but the routed experts, tid2eid and the indexer's query projections
    double indexer_q = 0;  // the indexer's wq_b (+ scale) and weights_proj of every ratio-4 layer
    double expert = 0;     // one routed expert: w1, w2, w3 and their scales

    double pass(int rows, bool indexer_scores, int distinct_experts) const {
        return head + rows * embed_row + dense + (indexer_scores ? indexer_q : 0.0) + distinct_experts * expert;
    }
};

CheckpointBytes checkpoint_bytes(const Checkpoint& ckpt, const ModelConfig& cfg) {
    CheckpointBytes c;
    for (const auto& [name, v] : ckpt.all()) {
        if (!cuda::tensor_needed(name, cfg.num_hidden_layers)) continue;
        const double b = double(v->nbytes);
        if (name == "embed.weight") {
            c.embed_row = b / double(v->shape.at(0));
        } else if (name.rfind("layers.", 0) != 0) {
            c.head += b;
        } else if (contains(name, ".ffn.experts.")) {
            if (name.rfind("layers.0.ffn.experts.0.", 0) == 0) c.expert += b;
        } else if (contains(name, ".gate.tid2eid")) {
            continue;  // a lookup of k ids per token, not a read of the table
        } else if (contains(name, ".attn.indexer.wq_b.") || contains(name, ".attn.indexer.weights_proj.")) {
            c.indexer_q += b;
        } else {
            c.dense += b;
        }
    }
    return c;
}

const OpTime* find_op(const StepProfile& p, const std::string& name) {
    for (const OpTime& o : p.ops)
        if (o.op == name) return &o;
    return nullptr;
}

// The per-op bytes sum to the step's weight bytes, and every op that streams a weight matrix has its bytes.
void expect_ops_sum_to_weight_bytes(const StepProfile& p) {
    ASSERT_GT(p.bytes_weights, 0);
    const bool widened = find_op(p, "attn.wo_a widen to bf16") != nullptr;  // prefill: the widening reads wo_a
    double sum = 0;
    for (const OpTime& o : p.ops) {
        EXPECT_GE(o.bytes, 0) << o.op;
        sum += o.bytes;
        const bool streams = contains(o.op, "gemm") || o.op.rfind("moe.routed", 0) == 0 ||
                             o.op.rfind("moe.shared", 0) == 0 || o.op == "attn.wo_a widen to bf16";
        if (streams && !(widened && o.op == "attn.wo_a grouped gemm")) {
            EXPECT_GT(o.bytes, 0) << o.op;
        }
        if (o.op == "prepare activation" || o.op == "head gather" || o.op == "moe.combine") {
            EXPECT_EQ(o.bytes, 0) << o.op;
        }
    }
    EXPECT_DOUBLE_EQ(sum, p.bytes_weights);
}

// tiny-a: FP8 linears, FP4 experts, hash layers, ratio 4 (indexer, index_topk 8: a sequence past 32 tokens makes the
// pass score) and ratio 128 layers.
TEST_F(CudaStepBytes, OpBytesSumToTheCheckpointsBytesPerPass) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    const std::string dir = test::tiny_checkpoint("tiny-a", seed % 997 + 1);
    auto ckpt = Checkpoint::open(dir);
    std::mt19937_64 rng(seed);
    for (Numerics num : {Numerics::Exact, Numerics::Release}) {
        SCOPED_TRACE(num == Numerics::Exact ? "exact" : "release");
        auto be = test::make_layout(dir, num, 1, 1);
        const ModelConfig& cfg = be->config();
        const CheckpointBytes want = checkpoint_bytes(*ckpt, cfg);
        ASSERT_GT(want.expert, 0);
        ASSERT_GT(want.indexer_q, 0);
        ASSERT_DOUBLE_EQ(want.embed_row, double(cfg.hidden_size) * 2);
        BackendDiagnostics& ext = *be->diagnostics();
        const int64_t V = cfg.vocab_size;
        const auto long_prompt = test::random_tokens(rng, 40, V), short_prompt = test::random_tokens(rng, 5, V);
        const int a = be->create_sequence(), b = be->create_sequence();

        // Prefill: one pass per prompt, each with its head row.
        std::vector<SequenceStep> steps = {{a, long_prompt.data(), 40, false}, {b, short_prompt.data(), 5, false}};
        expect_ops_sum_to_weight_bytes(ext.profile_step(steps));

        // Decode of both: two rows; a at 41 tokens has 10 compressed entries > index_topk, the pass scores.
        const auto next = test::random_tokens(rng, 2, V);
        steps = {{a, &next[0], 1, false}, {b, &next[1], 1, false}};
        StepProfile p = ext.profile_step(steps);
        expect_ops_sum_to_weight_bytes(p);
        EXPECT_DOUBLE_EQ(p.bytes_weights, want.pass(2, true, p.distinct_experts));
        const OpTime* index_q = find_op(p, "indexer.wq_b gemm");
        ASSERT_NE(index_q, nullptr);
        EXPECT_GT(index_q->bytes, 0);
        const OpTime* up = find_op(p, "moe.routed w1+w3+swiglu");
        const OpTime* down = find_op(p, "moe.routed w2");
        ASSERT_TRUE(up && down);
        EXPECT_DOUBLE_EQ(up->bytes + down->bytes, p.distinct_experts * want.expert);

        // Decode of b alone: one row, 7 tokens, no scoring (the indexer's query projections are not read).
        be->free_sequence(a);
        steps = {{b, &next[0], 1, false}};
        p = ext.profile_step(steps);
        expect_ops_sum_to_weight_bytes(p);
        EXPECT_DOUBLE_EQ(p.bytes_weights, want.pass(1, false, p.distinct_experts));
        EXPECT_EQ(find_op(p, "indexer.wq_b gemm"), nullptr);
        be->free_sequence(b);
    }
}

// Parallel layouts as virtual ranks on this device: every rank attributes its own slice's bytes op by op; their sum
// is the step's weight total (and the per-rank totals add up to the step's bytes).
TEST_F(CudaStepBytes, OpBytesSumToWeightBytesInParallelLayouts) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    const std::string dir = test::tiny_checkpoint("tiny-sharding", seed % 997 + 1);
    std::mt19937_64 rng(seed);
    for (auto [tp, ep] : {std::pair{2, 1}, {1, 2}, {2, 2}}) {
        SCOPED_TRACE("tp=" + std::to_string(tp) + " ep=" + std::to_string(ep));
        auto be = test::make_layout(dir, Numerics::Release, tp, ep);
        BackendDiagnostics& ext = *be->diagnostics();
        const auto prompt = test::random_tokens(rng, 30, be->config().vocab_size);
        const int a = be->create_sequence();
        std::vector<SequenceStep> steps = {{a, prompt.data(), 30, false}};
        expect_ops_sum_to_weight_bytes(ext.profile_step(steps));
        steps = {{a, &prompt[0], 1, false}};
        const StepProfile p = ext.profile_step(steps);
        expect_ops_sum_to_weight_bytes(p);
        ASSERT_EQ(p.bytes_per_rank.size(), size_t(tp * ep));
        double ranks = 0;
        for (double r : p.bytes_per_rank) ranks += r;
        EXPECT_DOUBLE_EQ(ranks, p.bytes_weights + p.bytes_state);
        be->free_sequence(a);
    }
}

}  // namespace
}  // namespace flashseek
