// Decode GEMV for BF16 weights (the router, the compressors' wkv / wgate, the indexer's weights_proj, the head) at
// 1-16 tokens. Why: these linears ran on tile_gemm, whose CTAs stage the
// activation behind barriers and compute 8-32-token tiles, a cost that grows with the tokens: on the H200 the
// router's 2.1 MB took 5.3 us at one token and 11.0 us at 16 (0.5 us at the copy rate), the compressors' 8.4 MB
// 7.2 / 16.6 us, the head (1.06 GB) 84% / 64% of the copy rate; this kernel takes 4.1 / 4.4 us, 6.2 / 6.8 us and
// 92% / 95% (docs/perf.md, kernel choice).
// Design:
//   - bf16 operands need no widening, so a lane's 16-byte weight loads are mma.sync m16n8k16 A fragments as they
//     arrive. Lane 4g + t loads columns [8t, 8t + 8) of a 32-column chunk of rows g and g + 8; mma j (0, 1) takes the
//     lane's 32-bit words 2j and 2j + 1 as the fragment's k-columns (2t, 2t + 1) and (2t + 8, 2t + 9). The dot
//     product does not depend on the order of k, so the B fragment (token g, the same k-columns) is the same 16 bytes
//     of that token's activation row: no shared memory and no permuted activation layout.
//   - CTA = 4 warps on one 16-row tile, each a quarter of the CTA's K range, summed in shared memory in warp order;
//     grid = (row tiles, K splits), the splits chosen so that a warp's weight loads (4 chunks, 4 KB) are in flight
//     at once on the small matrices (the router: 8 splits x 16 row tiles, one DRAM round trip per warp). The first
//     loads are issued before pdl_wait, since weights are constant during a pass; the activation is read through
//     L1 (ld.global.nc), the weights bypass it (ld.global.nc.L1::no_allocate).
//   - Split-K partials are summed in split order by the last CTA of a row tile (stream_gemv's plan and sum:
//     deterministic). The split depends on the weight's shape and the workspace, never on the token count, so a
//     token's result is the same at every count from 1 to 16.
// Numerics: exact bf16 products summed in fp32 by the tensor core per 16 columns, then in fp32: bf16_gemm's and
// tile_gemm's up to summation order. mma.sync bf16 runs on every target (sm_80 and later).
// The kernel is in bf16_gemv_kernel.cuh, a template over a tail run by the CTA that completes the output last (here
// none; the router's routing in moe/moe_route.cu).
// Variant bf16_gemv of the linear catalogue (linear_catalogue.h).
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/bf16_gemv_kernel.cuh"
#include "cuda/gemm/stream_gemv.cuh"

namespace flashseek::cuda::bf16_gemv {
namespace {

int64_t cta_slots() { return int64_t(current_arch().sm_count) * kCtasPerSm; }

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (w.kind != WeightKind::BF16 || x.layout != WeightKind::BF16 || x.raw || c.groups != 1) return false;
    if (x.m < 1 || x.m > kGemvMaxTokens) return false;
    return w.out % kRows == 0 && w.in % kChunkCols == 0 && x.k_pad % 8 == 0 && aligned16(w.weight) &&
           aligned16(x.values);
}

// Measured faster than tile_gemm on every BF16 linear of V4-Flash at 1-16 tokens (docs/perf.md, kernel choice).
bool preferred(const LinearCall& c, const KernelPolicy& policy) { return c.x.m <= policy.gemv_max_tokens; }

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    // About two CTAs per CTA slot, >= one load group (kUnroll chunks) per warp and split: a split of 16 chunks (512
    // columns) is one DRAM round trip per warp. Partials sized for 16 tokens whatever M is, so that M never changes
    // the split.
    LinearPlan p;
    p.variant = "bf16_gemv";
    p.tokens_per_pass = int(c.x.m);
    p.k_splits = stream_gemv::plan_splits(c.w.out / kRows, c.w.in / kChunkCols, cta_slots(), 2 * kWarps * kUnroll,
                                          kWarps * kUnroll, kGemvMaxTokens, c.w.out, c.ws);
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out,
         cudaStream_t stream) {
    auto kernel = c.x.m > 8 ? bf16_gemv_kernel<2, NoTail> : bf16_gemv_kernel<1, NoTail>;
    launch_pdl("bf16_gemv_kernel", kernel, launch_grid(c.w, plan.k_splits), dim3(kThreads), 0, stream,
               launch_args(c, plan.k_splits, out), NoTail{});
}

}  // namespace flashseek::cuda::bf16_gemv
