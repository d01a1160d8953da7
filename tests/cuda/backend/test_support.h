// Helpers shared by the CUDA backend tests: a fresh random seed per run (printed on failure), tiny random
// checkpoints written once per test binary into a temporary folder, and logits comparison figures.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flashseek::test {

uint64_t fresh_seed();  // from the clock unless FLASHSEEK_TEST_SEED is set
// Writes (once per process) a checkpoint of tests/data/configs/<config>.json with gen-checkpoint's generator and
// returns its folder.
std::string tiny_checkpoint(const std::string& config, uint64_t seed);
bool have_gpu();

struct Agreement {
    double max_rel = 0, mean_rel = 0;
    double argmax = 0;  // fraction of rows with the same argmax
};
Agreement compare_rows(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab);

}  // namespace flashseek::test
