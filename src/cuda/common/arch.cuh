// Run-time architecture facts and feature predicates for dispatch. Kernels are compiled for every architecture in
// CMAKE_CUDA_ARCHITECTURES; host code picks a path from the device's compute capability with these predicates
// (never from the compiled list alone). Device-side guards use FS_ARCH_* macros around arch-specific instructions.
#pragma once
#include <cuda_runtime.h>

#include <mutex>

#include "cuda/common/check.cuh"

namespace flashseek::cuda {

struct ArchInfo {
    int device = 0;
    int cc = 0;  // major * 10 + minor (80, 89, 90, 100, 120, ...)
    int sm_count = 0;
    int l2_bytes = 0;
    int max_smem_per_block_optin = 0;
};

// Facts of the current device, queried once per device and cached (cheap to call on every launch).
inline const ArchInfo& current_arch() {
    static constexpr int kMaxDevices = 64;
    static ArchInfo cache[kMaxDevices];
    static std::once_flag once[kMaxDevices];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    FS_REQUIRE(dev >= 0 && dev < kMaxDevices, "CUDA device index ", dev, " out of range");
    std::call_once(once[dev], [dev] {
        cudaDeviceProp p{};
        CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
        cache[dev] = ArchInfo{dev, p.major * 10 + p.minor, p.multiProcessorCount, p.l2CacheSize,
                              static_cast<int>(p.sharedMemPerBlockOptin)};
    });
    return cache[dev];
}

// Feature predicates (compute capability as major*10+minor).
inline bool has_bf16_mma(int cc) { return cc >= 80; }                  // mma.sync bf16/f16 m16n8k16
inline bool has_fp8_mma(int cc) { return cc >= 89; }                   // mma.sync e4m3 m16n8k32 (Ada and later)
inline bool has_wgmma(int cc) { return cc == 90; }                     // wgmma needs the sm_90a build
inline bool has_block_scaled_mma(int cc) { return cc >= 120 && cc < 130; }  // mma.sync kind::mxf8f6f4 (sm_120a)

// wgmma kernels can run here: a compute capability 9.0 device and this binary built with the sm_90a target
// (cmake/cuda.cmake defines FLASHSEEK_SM90A_BUILD; a plain sm_90 build has no wgmma code).
inline bool wgmma_usable() {
#if defined(FLASHSEEK_SM90A_BUILD)
    return has_wgmma(current_arch().cc);
#else
    return false;
#endif
}

}  // namespace flashseek::cuda

// Device-side architecture guards (only meaningful inside __device__ code).
#if defined(__CUDA_ARCH__)
#define FS_ARCH_AT_LEAST(x) (__CUDA_ARCH__ >= (x))
#else
#define FS_ARCH_AT_LEAST(x) 0
#endif
