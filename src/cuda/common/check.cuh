// Error checking for CUDA runtime calls, kernel launches and host-side argument checks, shared by every CUDA file.
// A failure throws flashseek::Error naming the call (or kernel / argument), the file and the line.
// fmt (util/error.h) does not compile under nvcc (consteval format strings), so .cu files use these macros and the
// throwing happens in check.cpp; messages are built with fs_cat (stream concatenation).
#pragma once
#include <cuda_runtime.h>

#include <sstream>
#include <string>

namespace flashseek::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);
[[noreturn]] void throw_error(const std::string& message);  // throws flashseek::Error(message)

template <typename... Args>
std::string fs_cat(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

}  // namespace flashseek::cuda

// CUDA_CHECK(cudaMemcpy(...)): throws when the runtime call does not return cudaSuccess.
#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        const cudaError_t fs_check_err_ = (call);                                                 \
        if (fs_check_err_ != cudaSuccess)                                                         \
            ::flashseek::cuda::throw_cuda_error(fs_check_err_, #call, __FILE__, __LINE__);        \
    } while (0)

// CUDA_CHECK_LAUNCH("kernel name"): call right after a <<<>>> launch; configuration errors (bad grid, too much
// shared memory) surface here instead of at a later synchronization. Does not synchronize.
#define CUDA_CHECK_LAUNCH(what)                                                                   \
    do {                                                                                          \
        const cudaError_t fs_check_err_ = cudaPeekAtLastError();                                  \
        if (fs_check_err_ != cudaSuccess)                                                         \
            ::flashseek::cuda::throw_cuda_error(fs_check_err_, what, __FILE__, __LINE__);         \
    } while (0)

// FS_REQUIRE(cond, "gemm: k (", k, ") must be ..."): argument check with a streamed message; throws Error.
#define FS_REQUIRE(cond, ...)                                                                     \
    do {                                                                                          \
        if (!(cond)) ::flashseek::cuda::throw_error(::flashseek::cuda::fs_cat(__VA_ARGS__));      \
    } while (0)
