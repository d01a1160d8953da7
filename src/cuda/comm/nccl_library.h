// NCCL, loaded at run time: flashseek builds without NCCL's headers or library and needs them only when a
// NcclCommunicator is made. The few entry points it uses are declared here with NCCL's stable C ABI (an opaque
// communicator pointer, int-sized enums, the values below); nccl_api() finds libnccl.so.2, checks its version and
// resolves them, once per process.
//
// Where it looks, in order: the file FLASHSEEK_NCCL_LIBRARY names (only there, when set); the dynamic loader's own
// search (LD_LIBRARY_PATH, the loader cache); the CUDA toolkit ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda: lib64 / lib /
// targets/*/lib); the system library folders; and the PyPI wheel nvidia-nccl-cu13 / -cu12 (nvidia/nccl/lib) in the
// site-packages of $VIRTUAL_ENV, $CONDA_PREFIX, $PYTHONPATH, ~/.local, /usr/local, /usr and /opt/conda. The error
// lists every place.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace flashseek::cuda {

struct NcclComm;  // NCCL's ncclComm (opaque)
using NcclCommHandle = NcclComm*;

inline constexpr int kNcclSuccess = 0;
inline constexpr int kNcclFloat32 = 7;  // ncclDataType_t ncclFloat32
inline constexpr int kNcclSum = 0;      // ncclRedOp_t ncclSum
inline constexpr int kNcclSplitNoColor = -1;
// ncclCommSplit and ncclCommFinalize exist from NCCL 2.18; older versions are refused.
inline constexpr int kNcclMinVersion = 21800;

struct NcclApi {
    std::string path;  // the file loaded
    int version = 0;   // major * 10000 + minor * 100 + patch
    int (*get_version)(int*) = nullptr;
    const char* (*get_error_string)(int) = nullptr;
    const char* (*get_last_error)(NcclCommHandle) = nullptr;
    int (*comm_init_all)(NcclCommHandle*, int, const int*) = nullptr;
    int (*comm_split)(NcclCommHandle, int color, int key, NcclCommHandle*, void* config) = nullptr;
    int (*comm_finalize)(NcclCommHandle) = nullptr;
    int (*comm_destroy)(NcclCommHandle) = nullptr;
    int (*group_start)() = nullptr;
    int (*group_end)() = nullptr;
    int (*all_reduce)(const void* send, void* recv, size_t count, int dtype, int op, NcclCommHandle,
                      cudaStream_t) = nullptr;
    int (*send)(const void* buf, size_t count, int dtype, int peer, NcclCommHandle, cudaStream_t) = nullptr;
    int (*recv)(void* buf, size_t count, int dtype, int peer, NcclCommHandle, cudaStream_t) = nullptr;
};

// Loads NCCL on first use; throws Error listing where it looked (or the missing entry point / old version).
const NcclApi& nccl_api();

}  // namespace flashseek::cuda
