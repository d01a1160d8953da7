// L2 prefetch of the routed experts' down-projection weights (w2 and its scales) at decode with few tokens.
// Why: at one token the routed up- and down-projections are latency-bound GEMVs at ~25% of the copy bandwidth
// (docs/perf.md), so DRAM idles while the up-projection runs. Once the routing is known, this kernel (on a side
// stream, beside the up-projection) pulls the selected experts' w2 into L2, so that the down-projection reads it
// from there. One thread per 128-byte line, prefetch instructions only (nothing waits on them). mode 1: plain
// prefetch; mode 2: L2::evict_last, so that the up-projection's stream of w1 / w3 does not push the lines out first.
#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/moe/moe.cuh"

namespace flashseek::cuda {
namespace {

__global__ void prefetch_down_kernel(const void* const* w, const void* const* s, int64_t w_bytes, int64_t s_bytes,
                                     const int32_t* active, const int32_t* n_active, int max_experts, int mode) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract); the grouping comes from the routing kernel
    pdl_trigger();
    const int pos = int(blockIdx.y);
    if (pos >= min(*n_active, max_experts)) return;
    const int e = active[pos];
    const char* wp = static_cast<const char*>(w[e]);
    const char* sp = static_cast<const char*>(s[e]);
    const int64_t w_lines = (w_bytes + 127) / 128, lines = w_lines + (s_bytes + 127) / 128;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < lines; i += int64_t(gridDim.x) * blockDim.x) {
        const char* a = i < w_lines ? wp + i * 128 : sp + (i - w_lines) * 128;
        if (mode == 2)
            asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(a));
        else
            asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    }
}

}  // namespace

void moe_prefetch_down(const ExpertTable& t, const MoeGrouping& g, int max_experts, int mode, cudaStream_t stream) {
    FS_REQUIRE(mode == 1 || mode == 2, "moe_prefetch_down: mode must be 1 or 2, got ", mode);
    FS_REQUIRE(max_experts >= 1 && max_experts <= g.E, "moe_prefetch_down: max_experts ", max_experts, " out of range");
    const int64_t row_bytes = t.kind == WeightKind::FP4_BLOCK32 ? t.inter / 2 : t.inter;
    const int64_t w_bytes = t.hidden * row_bytes;
    const int64_t s_elem = t.scale_kind == ScaleKind::F32 ? 4 : 1;
    const int64_t s_bytes = s_elem * (t.kind == WeightKind::FP4_BLOCK32 ? t.hidden * ((t.inter + 31) / 32)
                                                                        : ((t.hidden + 127) / 128) * ((t.inter + 127) / 128));
    const int64_t lines = (w_bytes + 127) / 128;
    const unsigned ctas = unsigned(std::min<int64_t>(64, (lines + 1023) / 1024));
    launch_pdl("moe prefetch_down_kernel", prefetch_down_kernel, dim3(ctas, unsigned(max_experts)), dim3(256), 0, stream,
               t.w2, t.w2_scale, w_bytes, s_bytes, g.active, g.n_active, max_experts, mode);
}

}  // namespace flashseek::cuda
