// The variants of sparse attention (cuda/attention/sparse_attention.cuh) as the op harness iterates them: the
// attention dispatch has no catalogue table of its own yet, so the two names it chooses between (KernelPolicy
// names, cuda::known_variants()) are listed here with their architectures. A new attention variant is one more row.
#pragma once
#include <string_view>

namespace flashseek::cuda::test {

struct AttentionVariant {
    std::string_view name;
    std::string_view archs;
};

// attn_mma: mma.sync m16n8k16 bf16, 16 heads per CTA (head_dim % 64 == 0 and <= 512, q 16-byte aligned);
// attn_simt: SIMT fp32, any head_dim.
inline constexpr AttentionVariant kAttentionVariants[] = {{"attn_mma", "sm_80+"}, {"attn_simt", "sm_80+"}};

}  // namespace flashseek::cuda::test
