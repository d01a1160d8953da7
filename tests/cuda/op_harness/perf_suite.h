// Registration of perf suites: a perf suite is a function that times one op family at full V4-Flash shapes (each
// op's default variant and every variant that supports it) and adds its rows to the report. A file registers its
// suite at namespace scope with FS_PERF_SUITE("family", function); `--perf` runs every registered suite (or those
// whose family contains the --perf-filter text) in registration order and prints one table per family.
#pragma once
#include <string>
#include <vector>

namespace flashseek::test {

class PerfReport;
using PerfSuiteFn = void (*)(PerfReport& report);

struct PerfSuite {
    std::string family;
    PerfSuiteFn run;
};

std::vector<PerfSuite>& perf_suites();

struct PerfSuiteRegistrar {
    PerfSuiteRegistrar(const char* family, PerfSuiteFn fn) { perf_suites().push_back({family, fn}); }
};

}  // namespace flashseek::test

#define FS_PERF_SUITE_CAT2(a, b) a##b
#define FS_PERF_SUITE_CAT(a, b) FS_PERF_SUITE_CAT2(a, b)
#define FS_PERF_SUITE(family, fn) \
    static ::flashseek::test::PerfSuiteRegistrar FS_PERF_SUITE_CAT(fs_perf_suite_, __LINE__)(family, fn)
