// Host side of common/weight_prefetch.cuh: how much of a weight range the early CTAs of a launch prefetch.
#include "cuda/common/weight_prefetch.cuh"

#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/pdl.cuh"
#include "util/env.h"

namespace flashseek::cuda {

WeightPrefetch plan_weight_prefetch(uint64_t bytes, uint64_t grid_ctas) {
    // Default cap: half the L2, so a prefetched prefix survives next to the previous kernel's working set and the
    // lines the GEMV streams past it.
    static const int64_t cap_mb = env_int("FLASHSEEK_L2_PREFETCH_MB", -1, -1, 1 << 20);
    WeightPrefetch p;
    if (!pdl_enabled() || cap_mb == 0 || bytes == 0 || grid_ctas == 0) return p;
    const ArchInfo& arch = current_arch();
    const uint64_t cap = cap_mb < 0 ? uint64_t(arch.l2_bytes) / 2 : uint64_t(cap_mb) << 20;
    p.max_bytes = std::min(bytes, cap);
    // Two CTAs per SM issue the slices: about the number resident next to a small previous kernel.
    p.ctas = uint32_t(std::min<uint64_t>(grid_ctas, uint64_t(2) * uint64_t(arch.sm_count)));
    return p;
}

}  // namespace flashseek::cuda
