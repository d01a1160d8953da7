// The linear catalogue (linear_catalogue.h) and the linear entry points of linear.cuh that go through it:
// argument checks, the variant table in priority order, the choice, and plan-then-run.
#include "cuda/gemm/linear_catalogue.h"

#include <array>

#include "cuda/common/check.cuh"
#include "cuda/gemm/gemv.cuh"
#include "cuda/gemm/linear_generic.cuh"

namespace flashseek::cuda {

// generic_linear: the element-wise fallback (linear_generic.cu) for grouped shapes whose groups do not start on a
// 128-column block or split a 64-row CTA (tiny test configs; every DeepSeek-V4 shape takes the tensor cores).
namespace generic_linear {
bool supports(const LinearCall& c) {
    return c.groups > 1 && !c.x.raw && (c.w.in % 128 != 0 || (c.w.out / c.groups) % 64 != 0);
}
bool preferred(const LinearCall&, const KernelPolicy&) { return true; }
LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    LinearPlan p;
    p.variant = "generic_linear";
    p.tokens_per_pass = int(c.x.m);
    return p;
}
void run(const LinearCall& c, const LinearPlan&, const KernelPolicy&, const LinearOut& out, cudaStream_t stream) {
    generic::linear(c.x, c.w, c.x.m, c.w.out / c.groups, c.w.in, out.y, out.kind, out.ld, stream);
}
}  // namespace generic_linear

namespace {

// Storage of the activations and weights that shape-only questions are asked about: supports() looks at pointers
// only for null and alignment, never through them.
alignas(256) unsigned char placeholder_storage[256];

// A [M, K] activation in format f (raw: raw bf16 rows, MMA_F16 only) for weights of `layout`, over the placeholder.
PreparedActivation shaped_activation(ActFormat f, int64_t M, int64_t K, WeightKind layout, ActNumerics numerics,
                                     bool raw) {
    PreparedActivation x;
    uint16_t* values = reinterpret_cast<uint16_t*>(placeholder_storage);
    float* scales = reinterpret_cast<float*>(placeholder_storage);
    describe_prepared(x, layout, numerics, M, K);
    x.values = values;
    x.scales = scales;
    if (raw) {
        x.raw = true;
        x.scales = nullptr;
        x.raw_ld = (K + 7) / 8 * 8;
    } else if (f == ActFormat::FP8_ROWS) {
        x.format = ActFormat::FP8_ROWS;
        x.fp8 = fp8_activation_view(values, scales, M, K);
    }
    return x;
}

// `w` with its pointers replaced by the placeholder (shape-only questions).
DeviceLinear shaped_weight(const DeviceLinear& w) {
    DeviceLinear s = w;
    s.weight = placeholder_storage;
    s.scale = w.kind == WeightKind::BF16 ? nullptr : placeholder_storage;
    return s;
}

// Whether a variant taking format f can be asked about this shape at all (FP8_ROWS: prepared, release, FP8).
bool format_fits(ActFormat f, const DeviceLinear& w, ActNumerics numerics, bool raw) {
    if (raw && w.kind == WeightKind::BF16) return false;  // raw activations exist for FP8 / FP4 weights only
    if (f == ActFormat::FP8_ROWS)
        return !raw && numerics == ActNumerics::FP8_BLOCK128 && w.kind == WeightKind::FP8_BLOCK128;
    return true;
}

// The catalogue's supports(): the format, then the variant's own checks.
template <bool (*Supports)(const LinearCall&), ActFormat F>
bool supports_in(const LinearCall& c) {
    return c.x.format == F && Supports(c);
}

// supports() asked from shapes alone, on an activation of that shape over well-aligned storage.
template <bool (*Supports)(const LinearCall&), ActFormat F>
bool supports_shape_of(int64_t M, const DeviceLinear& w, int groups, ActNumerics numerics, bool raw) {
    if (M <= 0 || groups < 1 || w.in <= 0 || w.out <= 0 || !format_fits(F, w, numerics, raw)) return false;
    const PreparedActivation x = shaped_activation(F, M, w.in * groups, w.kind, numerics, raw);
    const DeviceLinear sw = shaped_weight(w);
    return Supports(LinearCall{x, sw, groups, nullptr});
}

// rows_out: the variant's act_quant-rows output (supports, run), or nullptr, nullptr.
#define FS_LINEAR_ROW_WITH(ns, archs, format, rows_supports, rows_run)                                           \
    LinearVariant {                                                                                              \
        #ns, archs, format, &supports_in<&ns::supports, format>, &supports_shape_of<&ns::supports, format>,     \
            &ns::preferred, &ns::plan, &ns::run, rows_supports, rows_run                                         \
    }
#define FS_LINEAR_ROW(ns, archs, format) FS_LINEAR_ROW_WITH(ns, archs, format, nullptr, nullptr)
constexpr ActFormat kMmaF16 = ActFormat::MMA_F16, kFp8Rows = ActFormat::FP8_ROWS;
// Priority order: the first preferred variant that supports a problem runs it (docs/perf.md, kernel choice).
const std::array<LinearVariant, 13> kVariants = {
    FS_LINEAR_ROW(generic_linear, "sm_80+", kMmaF16),  // the only one for odd grouped shapes
    FS_LINEAR_ROW(fp8_gemm, "sm_90a", kFp8Rows),       // FP8, release numerics, from gemm_min_tokens rows (wq_b: 2)
    FS_LINEAR_ROW(fp8_gemm_splitk, "sm_90a", kFp8Rows),  // FP8 at 2-16 rows where the tiles do not fill the SMs
    FS_LINEAR_ROW(wgmma_gemv, "sm_90a", kMmaF16),      // 2-16 tokens, >= 4 MB FP8, release numerics
    FS_LINEAR_ROW(wgmma_f16_gemv, "sm_90a", kMmaF16),  // 2-256 tokens, FP8 weights, exact numerics (wo_a)
    FS_LINEAR_ROW(bulk_gemv, "sm_90+", kMmaF16),       // 2-16 tokens, >= 16 MB FP8, release numerics
    FS_LINEAR_ROW(ring_gemv, "sm_90+", kMmaF16),       // one token, >= 16 MB FP8 in ring_gemv_min_k..max_k (wo_a, wo_b)
    FS_LINEAR_ROW(simt_gemv, "sm_80+", kMmaF16),       // one token
    FS_LINEAR_ROW(mma_gemv, "sm_80+", kMmaF16),        // 1-16 tokens
    FS_LINEAR_ROW(bf16_gemv, "sm_80+", kMmaF16),       // BF16 weights, 1-16 tokens
    FS_LINEAR_ROW(fp8_gemm_mma, "sm_80+", kFp8Rows),   // the FP8 GEMM where wgmma is not
    FS_LINEAR_ROW_WITH(bf16_gemm, "sm_80+", kMmaF16,  // BF16, from gemm_min_tokens rows
                       &bf16_gemm::supports_fp8_rows_out, &bf16_gemm::run_fp8_rows_out),
    FS_LINEAR_ROW(tile_gemm, "sm_80+", kMmaF16),       // any M
};
#undef FS_LINEAR_ROW
#undef FS_LINEAR_ROW_WITH

const char* kind_name(WeightKind k) {
    switch (k) {
        case WeightKind::FP8_BLOCK128: return "FP8_BLOCK128";
        case WeightKind::FP4_BLOCK32: return "FP4_BLOCK32";
        default: return "BF16";
    }
}

void check_linear_args(const PreparedActivation& x, const DeviceLinear& w, int groups) {
    FS_REQUIRE(groups >= 1, "grouped_linear: groups (", groups, ") must be >= 1");
    FS_REQUIRE(w.weight != nullptr, "linear: weight pointer is null");
    FS_REQUIRE(w.out > 0 && w.in > 0, "linear: weight shape [", w.out, ", ", w.in, "] must be positive");
    FS_REQUIRE(x.values && (x.scales || x.raw), "linear: prepared activation has no storage");
    FS_REQUIRE(x.format == ActFormat::MMA_F16 || (x.fp8.codes && x.fp8.scales && x.fp8.m == x.m && x.fp8.k == x.k),
               "linear: FP8_ROWS activation of ", x.m, " x ", x.k, " describes codes of ", x.fp8.m, " x ", x.fp8.k);
    FS_REQUIRE(x.layout == w.kind, "linear: activation prepared for ", kind_name(x.layout), " but weight is ",
               kind_name(w.kind));
    FS_REQUIRE(x.k == w.in * groups, "linear: activation has ", x.k, " columns, weight expects ", w.in * groups);
    FS_REQUIRE(x.m > 0, "linear: no tokens (M = ", x.m, ")");
    if (w.kind == WeightKind::BF16) {
        FS_REQUIRE(w.scale_kind == ScaleKind::NONE, "linear: BF16 weight must have no scale");
    } else {
        FS_REQUIRE(w.scale != nullptr && w.scale_kind != ScaleKind::NONE, "linear: ", kind_name(w.kind),
                   " weight needs a scale tensor");
    }
    if (w.kind == WeightKind::FP4_BLOCK32)
        FS_REQUIRE(w.in % 32 == 0, "linear: FP4 weight in (", w.in, ") must be a multiple of 32 (one scale per 32)");
    if (groups > 1)
        FS_REQUIRE(w.out % groups == 0, "grouped_linear: weight rows ", w.out, " do not split into ", groups, " groups");
}

std::string_view run_linear(const LinearCall& c, const LinearOut& out, cudaStream_t stream,
                            const KernelPolicy& policy) {
    check_linear_args(c.x, c.w, c.groups);
    FS_REQUIRE(out.y != nullptr, "linear: output pointer is null");
    FS_REQUIRE(out.ld >= c.w.out, "linear: output row stride ", out.ld, " < ", c.w.out, " outputs");
    const LinearVariant& v = choose_linear(c, policy);
    const LinearPlan plan = v.plan(c, policy);
    v.run(c, plan, policy, out, stream);
    return v.name;
}

}  // namespace

std::span<const LinearVariant> linear_variants() { return kVariants; }

const LinearVariant& choose_linear(const LinearCall& c, const KernelPolicy& policy) {
    for (const LinearVariant& v : kVariants)
        if (policy.is_forced(v.name) && v.supports(c)) return v;
    for (const LinearVariant& v : kVariants)
        if (!policy.is_disabled(v.name) && v.supports(c) && v.preferred(c, policy)) return v;
    FS_REQUIRE(!c.x.raw, "linear: a raw activation needs the small-M GEMV path (M = ", c.x.m, ")");
    throw_error(fs_cat("linear: no enabled kernel variant supports M = ", c.x.m, " x [", c.w.out, ", ", c.w.in, "] (",
                       kind_name(c.w.kind), ", ", c.groups, " groups, ",
                       c.x.format == ActFormat::FP8_ROWS ? "FP8_ROWS" : "MMA_F16", " activation)"));
}

namespace {

// choose_linear from shapes alone: the first forced variant that supports the shape, else the first enabled and
// preferred one, each asked on an activation of its own format (raw: raw bf16 rows).
const LinearVariant& variant_for_shape(int64_t M, const DeviceLinear& w, int groups, ActNumerics numerics,
                                       const KernelPolicy& policy, bool raw) {
    for (const LinearVariant& v : kVariants)
        if (policy.is_forced(v.name) && v.supports_shape(M, w, groups, numerics, raw)) return v;
    for (const LinearVariant& v : kVariants) {
        if (policy.is_disabled(v.name) || !v.supports_shape(M, w, groups, numerics, raw)) continue;
        const PreparedActivation x = shaped_activation(v.format, M, w.in * groups, w.kind, numerics, raw);
        const DeviceLinear sw = shaped_weight(w);
        if (v.preferred(LinearCall{x, sw, groups, nullptr}, policy)) return v;
    }
    throw_error(fs_cat("linear_input_format: no enabled kernel variant supports M = ", M, " x [", w.out, ", ", w.in,
                       "] (", kind_name(w.kind), ", ", groups, " groups", raw ? ", raw input" : "", ")"));
}

}  // namespace

ActFormat linear_input_format(int64_t M, const DeviceLinear& w, int groups, ActNumerics numerics,
                              const KernelPolicy& policy, bool raw) {
    return variant_for_shape(M, w, groups, numerics, policy, raw).format;
}

std::string_view linear_choice(int64_t M, const DeviceLinear& w, int groups, ActNumerics numerics,
                               const KernelPolicy& policy, bool raw) {
    return variant_for_shape(M, w, groups, numerics, policy, raw).name;
}

const LinearVariant& linear_variant(std::string_view name) {
    for (const LinearVariant& v : kVariants)
        if (v.name == name) return v;
    throw_error(fs_cat("linear: no variant named '", std::string(name), "'"));
}

std::string_view linear(const PreparedActivation& x, const DeviceLinear& w, void* y, OutKind y_kind, int64_t ld_y,
                        const GemmWorkspace* ws, cudaStream_t stream, const KernelPolicy& policy) {
    return run_linear(LinearCall{x, w, 1, ws}, LinearOut{y, y_kind, ld_y}, stream, policy);
}

std::string_view grouped_linear(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y,
                                OutKind y_kind, int64_t ld_y, const GemmWorkspace* ws, cudaStream_t stream,
                                const KernelPolicy& policy) {
    return run_linear(LinearCall{x, w, groups, ws}, LinearOut{y, y_kind, ld_y}, stream, policy);
}

std::string_view grouped_linear_to_fp8_rows(const PreparedActivation& x, const DeviceLinear& w, int groups,
                                            const Fp8Activation& y, const GemmWorkspace* ws, cudaStream_t stream,
                                            const KernelPolicy& policy) {
    check_linear_args(x, w, groups);
    const LinearCall c{x, w, groups, ws};
    const LinearVariant& v = choose_linear(c, policy);
    if (!v.supports_fp8_rows_out || !v.supports_fp8_rows_out(c, y)) return {};
    v.run_fp8_rows_out(c, y, stream);
    return v.name;
}

LinearPlan plan_linear(const PreparedActivation& x, const DeviceLinear& w, int groups, const GemmWorkspace* ws,
                       const KernelPolicy& policy) {
    const LinearCall c{x, w, groups, ws};
    return choose_linear(c, policy).plan(c, policy);
}

PreparedActivation prepare_and_linear(const void* x, bool x_is_f32, int64_t M, int64_t ld_x, const DeviceLinear& w,
                                      ActNumerics numerics, uint16_t* scratch_values, float* scratch_scales,
                                      void* y, OutKind y_kind, int64_t ld_y, const GemmWorkspace* ws,
                                      cudaStream_t stream, const KernelPolicy& policy) {
    PreparedActivation p;
    p.values = scratch_values;
    p.scales = scratch_scales;
    prepare_activation(x, x_is_f32, M, w.in, ld_x, w.kind, numerics, p, stream);
    linear(p, w, y, y_kind, ld_y, ws, stream, policy);
    return p;
}

}  // namespace flashseek::cuda
