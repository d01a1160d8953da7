// A timing model of a persistent step's schedule (step_schedule.h), for choosing among schedules before one is built
// on the device and for writing down the prediction its measurement is judged against. The model:
//   - HBM: one copy rate shared equally by the CTAs whose loaders are transferring, each capped at a per-CTA rate
//     (one SM's loader cannot take the whole device's rate);
//   - each CTA's loader requests its tiles' bytes in list order as long as its ring has room (ring_bytes; a tile
//     larger than the ring waits for an empty ring), whatever the tiles' compute dependencies: weights depend on
//     nothing, except where an op's rows are chosen by an earlier op (ScheduleOp::bytes_after: the loader stops at
//     such a tile until those ops complete);
//   - each CTA's compute starts its tiles in list order on one of compute_lanes lanes (compute warps), once the
//     tile's bytes have landed and every tile of the ops it reads has completed; a tile holds its ring bytes until
//     its compute ends.
// What it leaves out: L2 hits, the latency of a counter's update reaching the waiting CTA, shared-memory limits
// beyond the ring, and contention between compute and copies on one SM; so its times are lower bounds of the kind
// the design's sizing uses, to compare orders and decompositions with, not to replace the measurement.
#pragma once
#include <string>
#include <vector>

#include "backend/step_schedule.h"

namespace flashseek {

struct StepMachine {
    double copy_gb_s = 4200;      // the device's copy rate (flashseek bench measures it), GB/s
    double per_cta_gb_s = 60;     // what one CTA's loader can take at most, GB/s (an assumption, not measured: at the
                                  // full copy rate an SM's share is ~32 GB/s, so it binds only below ~70 streaming CTAs)
    double ring_bytes = 128 * 1024;  // bytes a CTA may have requested and not yet consumed
    int compute_lanes = 8;        // tiles a CTA computes at once
};

struct ScheduleTiming {
    double step_us = 0;              // the last tile's completion
    double hbm_busy_us = 0;          // time during which some loader was transferring
    double bytes = 0;                // all tiles' bytes
    std::vector<double> op_done_us;  // per op: its last tile's completion
    // Per op: how long its tiles waited, summed, between their bytes landing and their inputs being complete (the
    // time the op's weights sat ready for a producer elsewhere).
    std::vector<double> op_input_wait_us;
};

// Runs the model. The schedule must be valid for the graph (schedule_problem() empty) and the machine's numbers
// positive; an Error naming what is wrong otherwise.
ScheduleTiming simulate_schedule(const StepGraph& graph, const StepSchedule& schedule, const StepMachine& machine);

}  // namespace flashseek
