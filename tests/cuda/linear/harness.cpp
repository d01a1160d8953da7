// Helpers of the linear-algebra GPU harness (see harness.h). The executable's main and its modes come from
// tests/cuda/op_harness (harness_main.cpp).
#include "harness.h"

#include <cstdlib>

namespace flashseek::test {

uint64_t fresh_seed() {
    if (const char* s = std::getenv("FS_TEST_SEED")) return std::strtoull(s, nullptr, 0);
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        const double d = double(a[i]) - double(b[i]);
        num += d * d;
        den += double(b[i]) * double(b[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b, double floor) {
    if (a.size() != b.size()) return INFINITY;
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        m = std::max(m, std::fabs(double(a[i]) - double(b[i])) / (std::fabs(double(b[i])) + floor));
    }
    return m;
}

}  // namespace flashseek::test
