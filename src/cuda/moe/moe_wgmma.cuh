// wgmma_experts, a decode variant of the expert catalogue: the routed FP4 experts on sm_90a warpgroup tensor cores
// (release numerics, any token count the grouping's tiles hold; preferred from KernelPolicy::moe_wgmma_min_tokens
// to moe_wgmma_max_tokens). See moe_wgmma.cu; its
// catalogue functions are declared in moe_catalogue.h. The activation rows are packed into the grouping's tiles
// first; up writes natural-order bf16 h rows by slot, then quantizes them in place to w2's prepared layout and packs
// them into the tiles for down at once (quantize_h_tiles_kernel). Internal to src/cuda/moe.
#pragma once

namespace flashseek::cuda::wgmma_experts {

// Split-item scratch (MoeGrouping::split_partials): per CTA boundary both halves' per-thread sums (2 x 128 x 16
// floats), for up to max_ctas() CTAs.
inline constexpr int kSplitFloatsPerSlot = 2 * 128 * 16;
int max_ctas();

}  // namespace flashseek::cuda::wgmma_experts
