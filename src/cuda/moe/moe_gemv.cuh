// gemv_experts, the small-M (decode) variant of the expert catalogue: bandwidth-bound f16 mma.sync GEMV kernels over
// each active expert's weights (1-16 tokens, hidden and inter multiples of 128), which also take raw inputs. The
// up-projection leaves h as natural-order bf16 rows that quantize_h turns into w2's prepared layout. See
// moe_gemv.cu for the design; its catalogue functions are declared in moe_catalogue.h. Internal to src/cuda/moe.
#pragma once
#include <cuda_runtime.h>

#include "cuda/moe/moe.cuh"

namespace flashseek::cuda::gemv_experts {

// h (natural-order bf16 rows written by an up-projection, fields set) -> prepared layout of w2 in place.
void quantize_h(PreparedActivation& h, const ExpertTable& t, const MoeGrouping* grouping, ActNumerics h_numerics,
                cudaStream_t stream);

}  // namespace flashseek::cuda::gemv_experts
