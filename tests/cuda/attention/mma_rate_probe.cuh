// The bf16 tensor-core rate this GPU reaches with mma.sync m16n8k16 (fp32 accumulate), measured by a kernel that
// does nothing else: the ceiling the prefill benchmark divides by (beside the datasheet's dense bf16 rate), so a
// kernel's fraction is of the instruction it is built from, on the GPU and clocks of the same run.
#pragma once

namespace flashseek::cuda::test {

// TFLOP/s of back-to-back independent mma.sync m16n8k16 bf16 on every SM (8 warps per CTA, 4 CTAs per SM).
double measure_mma_bf16_tflops();

}  // namespace flashseek::cuda::test
