// main() of the GPU op harness executables and their mode (harness_mode.h). Command line:
//   (nothing)  gtest, every gtest flag as usual
//   --quick    the reduced case lists (compute-sanitizer runs), then gtest as usual
//   --perf [--perf-filter TEXT] [--json FILE]   the registered perf suites whose family contains TEXT, one table
//              per family on stdout, every row in FILE; exit status 1 if a suite threw, 3 if no suite matches
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "harness_mode.h"
#include "perf_ceilings.h"
#include "perf_report.h"
#include "perf_suite.h"

namespace flashseek::test {
namespace {

HarnessMode g_mode = HarnessMode::Test;

// Exit status: 0, 1 when a suite threw, 3 when no suite matches the filter (nothing measured).
int run_perf(const std::string& filter, const std::string& json_path) {
    std::vector<const PerfSuite*> selected;
    for (const PerfSuite& suite : perf_suites())
        if (filter.empty() || suite.family.find(filter) != std::string::npos) selected.push_back(&suite);
    if (selected.empty()) {
        std::printf("perf: no suite matches '%s'; suites:", filter.c_str());
        for (const PerfSuite& s : perf_suites()) std::printf(" %s", s.family.c_str());
        std::printf("\n");
        return 3;
    }
    const Ceilings& c = measured_ceilings();
    std::printf("perf: device %s\nperf: copy bandwidth %.1f GB/s (read + write); cuBLASLt 8192^3 FP8 %.1f TFLOP/s, "
                "BF16 %.1f TFLOP/s\n",
                c.device.c_str(), c.copy_bytes_per_s / 1e9, c.fp8_flops_per_s / 1e12, c.bf16_flops_per_s / 1e12);
    if (!c.gemm_note.empty()) std::printf("perf: %s\n", c.gemm_note.c_str());
    PerfReport report;
    int status = 0;
    for (const PerfSuite* suite : selected) {
        report.begin_family(suite->family);
        try {
            suite->run(report);
        } catch (const std::exception& e) {
            std::printf("perf: suite %s FAILED: %s\n", suite->family.c_str(), e.what());
            status = 1;
        }
        report.print_table(suite->family);
    }
    if (!json_path.empty()) report.write_json(json_path);
    return status;
}

}  // namespace

HarnessMode harness_mode() { return g_mode; }
std::vector<PerfSuite>& perf_suites() {
    static std::vector<PerfSuite> suites;
    return suites;
}

}  // namespace flashseek::test

int main(int argc, char** argv) {
    using namespace flashseek::test;
    std::string filter, json_path;
    bool perf_only_flag = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--perf") == 0) g_mode = HarnessMode::Perf;
        else if (std::strcmp(argv[i], "--quick") == 0 && g_mode != HarnessMode::Perf) g_mode = HarnessMode::Quick;
        else if (std::strcmp(argv[i], "--perf-filter") == 0 || std::strcmp(argv[i], "--json") == 0) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", argv[i]);
                return 2;
            }
            (argv[i][2] == 'j' ? json_path : filter) = argv[i + 1];
            perf_only_flag = true;
            ++i;
        }
    }
    if (g_mode == HarnessMode::Perf) {
        for (int i = 1; i < argc; ++i) {
            const bool takes_value = std::strcmp(argv[i], "--perf-filter") == 0 || std::strcmp(argv[i], "--json") == 0;
            if (takes_value) ++i;
            else if (std::strcmp(argv[i], "--perf") != 0) {
                std::fprintf(stderr, "perf mode: unknown argument '%s' (--perf [--perf-filter TEXT] [--json FILE])\n",
                             argv[i]);
                return 2;
            }
        }
        try {
            return run_perf(filter, json_path);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "perf: %s\n", e.what());
            return 1;
        }
    }
    if (perf_only_flag) {
        std::fprintf(stderr, "--perf-filter and --json belong to perf mode: add --perf\n");
        return 2;
    }
    ::testing::InitGoogleTest(&argc, argv);  // removes the gtest flags it knows
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--quick") != 0) {
            std::fprintf(stderr, "unknown argument '%s' (gtest flags, --quick, or --perf)\n", argv[i]);
            return 2;
        }
    return RUN_ALL_TESTS();
}
