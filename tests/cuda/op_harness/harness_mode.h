// The three modes of a GPU op harness executable (test_cuda_linear, test_cuda_attention), chosen on its command line
// (harness_main.cpp):
//   test  (default)  gtest: every case of each op family's case list through every catalogue variant that supports
//                    it on this GPU, against the CPU op, outputs poisoned before each run;
//   quick (--quick)  gtest on reduced case lists, small enough for compute-sanitizer memcheck and racecheck to finish
//                    in minutes; a reduced list still reaches every variant (the coverage check holds in both);
//   perf  (--perf)   no gtest: every registered perf suite (perf_report.h) at full V4-Flash shapes, timed against
//                    the ceilings measured by the same binary.
// Case lists ask harness_mode() which list to return.
#pragma once
#include <vector>

namespace flashseek::test {

enum class HarnessMode { Test, Quick, Perf };

HarnessMode harness_mode();
inline bool quick_mode() { return harness_mode() == HarnessMode::Quick; }

// A family's case list for the current mode: the perf list, the test list, or the test cases marked `quick`.
template <typename Case>
std::vector<Case> cases_for_mode(std::vector<Case> (*test_list)(), std::vector<Case> (*perf_list)()) {
    if (harness_mode() == HarnessMode::Perf) return perf_list();
    std::vector<Case> cases = test_list();
    if (quick_mode()) std::erase_if(cases, [](const Case& c) { return !c.quick; });
    return cases;
}

}  // namespace flashseek::test
