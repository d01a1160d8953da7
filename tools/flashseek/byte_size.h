// Byte counts on the command line (`--gpu-memory 80GB`): a number, optionally with a decimal (K, M, G, T, with or
// without B: powers of 1000) or binary (KiB, MiB, GiB, TiB: powers of 1024) unit. Errors name the flag.
#pragma once
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "util/error.h"

namespace flashseek::cli {

inline int64_t parse_byte_size(const std::string& flag, const std::string& text) {
    const char* begin = text.c_str();
    char* end = nullptr;
    const double value = std::strtod(begin, &end);
    std::string unit(end);
    for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
    double scale = 0;
    if (unit.empty() || unit == "b") scale = 1;
    const char* prefixes = "kmgt";
    for (int i = 0; i < 4; ++i) {
        const std::string p(1, prefixes[i]);
        if (unit == p || unit == p + "b") scale = std::pow(1000.0, i + 1);
        if (unit == p + "ib") scale = std::pow(1024.0, i + 1);
    }
    FS_CHECK(end != begin && scale > 0, "{} '{}': expected a byte count such as 80000000000, 80GB or 141GiB", flag,
             text);
    const double bytes = value * scale;
    FS_CHECK(std::isfinite(bytes) && bytes >= 1 && bytes < 9.0e18, "{} '{}': must be a positive byte count below "
             "9e18", flag, text);
    return int64_t(bytes);
}

}  // namespace flashseek::cli
