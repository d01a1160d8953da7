// FNV-1a 64-bit hashing: the content hash that `flashseek inspect` prints and tests compare, so that regenerated
// checkpoints can be checked bit-for-bit against committed expectations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace flashseek {

inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// Continues an FNV-1a hash `h` over `n` bytes.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset);
inline uint64_t fnv1a_str(std::string_view s, uint64_t h = kFnvOffset) { return fnv1a(s.data(), s.size(), h); }
inline uint64_t fnv1a_u64(uint64_t v, uint64_t h) { return fnv1a(&v, sizeof v, h); }  // little-endian hosts

}  // namespace flashseek
