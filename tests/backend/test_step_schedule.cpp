// The persistent step's schedule (backend/step_schedule.h) and its timing model (backend/step_schedule_sim.h):
// dealing, the checks that refuse schedules that cannot run (named), and the model against closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/step_schedule.h"
#include "backend/step_schedule_sim.h"
#include "util/error.h"

namespace flashseek {
namespace {

ScheduleOp op(std::string name, int tiles, double bytes, double compute_us, std::vector<int> after = {}) {
    ScheduleOp o;
    o.name = std::move(name);
    o.tiles = tiles;
    o.tile_bytes = bytes;
    o.tile_compute_us = compute_us;
    o.after = std::move(after);
    return o;
}

// norm (no weights) -> gemv a -> gemv b, and a side branch reading the norm.
StepGraph chain_with_branch() {
    StepGraph g;
    const int norm = g.add(op("norm", 1, 0, 2));
    const int a = g.add(op("a", 40, 16384, 0.5, {norm}));
    g.add(op("b", 64, 16384, 0.5, {a}));
    g.add(op("branch", 8, 8192, 0.5, {norm}));
    return g;
}

TEST(StepSchedule, GraphProblemsNameTheOp) {
    StepGraph g = chain_with_branch();
    EXPECT_EQ(graph_problem(g), "");
    StepGraph bad = g;
    bad.ops[1].tiles = 0;
    EXPECT_NE(graph_problem(bad).find("op 'a' has 0 tiles"), std::string::npos) << graph_problem(bad);
    bad = g;
    bad.ops[2].tile_bytes = -1;
    EXPECT_NE(graph_problem(bad).find("'b' has tile_bytes -1"), std::string::npos) << graph_problem(bad);
    bad = g;
    bad.ops[2].after = {7};
    EXPECT_NE(graph_problem(bad).find("reads op 7, which does not exist"), std::string::npos) << graph_problem(bad);
    bad = g;
    bad.ops[0].after = {2};  // norm <- b <- a <- norm
    EXPECT_NE(graph_problem(bad).find("dependency cycle"), std::string::npos) << graph_problem(bad);
    EXPECT_NE(graph_problem(StepGraph{}).find("no ops"), std::string::npos);
}

TEST(StepSchedule, DealingCoversEveryTileOnceInOpOrder) {
    const StepGraph g = chain_with_branch();
    for (int ctas : {1, 3, 7, 132}) {
        const StepSchedule s = deal_tiles(g, ctas, {0, 3, 1, 2});
        ASSERT_EQ(int(s.cta.size()), ctas);
        EXPECT_EQ(schedule_problem(g, s), "") << ctas << " CTAs";
        size_t n = 0;
        for (const auto& list : s.cta) {
            n += list.size();
            const std::vector<int> rank = {0, 2, 3, 1};  // position of each op in the order above
            for (size_t k = 1; k < list.size(); ++k) EXPECT_LE(rank[size_t(list[k - 1].op)], rank[size_t(list[k].op)]);
        }
        EXPECT_EQ(n, size_t(1 + 40 + 64 + 8));
        // Even shares: every CTA's count of each op's tiles differs by at most one between CTAs.
        for (int o = 0; o < 4; ++o) {
            int lo = 1 << 30, hi = 0;
            for (const auto& list : s.cta) {
                int k = 0;
                for (const TileRef& r : list) k += r.op == o;
                lo = std::min(lo, k);
                hi = std::max(hi, k);
            }
            EXPECT_LE(hi - lo, 1) << "op " << o << ", " << ctas << " CTAs";
        }
    }
    EXPECT_THROW(deal_tiles(g, 0, {0, 1, 2, 3}), Error);
    EXPECT_THROW(deal_tiles(g, 4, {0, 1, 2}), Error);     // an op missing
    EXPECT_THROW(deal_tiles(g, 4, {0, 1, 1, 3}), Error);  // an op twice
    try {
        deal_tiles(g, 4, {0, 2, 1, 3});  // b before a, which it reads
        FAIL() << "an order against the dependencies was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("puts 'b' before 'a'"), std::string::npos) << e.what();
    }
}

TEST(StepSchedule, RefusesMissingDuplicateAndForeignTiles) {
    const StepGraph g = chain_with_branch();
    StepSchedule s = deal_tiles(g, 4, {0, 1, 2, 3});
    StepSchedule bad = s;
    bad.cta[1].pop_back();
    EXPECT_NE(schedule_problem(g, bad).find("is dealt to no CTA"), std::string::npos) << schedule_problem(g, bad);
    bad = s;
    bad.cta[0].push_back(s.cta[2][0]);
    EXPECT_NE(schedule_problem(g, bad).find("is dealt twice"), std::string::npos) << schedule_problem(g, bad);
    bad = s;
    bad.cta[3].push_back({1, 40});
    EXPECT_NE(schedule_problem(g, bad).find("tile 40 of op 'a', which has 40 tiles"), std::string::npos)
        << schedule_problem(g, bad);
    bad = s;
    bad.cta[3].push_back({9, 0});
    EXPECT_NE(schedule_problem(g, bad).find("lists op 9"), std::string::npos) << schedule_problem(g, bad);
    EXPECT_NE(schedule_problem(g, StepSchedule{}).find("no CTAs"), std::string::npos);
}

// A consumer's tile ahead of its producer's last tile on one CTA waits forever; so does a loop through two CTAs.
TEST(StepSchedule, RefusesSchedulesThatHang) {
    StepGraph g;
    const int a = g.add(op("a", 2, 100, 1));
    const int b = g.add(op("b", 2, 100, 1, {a}));
    StepSchedule own;  // CTA 0: b0 before a1, and b needs every tile of a
    own.cta = {{{a, 0}, {b, 0}, {a, 1}}, {{b, 1}}};
    const std::string why = schedule_problem(g, own);
    EXPECT_NE(why.find("a wait that never ends"), std::string::npos) << why;
    EXPECT_NE(why.find("'a' tile 1 (CTA 0)"), std::string::npos) << why;
    EXPECT_NE(why.find("'b' tile 0 (CTA 0)"), std::string::npos) << why;

    StepGraph g2;  // x and y independent; p reads x, q reads y
    const int x = g2.add(op("x", 1, 0, 1)), y = g2.add(op("y", 1, 0, 1));
    const int p = g2.add(op("p", 1, 0, 1, {x})), q = g2.add(op("q", 1, 0, 1, {y}));
    StepSchedule across;  // CTA 0 runs p before y, CTA 1 runs q before x: each waits for the other's later tile
    across.cta = {{{p, 0}, {y, 0}}, {{q, 0}, {x, 0}}};
    EXPECT_NE(schedule_problem(g2, across).find("a wait that never ends"), std::string::npos)
        << schedule_problem(g2, across);
    across.cta = {{{y, 0}, {p, 0}}, {{x, 0}, {q, 0}}};  // producers first: runs
    EXPECT_EQ(schedule_problem(g2, across), "");
    EXPECT_THROW(simulate_schedule(g, own, StepMachine{}), Error);
}

// One op streaming N bytes over all CTAs at the copy rate takes N / rate.
TEST(StepScheduleSim, StreamingAloneRunsAtTheCopyRate) {
    StepGraph g;
    g.add(op("w", 1320, 16384, 0));
    StepMachine m;
    m.copy_gb_s = 4000;
    m.per_cta_gb_s = 100;  // 132 x 100 > 4000: the device's rate binds
    m.ring_bytes = 1 << 20;
    const ScheduleTiming r = simulate_schedule(g, deal_tiles(g, 132, {0}), m);
    const double expect_us = 1320 * 16384 / (4000 * 1e3);
    EXPECT_NEAR(r.step_us, expect_us, 1e-6 * expect_us);
    EXPECT_NEAR(r.hbm_busy_us, expect_us, 1e-6 * expect_us);
    EXPECT_DOUBLE_EQ(r.bytes, 1320.0 * 16384);
    // Eight CTAs at 100 GB/s each cannot take the device's rate: 800 GB/s.
    const ScheduleTiming few = simulate_schedule(g, deal_tiles(g, 8, {0}), m);
    EXPECT_NEAR(few.step_us, 1320 * 16384 / (800 * 1e3), 1e-6 * few.step_us);
}

// The design's premise: a latency-bound op at the head of the step no longer delays the weights behind it, which
// stream while it runs; the consumer's tiles then only compute.
TEST(StepScheduleSim, WeightsStreamWhileTheLatencyBoundOpRuns) {
    StepGraph g;
    const int norm = g.add(op("norm", 1, 0, 10));
    g.add(op("gemv", 132, 16384, 0.25, {norm}));
    StepMachine m;
    m.copy_gb_s = 4000;
    m.per_cta_gb_s = 100;
    m.ring_bytes = 65536;
    const ScheduleTiming r = simulate_schedule(g, deal_tiles(g, 132, {0, 1}), m);
    // 2.16 MB land in 0.54 us, long before the norm's 10 us end; then each CTA's tile computes for 0.25 us.
    EXPECT_NEAR(r.step_us, 10.25, 1e-9);
    EXPECT_NEAR(r.op_done_us[0], 10.0, 1e-9);
    EXPECT_NEAR(r.op_input_wait_us[1], 132 * (10.0 - 16384 / (4000 * 1e3 / 132)), 1e-6);
    // With a ring that holds no tile ahead of a blocked one nothing changes here (one tile per CTA); with two tiles
    // per CTA and a one-tile ring the second tile's bytes wait for the first's compute.
    StepGraph g2;
    const int norm2 = g2.add(op("norm", 1, 0, 10));
    g2.add(op("gemv", 264, 16384, 0.25, {norm2}));
    m.ring_bytes = 16384;
    const ScheduleTiming r2 = simulate_schedule(g2, deal_tiles(g2, 132, {0, 1}), m);
    const double second_tile_us = 16384 / (4000 * 1e3 / 132);  // all 132 loaders at once after the first computes
    EXPECT_NEAR(r2.step_us, 10.25 + second_tile_us + 0.25, 1e-6);
    // Without weight prefetch (a sequence of kernels) the consumer's bytes follow the norm: 10 us + bytes + compute.
    const StepGraph pk = without_weight_prefetch(g);
    EXPECT_EQ(pk.ops[1].bytes_after, std::vector<int>{norm});
    EXPECT_EQ(without_weight_prefetch(pk).ops[1].bytes_after, std::vector<int>{norm});  // added once
    m.ring_bytes = 65536;
    EXPECT_NEAR(simulate_schedule(pk, deal_tiles(pk, 132, {0, 1}), m).step_us, 10 + second_tile_us + 0.25, 1e-6);
}

// Rows chosen by an earlier op (the routed experts): their bytes cannot be requested before it completes, so they
// stream after the routing instead of during it. A bytes_after dependency counts in the cycle check too.
TEST(StepScheduleSim, BytesAfterWaitsToRequest) {
    StepMachine m;
    m.copy_gb_s = 4000;
    m.per_cta_gb_s = 100;
    const double tile_us = 16384 / (4000 * 1e3 / 132);
    for (bool routed : {false, true}) {
        StepGraph g;
        const int route = g.add(op("route", 1, 0, 10));
        ScheduleOp experts = op("experts", 132, 16384, 0.25, {route});
        if (routed) experts.bytes_after = {route};
        g.add(experts);
        const ScheduleTiming r = simulate_schedule(g, deal_tiles(g, 132, {0, 1}), m);
        EXPECT_NEAR(r.step_us, routed ? 10 + tile_us + 0.25 : 10.25, 1e-6) << (routed ? "rows after the routing" : "rows known");
        EXPECT_NEAR(r.op_input_wait_us[1], routed ? 0 : 132 * (10 - tile_us), 1e-6);
    }
    StepGraph cyc;
    const int a = cyc.add(op("a", 1, 100, 1));
    cyc.add(op("b", 1, 100, 1, {a}));
    cyc.ops[0].bytes_after = {1};
    EXPECT_NE(graph_problem(cyc).find("dependency cycle"), std::string::npos) << graph_problem(cyc);
    cyc.ops[0].bytes_after = {5};
    EXPECT_NE(graph_problem(cyc).find("reads op 5"), std::string::npos) << graph_problem(cyc);
}

// Compute lanes bound a CTA's tiles in flight: 16 tiles of 1 us on one CTA with 4 lanes and no bytes take 4 us.
TEST(StepScheduleSim, ComputeLanesBoundTheTilesInFlight) {
    StepGraph g;
    g.add(op("work", 16, 0, 1.0));
    StepMachine m;
    m.compute_lanes = 4;
    EXPECT_NEAR(simulate_schedule(g, deal_tiles(g, 1, {0}), m).step_us, 4.0, 1e-9);
    m.compute_lanes = 1;
    EXPECT_NEAR(simulate_schedule(g, deal_tiles(g, 1, {0}), m).step_us, 16.0, 1e-9);
    EXPECT_THROW(simulate_schedule(g, deal_tiles(g, 1, {0}), StepMachine{0, 1, 1, 1}), Error);
    EXPECT_THROW(simulate_schedule(g, deal_tiles(g, 1, {0}), StepMachine{1, 1, 1, 0}), Error);
}

// Random graphs and dealt schedules: the model finishes, no op completes before the ops it reads, and the step is
// never shorter than its bytes at the copy rate nor than its longest dependency chain of computes.
TEST(StepScheduleSim, RandomGraphsRespectTheirBounds) {
    std::mt19937_64 rng(std::random_device{}());
    for (int trial = 0; trial < 50; ++trial) {
        StepGraph g;
        const int n = 2 + int(rng() % 10);
        std::vector<double> chain(static_cast<size_t>(n), 0.0);
        for (int i = 0; i < n; ++i) {
            std::vector<int> after;
            for (int d = 0; d < i; ++d)
                if (rng() % 3 == 0) after.push_back(d);
            const double compute = double(rng() % 100) / 50;
            g.add(op("op" + std::to_string(i), 1 + int(rng() % 300), double(rng() % 3) * 8192, compute, after));
            for (int d : after) chain[size_t(i)] = std::max(chain[size_t(i)], chain[size_t(d)]);
            chain[size_t(i)] += compute;
        }
        std::vector<int> order;
        for (int i = 0; i < n; ++i) order.push_back(i);
        StepMachine m;
        m.copy_gb_s = 1000 + double(rng() % 4000);
        m.per_cta_gb_s = 20 + double(rng() % 80);
        m.ring_bytes = 8192 * (1 + double(rng() % 16));
        m.compute_lanes = 1 + int(rng() % 8);
        const int ctas = 1 + int(rng() % 140);
        const ScheduleTiming r = simulate_schedule(g, deal_tiles(g, ctas, order), m);
        SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << n << " ops, " << ctas << " CTAs");
        EXPECT_GE(r.step_us, r.bytes / (m.copy_gb_s * 1e3) * (1 - 1e-9));
        EXPECT_GE(r.step_us, *std::max_element(chain.begin(), chain.end()) * (1 - 1e-9));
        for (int i = 0; i < n; ++i)
            for (int d : g.ops[size_t(i)].after) EXPECT_GE(r.op_done_us[size_t(i)], r.op_done_us[size_t(d)]);
    }
}

}  // namespace
}  // namespace flashseek

