// The linear op family (cuda/gemm/linear.cuh) in the op harness: every case of linear_cases() through every variant
// of the linear catalogue that supports it on this GPU (KernelPolicy::only), each from the activation prepared in
// the format it takes (MMA_F16: prepare_activation; FP8_ROWS: prepare_activation_rows, the compute-bound FP8 GEMMs),
// against cpu::dequantize_linear + cpu::act_quant_fp8_block128 + cpu::linear_f32 / cpu::grouped_out_proj, on random
// data with fresh seeds. Per case and variant: the variant refuses the other format; linear_input_format() names its
// format when it is forced; the plan and the run name the variant; outputs are poisoned (NaN) before every run; the
// error is within the variant's threshold (linear_family.cpp); a rerun is bit-identical (split-K reduces
// deterministically); the run without a split-K workspace agrees too; where the variant takes raw activations
// (raw_activation: bf16 rows prepared while staging) the raw run is bit-identical to the prepared one; all variants
// agree with each other. The default policy runs from the format linear_input_format() names, and runs the variant
// plan_linear() predicts. The family's test ends by checking that every variant that exists on this device ran,
// with the properties the case list must reach. Then the default choice rules, the policy's environment variables
// and the named errors for bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include "cpu/ops.h"
#include "cuda/common/arch.cuh"
#include "cuda/gemm/linear_catalogue.h"
#include "cuda/gemm/weight_dequant.cuh"
#include "harness.h"
#include "harness_mode.h"
#include "named_error.h"
#include "scoped_env.h"
#include "linear_family.h"
#include "variant_coverage.h"
#include "weights.h"

namespace flashseek::test {
namespace {

using cuda::ActNumerics;
using cuda::KernelPolicy;
using cuda::OutKind;
using cuda::ScaleKind;
using cuda::WeightKind;

// Poisoned storage of a prepared activation of M x K (either format), attached to `p`.
struct PreparedStorage {
    DeviceArray<uint16_t> values;
    DeviceArray<float> scales;
    PreparedStorage(int64_t M, int64_t K, cuda::PreparedActivation& p)
        : values(cuda::prepared_values_bytes(M, K) / 2), scales(cuda::prepared_scales_bytes(M, K) / 4) {
        values.poison();
        scales.poison();
        p.values = values.ptr;
        p.scales = scales.ptr;
    }
};

// The case's data on the host and the device: the weight, the activation (as the op reads it: bf16 rows with a row
// stride wider than K, fp32 rows, and bf16 rows with a stride that is a multiple of 8 for the raw path), the
// activation prepared in each format a variant may take (ActFormat: MMA_F16 always; FP8_ROWS for FP8 weights in
// release numerics from bf16 rows) and the CPU reference output.
struct LinearProblem {
    TestWeight w;
    std::vector<float> ref;  // [M, N]
    std::unique_ptr<DeviceArray<uint16_t>> x_bf16, x_raw;
    std::unique_ptr<DeviceArray<float>> x_f32;
    cuda::PreparedActivation prepared, rows, raw;
    std::unique_ptr<PreparedStorage> prepared_storage, rows_storage;
    bool has_rows = false, has_raw = false;

    // The activation in format f, or null where this case cannot give that format.
    const cuda::PreparedActivation* input(cuda::ActFormat f) const {
        if (f == cuda::ActFormat::FP8_ROWS) return has_rows ? &rows : nullptr;
        return &prepared;
    }

    LinearProblem(const LinearCase& c, std::mt19937_64& rng) : w(make_weight(rng, c.kind, c.scale, c.N, c.K)) {
        const int64_t Kx = c.x_width();
        // N(0, 1) with a quarter of the values scaled by 1e-3: 128-blocks of uneven magnitude (act_quant scales).
        std::normal_distribution<float> d(0.f, 1.f);
        std::vector<float> x(size_t(c.M * Kx));
        for (auto& v : x) {
            const float f = d(rng) * (rng() % 4 == 0 ? 1e-3f : 1.f);
            v = c.f32_input ? f : round_bf16(f);
        }
        ref = reference(c, x);
        const int64_t ld_x = Kx + 5;  // odd row stride: prepare_activation's ld_x
        if (c.f32_input) {
            std::vector<float> h(size_t(c.M * ld_x), 0.f);
            for (int64_t m = 0; m < c.M; ++m) std::copy_n(&x[size_t(m * Kx)], Kx, &h[size_t(m * ld_x)]);
            x_f32 = std::make_unique<DeviceArray<float>>(h);
        } else {
            std::vector<uint16_t> h(size_t(c.M * ld_x), 0), r(size_t(c.M * (Kx + 24)), 0);
            for (int64_t m = 0; m < c.M; ++m)
                for (int64_t k = 0; k < Kx; ++k) {
                    h[size_t(m * ld_x + k)] = f32_to_bf16(x[size_t(m * Kx + k)]);
                    r[size_t(m * (Kx + 24) + k)] = h[size_t(m * ld_x + k)];
                }
            x_bf16 = std::make_unique<DeviceArray<uint16_t>>(h);
            if (c.kind != WeightKind::BF16) {
                x_raw = std::make_unique<DeviceArray<uint16_t>>(r);
                raw = cuda::raw_activation(x_raw->ptr, c.M, Kx, Kx + 24, c.kind, c.numerics);
                has_raw = true;
            }
        }
        prepared_storage = std::make_unique<PreparedStorage>(c.M, Kx, prepared);
        const void* xin = c.f32_input ? static_cast<const void*>(x_f32->ptr) : static_cast<const void*>(x_bf16->ptr);
        cuda::prepare_activation(xin, c.f32_input, c.M, Kx, ld_x, c.kind, c.numerics, prepared, nullptr);
        // FP8_ROWS: act_quant of the bf16 rows (release numerics, FP8 weights), the compute-bound FP8 GEMMs' input.
        has_rows = !c.f32_input && c.kind == WeightKind::FP8_BLOCK128 && c.numerics == ActNumerics::FP8_BLOCK128;
        if (has_rows) {
            rows_storage = std::make_unique<PreparedStorage>(c.M, Kx, rows);
            cuda::prepare_activation_rows(x_bf16->ptr, c.M, Kx, ld_x, c.numerics, rows, nullptr);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
    }

    // CPU: x (act_quant per 128 in release numerics) times the dequantized weight, per group when grouped.
    std::vector<float> reference(const LinearCase& c, const std::vector<float>& x) const {
        const int64_t Kx = c.x_width();
        std::vector<float> xq = x;
        if (c.numerics == ActNumerics::FP8_BLOCK128)
            for (int64_t m = 0; m < c.M; ++m) cpu::act_quant_fp8_block128(&x[size_t(m * Kx)], Kx, &xq[size_t(m * Kx)]);
        const std::vector<float> wf = w.dequantized();
        std::vector<float> y(size_t(c.M * c.N));
        if (c.groups > 1)
            cpu::grouped_out_proj(xq.data(), c.M, c.groups, c.N / c.groups, c.K, wf.data(), y.data(), nullptr);
        else
            cpu::linear_f32(xq.data(), c.M, wf.data(), c.N, c.K, y.data(), nullptr);
        return y;
    }
};

struct LinearRun {
    std::vector<float> y;  // [M, N] as fp32
    std::string variant;   // what the op returned
};

// One call of the op into a poisoned output with row stride N + 3, read back as fp32.
LinearRun run_once(const LinearCase& c, const cuda::PreparedActivation& x, const cuda::DeviceLinear& w,
                   const cuda::GemmWorkspace* ws, const KernelPolicy& policy) {
    const int64_t ld_y = c.N + 3;
    const size_t elem = c.out == OutKind::F32 ? 4 : 2;
    DeviceArray<uint8_t> y(size_t(c.M * ld_y) * elem);
    y.poison();
    LinearRun r;
    r.variant = std::string(c.groups > 1 ? cuda::grouped_linear(x, w, c.groups, y.ptr, c.out, ld_y, ws, nullptr, policy)
                                         : cuda::linear(x, w, y.ptr, c.out, ld_y, ws, nullptr, policy));
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> h = y.download();
    r.y.reserve(size_t(c.M * c.N));
    for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
            const size_t at = size_t(m * ld_y + n) * elem;
            if (c.out == OutKind::F32) {
                float v;
                std::memcpy(&v, &h[at], 4);
                r.y.push_back(v);
            } else {
                uint16_t b;
                std::memcpy(&b, &h[at], 2);
                r.y.push_back(bf16_to_f32(b));
            }
        }
    return r;
}

class LinearFamily : public ::testing::Test {
protected:
    // A small split-K workspace (8 MB, 4096 counters): plans must respect its limits.
    void SetUp() override { ws_ = cuda::create_gemm_workspace(size_t(8) << 20, 4096); }
    void TearDown() override { cuda::destroy_gemm_workspace(ws_); }
    cuda::GemmWorkspace ws_;
};

const char* format_name(cuda::ActFormat f) { return f == cuda::ActFormat::FP8_ROWS ? "FP8_ROWS" : "MMA_F16"; }

// Runs one case through every supporting variant, each from the activation format it takes; records the runs in
// `coverage`.
void check_case(const LinearCase& c, const cuda::GemmWorkspace& ws, VariantCoverage& coverage) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed) + " (FS_TEST_SEED to reproduce)");
    std::mt19937_64 rng(seed);
    LinearProblem p(c, rng);
    const cuda::DeviceLinear w = p.w.device();

    // The default policy: linear_input_format() names the format to prepare, and from it the variant that runs is
    // what plan_linear() predicts and takes that format.
    const KernelPolicy defaults;
    const cuda::ActFormat default_format = cuda::linear_input_format(c.M, w, c.groups, c.numerics, defaults);
    const cuda::PreparedActivation* default_in = p.input(default_format);
    ASSERT_NE(default_in, nullptr) << "the default choice takes " << format_name(default_format)
                                   << ", which this case's input cannot be prepared in";
    const cuda::LinearPlan default_plan = cuda::plan_linear(*default_in, w, c.groups, &ws, defaults);
    const LinearRun d = run_once(c, *default_in, w, &ws, defaults);
    EXPECT_EQ(d.variant, default_plan.variant) << "the default run and plan_linear disagree";
    EXPECT_EQ(cuda::linear_variant(d.variant).format, default_format)
        << "linear_input_format and the variant the default policy runs disagree";

    const bool partial_block = (c.N / c.groups) % 128 != 0 || c.K % 128 != 0;
    const bool above_floor = c.M >= defaults.gemm_min_tokens;
    std::optional<LinearRun> first;  // the first supporting variant's output: every other one must agree with it
    int supporting = 0;
    for (const cuda::LinearVariant& v : cuda::linear_variants()) {
        const cuda::PreparedActivation* in = p.input(v.format);
        if (in == nullptr || !v.supports(cuda::LinearCall{*in, w, c.groups, &ws})) continue;
        ++supporting;
        SCOPED_TRACE(std::string("variant ") + std::string(v.name) + " (" + format_name(v.format) + " input)");
        const cuda::PreparedActivation& x = *in;
        // The other format's activation is refused (the variant would misread it).
        const cuda::ActFormat other =
            v.format == cuda::ActFormat::FP8_ROWS ? cuda::ActFormat::MMA_F16 : cuda::ActFormat::FP8_ROWS;
        if (const cuda::PreparedActivation* o = p.input(other)) {
            EXPECT_FALSE(v.supports(cuda::LinearCall{*o, w, c.groups, &ws}))
                << "took an " << format_name(other) << " activation";
        }
        const KernelPolicy only = KernelPolicy::only(v.name);
        EXPECT_EQ(cuda::linear_input_format(c.M, w, c.groups, c.numerics, only), v.format)
            << "linear_input_format with the variant forced";
        const cuda::LinearPlan plan = cuda::plan_linear(x, w, c.groups, &ws, only);
        EXPECT_EQ(plan.variant, v.name);
        const LinearRun a = run_once(c, x, w, &ws, only);
        ASSERT_EQ(a.variant, v.name) << "the forced variant did not run";
        const double thr = linear_threshold(c, v.name);
        const double err = rel_l2(a.y, p.ref);
        EXPECT_LE(err, thr) << "k_splits " << plan.k_splits << ", tokens per pass " << plan.tokens_per_pass
                            << ", aligned " << plan.aligned;
        const LinearRun b = run_once(c, x, w, &ws, only);
        EXPECT_TRUE(bit_identical(a.y, b.y)) << "rerun differs (k_splits " << plan.k_splits << ")";
        const LinearRun no_ws = run_once(c, x, w, nullptr, only);
        EXPECT_EQ(no_ws.variant, v.name);
        EXPECT_LE(rel_l2(no_ws.y, p.ref), thr) << "without a split-K workspace";
        coverage.ran(v.name);
        if (plan.k_splits > 1) coverage.ran(v.name, "split-k");
        if (!plan.aligned) coverage.ran(v.name, "guarded");
        if (c.groups > 1) coverage.ran(v.name, "grouped");
        if (partial_block) coverage.ran(v.name, "partial-block");
        if (above_floor) coverage.ran(v.name, "above-floor");
        if (d.variant == v.name) {
            EXPECT_LE(rel_l2(d.y, p.ref), thr) << "default run";
        }
        if (p.has_raw && v.supports(cuda::LinearCall{p.raw, w, c.groups, &ws})) {
            const LinearRun r = run_once(c, p.raw, w, &ws, only);
            EXPECT_EQ(r.variant, v.name);
            EXPECT_TRUE(bit_identical(r.y, a.y)) << "raw activation differs from the prepared one";
            coverage.ran(v.name, "raw");
        }
        if (!first) {
            first = a;
        } else {
            EXPECT_LE(rel_l2(a.y, first->y), thr + linear_threshold(c, first->variant))
                << "disagrees with " << first->variant;
        }
    }
    EXPECT_GT(supporting, 0) << "no variant supports the case";
}

TEST_F(LinearFamily, EveryCaseThroughEveryVariant) {
    VariantCoverage coverage("linear");
    coverage.declare_all(cuda::linear_variants());
    // Properties the former per-kernel suites checked, kept as requirements of the case list.
    for (const char* v :
         {"simt_gemv", "mma_gemv", "bf16_gemv", "tile_gemm", "bulk_gemv", "wgmma_gemv", "wgmma_f16_gemv"})
        coverage.require(v, "split-k");
    coverage.require("wgmma_f16_gemv", "grouped");
    coverage.require("ring_gemv", "grouped");
    coverage.require("ring_gemv", "split-k");  // K parts over the warps that few row tiles leave free (wo_b's shape)
    coverage.require("mma_gemv", "raw");
    coverage.require("simt_gemv", "raw");
    coverage.require("ring_gemv", "raw");  // one raw row prepared by every CTA (wo_b's input)
    coverage.require("tile_gemm", "guarded");
    // The compute-bound GEMMs where the default choice takes them (from KernelPolicy::gemm_min_tokens rows), with
    // N or K off the 128 grid, and the FP8 ones on wo_a's grouped form.
    for (const char* v : {"fp8_gemm", "fp8_gemm_mma", "bf16_gemm"}) {
        coverage.require(v, "above-floor");
        coverage.require(v, "partial-block");
    }
    coverage.require("fp8_gemm", "grouped");
    coverage.require("fp8_gemm_mma", "grouped");
    coverage.require("fp8_gemm_splitk", "split-k");
    coverage.require("fp8_gemm_splitk", "partial-block");
    const auto cases = linear_cases();
    std::printf("[ cases    ] %zu linear cases (%s)\n", cases.size(), quick_mode() ? "quick" : "test");
    for (const LinearCase& c : cases) check_case(c, ws_, coverage);
    coverage.expect_complete();
}

// A decode row's output does not depend on its batch-mates: through the FP8 GEMM and its split-K form (whose split
// count is planned from the shape, not the row count), the first rows of a 16-row call are bit-identical to the same
// rows called alone in a 3-row call, on wo_b's shape (four splits of K = 8,192) and wq_a's (sixteen of 4,096).
TEST_F(LinearFamily, DecodeRowsDoNotDependOnTheBatch) {
    if (!cuda::wgmma_usable()) GTEST_SKIP() << "fp8_gemm and fp8_gemm_splitk need wgmma (sm_90a)";
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " (FS_TEST_SEED to reproduce)");
    std::mt19937_64 rng(seed);
    for (const auto& [N, K] : {std::pair<int64_t, int64_t>{4096, 8192}, {1024, 4096}}) {
        const LinearCase big{"decode rows", WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::FP8_BLOCK128,
                             16, N, K, 1, OutKind::BF16};
        LinearProblem p(big, rng);
        const cuda::DeviceLinear w = p.w.device();
        constexpr int64_t kFew = 3;
        cuda::PreparedActivation few;
        PreparedStorage storage(kFew, K, few);
        cuda::prepare_activation_rows(p.x_bf16->ptr, kFew, K, K + 5, big.numerics, few, nullptr);  // LinearProblem's ld_x
        LinearCase small = big;
        small.M = kFew;
        for (const char* name : {"fp8_gemm_splitk", "fp8_gemm"}) {
            SCOPED_TRACE(std::string(name) + ", " + std::to_string(N) + " x " + std::to_string(K));
            const KernelPolicy only = KernelPolicy::only(name);
            const LinearRun all = run_once(big, p.rows, w, &ws_, only), alone = run_once(small, few, w, &ws_, only);
            ASSERT_EQ(all.variant, name);
            ASSERT_EQ(alone.variant, name);
            if (std::string(name) == "fp8_gemm_splitk") {
                const int splits = cuda::plan_linear(p.rows, w, 1, &ws_, only).k_splits;
                EXPECT_GT(splits, 1);
                EXPECT_EQ(splits, cuda::plan_linear(few, w, 1, &ws_, only).k_splits);
            }
            EXPECT_LE(rel_l2(all.y, p.ref), linear_threshold(big, name));
            const std::vector<float> head(all.y.begin(), all.y.begin() + kFew * N);
            EXPECT_TRUE(bit_identical(head, alone.y)) << "rows 0-2 differ between a 16-row and a 3-row call";
        }
    }
}

// An [N, K] weight (K per group) at fake, aligned addresses.
cuda::DeviceLinear fake_weight(int64_t N, int64_t K, WeightKind kind) {
    return cuda::DeviceLinear{kind, kind == WeightKind::BF16 ? ScaleKind::NONE : ScaleKind::E8M0, N, K,
                              reinterpret_cast<const void*>(uintptr_t(3) << 20),
                              kind == WeightKind::BF16 ? nullptr : reinterpret_cast<const void*>(uintptr_t(4) << 20)};
}

constexpr auto kMmaF16 = cuda::ActFormat::MMA_F16;
constexpr auto kFp8Rows = cuda::ActFormat::FP8_ROWS;

// A prepared FP8 / FP4 / BF16 activation of M tokens in `format` and an [N, K x groups] weight at fake, aligned
// addresses: plan_linear() only looks at shapes, formats and alignment, so no memory is touched.
std::string planned(int64_t M, int64_t N, int64_t K, ActNumerics num, const KernelPolicy& policy, int groups = 1,
                    WeightKind kind = WeightKind::FP8_BLOCK128, cuda::ActFormat format = kMmaF16) {
    cuda::PreparedActivation x;
    cuda::describe_prepared(x, kind, num, M, K * groups);
    x.values = reinterpret_cast<uint16_t*>(uintptr_t(1) << 20);
    x.scales = reinterpret_cast<float*>(uintptr_t(2) << 20);
    if (format == kFp8Rows) {
        x.format = kFp8Rows;
        x.fp8 = cuda::fp8_activation_view(x.values, x.scales, M, K * groups);
    }
    const cuda::GemmWorkspace ws = {reinterpret_cast<float*>(uintptr_t(5) << 20), size_t(32) << 20,
                                    reinterpret_cast<uint32_t*>(uintptr_t(6) << 20), 1 << 16};
    return std::string(cuda::plan_linear(x, fake_weight(N, K, kind), groups, &ws, policy).variant);
}

// The format linear_input_format() asks the caller to prepare for that problem.
cuda::ActFormat input_format(int64_t M, int64_t N, int64_t K, ActNumerics num, const KernelPolicy& policy,
                             int groups = 1, WeightKind kind = WeightKind::FP8_BLOCK128) {
    return cuda::linear_input_format(M, fake_weight(N, K, kind), groups, num, policy);
}

// The default choice (docs/perf.md, kernel choice): one token -> simt_gemv (ring_gemv on >= 16 MB of FP8 on Hopper with
// K in KernelPolicy::ring_gemv_min_k..ring_gemv_max_k: wo_a and wo_b by default); 2-16 tokens in release numerics ->
// wgmma_gemv on >= 4 MB where wgmma exists, else bulk_gemv on >= 16 MB on sm_90+, else mma_gemv; exact numerics (wo_a)
// 2-256 tokens -> wgmma_f16_gemv where wgmma exists; > 16 tokens otherwise -> tile_gemm; BF16 weights 1-16 tokens ->
// bf16_gemv (rows % 16, K % 32), else tile_gemm; odd grouped shapes -> generic_linear; from gemm_min_tokens (32) rows
// the compute-bound GEMMs: FP8 weights in release numerics from an FP8_ROWS activation (fp8_gemm where wgmma exists,
// else fp8_gemm_mma; fp8_gemm from 2 rows on >= 4,096 rows of K <= 2,048: wq_b, the indexer's wq_b, the shared expert's
// w2), BF16 weights bf16_gemm, and linear_input_format() names the format to prepare. Where wgmma exists, FP8 weights
// of >= 16 MB at 2-16 rows in release numerics whose 128-column tiles fill at most half the SMs take fp8_gemm_splitk
// (wo_b). A disabled variant is skipped, a forced one is taken where it supports the problem, gemv_max_tokens = 0
// leaves everything but fp8_gemm's wide short-K rule to tile_gemm.
TEST(LinearChoice, DefaultRules) {
    const bool wgmma = cuda::wgmma_usable();
    const bool sm90 = cuda::current_arch().cc >= 90;
    const auto R = ActNumerics::FP8_BLOCK128;
    const auto X = ActNumerics::EXACT;
    const KernelPolicy def;
    // one token: ring_gemv on >= 16 MB of FP8 on Hopper with K in ring_gemv_min_k..ring_gemv_max_k (2,048-8,192)
    const std::string ring = cuda::current_arch().cc == 90 ? "ring_gemv" : "simt_gemv";
    EXPECT_EQ(planned(1, 32768, 1024, R, def), "simt_gemv");  // wq_b
    EXPECT_EQ(planned(1, 4096, 8192, R, def), ring);          // wo_b
    EXPECT_EQ(planned(1, 8192, 4096, X, def, 8), ring);       // wo_a: grouped, exact numerics
    EXPECT_EQ(planned(1, 1024, 4096, R, def), "simt_gemv");   // wq_a, 4 MB
    KernelPolicy no_ring;
    no_ring.ring_gemv_max_k = 0;
    EXPECT_EQ(planned(1, 4096, 8192, R, no_ring), "simt_gemv");
    KernelPolicy ring_all, ring_short_k;
    ring_all.ring_gemv_min_k = 0;
    ring_all.ring_gemv_max_k = 8192;
    ring_short_k.ring_gemv_min_k = 0;
    ring_short_k.ring_gemv_max_k = 1024;
    EXPECT_EQ(planned(1, 32768, 1024, R, ring_all), ring);     // wq_b
    EXPECT_EQ(planned(1, 4096, 8192, R, ring_all), ring);      // wo_b
    EXPECT_EQ(planned(1, 8192, 4096, X, ring_all, 8), ring);   // wo_a: grouped, exact numerics
    EXPECT_EQ(planned(1, 1024, 4096, R, ring_all), "simt_gemv");  // wq_a, 4 MB
    EXPECT_EQ(planned(2, 32768, 1024, R, ring_all), wgmma ? "wgmma_gemv" : sm90 ? "bulk_gemv" : "mma_gemv");
    EXPECT_EQ(planned(1, 32768, 1024, R, ring_short_k), ring);
    EXPECT_EQ(planned(1, 4096, 8192, R, ring_short_k), "simt_gemv");
    KernelPolicy ring_wo_a;  // K from 2,048 to 4,096: wo_a alone
    ring_wo_a.ring_gemv_min_k = 2048;
    ring_wo_a.ring_gemv_max_k = 4096;
    EXPECT_EQ(planned(1, 8192, 4096, X, ring_wo_a, 8), ring);
    EXPECT_EQ(planned(1, 32768, 1024, R, ring_wo_a), "simt_gemv");
    EXPECT_EQ(planned(1, 4096, 8192, R, ring_wo_a), "simt_gemv");
    EXPECT_EQ(planned(1, 2048, 4096, R, def, 1, WeightKind::FP4_BLOCK32), "simt_gemv");
    // 2-16 tokens, release numerics
    EXPECT_EQ(planned(2, 1024, 4096, R, def), wgmma ? "wgmma_gemv" : "mma_gemv");  // wq_a, 4 MB: below bulk's 16 MB
    EXPECT_EQ(planned(16, 32768, 1024, R, def), wgmma ? "wgmma_gemv" : sm90 ? "bulk_gemv" : "mma_gemv");
    EXPECT_EQ(planned(8, 512, 4096, R, def), "mma_gemv");  // wkv, 2 MB: below wgmma's 4 MB
    KernelPolicy no_wgmma;
    no_wgmma.disabled = {"wgmma_gemv"};
    EXPECT_EQ(planned(2, 4096, 4096, R, no_wgmma), sm90 ? "bulk_gemv" : "mma_gemv");  // 16.8 MB, sm_90 without wgmma
    EXPECT_EQ(planned(8, 4096, 4096, R, no_wgmma), sm90 ? "bulk_gemv" : "mma_gemv");
    KernelPolicy late_wgmma;
    late_wgmma.wgmma_gemv_min_tokens = 4;
    EXPECT_EQ(planned(2, 32768, 1024, R, late_wgmma), sm90 ? "bulk_gemv" : "mma_gemv");
    EXPECT_EQ(planned(4, 32768, 1024, R, late_wgmma), wgmma ? "wgmma_gemv" : sm90 ? "bulk_gemv" : "mma_gemv");
    // exact numerics: the e4m3 streaming GEMVs need FP8 activations; wgmma_f16_gemv takes f16 ones from 2 to 256
    // tokens where wgmma exists
    EXPECT_EQ(planned(8, 32768, 1024, X, def), wgmma ? "wgmma_f16_gemv" : "mma_gemv");
    EXPECT_EQ(planned(256, 32768, 1024, X, def), wgmma ? "wgmma_f16_gemv" : "tile_gemm");
    EXPECT_EQ(planned(257, 32768, 1024, X, def), "tile_gemm");
    EXPECT_EQ(planned(4, 2048, 4096, R, def, 1, WeightKind::FP4_BLOCK32), "mma_gemv");
    // more than 16 tokens from an MMA_F16 activation: tile_gemm at any M
    EXPECT_EQ(planned(17, 32768, 1024, R, def), "tile_gemm");
    EXPECT_EQ(planned(4096, 4096, 8192, R, def), "tile_gemm");
    // the compute-bound GEMMs from gemm_min_tokens rows, and the format they take
    const std::string fp8_gemm = wgmma ? "fp8_gemm" : "fp8_gemm_mma";
    const auto FP8 = WeightKind::FP8_BLOCK128;
    const auto BF16 = WeightKind::BF16;
    EXPECT_EQ(input_format(31, 1024, 4096, R, def), kMmaF16);
    EXPECT_EQ(input_format(32, 1024, 4096, R, def), kFp8Rows);
    EXPECT_EQ(input_format(16, 1024, 4096, R, def), kMmaF16);
    // below the floor, fp8_gemm on wide projections over a short K (wq_b, the indexer's wq_b) from 2 rows where wgmma
    // exists; one row keeps the SIMT GEMV
    EXPECT_EQ(input_format(1, 32768, 1024, R, def), kMmaF16);
    for (int64_t m : {2, 8, 16}) {
        EXPECT_EQ(input_format(m, 32768, 1024, R, def), wgmma ? kFp8Rows : kMmaF16) << m << " rows of wq_b";
        EXPECT_EQ(input_format(m, 8192, 1024, R, def), wgmma ? kFp8Rows : kMmaF16) << m << " rows of indexer wq_b";
        EXPECT_EQ(input_format(m, 4096, 2048, R, def), wgmma ? kFp8Rows : kMmaF16) << m << " rows of shared w2";
        EXPECT_EQ(input_format(m, 2048, 4096, R, def), kMmaF16) << m << " rows of shared w1 (8 MB, long K)";
        EXPECT_EQ(input_format(m, 4096, 8192, R, def), wgmma ? kFp8Rows : kMmaF16) << m << " rows of wo_b (split K)";
        EXPECT_EQ(input_format(m, 4096, 4096, R, def), wgmma ? kFp8Rows : kMmaF16) << m << " rows of 16 MB (split K)";
        EXPECT_EQ(input_format(m, 1024, 4096, R, def), kMmaF16) << m << " rows of wq_a (4 MB: a GEMV)";
        EXPECT_EQ(input_format(m, 16384, 4096, R, def), kMmaF16) << m << " rows: 128 tiles, nothing to split";
        EXPECT_EQ(input_format(m, 32768, 1024, X, def), kMmaF16) << "exact numerics";
    }
    EXPECT_EQ(input_format(1, 4096, 8192, R, def), kMmaF16);  // one row: the SIMT GEMV
    if (wgmma) {
        EXPECT_EQ(planned(2, 32768, 1024, R, def, 1, FP8, kFp8Rows), "fp8_gemm");
        EXPECT_EQ(planned(8, 4096, 2048, R, def, 1, FP8, kFp8Rows), "fp8_gemm");  // shared w2
        EXPECT_EQ(planned(2, 4096, 8192, R, def, 1, FP8, kFp8Rows), "fp8_gemm_splitk");
        EXPECT_EQ(planned(16, 4096, 4096, R, def, 1, FP8, kFp8Rows), "fp8_gemm_splitk");
        KernelPolicy no_split;
        no_split.disabled = {"fp8_gemm_splitk"};
        EXPECT_EQ(input_format(16, 4096, 8192, R, no_split), kMmaF16);
        // prefill passes force the compute-bound GEMMs: fp8_gemm, not its split-K form, at any row count
        EXPECT_EQ(planned(8, 4096, 8192, R, def.for_pass(true), 1, FP8, kFp8Rows), "fp8_gemm");
    }
    EXPECT_EQ(input_format(4096, 1024, 4096, X, def), kMmaF16);  // exact numerics: tile_gemm
    EXPECT_EQ(input_format(4096, 8192, 4096, R, def, 8), kFp8Rows);  // wo_a in release numerics
    EXPECT_EQ(input_format(4096, 129280, 4096, X, def, 1, BF16), kMmaF16);
    EXPECT_EQ(planned(64, 1024, 4096, R, def, 1, FP8, kFp8Rows), fp8_gemm);
    EXPECT_EQ(planned(4096, 4096, 8192, R, def, 1, FP8, kFp8Rows), fp8_gemm);
    EXPECT_EQ(planned(4096, 8192, 4096, R, def, 8, FP8, kFp8Rows), fp8_gemm);  // all 8 groups in one launch
    EXPECT_EQ(planned(32, 129280, 4096, X, def, 1, BF16), "bf16_gemm");
    EXPECT_EQ(planned(31, 129280, 4096, X, def, 1, BF16), "tile_gemm");
    // below the floor an FP8_ROWS activation has no preferred variant where neither the wide short-K rule nor split-K
    // applies (callers ask linear_input_format first)
    EXPECT_THROW(planned(16, 16384, 4096, R, def, 1, FP8, kFp8Rows), Error);
    EXPECT_THROW(planned(16, 1024, 4096, R, def, 1, FP8, kFp8Rows), Error);
    EXPECT_THROW(planned(1, 4096, 8192, R, def, 1, FP8, kFp8Rows), Error);
    KernelPolicy late_gemm;
    late_gemm.gemm_min_tokens = 256;
    EXPECT_EQ(input_format(128, 1024, 4096, R, late_gemm), kMmaF16);
    EXPECT_EQ(planned(128, 129280, 4096, X, late_gemm, 1, BF16), "tile_gemm");
    KernelPolicy no_fp8_gemm;
    no_fp8_gemm.disabled = {"fp8_gemm"};
    EXPECT_EQ(planned(4096, 4096, 8192, R, no_fp8_gemm, 1, FP8, kFp8Rows), "fp8_gemm_mma");
    no_fp8_gemm.disabled.emplace_back("fp8_gemm_mma");
    EXPECT_EQ(input_format(4096, 4096, 8192, R, no_fp8_gemm), kMmaF16);
    // a GEMM forced below its floor: its format, and it runs
    EXPECT_EQ(input_format(8, 1024, 4096, R, KernelPolicy::only("fp8_gemm_mma")), kFp8Rows);
    EXPECT_EQ(planned(8, 1024, 4096, R, KernelPolicy::only("fp8_gemm_mma"), 1, FP8, kFp8Rows), "fp8_gemm_mma");
    EXPECT_EQ(planned(8, 129280, 4096, X, KernelPolicy::only("bf16_gemm"), 1, BF16), "bf16_gemm");
    // the GEMMs' format is refused by the MMA_F16 variants even when forced: FP8_ROWS needs release numerics
    EXPECT_EQ(input_format(4096, 1024, 4096, X, KernelPolicy::only("fp8_gemm_mma")), kMmaF16);
    // BF16 weights: bf16_gemv from 1 to 16 tokens on its shapes (rows % 16, K % 32), else the tile GEMM below the
    // compute-bound GEMM's floor
    EXPECT_EQ(planned(1, 129280, 4096, X, def, 1, BF16), "bf16_gemv");  // head
    EXPECT_EQ(planned(16, 256, 4096, X, def, 1, BF16), "bf16_gemv");    // router
    EXPECT_EQ(planned(1, 1024, 4096, X, def, 1, BF16), "bf16_gemv");    // compressor wkv
    EXPECT_EQ(planned(8, 64, 4096, X, def, 1, BF16), "bf16_gemv");      // indexer weights_proj
    EXPECT_EQ(planned(17, 1024, 4096, X, def, 1, BF16), "tile_gemm");
    EXPECT_EQ(planned(4, 200, 384, X, def, 1, BF16), "tile_gemm");      // rows not a multiple of 16
    EXPECT_EQ(planned(4, 256, 400, X, def, 1, BF16), "tile_gemm");      // K not a multiple of 32
    // grouped (wo_a, bf16 activation): the GEMVs by token count (one token: the ring, above); odd grouped shapes the
    // element-wise fallback
    EXPECT_EQ(planned(1, 8192, 4096, X, no_ring, 8), "simt_gemv");
    EXPECT_EQ(planned(2, 8192, 4096, X, def, 8), wgmma ? "wgmma_f16_gemv" : "mma_gemv");
    EXPECT_EQ(planned(8, 8192, 4096, X, def, 8), wgmma ? "wgmma_f16_gemv" : "mma_gemv");
    EXPECT_EQ(planned(32, 8192, 4096, X, def, 8), wgmma ? "wgmma_f16_gemv" : "tile_gemm");
    EXPECT_EQ(planned(256, 8192, 4096, X, def, 8), wgmma ? "wgmma_f16_gemv" : "tile_gemm");
    KernelPolicy no_f16_wgmma;
    no_f16_wgmma.disabled = {"wgmma_f16_gemv"};
    EXPECT_EQ(planned(16, 8192, 4096, X, no_f16_wgmma, 8), "mma_gemv");
    EXPECT_EQ(planned(64, 8192, 4096, X, no_f16_wgmma, 8), "tile_gemm");
    EXPECT_EQ(planned(2, 4 * 24, 192, X, def, 4), "generic_linear");
    EXPECT_EQ(planned(3, 2 * 32, 256, X, def, 2), "generic_linear");
    // gemv_max_tokens = 0: no GEMV at all
    KernelPolicy no_gemv;
    no_gemv.gemv_max_tokens = 0;
    EXPECT_EQ(planned(1, 32768, 1024, R, no_gemv), "tile_gemm");
    EXPECT_EQ(planned(8, 32768, 1024, R, no_gemv), "tile_gemm");
    EXPECT_EQ(planned(4, 256, 4096, X, no_gemv, 1, BF16), "tile_gemm");
    // forcing: taken where it supports the problem, ignored where it does not
    EXPECT_EQ(planned(1, 32768, 1024, R, KernelPolicy::only("tile_gemm")), "tile_gemm");
    EXPECT_EQ(planned(1, 32768, 1024, R, KernelPolicy::only("mma_gemv")), "mma_gemv");
    EXPECT_EQ(planned(4, 32768, 1024, X, KernelPolicy::only("wgmma_gemv")), wgmma ? "wgmma_f16_gemv" : "mma_gemv");
    EXPECT_EQ(planned(8, 32768, 1024, R, KernelPolicy::only("wgmma_f16_gemv")), wgmma ? "wgmma_f16_gemv" : "mma_gemv");
    EXPECT_EQ(planned(17, 32768, 1024, R, KernelPolicy::only("simt_gemv")), "tile_gemm");
    // every catalogue row names a known variant (one FLASHSEEK_FORCE / FLASHSEEK_DISABLE accept) and declares
    // architectures of a known form
    const auto& known = cuda::known_variants();
    for (const cuda::LinearVariant& v : cuda::linear_variants()) {
        EXPECT_NO_THROW(archs_available(v.archs)) << v.name;
        EXPECT_NO_THROW(cuda::linear_variant(v.name));
        EXPECT_NE(std::find(known.begin(), known.end(), v.name), known.end()) << v.name << " not in known_variants()";
    }
    EXPECT_THROW(cuda::linear_variant("no_such_variant"), Error);
}

using test_support::ScopedEnv;

// The variable is refused with an error naming it (and the offending value where given).
void expect_env_error(const char* name, const char* value, const char* fragment) {
    ScopedEnv env(name, value);
    expect_named_error([] { (void)KernelPolicy::from_env(); }, name);
    expect_named_error([] { (void)KernelPolicy::from_env(); }, fragment);
}

// KernelPolicy::from_env: the variables reach the policy; a bad value is refused naming the variable.
TEST(LinearChoice, PolicyFromEnvironment) {
    {
        ScopedEnv force("FLASHSEEK_FORCE", "tile_gemm,attn_mma,indexer_branch,weight_prefetch,early_wo_a,early_wo_b");
        ScopedEnv disable("FLASHSEEK_DISABLE", "wgmma_gemv,early_wo_b");
        ScopedEnv max_tokens("FLASHSEEK_GEMV_MAX_TOKENS", "8");
        ScopedEnv pdl("FLASHSEEK_PDL", "0");
        ScopedEnv specialized("FLASHSEEK_MOE_WGMMA_SPECIALIZED", "1");
        ScopedEnv indexer_form("FLASHSEEK_INDEXER_SELECT_FORM", "0");
        ScopedEnv ws_order("FLASHSEEK_MOE_WGMMA_WS_ORDER", "1");
        ScopedEnv slot_rows("FLASHSEEK_GROUPED_SLOT_ROWS", "64");
        ScopedEnv widen("FLASHSEEK_WO_A_WIDEN_MIN_TOKENS", "256");
        ScopedEnv chain_free("FLASHSEEK_GEMV_CHAIN_FREE_SMS", "32");
        ScopedEnv ring_min("FLASHSEEK_RING_GEMV_MIN_K", "4096");
        ScopedEnv ring_max("FLASHSEEK_RING_GEMV_MAX_K", "0");
        ScopedEnv ring_parts("FLASHSEEK_RING_GEMV_K_PARTS", "2");
        const KernelPolicy p = KernelPolicy::from_env();
        EXPECT_TRUE(p.is_forced("tile_gemm"));
        EXPECT_TRUE(p.is_forced("attn_mma"));
        EXPECT_TRUE(p.is_forced("indexer_branch"));
        EXPECT_TRUE(p.is_forced("weight_prefetch"));
        EXPECT_TRUE(p.takes_forced_only("early_wo_a"));
        EXPECT_FALSE(p.takes_forced_only("early_wo_b"));  // forced and disabled: disabled wins
        EXPECT_TRUE(p.is_disabled("wgmma_gemv"));
        EXPECT_FALSE(p.is_disabled("bulk_gemv"));
        EXPECT_EQ(p.gemv_max_tokens, 8);
        EXPECT_FALSE(p.pdl);
        EXPECT_TRUE(p.branches);
        EXPECT_EQ(p.moe_wgmma_specialized, 1);
        EXPECT_EQ(p.indexer_select_form, 0);
        EXPECT_EQ(p.moe_wgmma_ws_order, 1);
        EXPECT_EQ(p.grouped_slot_rows, 64);
        EXPECT_EQ(p.wo_a_widen_min_tokens, 256);
        EXPECT_EQ(p.gemv_chain_free_sms, 32);
        EXPECT_EQ(p.ring_gemv_min_k, 4096);
        EXPECT_EQ(p.ring_gemv_max_k, 0);
        EXPECT_EQ(p.ring_gemv_k_parts, 2);
    }
    EXPECT_EQ(KernelPolicy::from_env().gemv_chain_free_sms, 0);
    EXPECT_EQ(KernelPolicy::from_env().grouped_slot_rows, 0);
    EXPECT_EQ(KernelPolicy::from_env().wo_a_widen_min_tokens, 64);
    EXPECT_EQ(KernelPolicy::from_env().ring_gemv_min_k, 2048);
    EXPECT_EQ(KernelPolicy::from_env().ring_gemv_max_k, 8192);
    EXPECT_EQ(KernelPolicy::from_env().ring_gemv_k_parts, 4);
    expect_env_error("FLASHSEEK_DISABLE", "wgmma_gemv,no_such_kernel", "no_such_kernel");
    expect_env_error("FLASHSEEK_FORCE", "tile", "tile");
    expect_env_error("FLASHSEEK_GEMV_MAX_TOKENS", "17", "");
    expect_env_error("FLASHSEEK_GEMV_KW", "3", "");
    expect_env_error("FLASHSEEK_MOE_WGMMA_BALANCE", "x", "");
    expect_env_error("FLASHSEEK_MOE_WGMMA_SPECIALIZED", "3", "");
    expect_env_error("FLASHSEEK_INDEXER_SELECT_FORM", "2", "");
    expect_env_error("FLASHSEEK_MOE_WGMMA_WS_ORDER", "3", "");
    expect_env_error("FLASHSEEK_GROUPED_SLOT_ROWS", "48", "48");
    expect_env_error("FLASHSEEK_GROUPED_SLOT_ROWS", "256", "");
    expect_env_error("FLASHSEEK_WO_A_WIDEN_MIN_TOKENS", "0", "");
    expect_env_error("FLASHSEEK_GEMV_CHAIN_FREE_SMS", "-1", "");
    expect_env_error("FLASHSEEK_RING_GEMV_K_PARTS", "3", "3");
    expect_env_error("FLASHSEEK_RING_GEMV_MIN_K", "-1", "");
}

TEST(LinearArgs, BadArgumentsThrowNamedErrors) {
    std::mt19937_64 rng(fresh_seed());
    TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 128, 256);
    DeviceArray<uint16_t> pv(cuda::prepared_values_bytes(2, 256) / 2);
    DeviceArray<float> ps(cuda::prepared_scales_bytes(2, 256) / 4), y(512);
    DeviceArray<uint16_t> x(random_bf16(rng, 512, 1.f));
    cuda::PreparedActivation p;
    p.values = pv.ptr;
    p.scales = ps.ptr;
    const auto run = [&](const cuda::PreparedActivation& in, const cuda::DeviceLinear& wl, void* out, int64_t ld,
                         const KernelPolicy& policy = KernelPolicy{}) {
        cuda::linear(in, wl, out, OutKind::F32, ld, nullptr, nullptr, policy);
    };
    cuda::prepare_activation(x.ptr, false, 2, 256, 256, WeightKind::BF16, ActNumerics::EXACT, p, nullptr);
    expect_named_error([&] { run(p, w.device(), y.ptr, 128); }, "prepared for BF16");
    cuda::prepare_activation(x.ptr, false, 2, 256, 256, WeightKind::FP8_BLOCK128, ActNumerics::EXACT, p, nullptr);
    cuda::DeviceLinear no_scale = w.device();
    no_scale.scale = nullptr;
    expect_named_error([&] { run(p, no_scale, y.ptr, 128); }, "scale");
    cuda::DeviceLinear wide = w.device();
    wide.in = 512;
    expect_named_error([&] { run(p, wide, y.ptr, 128); }, "columns");
    expect_named_error([&] { run(p, w.device(), nullptr, 128); }, "output");
    expect_named_error([&] { run(p, w.device(), y.ptr, 100); }, "stride");
    expect_named_error(
        [&] { cuda::grouped_linear(p, w.device(), 0, y.ptr, OutKind::F32, 128, nullptr, nullptr); }, "groups");
    expect_named_error(
        [&] {
            cuda::prepare_activation(x.ptr, false, 2, 256, 100, WeightKind::FP8_BLOCK128, ActNumerics::EXACT, p, nullptr);
        },
        "prepare_activation");
    // A raw activation only suits the small-M GEMV: 17 tokens have no variant.
    DeviceArray<uint16_t> x17(random_bf16(rng, 17 * 256, 1.f));
    const cuda::PreparedActivation raw17 =
        cuda::raw_activation(x17.ptr, 17, 256, 256, WeightKind::FP8_BLOCK128, ActNumerics::EXACT);
    DeviceArray<float> y17(17 * 128);
    expect_named_error([&] { run(raw17, w.device(), y17.ptr, 128); }, "raw");
    // FP8_ROWS (prepare_activation_rows): release numerics only, a row stride of at least K, 16-byte aligned storage;
    // linear() refuses an FP8_ROWS activation whose codes describe another shape.
    cuda::PreparedActivation rows;
    rows.values = pv.ptr;
    rows.scales = ps.ptr;
    expect_named_error([&] { cuda::prepare_activation_rows(x.ptr, 2, 256, 256, ActNumerics::EXACT, rows, nullptr); },
                       "release numerics");
    expect_named_error(
        [&] { cuda::prepare_activation_rows(x.ptr, 2, 256, 200, ActNumerics::FP8_BLOCK128, rows, nullptr); },
        "row stride 200");
    expect_named_error(
        [&] {
            cuda::PreparedActivation misaligned = rows;
            misaligned.scales = ps.ptr + 1;
            cuda::prepare_activation_rows(x.ptr, 2, 256, 256, ActNumerics::FP8_BLOCK128, misaligned, nullptr);
        },
        "16-byte aligned");
    cuda::prepare_activation_rows(x.ptr, 2, 256, 256, ActNumerics::FP8_BLOCK128, rows, nullptr);
    cuda::PreparedActivation short_codes = rows;
    short_codes.fp8.m = 1;
    expect_named_error([&] { run(short_codes, w.device(), y.ptr, 128); }, "describes codes of 1 x 256");
    // Every variant disabled: the error names the problem.
    KernelPolicy none;
    for (const cuda::LinearVariant& v : cuda::linear_variants()) none.disabled.emplace_back(v.name);
    expect_named_error([&] { run(p, w.device(), y.ptr, 128, none); }, "no enabled kernel variant");
}

// dequantize_weight_bf16 (the prefill's widening of wo_a for the bf16 GEMM) equals the CPU reference's
// dequantize_linear rounded to bf16, bit for bit, for every weight format: rows of a multiple of 8 elements take the
// 8-wide kernel, the others (and a misaligned output) the element-wise one. [1031, 4224] has more 8-element groups
// than one pass of the grid covers: the grid-stride loop steps (row, column) across row ends.
TEST(WeightDequant, WidensExactlyLikeTheReference) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    struct Case { WeightKind kind; ScaleKind scales; int64_t out, in; bool shift; };
    for (Case c : {Case{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 130, 264, false},
                   Case{WeightKind::FP8_BLOCK128, ScaleKind::F32, 257, 1024, false},
                   Case{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 7, 36, false},
                   Case{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 1031, 4224, false},
                   Case{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 64, 512, true},
                   Case{WeightKind::FP4_BLOCK32, ScaleKind::E8M0, 33, 352, false},
                   Case{WeightKind::FP4_BLOCK32, ScaleKind::E8M0, 5, 96, true},
                   Case{WeightKind::BF16, ScaleKind::NONE, 9, 200, false},
                   Case{WeightKind::BF16, ScaleKind::NONE, 3, 13, false}}) {
        TestWeight w = make_weight(rng, c.kind, c.scales, c.out, c.in);
        const size_t n = size_t(c.out * c.in), sh = c.shift ? 1 : 0;
        DeviceArray<uint16_t> out(n + sh);
        out.poison();
        cuda::dequantize_weight_bf16(w.device(), out.ptr + sh, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> got = out.download();
        const std::vector<float> want = w.dequantized();
        size_t n_diff = 0, first = n;
        for (size_t i = 0; i < n; ++i)
            if (got[i + sh] != f32_to_bf16(want[i])) n_diff++, first = std::min(first, i);
        EXPECT_EQ(n_diff, 0u) << "kind " << int(c.kind) << " [" << c.out << ", " << c.in << "]"
                              << (c.shift ? " misaligned output" : "") << ": first difference at " << first;
    }
}

}  // namespace
}  // namespace flashseek::test
