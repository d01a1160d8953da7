// FNV-1a over bytes (see hash.h).
#include "util/hash.h"

namespace flashseek {

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= kFnvPrime;
    }
    return h;
}

}  // namespace flashseek
