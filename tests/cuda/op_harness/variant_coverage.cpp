// Variant coverage of an op family's test (variant_coverage.h).
#include "variant_coverage.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cstdio>

#include "cuda/common/arch.cuh"
#include "util/error.h"

namespace flashseek::test {

bool archs_available(std::string_view archs) {
    const auto bad = [&] {
        return Error("variant architectures '" + std::string(archs) + "': expected sm_XY+ or sm_XYa (e.g. sm_80+, sm_90a)");
    };
    if (archs.size() < 5 || archs.substr(0, 3) != "sm_") throw bad();
    const char last = archs.back();
    if (last != '+' && last != 'a') throw bad();
    const std::string_view digits = archs.substr(3, archs.size() - 4);
    int cc = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cc);
    if (ec != std::errc() || end != digits.data() + digits.size()) throw bad();
    const int device_cc = cuda::current_arch().cc;
    if (last == '+') return device_cc >= cc;
    if (cc == 90) return cuda::wgmma_usable();
    return device_cc == cc;
}

void VariantCoverage::declare(std::string_view variant, std::string_view archs) {
    archs_[std::string(variant)] = std::string(archs);
}

void VariantCoverage::ran(std::string_view variant, std::string_view tag) {
    if (archs_.find(variant) == archs_.end()) {
        ADD_FAILURE() << family_ << ": an op reported variant '" << variant << "', which its catalogue does not declare";
        return;
    }
    ++runs_[{std::string(variant), std::string()}];
    if (!tag.empty()) ++runs_[{std::string(variant), std::string(tag)}];
}

int VariantCoverage::runs(std::string_view variant, std::string_view tag) const {
    const auto it = runs_.find(std::make_pair(std::string(variant), std::string(tag)));
    return it == runs_.end() ? 0 : it->second;
}

void VariantCoverage::require(std::string_view variant, std::string_view tag) {
    required_[std::string(variant) + "/" + std::string(tag)] = std::string(variant);
}

void VariantCoverage::expect_complete() const {
    std::printf("[ coverage ] %s:", family_.c_str());
    for (const auto& [variant, archs] : archs_) std::printf(" %s=%d", variant.c_str(), runs(variant));
    std::printf("\n");
    for (const auto& [variant, archs] : archs_) {
        if (!archs_available(archs)) continue;
        EXPECT_GT(runs(variant), 0) << family_ << ": variant " << variant << " (" << archs
                                    << ") exists on this device but no case ran it";
    }
    for (const auto& [key, variant] : required_) {
        const auto it = archs_.find(variant);
        if (it == archs_.end()) {
            ADD_FAILURE() << family_ << ": required '" << key << "' names an undeclared variant";
            continue;
        }
        if (!archs_available(it->second)) continue;
        const std::string tag = key.substr(variant.size() + 1);
        EXPECT_GT(runs(variant, tag), 0) << family_ << ": no case ran " << variant << " with " << tag;
    }
}

}  // namespace flashseek::test
