// The schedule of a persistent decode step (docs/decode-step-design.md, stages 2-4): the step as ops split into tiles,
// each tile dealt to one resident CTA, every CTA working through its own tile list in order. A tile's weights are
// requested as soon as its CTA's loader reaches it (weights depend on nothing); its arithmetic waits until every
// tile of the ops it reads has completed (a dependency counter per op on the device). Plain host data, so the
// planner, its checks and the timing model (step_schedule_sim.h) are tested on the CPU; the CUDA backend turns a
// schedule into its device tables.
// Why a deadlock check: the CTAs of a persistent grid wait for each other's counters and cannot be preempted, so a
// CTA whose earlier tile waits for an op whose missing tiles sit behind that same tile (in its own list, or through
// a chain of other CTAs' lists) hangs the GPU. schedule_problem() refuses such a schedule before anything runs.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace flashseek {

// One op of the step: `tiles` units of work, each streaming tile_bytes of weights (0: the op streams none, e.g. a
// norm, the routing or the attention) and computing for tile_compute_us once its inputs and its bytes are there.
struct ScheduleOp {
    std::string name;
    int tiles = 1;
    double tile_bytes = 0;
    double tile_compute_us = 0;
    std::vector<int> after;  // indices of the ops every tile of which must complete before this op's tiles compute
    // Ops that must complete before this op's weight bytes can even be requested: which rows to stream is known only
    // then (the routed experts' weights wait for the routing). A CTA's loader stops at such a tile until then.
    std::vector<int> bytes_after;
    // after and bytes_after: every op this one waits for.
    std::vector<int> waits_for() const;
};

struct StepGraph {
    std::vector<ScheduleOp> ops;
    int add(ScheduleOp op);  // appends op and returns its index
};

struct TileRef {
    int op = 0;
    int tile = 0;
    bool operator==(const TileRef&) const = default;
};

// cta[c]: the tiles CTA c runs, in the order it runs them (its loader requests their bytes in the same order).
struct StepSchedule {
    std::vector<std::vector<TileRef>> cta;
};

// The ops in an order in which every op comes after the ops it waits for (Kahn's algorithm, taking at each step the
// lowest-index ready op that `prefer` accepts, else the lowest-index ready op); fewer than all ops when the
// dependencies have a cycle.
std::vector<int> dependency_order(const StepGraph& graph, const std::function<bool(int)>& prefer = nullptr);

// Why `graph` is not a step (empty when it is): an op with no tiles or a negative size, a dependency (after or
// bytes_after) on an unknown op or on itself, a dependency cycle. Names the op.
std::string graph_problem(const StepGraph& graph);

// `graph` with every op's weights requested only once its inputs are complete (bytes_after gains after): the step
// as a sequence of kernels that load nothing before their predecessors end, the comparison the persistent step is
// measured against in the model.
StepGraph without_weight_prefetch(StepGraph graph);

// Deals the tiles of the ops over `ctas` CTAs, op by op in `op_order` (every op once; a dependency's tiles before its
// consumers'), each op's tiles round robin starting where the previous op's ended, so that every CTA's list follows
// op_order and every CTA carries an even share of each op. An Error naming the problem for a bad graph or order.
StepSchedule deal_tiles(const StepGraph& graph, int ctas, const std::vector<int>& op_order);

// Why `schedule` cannot run `graph` on a grid whose CTAs are all resident (empty when it can): a tile missing,
// out of range or dealt twice, or a wait that can never end: the graph of "tile B computes only after tile A" (A
// before B in one CTA's list, or A a tile of an op B's op reads) has a cycle. Names an op and tile on the cycle.
std::string schedule_problem(const StepGraph& graph, const StepSchedule& schedule);

}  // namespace flashseek
