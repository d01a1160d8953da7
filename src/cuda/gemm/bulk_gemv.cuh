// bulk_gemv, a decode variant of the linear catalogue: FP8 block-scaled weights streamed by bulk copies into
// mma.sync e4m3 (sm_90+, release numerics, 1-16 tokens; preferred for 2-16 tokens on >= 16 MB of weights). See
// bulk_gemv.cu; its catalogue functions are declared in linear_catalogue.h. Internal to src/cuda/gemm.
#pragma once
