// Helpers shared by the CUDA backend tests: a fresh random seed per run (printed on failure), tiny random
// checkpoints written once per test binary into a temporary folder, random prompts, CUDA backends of a layout and
// logits comparison figures.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/options.h"

namespace flashseek::test {

uint64_t fresh_seed();
// The source tree (test data): the build's, unless FLASHSEEK_SOURCE_DIR is set (binaries carried to another machine).
std::string source_dir();  // from the clock unless FLASHSEEK_TEST_SEED is set
// Writes (once per process) a checkpoint of tests/data/configs/<config>.json with gen-checkpoint's generator and
// returns its folder.
std::string tiny_checkpoint(const std::string& config, uint64_t seed);
bool have_gpu();
// n token ids drawn uniformly from [2, vocab) (0 and 1 are left to the special tokens).
std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int64_t vocab);
// A CUDA backend of the checkpoint in `dir` for two sequences of up to 4,096 tokens; tp x ep > 1: that tensor /
// expert parallel layout as virtual ranks on this device.
std::unique_ptr<Backend> make_layout(const std::string& dir, Numerics num, int tp, int ep);
// Runs `steps` once more as a profiled step (BackendDiagnostics::profile_step: the sequences advance) and says
// whether its op table has an op named `op`: which path a pass took where the logits alone cannot show it.
bool profiled_step_has_op(Backend& be, std::span<const SequenceStep> steps, std::string_view op);

struct Agreement {
    double max_rel = 0, mean_rel = 0, median_rel = 0, p90_rel = 0;  // per-row relative L2 error statistics
    double argmax = 0;  // fraction of rows with the same argmax
    int64_t rows = 0;   // rows compared
};
Agreement compare_rows(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab);

// The noise-calibrated criterion (docs/perf.md, "sensitivity of the tiny models"; scripts/compare_logits.py
// --envelope): `ours` against the reference may differ by no more than the reference differs from itself when its
// norm weights are perturbed by one bf16 rounding (`envelope`): median and 90th percentile of the per-row error
// <= max(1.5 x the envelope's, 2e-2), argmax agreement >= the envelope's - max(2 points, 3 binomial standard
// deviations of an agreement over `ours.rows` rows). Both agreements are samples: on these near-flat logits a few
// rows' argmax flip under any valid rounding, so with 90 rows two flips (2.2 points) are noise, not a defect (the
// ParallelLayouts test failed on 2 of 4 seeds with the same logits from the binaries before and after a change).
// Empty string = pass, else the reason.
std::string envelope_violation(const Agreement& ours, const Agreement& envelope);
// The bound that criterion puts on an error figure whose envelope counterpart is `envelope_error`:
// max(1.5 x it, 2e-2).
double envelope_limit(double envelope_error);

}  // namespace flashseek::test
