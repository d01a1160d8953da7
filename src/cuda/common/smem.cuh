// Dynamic shared memory above 48 KB needs a per-kernel opt-in (cudaFuncSetAttribute), which is per device: the
// attribute is set once per (device, kernel) for the largest size asked so far. Host only; not a stream operation,
// so it may run while a stream is being captured. Thread-safe (shards on several devices share the process).
#pragma once
#include <cstddef>

namespace flashseek::cuda {

// Raises `kernel`'s dynamic shared-memory limit on the current device to at least `bytes` (no-op up to 48 KB).
// Throws Error when the device refuses.
void allow_dynamic_smem(const void* kernel, size_t bytes);

template <typename Kernel>
void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace flashseek::cuda
