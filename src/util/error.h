// Error handling: every user-facing failure is a flashseek::Error whose message names the file, key or field.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace flashseek {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace flashseek

// FS_CHECK(cond, "message {}", value): throws flashseek::Error with the formatted message when cond is false.
#define FS_CHECK(cond, ...)                          \
    do {                                             \
        if (!(cond)) ::flashseek::fail(__VA_ARGS__); \
    } while (0)
