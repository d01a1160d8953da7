// The persistent step's schedule: dealing tiles and the checks (step_schedule.h).
#include "backend/step_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

#include "util/error.h"

namespace flashseek {

std::vector<int> ScheduleOp::waits_for() const {
    std::vector<int> w = after;
    w.insert(w.end(), bytes_after.begin(), bytes_after.end());
    return w;
}

int StepGraph::add(ScheduleOp op) {
    ops.push_back(std::move(op));
    return int(ops.size()) - 1;
}

std::vector<int> dependency_order(const StepGraph& g, const std::function<bool(int)>& prefer) {
    const int n = int(g.ops.size());
    std::vector<int> pending(size_t(n), 0), order;
    std::vector<std::vector<int>> consumers(g.ops.size());
    for (int i = 0; i < n; ++i)
        for (int d : g.ops[size_t(i)].waits_for()) {
            ++pending[size_t(i)];
            consumers[size_t(d)].push_back(i);
        }
    std::vector<bool> placed(size_t(n), false);
    for (;;) {
        int pick = -1;
        for (int pass = prefer ? 0 : 1; pass < 2 && pick < 0; ++pass)
            for (int i = 0; i < n && pick < 0; ++i)
                if (!placed[size_t(i)] && pending[size_t(i)] == 0 && (pass == 1 || prefer(i))) pick = i;
        if (pick < 0) return order;  // all placed, or the rest wait on a cycle
        placed[size_t(pick)] = true;
        order.push_back(pick);
        for (int c : consumers[size_t(pick)]) --pending[size_t(c)];
    }
}

std::string graph_problem(const StepGraph& g) {
    if (g.ops.empty()) return "step graph: no ops";
    const int n = int(g.ops.size());
    for (int i = 0; i < n; ++i) {
        const ScheduleOp& op = g.ops[size_t(i)];
        const std::string name = op.name.empty() ? fmt::format("#{}", i) : fmt::format("'{}'", op.name);
        if (op.tiles < 1) return fmt::format("step graph: op {} has {} tiles (at least 1)", name, op.tiles);
        if (!std::isfinite(op.tile_bytes) || op.tile_bytes < 0)
            return fmt::format("step graph: op {} has tile_bytes {} (a number >= 0)", name, op.tile_bytes);
        if (!std::isfinite(op.tile_compute_us) || op.tile_compute_us < 0)
            return fmt::format("step graph: op {} has tile_compute_us {} (a number >= 0)", name, op.tile_compute_us);
        for (int d : op.waits_for()) {
            if (d < 0 || d >= n) return fmt::format("step graph: op {} reads op {}, which does not exist", name, d);
            if (d == i) return fmt::format("step graph: op {} reads itself", name);
        }
    }
    const std::vector<int> order = dependency_order(g);
    if (int(order.size()) < n) {
        std::vector<bool> placed(size_t(n), false);
        for (int i : order) placed[size_t(i)] = true;
        for (int i = 0; i < n; ++i)
            if (!placed[size_t(i)])
                return fmt::format("step graph: op '{}' is on or behind a dependency cycle", g.ops[size_t(i)].name);
    }
    return {};
}

StepGraph without_weight_prefetch(StepGraph g) {
    for (ScheduleOp& op : g.ops)
        for (int d : op.after)
            if (std::find(op.bytes_after.begin(), op.bytes_after.end(), d) == op.bytes_after.end())
                op.bytes_after.push_back(d);
    return g;
}

StepSchedule deal_tiles(const StepGraph& g, int ctas, const std::vector<int>& op_order) {
    const std::string bad = graph_problem(g);
    FS_CHECK(bad.empty(), "deal_tiles: {}", bad);
    FS_CHECK(ctas >= 1, "deal_tiles: the grid needs at least one CTA, got {}", ctas);
    const int n = int(g.ops.size());
    FS_CHECK(int(op_order.size()) == n, "deal_tiles: op_order lists {} ops, the graph has {}", op_order.size(), n);
    std::vector<int> position(size_t(n), -1);
    for (int k = 0; k < n; ++k) {
        const int op = op_order[size_t(k)];
        FS_CHECK(op >= 0 && op < n, "deal_tiles: op_order names op {}, which does not exist", op);
        FS_CHECK(position[size_t(op)] < 0, "deal_tiles: op_order names op '{}' twice", g.ops[size_t(op)].name);
        position[size_t(op)] = k;
    }
    for (int op = 0; op < n; ++op)
        for (int d : g.ops[size_t(op)].waits_for())
            FS_CHECK(position[size_t(d)] < position[size_t(op)],
                     "deal_tiles: op_order puts '{}' before '{}', which it reads", g.ops[size_t(op)].name,
                     g.ops[size_t(d)].name);
    StepSchedule s;
    s.cta.resize(size_t(ctas));
    int next = 0;
    for (int op : op_order)
        for (int t = 0; t < g.ops[size_t(op)].tiles; ++t) {
            s.cta[size_t(next)].push_back({op, t});
            next = (next + 1) % ctas;
        }
    return s;
}

std::string schedule_problem(const StepGraph& g, const StepSchedule& s) {
    const std::string bad = graph_problem(g);
    if (!bad.empty()) return bad;
    if (s.cta.empty()) return "schedule: no CTAs";
    const int n_ops = int(g.ops.size());
    // Node ids: tile (op, t) at first_tile[op] + t, then one node per op ("every tile of the op has completed").
    std::vector<int64_t> first_tile(size_t(n_ops) + 1, 0);
    for (int op = 0; op < n_ops; ++op) first_tile[size_t(op) + 1] = first_tile[size_t(op)] + g.ops[size_t(op)].tiles;
    const int64_t n_tiles = first_tile[size_t(n_ops)];
    const int64_t n_nodes = n_tiles + n_ops;
    std::vector<int> where(size_t(n_tiles), -1);  // CTA of each tile
    for (size_t c = 0; c < s.cta.size(); ++c)
        for (const TileRef& r : s.cta[c]) {
            if (r.op < 0 || r.op >= n_ops) return fmt::format("schedule: CTA {} lists op {}, which does not exist", c, r.op);
            const ScheduleOp& op = g.ops[size_t(r.op)];
            if (r.tile < 0 || r.tile >= op.tiles)
                return fmt::format("schedule: CTA {} lists tile {} of op '{}', which has {} tiles", c, r.tile, op.name,
                                   op.tiles);
            int& w = where[size_t(first_tile[size_t(r.op)] + r.tile)];
            if (w >= 0)
                return fmt::format("schedule: tile {} of op '{}' is dealt twice (CTAs {} and {})", r.tile, op.name, w, c);
            w = int(c);
        }
    for (int op = 0; op < n_ops; ++op)
        for (int t = 0; t < g.ops[size_t(op)].tiles; ++t)
            if (where[size_t(first_tile[size_t(op)] + t)] < 0)
                return fmt::format("schedule: tile {} of op '{}' is dealt to no CTA", t, g.ops[size_t(op)].name);

    // "b starts only after a": a CTA's consecutive tiles; a tile before its op's node; an op's node before the tiles
    // of the ops that read it. Every started tile completes (its compute waits for nothing more), so the grid hangs
    // exactly when this graph has a cycle.
    std::vector<std::vector<int64_t>> succ(static_cast<size_t>(n_nodes)), pred(static_cast<size_t>(n_nodes));
    auto edge = [&](int64_t a, int64_t b) {
        succ[size_t(a)].push_back(b);
        pred[size_t(b)].push_back(a);
    };
    for (const auto& list : s.cta)
        for (size_t k = 1; k < list.size(); ++k)
            edge(first_tile[size_t(list[k - 1].op)] + list[k - 1].tile, first_tile[size_t(list[k].op)] + list[k].tile);
    for (int op = 0; op < n_ops; ++op) {
        for (int t = 0; t < g.ops[size_t(op)].tiles; ++t) edge(first_tile[size_t(op)] + t, n_tiles + op);
        for (int d : g.ops[size_t(op)].waits_for())
            for (int t = 0; t < g.ops[size_t(op)].tiles; ++t) edge(n_tiles + d, first_tile[size_t(op)] + t);
    }
    std::vector<int> waiting(size_t(n_nodes), 0);
    std::vector<int64_t> ready;
    for (int64_t v = 0; v < n_nodes; ++v) {
        waiting[size_t(v)] = int(pred[size_t(v)].size());
        if (waiting[size_t(v)] == 0) ready.push_back(v);
    }
    for (size_t k = 0; k < ready.size(); ++k)
        for (int64_t w : succ[size_t(ready[k])])
            if (--waiting[size_t(w)] == 0) ready.push_back(w);
    if (int64_t(ready.size()) == n_nodes) return {};

    // A node on a cycle: walk back through unfinished predecessors until one repeats; then name the ops on the loop.
    int64_t v = -1;
    for (int64_t u = 0; u < n_nodes && v < 0; ++u)
        if (waiting[size_t(u)] > 0) v = u;
    std::vector<int64_t> seen_at(size_t(n_nodes), -1);
    std::vector<int64_t> path;
    while (seen_at[size_t(v)] < 0) {
        seen_at[size_t(v)] = int64_t(path.size());
        path.push_back(v);
        for (int64_t p : pred[size_t(v)])
            if (waiting[size_t(p)] > 0) {
                v = p;
                break;
            }
    }
    auto describe = [&](int64_t node) {
        if (node >= n_tiles) return fmt::format("all of '{}'", g.ops[size_t(node - n_tiles)].name);
        int op = 0;
        while (first_tile[size_t(op) + 1] <= node) ++op;
        const int64_t t = node - first_tile[size_t(op)];
        return fmt::format("'{}' tile {} (CTA {})", g.ops[size_t(op)].name, t, where[size_t(node)]);
    };
    std::string loop;
    for (size_t k = path.size(); k-- > size_t(seen_at[size_t(v)]);) {  // the loop in "waits for" order reversed
        if (!loop.empty()) loop += " -> ";
        loop += describe(path[k]);
    }
    return fmt::format("schedule: a wait that never ends (A -> B: B starts only after A): {} -> {}", loop,
                       describe(path.back()));
}

}  // namespace flashseek
