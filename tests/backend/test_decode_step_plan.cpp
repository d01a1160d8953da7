// The attention sub-block of V4-Flash at one token as the persistent step's graph (backend/decode_step_plan.h): its
// ops, bytes and dependencies per layer kind, the two stream orders, and the named cost overrides.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/decode_step_plan.h"
#include "backend_test_util.h"
#include "backend/step_schedule_sim.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/error.h"

namespace flashseek {
namespace {

ModelConfig v4_flash() { return load_model_config(std::string(FLASHSEEK_SOURCE_DIR) + "/tests/data/configs/v4-flash.json"); }

const ScheduleOp* find_op(const StepGraph& g, const std::string& name, int* index = nullptr) {
    for (size_t i = 0; i < g.ops.size(); ++i)
        if (g.ops[i].name == name) {
            if (index) *index = int(i);
            return &g.ops[i];
        }
    return nullptr;
}

TEST(DecodeStepPlan, SubblockGraphHasEachLayersOpsAndBytes) {
    const ModelConfig cfg = v4_flash();
    const SubblockCosts costs;
    for (int layer : {0, 2, 3}) {  // ratios 0, 4, 128
        SCOPED_TRACE("layer " + std::to_string(layer) + ", ratio " + std::to_string(cfg.ratio(layer)));
        const StepGraph g = attention_subblock_graph(cfg, layer, costs);
        EXPECT_EQ(graph_problem(g), "");
        // The query path's large projections, as the checkpoint stores them (FP8 weight + E8M0 block scales).
        const ScheduleOp* wq_b = find_op(g, "wq_b");
        ASSERT_NE(wq_b, nullptr);
        const double wq_b_bytes = 64.0 * 512 * 1024 + (64.0 * 512 / 128) * (1024 / 128);
        EXPECT_NEAR(wq_b->tile_bytes * wq_b->tiles, wq_b_bytes, 1e-6 * wq_b_bytes);
        EXPECT_LE(wq_b->tile_bytes, costs.tile_bytes);
        EXPECT_NEAR(wq_b->tile_compute_us, 64.0 * 512 * 1024 / wq_b->tiles / 1024 * costs.us_per_kweight, 1e-9);
        const bool compressed = cfg.ratio(layer) > 0, indexed = cfg.ratio(layer) == 4;
        EXPECT_EQ(find_op(g, "compressor gemv") != nullptr, compressed);
        EXPECT_EQ(find_op(g, "indexer.select") != nullptr, indexed);
        // The attention waits for the queries, the window KV, and the entries and selection that exist.
        int att = -1, rope = -1, kv = -1, comp = -1, sel = -1;
        ASSERT_NE(find_op(g, "attention", &att), nullptr);
        find_op(g, "q head norm + rope", &rope);
        find_op(g, "kv norm + rope + store", &kv);
        find_op(g, "compressor", &comp);
        find_op(g, "indexer.select", &sel);
        std::vector<int> want = {rope, kv};
        if (compressed) want.push_back(comp);
        if (indexed) want.push_back(sel);
        std::vector<int> got = g.ops[size_t(att)].after;
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        EXPECT_EQ(got, want);
        // Both stream orders are dependency orders whose dealt schedules run on a full grid.
        for (bool query_first : {true, false}) {
            const std::vector<int> order = subblock_order(g, query_first);
            ASSERT_EQ(order.size(), g.ops.size());
            const StepSchedule s = deal_tiles(g, 132, order);
            EXPECT_EQ(schedule_problem(g, s), "");
            const ScheduleTiming r = simulate_schedule(g, s, StepMachine{});
            EXPECT_GE(r.step_us, r.bytes / (StepMachine{}.copy_gb_s * 1e3));
            // Query first: wq_a is dealt before wkv; branches first: after.
            int wq_a_at = -1, wkv_at = -1;
            for (size_t k = 0; k < order.size(); ++k) {
                if (g.ops[size_t(order[k])].name == "wq_a") wq_a_at = int(k);
                if (g.ops[size_t(order[k])].name == "wkv") wkv_at = int(k);
            }
            EXPECT_EQ(wq_a_at < wkv_at, query_first);
        }
    }
    EXPECT_THROW(attention_subblock_graph(cfg, 43, costs), Error);
}

// The whole step: per layer the attention and MoE sub-blocks, then the head. Its bytes are those of an independent
// count over the inventory (every tensor of the layers but the routed experts, top_k experts' worth of those, no hash
// table, plus the head, its mHC and the final norm); the routed experts' bytes wait for the routing, the shared
// expert's do not; both orders give runnable schedules for the 43-layer step.
TEST(DecodeStepPlan, WholeStepGraph) {
    const ModelConfig cfg = v4_flash();
    const SubblockCosts costs;
    for (int layers : {1, 4, 43}) {
        SCOPED_TRACE(std::to_string(layers) + " layers");
        const StepGraph g = decode_step_graph(cfg, layers, costs);
        EXPECT_EQ(graph_problem(g), "");
        size_t want_ops = 3;
        for (int l = 0; l < layers; ++l) want_ops += 10 + (cfg.ratio(l) == 4 ? 19 : cfg.ratio(l) == 128 ? 13 : 11);
        EXPECT_EQ(g.ops.size(), want_ops);
        double bytes = 0;
        for (const ScheduleOp& op : g.ops) bytes += op.tile_bytes * op.tiles;
        InventoryOptions opt;
        opt.include_mtp = false;
        double want = 0;
        for (const TensorSpec& t : expected_tensors(cfg, opt)) {
            double b = double(dtype_size(t.dtype));
            for (int64_t d : t.shape) b *= double(d);
            const std::string& n = t.name;
            if (n == "head.weight" || n == "norm.weight" || n.rfind("hc_head_", 0) == 0) {
                want += b;
                continue;
            }
            if (n.rfind("layers.", 0) != 0 || std::stoi(n.substr(7)) >= layers) continue;
            if (n.find(".gate.tid2eid") != std::string::npos) continue;
            const size_t e = n.find(".ffn.experts.");
            if (e != std::string::npos) {
                if (n.compare(e, 16, ".ffn.experts.0.w") == 0) want += b * cfg.num_experts_per_tok;
                continue;
            }
            want += b;
        }
        EXPECT_NEAR(bytes, want, 1e-9 * want);
        const ScheduleOp* route = find_op(g, "L0 route + group");
        int route_at = -1;
        find_op(g, "L0 route + group", &route_at);
        ASSERT_NE(route, nullptr);
        for (const char* routed : {"L0 routed up", "L0 routed down"}) {
            const ScheduleOp* op = find_op(g, routed);
            ASSERT_NE(op, nullptr) << routed;
            EXPECT_EQ(op->bytes_after, std::vector<int>{route_at}) << routed;
        }
        EXPECT_TRUE(find_op(g, "L0 shared up")->bytes_after.empty());
        if (layers == 43) {
            for (bool query_first : {true, false}) {
                const StepSchedule s = deal_tiles(g, 132, subblock_order(g, query_first));
                EXPECT_EQ(schedule_problem(g, s), "");
                const ScheduleTiming r = simulate_schedule(g, s, StepMachine{});
                EXPECT_GE(r.step_us, bytes / (StepMachine{}.copy_gb_s * 1e3));
                EXPECT_DOUBLE_EQ(r.bytes, bytes);
            }
        }
    }
    EXPECT_THROW(decode_step_graph(cfg, 0, costs), Error);
    EXPECT_THROW(decode_step_graph(cfg, 44, costs), Error);
}

TEST(DecodeStepPlan, CostsAreSetByNameAndBadOnesNamed) {
    SubblockCosts c;
    set_subblock_cost(c, "attention_us", 7.5);
    EXPECT_DOUBLE_EQ(c.attention_us, 7.5);
    EXPECT_EQ(subblock_cost_names().size(), 15u);
    try {
        set_subblock_cost(c, "attenton_us", 1);
        FAIL() << "an unknown cost was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown sub-block cost 'attenton_us'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("attention_us"), std::string::npos) << e.what();
    }
    EXPECT_THROW(set_subblock_cost(c, "kv_store_us", -1), Error);
    EXPECT_THROW(set_subblock_cost(c, "tile_bytes", 0), Error);
}

// `flashseek plan-step`: both orders printed and written, the schedules' bytes those of the graph; bad flags named.
TEST(DecodeStepPlan, PlanStepCommand) {
    const std::string cfg = std::string(FLASHSEEK_SOURCE_DIR) + "/tests/data/configs/v4-flash.json";
    const std::string json_path = backend_test::temp_path("plan_step", "plan.json");
    const auto r = backend_test::run_flashseek("plan-step --model " + cfg + " --layer 2 --copy-gb-s 4000 --json " +
                                               json_path + " --cost us_per_kweight=0.05");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("query_first: sub-block"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("branches_first: sub-block"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("0.050 us per 1,024 weights"), std::string::npos) << r.output;
    const auto step = backend_test::run_flashseek("plan-step --model " + cfg + " --layers 3");
    ASSERT_EQ(step.exit_code, 0) << step.output;
    EXPECT_NE(step.output.find("the one-token decode step of 3 layers and the head"), std::string::npos) << step.output;
    EXPECT_NE(step.output.find("query_first: step (TPOT)"), std::string::npos) << step.output;
    EXPECT_NE(step.output.find("routed down"), std::string::npos) << step.output;
    std::ifstream in(json_path);
    const nlohmann::json j = nlohmann::json::parse(in);
    SubblockCosts costs;
    costs.us_per_kweight = 0.05;
    const StepGraph g = attention_subblock_graph(v4_flash(), 2, costs);
    for (const char* order : {"query_first", "branches_first"}) {
        const nlohmann::json& t = j.at(order);
        EXPECT_EQ(t.at("ops").size(), g.ops.size()) << order;
        EXPECT_GE(t.at("step_us").get<double>(), t.at("bytes").get<double>() / 4e6) << order;
        double bytes = 0;
        for (const ScheduleOp& op : g.ops) bytes += op.tile_bytes * op.tiles;
        EXPECT_NEAR(t.at("bytes").get<double>(), bytes, 1e-6 * bytes) << order;
    }
    struct Case {
        std::string args, expect;
    };
    const std::vector<Case> bad = {
        {"--cost bogus=1", "unknown sub-block cost 'bogus'"},
        {"--cost attention_us=x", "'x' is not a number"},
        {"--cost attention_us", "expected NAME=VALUE"},
        {"--cost kv_store_us=-2", "'kv_store_us' must be a number >= 0"},
        {"--layer 43", "--layer 43"},
        {"--ctas 0", "--ctas 0"},
        {"--layers 44", "--layers 44"},
        {"--copy-gb-s 0", "copy_gb_s must be > 0"},
    };
    for (const Case& c : bad) {
        const auto e = backend_test::run_flashseek("plan-step --model " + cfg + " " + c.args);
        EXPECT_NE(e.exit_code, 0) << c.args << "\n" << e.output;
        EXPECT_NE(e.output.find(c.expect), std::string::npos) << c.args << "\n" << e.output;
    }
    const auto missing = backend_test::run_flashseek("plan-step --model /nonexistent/config.json");
    EXPECT_NE(missing.exit_code, 0);
    EXPECT_NE(missing.output.find("/nonexistent/config.json"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace flashseek
