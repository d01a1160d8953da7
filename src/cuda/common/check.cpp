// Host side of cuda/common/check.cuh: turns CUDA failures and failed argument checks into flashseek::Error
// (compiled by the C++ compiler, where fmt works).
#include "cuda/common/check.cuh"

#include "util/error.h"

namespace flashseek::cuda {

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
    fail("CUDA error {} ({}) in `{}` at {}:{}", cudaGetErrorName(err), cudaGetErrorString(err), what, file, line);
}

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace flashseek::cuda
