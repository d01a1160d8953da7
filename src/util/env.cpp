#include "util/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace flashseek {

bool env_switch_on(const char* name) {
    const char* v = std::getenv(name);
    return v == nullptr || std::strcmp(v, "0") != 0;
}

int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    errno = 0;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    FS_CHECK(errno == 0 && end != v && *end == '\0' && n >= lo && n <= hi,
             "environment variable {} must be an integer in [{}, {}], got '{}'", name, lo, hi, v);
    return int64_t(n);
}

}  // namespace flashseek
