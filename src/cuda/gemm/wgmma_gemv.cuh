// wgmma_gemv, a decode variant of the linear catalogue: FP8 block-scaled weights on sm_90a warpgroup tensor cores
// (release numerics, 1-16 tokens; preferred from KernelPolicy::wgmma_gemv_min_tokens tokens on >= 4 MB of
// weights). See wgmma_gemv.cu; its catalogue functions are declared in linear_catalogue.h. Internal to
// src/cuda/gemm.
#pragma once
