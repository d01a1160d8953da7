// Pointer alignment as the kernels' host-side dispatch checks it: 16-byte vector loads and stores, cp.async and
// TMA need 16-byte aligned addresses, and a variant that relies on them refuses other pointers. Host-only header.
#pragma once
#include <cstdint>

namespace flashseek::cuda {

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace flashseek::cuda
