// The compute-bound GEMMs of dense_gemm.cuh as linear catalogue variants (linear_catalogue.h), and the FP8_ROWS
// activation format they take (prepare_activation_rows, linear.cuh):
//   fp8_gemm      sm_90a: the wgmma FP8 block-scaled GEMM (gemm_sm90.cu), FP8 weights, FP8_ROWS input, release
//                 numerics, any group count the GEMM takes (wo_a: 8);
//   fp8_gemm_mma  the same product on mma.sync (gemm_mma.cu): e4m3 where the device has it (sm_89+), else widened to
//                 f16 (sm_80); where wgmma is not (or fp8_gemm is disabled);
//   bf16_gemm     BF16 weights (compressors, router, head, indexer weights_proj; wo_a widened to bf16 in prefill
//                 passes and large decode passes, grouped: one GEMM over all groups on sm_90a, one per group on
//                 mma.sync): wgmma on sm_90a, else mma.sync bf16; its input is the MMA_F16
//                 format of BF16 weights, natural bf16 rows with unit scales (row stride k_pad elements, a multiple
//                 of 128: the GEMM's lda needs a multiple of 8).
// Preference: from KernelPolicy::gemm_min_tokens rows (default 32); fp8_gemm also at 2-16 rows on wide projections
// over a short K (wq_b; it comes before the GEMVs in the catalogue), the GEMVs elsewhere at 1-16 rows; between,
// tile_gemm. Why a floor at all: the GEMMs tile 64-256 rows x 128 weight rows and never split K (batch invariance),
// so at a few dozen rows the small projections (wq_a, wkv: N <= 1024, 8 column tiles) occupy a few SMs while
// tile_gemm splits K over the whole GPU. The floor is not measured yet:
// the op harness's perf tables "linear" (16-256 rows) and "linear prefill" (test_cuda_linear --perf) compare the
// variants on the V4-Flash shapes.
// Exact numerics keep tile_gemm for FP8 weights (the GEMMs quantize activations as act_quant does).
#include <string>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/gemm/dense_gemm.cuh"
#include "cuda/gemm/linear_catalogue.h"

namespace flashseek::cuda {
namespace {

alignas(16) unsigned char output_placeholder[16];  // supports() asks eligibility before the output is known

// The FP8 GEMM's arguments for a call; LinearCall's groups are the GEMM's groups (x = [M, G * Kg], W = [G * R, Kg]).
Fp8GemmArgs fp8_args(const LinearCall& c, void* d, OutKind kind, int64_t ldd) {
    Fp8GemmArgs a;
    a.a = c.x.fp8;
    a.w = static_cast<const uint8_t*>(c.w.weight);
    a.w_scales = c.w.scale;
    a.w_scale_kind = c.w.scale_kind;
    a.n = c.w.out;
    a.d = d;
    a.d_kind = kind;
    a.ldd = ldd;
    a.groups = c.groups;
    return a;
}

bool fp8_call_fits(const LinearCall& c, GemmPath path) {
    const PreparedActivation& x = c.x;
    if (x.format != ActFormat::FP8_ROWS || x.raw || x.numerics != ActNumerics::FP8_BLOCK128) return false;
    if (c.w.kind != WeightKind::FP8_BLOCK128 || x.layout != WeightKind::FP8_BLOCK128) return false;
    if (x.fp8.m != x.m || x.fp8.k != x.k || x.k != c.w.in * c.groups) return false;
    return fp8_gemm_eligible(fp8_args(c, output_placeholder, OutKind::F32, c.w.out), path);
}

LinearPlan gemm_plan(const char* name, const GemmPlan& g) {
    LinearPlan p;
    p.variant = name;
    p.tokens_per_pass = g.block_m;
    p.k_splits = g.k_splits;
    return p;
}

// mma.sync's FP8 form on this device: e4m3 where it exists, else e4m3 widened exactly to f16.
GemmPath mma_fp8_path() { return has_fp8_mma(current_arch().cc) ? GemmPath::MMA_NATIVE : GemmPath::MMA_F16; }

// Group g of a bf16 call (groups = 1: the whole product): x's columns [g * Kg, (g + 1) * Kg) against weight rows
// [g * R, (g + 1) * R) into output columns [g * R, (g + 1) * R), with Kg = w.in and R = w.out / groups.
Bf16GemmArgs bf16_group_args(const LinearCall& c, int g, void* d, OutKind kind, int64_t ldd) {
    const int64_t R = c.w.out / c.groups, Kg = c.w.in;
    Bf16GemmArgs a;
    a.a = c.x.values + g * Kg;
    a.lda = c.x.k_pad;
    a.m = c.x.m;
    a.k = Kg;
    a.w = static_cast<const uint16_t*>(c.w.weight) + size_t(g) * size_t(R) * size_t(Kg);
    a.n = R;
    a.d = d == output_placeholder ? d
          : static_cast<void*>(static_cast<char*>(d) + size_t(g) * size_t(R) * (kind == OutKind::F32 ? 4 : 2));
    a.d_kind = kind;
    a.ldd = ldd;
    a.weights_in_stream = c.w.written_in_stream;
    return a;
}

// The whole grouped bf16 call as one GEMM (Bf16GemmArgs::groups, the wgmma path): x's k_pad-strided rows of
// groups x Kg columns against all w.out rows into output columns [0, w.out).
Bf16GemmArgs bf16_grouped_args(const LinearCall& c, void* d, OutKind kind, int64_t ldd) {
    Bf16GemmArgs a = bf16_group_args(c, 0, d, kind, ldd);
    a.k = c.w.in * c.groups;
    a.n = c.w.out;
    a.groups = c.groups;
    return a;
}

// Whether a grouped call runs as one launch: on the wgmma path (the mma.sync kernel takes one group), where the
// shapes allow it. One launch per group filled few SMs at short prompts: wo_a's eight launches of 2 x 8 tiles took
// ~193 us per call at 256 and 1,024 tokens alike (run 216 of docs/perf-log/2026-12-05_expert-weight-boxes.md).
bool bf16_one_launch(const LinearCall& c) {
    return c.groups > 1 && bf16_gemm_eligible(bf16_grouped_args(c, output_placeholder, OutKind::F32, c.w.out),
                                              GemmPath::WGMMA);
}

}  // namespace

void prepare_activation_rows(const uint16_t* x, int64_t M, int64_t K, int64_t ld_x, ActNumerics numerics,
                             PreparedActivation& out, cudaStream_t stream) {
    FS_REQUIRE(numerics == ActNumerics::FP8_BLOCK128,
               "prepare_activation_rows: the FP8_ROWS format is act_quant (release numerics); exact numerics take "
               "prepare_activation");
    FS_REQUIRE(x != nullptr && M > 0 && K > 0 && ld_x >= K, "prepare_activation_rows: bad input [", M, ", ", K,
               "] with row stride ", ld_x);
    FS_REQUIRE(out.values && out.scales && aligned16(out.values) && aligned16(out.scales),
               "prepare_activation_rows: output storage null or not 16-byte aligned");
    describe_fp8_rows(out, M, K);
    quantize_fp8_activation(x, M, ld_x, nullptr, out.fp8, stream);
}

namespace fp8_gemm {
// Below the floor (decode passes of 2-16 rows): projections of many output columns over a short K stream faster
// through the GEMM's TMA pipeline than through any GEMV (H200, linear perf table: wq_b, 32,768 x 1,024, 11.6-11.9 us
// against 19.1-22.9; the indexer's wq_b, 8,192 x 1,024, 4.6 against 9.7-11.9; the shared expert's w2, 4,096 x
// 2,048, 7.0 against 9.2-11.3, run 201 of docs/perf-log/2026-12-04_split-k-fp8-gemm.md; the step at 2 / 8 / 16
// sequences 2-3% shorter with wq_b's, run 196 of the BF16 GEMV log). Long-K or narrow projections do not (wo_b, 32
// column tiles of K = 8,192, 20.4 us against 19-23, takes fp8_gemm_splitk; wq_a, wkv: ~11 us of fixed cost against
// 8-10). One row keeps the SIMT GEMV: with the GEMM there the one-sequence step was 0.12 ms longer although wq_b
// itself was 4.8 us faster per layer (docs/perf-log/2026-12-04_bf16-gemv.md, run 195).
constexpr int64_t kWideMinCols = 4096, kWideMaxK = 2048;
bool supports(const LinearCall& c) { return fp8_call_fits(c, GemmPath::WGMMA); }
bool preferred(const LinearCall& c, const KernelPolicy& policy) {
    const bool wide_short = c.w.out / c.groups >= kWideMinCols && c.w.in <= kWideMaxK;
    return c.x.m >= policy.gemm_min_tokens || (wide_short && c.x.m >= 2);
}
LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    return gemm_plan("fp8_gemm", plan_fp8_gemm(fp8_args(c, output_placeholder, OutKind::F32, c.w.out),
                                               GemmPath::WGMMA));
}
void run(const LinearCall& c, const LinearPlan&, const KernelPolicy& policy, const LinearOut& out,
         cudaStream_t stream) {
    Fp8GemmArgs a = fp8_args(c, out.y, out.kind, out.ld);
    a.tma_store = !policy.is_disabled("gemm_tma_store");
    cuda::gemm_fp8(a, GemmPath::WGMMA, stream);
}
}  // namespace fp8_gemm

namespace fp8_gemm_splitk {
// Decode passes (2-16 rows) of large FP8 projections whose output tiles fill at most half the SMs (wo_b: 32 tiles
// of 128 columns over K = 8,192): the same GEMM with K split so that tiles x splits fill one wave of the SMs
// (fp8_gemm_k_splits), each CTA streaming its range through the TMA pipeline and the tile's last CTA summing the
// partials. H200, linear perf table (run 201 of docs/perf-log/2026-12-04_split-k-fp8-gemm.md): wo_b 14.7-15.9 us
// at 2-16 rows against 19.2-23.5 on wgmma_gemv. Not on the small ones (wq_a 4.2 MB, wkv 2.1 MB, shared w2 8.4 MB:
// 9-20 us against 4-11): the fixed cost of a GEMM call and of the partials' sum outweighs their streaming time, so
// the preference starts at kMinBytes. Not a compute-bound variant: prefill passes keep fp8_gemm, whose sums it
// does not reproduce. Without a workspace (shape-only questions, tests) it runs unsplit. One row keeps the SIMT
// GEMV: wo_b split 14.7 us against 19.8, yet the one-sequence step was 0.11 ms longer with it (run 202), the
// whole-GPU kernel effect of docs/perf.md section 2.3.
constexpr int64_t kMinBytes = int64_t(16) << 20;
bool supports(const LinearCall& c) { return c.x.m <= 64 && fp8_call_fits(c, GemmPath::WGMMA); }
bool preferred(const LinearCall& c, const KernelPolicy& policy) {
    return c.x.m >= 2 && c.x.m <= policy.gemv_max_tokens && c.w.out * c.w.in >= kMinBytes &&
           fp8_gemm_k_splits(c.w.out, c.w.in * c.groups, c.groups) > 1;
}
// The planned splits where the workspace holds them for 64 rows (its size, not the row count, decides), else 1.
int splits_for(const LinearCall& c) {
    if (!c.ws || !c.ws->partials || !c.ws->counters) return 1;
    const int splits = fp8_gemm_k_splits(c.w.out, c.w.in * c.groups, c.groups);
    const bool fits = c.ws->partial_bytes >= size_t(splits) * 64 * size_t(c.w.out) * 4 &&
                      c.ws->n_counters >= (c.w.out / c.groups + 127) / 128 * c.groups;
    return fits ? splits : 1;
}
Fp8GemmArgs split_args(const LinearCall& c, void* d, OutKind kind, int64_t ldd, int splits) {
    Fp8GemmArgs a = fp8_args(c, d, kind, ldd);
    a.k_splits = splits;
    a.ws = c.ws;
    return a;
}
LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    return gemm_plan("fp8_gemm_splitk", plan_fp8_gemm(split_args(c, output_placeholder, OutKind::F32, c.w.out,
                                                                 splits_for(c)),
                                                      GemmPath::WGMMA));
}
// The planned splits run (linear() plans, then runs that plan).
void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out, cudaStream_t stream) {
    cuda::gemm_fp8(split_args(c, out.y, out.kind, out.ld, plan.k_splits), GemmPath::WGMMA, stream);
}
}  // namespace fp8_gemm_splitk

namespace fp8_gemm_mma {
bool supports(const LinearCall& c) { return fp8_call_fits(c, mma_fp8_path()); }
bool preferred(const LinearCall& c, const KernelPolicy& policy) { return c.x.m >= policy.gemm_min_tokens; }
LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    return gemm_plan("fp8_gemm_mma", plan_fp8_gemm(fp8_args(c, output_placeholder, OutKind::F32, c.w.out),
                                                   mma_fp8_path()));
}
void run(const LinearCall& c, const LinearPlan&, const KernelPolicy&, const LinearOut& out, cudaStream_t stream) {
    cuda::gemm_fp8(fp8_args(c, out.y, out.kind, out.ld), mma_fp8_path(), stream);
}
}  // namespace fp8_gemm_mma

namespace bf16_gemm {
bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    if (x.format != ActFormat::MMA_F16 || x.raw || x.layout != WeightKind::BF16 || c.w.kind != WeightKind::BF16)
        return false;
    if (c.groups < 1 || c.w.out % c.groups != 0 || x.k != c.w.in * c.groups) return false;
    return bf16_gemm_eligible(bf16_group_args(c, 0, output_placeholder, OutKind::F32, c.w.out), GemmPath::AUTO);
}
bool preferred(const LinearCall& c, const KernelPolicy& policy) { return c.x.m >= policy.gemm_min_tokens; }
LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    if (bf16_one_launch(c))
        return gemm_plan("bf16_gemm", plan_bf16_gemm(bf16_grouped_args(c, output_placeholder, OutKind::F32, c.w.out),
                                                     GemmPath::WGMMA));
    return gemm_plan("bf16_gemm", plan_bf16_gemm(bf16_group_args(c, 0, output_placeholder, OutKind::F32, c.w.out)));
}
// A grouped linear (wo_a widened to bf16 in prefill passes) runs as one GEMM over all groups on the wgmma path,
// else as one GEMM per group over its column slices; the kernel computes an element in the same order either way
// (its K walk does not depend on the tile shape).
void run(const LinearCall& c, const LinearPlan&, const KernelPolicy& policy, const LinearOut& out,
         cudaStream_t stream) {
    const bool tma_store = !policy.is_disabled("gemm_tma_store");
    if (bf16_one_launch(c)) {
        Bf16GemmArgs a = bf16_grouped_args(c, out.y, out.kind, out.ld);
        a.tma_store = tma_store;
        cuda::gemm_bf16(a, GemmPath::WGMMA, stream);
        return;
    }
    for (int g = 0; g < c.groups; ++g) {
        Bf16GemmArgs a = bf16_group_args(c, g, out.y, out.kind, out.ld);
        a.tma_store = tma_store;
        cuda::gemm_bf16(a, GemmPath::AUTO, stream);
    }
}

namespace {
// Group g with the act_quant rows of the bf16 output as its destination (columns g * R ..).
Bf16GemmArgs rows_group_args(const LinearCall& c, int g, const Fp8Activation& y) {
    Bf16GemmArgs a = bf16_group_args(c, g, output_placeholder, OutKind::BF16, c.w.out);
    a.d = nullptr;
    a.d_rows = y;
    a.rows_col0 = int64_t(g) * (c.w.out / c.groups);
    return a;
}
}  // namespace

bool supports_fp8_rows_out(const LinearCall& c, const Fp8Activation& y) {
    if (!supports(c) || y.m < c.x.m || y.k != c.w.out) return false;
    for (int g = 0; g < c.groups; ++g)
        if (!bf16_gemm_eligible(rows_group_args(c, g, y), GemmPath::WGMMA)) return false;
    return true;
}

void run_fp8_rows_out(const LinearCall& c, const Fp8Activation& y, cudaStream_t stream) {
    if (bf16_one_launch(c)) {
        Bf16GemmArgs a = bf16_grouped_args(c, output_placeholder, OutKind::BF16, c.w.out);
        a.d = nullptr;
        a.d_rows = y;
        a.rows_col0 = 0;
        if (bf16_gemm_eligible(a, GemmPath::WGMMA)) {
            cuda::gemm_bf16(a, GemmPath::WGMMA, stream);
            return;
        }
    }
    for (int g = 0; g < c.groups; ++g) cuda::gemm_bf16(rows_group_args(c, g, y), GemmPath::WGMMA, stream);
}
}  // namespace bf16_gemm

}  // namespace flashseek::cuda
