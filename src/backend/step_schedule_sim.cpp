// The timing model of a persistent step's schedule (step_schedule_sim.h): an event loop over transfers and tile
// computes, the copy rate shared between the loaders transferring at each moment.
#include "backend/step_schedule_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace flashseek {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct CtaState {
    const std::vector<TileRef>* list = nullptr;
    size_t requested = 0;       // tiles whose bytes the loader has requested (in list order)
    size_t landed = 0;          // tiles whose bytes have landed (in list order)
    double head_left = 0;       // bytes of tile `landed` still to arrive (when landed < requested)
    double ring_used = 0;       // bytes requested and not yet released by a completed compute
    size_t started = 0;         // tiles whose compute has started (in list order)
    double blocked_since = -1;  // when tile `started` became ready but for its inputs (-1: not blocked)
    std::vector<std::pair<double, TileRef>> running;  // (end time, tile) of the computes in flight
};

}  // namespace

ScheduleTiming simulate_schedule(const StepGraph& g, const StepSchedule& s, const StepMachine& m) {
    const std::string bad = schedule_problem(g, s);
    FS_CHECK(bad.empty(), "simulate_schedule: {}", bad);
    FS_CHECK(std::isfinite(m.copy_gb_s) && m.copy_gb_s > 0, "simulate_schedule: copy_gb_s must be > 0, got {}",
             m.copy_gb_s);
    FS_CHECK(std::isfinite(m.per_cta_gb_s) && m.per_cta_gb_s > 0, "simulate_schedule: per_cta_gb_s must be > 0, got {}",
             m.per_cta_gb_s);
    FS_CHECK(std::isfinite(m.ring_bytes) && m.ring_bytes > 0, "simulate_schedule: ring_bytes must be > 0, got {}",
             m.ring_bytes);
    FS_CHECK(m.compute_lanes >= 1, "simulate_schedule: compute_lanes must be >= 1, got {}", m.compute_lanes);

    const size_t n_ops = g.ops.size();
    ScheduleTiming r;
    r.op_done_us.assign(n_ops, 0.0);
    r.op_input_wait_us.assign(n_ops, 0.0);
    std::vector<int> tiles_left(n_ops);
    for (size_t op = 0; op < n_ops; ++op) {
        tiles_left[op] = g.ops[op].tiles;
        r.bytes += g.ops[op].tile_bytes * g.ops[op].tiles;
    }
    auto all_done = [&](const std::vector<int>& ops) {
        for (int d : ops)
            if (tiles_left[size_t(d)] > 0) return false;
        return true;
    };
    auto inputs_done = [&](int op) { return all_done(g.ops[size_t(op)].after); };
    std::vector<CtaState> ctas(s.cta.size());
    for (size_t c = 0; c < ctas.size(); ++c) ctas[c].list = &s.cta[c];
    size_t tiles_total = 0, tiles_done = 0;
    for (const auto& list : s.cta) tiles_total += list.size();

    double t = 0;
    // bytes per us = GB/s * 1e3
    const double copy_rate = m.copy_gb_s * 1e3, cta_cap = m.per_cta_gb_s * 1e3;
    while (tiles_done < tiles_total) {
        // Everything that can start at time t.
        for (CtaState& c : ctas) {
            const auto& list = *c.list;
            for (;;) {  // the loader: request while the ring has room; zero-byte tiles land as they reach the head
                bool moved = false;
                if (c.requested < list.size() && all_done(g.ops[size_t(list[c.requested].op)].bytes_after)) {
                    const double b = g.ops[size_t(list[c.requested].op)].tile_bytes;
                    if (b == 0 || c.ring_used == 0 || c.ring_used + b <= m.ring_bytes) {
                        if (c.landed == c.requested) c.head_left = b;
                        c.ring_used += b;
                        ++c.requested;
                        moved = true;
                    }
                }
                if (c.landed < c.requested && c.head_left <= 0) {
                    ++c.landed;
                    if (c.landed < c.requested) c.head_left = g.ops[size_t(list[c.landed].op)].tile_bytes;
                    moved = true;
                }
                if (!moved) break;
            }
            while (c.started < c.landed && int(c.running.size()) < m.compute_lanes) {  // computes, in list order
                const TileRef tile = list[c.started];
                if (!inputs_done(tile.op)) {
                    if (c.blocked_since < 0) c.blocked_since = t;
                    break;
                }
                if (c.blocked_since >= 0) {
                    r.op_input_wait_us[size_t(tile.op)] += t - c.blocked_since;
                    c.blocked_since = -1;
                }
                c.running.push_back({t + g.ops[size_t(tile.op)].tile_compute_us, tile});
                ++c.started;
            }
        }
        // The next event: a head transfer landing or a compute ending.
        int transferring = 0;
        for (const CtaState& c : ctas)
            if (c.landed < c.requested) ++transferring;
        const double rate = transferring ? std::min(cta_cap, copy_rate / transferring) : 0;
        double dt = kInf;
        for (const CtaState& c : ctas) {
            if (c.landed < c.requested) dt = std::min(dt, c.head_left / rate);
            for (const auto& run : c.running) dt = std::min(dt, run.first - t);
        }
        FS_CHECK(std::isfinite(dt), "simulate_schedule: no tile can proceed at {} us with {} of {} tiles done", t,
                 tiles_done, tiles_total);  // unreachable for a schedule schedule_problem() accepts
        dt = std::max(dt, 0.0);
        t += dt;
        if (transferring) r.hbm_busy_us += dt;
        for (CtaState& c : ctas) {
            if (c.landed < c.requested) {
                c.head_left -= rate * dt;
                // Rounding: a head within a millionth of a byte of its end has landed.
                if (c.head_left < 1e-6) c.head_left = 0;
            }
            for (size_t k = 0; k < c.running.size();) {
                if (c.running[k].first <= t + 1e-9) {
                    const TileRef done = c.running[k].second;
                    c.ring_used -= g.ops[size_t(done.op)].tile_bytes;
                    if (c.ring_used < 1e-6) c.ring_used = 0;
                    if (--tiles_left[size_t(done.op)] == 0) r.op_done_us[size_t(done.op)] = t;
                    ++tiles_done;
                    c.running[k] = c.running.back();
                    c.running.pop_back();
                } else {
                    ++k;
                }
            }
        }
    }
    r.step_us = t;
    return r;
}

}  // namespace flashseek
