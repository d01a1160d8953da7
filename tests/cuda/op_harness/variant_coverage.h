// Which kernel variants of one op family a test exercised. A family's test declares every row of its catalogue
// (name and architectures), records each run by the variant name the op returned (and, where a property matters,
// a tag such as "split-k"), and ends with expect_complete(): every declared variant that exists on this device in
// this build must have run, and every required (variant, tag) pair must have been seen. A new catalogue row is
// picked up by the declaration loop, so a variant no case reaches fails the family's test instead of going
// untested.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace flashseek::test {

// Whether a variant declared for `archs` exists on the current device in this build: "sm_XY+" needs compute
// capability >= XY; "sm_90a" needs capability 9.0 and the sm_90a build (cuda::wgmma_usable()); another "sm_XYa"
// needs capability XY exactly. Throws flashseek::Error naming any other form.
bool archs_available(std::string_view archs);

class VariantCoverage {
public:
    explicit VariantCoverage(std::string family) : family_(std::move(family)) {}

    void declare(std::string_view variant, std::string_view archs);
    // Declares every row of a catalogue (anything iterable whose rows have .name and .archs).
    template <typename Rows>
    void declare_all(const Rows& rows) {
        for (const auto& row : rows) declare(row.name, row.archs);
    }
    // One run of `variant` (a name an op returned); an undeclared name is a test failure.
    void ran(std::string_view variant, std::string_view tag = {});
    int runs(std::string_view variant, std::string_view tag = {}) const;
    // expect_complete() also requires `variant` to have run with `tag`, where the variant exists on this device.
    void require(std::string_view variant, std::string_view tag);

    // Prints the run counts; a gtest failure for each declared variant available here that never ran and each
    // required tag not seen.
    void expect_complete() const;

private:
    std::string family_;
    std::map<std::string, std::string, std::less<>> archs_;                  // variant -> archs
    std::map<std::pair<std::string, std::string>, int, std::less<>> runs_;  // (variant, tag) -> runs
    std::map<std::string, std::string, std::less<>> required_;              // "variant/tag" -> variant
};

}  // namespace flashseek::test
