// CK(call): the standalone device probes' CUDA error check (prints the call, line and error, exits 1).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_));                \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
