// normed_gemv (cuda/gemm/normed_gemv.cuh: one token's RMSNorm inside simt_gemv's staging) against the two launches
// it replaces on the query path: rmsnorm writing the normed bf16 row and its prepared copy, then simt_gemv with the
// K splits plan_linear gives it. The GEMV's output, the normed row and the prepared copy (values and scales of all
// eight rows, the padding rows' zeros included) must equal the launches' bit for bit, on two launches with the
// outputs poisoned before each; the launches' result is checked against the CPU (fp32 over the dequantized
// weights) so the two do not agree on a wrong answer. Random rows with 128-blocks of uneven magnitude, fresh seeds.
// Cases: V4-Flash's wq_b (32,768 x 1,024) in release and exact numerics, E8M0 and fp32 scales; split-K (512 rows of
// 2,048 with the production workspace); FP4 weights; an unweighted norm; 1,536 columns (a lane's last chunk past
// the row on some lanes). --quick (compute-sanitizer) keeps the small cases. Then the refusals, each naming its
// field.
#include <gtest/gtest.h>

#include <cmath>
#include <string_view>

#include "cpu/ops.h"
#include "cuda/gemm/linear_catalogue.h"
#include "cuda/gemm/normed_gemv.cuh"
#include "cuda/norm/rmsnorm.cuh"
#include "harness.h"
#include "harness_mode.h"
#include "named_error.h"
#include "weights.h"

namespace flashseek::test {
namespace {

using cuda::ActNumerics;
using cuda::KernelPolicy;
using cuda::OutKind;
using cuda::ScaleKind;
using cuda::WeightKind;

struct NormedCase {
    const char* name;
    int64_t n, k;  // the weight [n, k]
    WeightKind kind;
    ScaleKind scale;
    ActNumerics numerics;
    OutKind out;
    bool weighted;          // the norm has a weight (q_norm) or not
    bool workspace_splits;  // plan with the production split-K workspace, or without (one split)
    bool quick;
};

// A prepared copy of one row (eight rows of storage: the padding rows are written too).
struct Prepared {
    DeviceArray<uint16_t> values;
    DeviceArray<float> scales;
    cuda::PreparedActivation act;
    Prepared(int64_t k, WeightKind layout, ActNumerics numerics)
        : values(cuda::prepared_values_bytes(1, k) / 2), scales(cuda::prepared_scales_bytes(1, k) / 4) {
        values.poison();
        scales.poison();
        act.values = values.ptr;
        act.scales = scales.ptr;
        act.layout = layout;
        act.numerics = numerics;
        act.format = cuda::ActFormat::MMA_F16;
        act.raw = false;
    }
};

void check_normed(const NormedCase& c, const cuda::GemmWorkspace& ws) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed) + " (FS_TEST_SEED to reproduce)");
    std::mt19937_64 rng(seed);
    const TestWeight w = make_weight(rng, c.kind, c.scale, c.n, c.k);
    const cuda::DeviceLinear dw = w.device();
    // The raw row: N(0, 1) with a quarter of the values scaled by 1e-3 (128-blocks of uneven magnitude); the norm's
    // weight around 1.
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<uint16_t> xh(static_cast<size_t>(c.k)), nwh(static_cast<size_t>(c.k));
    for (auto& v : xh) v = f32_to_bf16(d(rng) * (rng() % 4 == 0 ? 1e-3f : 1.f));
    std::uniform_real_distribution<float> wd(0.5f, 1.5f);
    for (auto& v : nwh) v = f32_to_bf16(wd(rng));
    DeviceArray<uint16_t> x(xh), norm_w(nwh);
    const auto* nw = c.weighted ? reinterpret_cast<const __nv_bfloat16*>(norm_w.ptr) : nullptr;
    const float eps = 1e-6f;
    const cuda::GemmWorkspace* plan_ws = c.workspace_splits ? &ws : nullptr;
    const size_t elem = c.out == OutKind::F32 ? 4 : 2;

    // The two launches.
    DeviceArray<uint16_t> normed_ref(static_cast<size_t>(c.k));
    normed_ref.poison();
    Prepared pref(c.k, c.kind, c.numerics);
    cuda::rmsnorm(reinterpret_cast<const __nv_bfloat16*>(x.ptr), c.k,
                  reinterpret_cast<__nv_bfloat16*>(normed_ref.ptr), c.k, nw, 1, int(c.k), eps, nullptr, &pref.act);
    const KernelPolicy simt = KernelPolicy::only("simt_gemv");
    const cuda::LinearPlan plan = cuda::plan_linear(pref.act, dw, 1, plan_ws, simt);
    ASSERT_EQ(plan.variant, "simt_gemv");
    SCOPED_TRACE("splits " + std::to_string(plan.k_splits));
    DeviceArray<uint8_t> y_ref(size_t(c.n) * elem);
    y_ref.poison();
    cuda::linear(pref.act, dw, y_ref.ptr, c.out, c.n, plan_ws, nullptr, simt);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> normed_expect = normed_ref.download();
    const std::vector<uint16_t> values_expect = pref.values.download();
    const std::vector<float> scales_expect = pref.scales.download();
    const std::vector<uint8_t> y_expect = y_ref.download();
    if (c.workspace_splits && c.n <= 512) {
        EXPECT_GT(plan.k_splits, 1) << "the split-K case should reach split-K";
    }

    // The CPU: the norm, the preparation's rounding (act_quant in release numerics), the linear in fp32.
    {
        double ss = 0;
        for (uint16_t v : xh) ss += double(bf16_to_f32(v)) * bf16_to_f32(v);
        const float r = float(1.0 / std::sqrt(ss / double(c.k) + eps));
        std::vector<float> normed(static_cast<size_t>(c.k)), y(static_cast<size_t>(c.n));
        for (size_t i = 0; i < normed.size(); ++i)
            normed[i] = round_bf16(bf16_to_f32(xh[i]) * r * (c.weighted ? bf16_to_f32(nwh[i]) : 1.f));
        EXPECT_LE(rel_l2(bf16_to_f32_vec(normed_expect), normed), 1e-2) << "the norm against the CPU";
        std::vector<float> q = normed;
        if (c.numerics == ActNumerics::FP8_BLOCK128) cpu::act_quant_fp8_block128(normed.data(), c.k, q.data());
        const std::vector<float> wf = w.dequantized();
        cpu::linear_f32(q.data(), 1, wf.data(), c.n, c.k, y.data(), nullptr);
        EXPECT_LE(rel_l2(output_as_f32(y_expect, c.out == OutKind::F32, size_t(c.n)), y), 2e-2) << "the GEMV against the CPU";
    }

    // The fused launch, twice.
    DeviceArray<uint16_t> normed(static_cast<size_t>(c.k));
    Prepared prep(c.k, c.kind, c.numerics);
    DeviceArray<uint8_t> y(size_t(c.n) * elem);
    cuda::NormedInput in;
    in.x = reinterpret_cast<const __nv_bfloat16*>(x.ptr);
    in.weight = nw;
    in.eps = eps;
    in.numerics = c.numerics;
    in.normed_out = reinterpret_cast<__nv_bfloat16*>(normed.ptr);
    in.prepared_out = &prep.act;
    ASSERT_STREQ(cuda::normed_gemv_unsupported(in, dw), "");
    for (int launch = 0; launch < 2; ++launch) {
        SCOPED_TRACE("launch " + std::to_string(launch));
        normed.poison();
        prep.values.poison();
        prep.scales.poison();
        y.poison();
        cuda::normed_gemv(in, dw, y.ptr, c.out, c.n, plan_ws, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(same_bytes(y.download(), y_expect)) << "the GEMV's output";
        EXPECT_TRUE(same_bytes(normed.download(), normed_expect)) << "the normed bf16 row";
        EXPECT_TRUE(same_bytes(prep.values.download(), values_expect)) << "the prepared copy's values (8 rows)";
        EXPECT_TRUE(same_bytes(prep.scales.download(), scales_expect)) << "the prepared copy's scales (8 rows)";
        EXPECT_EQ(prep.act.m, 1);
        EXPECT_EQ(prep.act.k, c.k);
        EXPECT_EQ(prep.act.layout, c.kind);
    }
}

class NormedGemvTest : public ::testing::Test {
protected:
    void SetUp() override { ws_ = cuda::create_gemm_workspace(); }  // the backend's workspace size: its splits
    void TearDown() override {
        if (ws_.partials) cuda::destroy_gemm_workspace(ws_);
    }
    cuda::GemmWorkspace ws_;
};

TEST_F(NormedGemvTest, BitIdenticalToTheNormAndTheGemv) {
    const NormedCase cases[] = {
        {"V4 q_norm + wq_b, release", 32768, 1024, WeightKind::FP8_BLOCK128, ScaleKind::E8M0,
         ActNumerics::FP8_BLOCK128, OutKind::BF16, true, true, false},
        {"V4 q_norm + wq_b, exact, fp32 scales, one split", 32768, 1024, WeightKind::FP8_BLOCK128, ScaleKind::F32,
         ActNumerics::EXACT, OutKind::BF16, true, false, false},
        {"split-K: 512 rows of 2,048, fp32 output", 512, 2048, WeightKind::FP8_BLOCK128, ScaleKind::E8M0,
         ActNumerics::FP8_BLOCK128, OutKind::F32, true, true, true},
        {"FP4 weights, 1,024 rows of 1,024", 1024, 1024, WeightKind::FP4_BLOCK32, ScaleKind::E8M0,
         ActNumerics::FP8_BLOCK128, OutKind::BF16, true, true, true},
        {"unweighted norm, exact", 768, 512, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::EXACT,
         OutKind::BF16, false, true, true},
        {"1,536 columns (partial last chunks)", 400, 1536, WeightKind::FP8_BLOCK128, ScaleKind::E8M0,
         ActNumerics::FP8_BLOCK128, OutKind::F32, true, false, true},
    };
    for (const NormedCase& c : cases)
        if (c.quick || !quick_mode()) check_normed(c, ws_);
}

TEST_F(NormedGemvTest, RefusalsNameTheField) {
    std::mt19937_64 rng(fresh_seed());
    const TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 256, 1024);
    const TestWeight bf = make_weight(rng, WeightKind::BF16, ScaleKind::NONE, 256, 1024);
    const TestWeight wide = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 256, 4096);
    DeviceArray<uint16_t> x(random_bf16(rng, 4096, 1.f)), normed(4096);
    DeviceArray<float> y(256);
    Prepared prep(1024, WeightKind::FP8_BLOCK128, ActNumerics::FP8_BLOCK128);
    cuda::NormedInput in;
    in.x = reinterpret_cast<const __nv_bfloat16*>(x.ptr);
    in.normed_out = reinterpret_cast<__nv_bfloat16*>(normed.ptr);
    in.prepared_out = &prep.act;
    const cuda::DeviceLinear dw = w.device();
    ASSERT_STREQ(cuda::normed_gemv_unsupported(in, dw), "");
    const auto refused = [&](const cuda::NormedInput& bad, const cuda::DeviceLinear& bw, std::string_view field) {
        const std::string why = cuda::normed_gemv_unsupported(bad, bw);
        EXPECT_NE(why.find(field), std::string::npos) << why;
        expect_named_error([&] { cuda::normed_gemv(bad, bw, y.ptr, OutKind::F32, 256, nullptr, nullptr); }, field);
    };
    refused(in, bf.device(), "weight: FP8 or FP4");
    refused(in, wide.device(), "weight: in");
    cuda::NormedInput bad = in;
    bad.x = nullptr;
    refused(bad, dw, "x:");
    bad = in;
    bad.normed_out = reinterpret_cast<__nv_bfloat16*>(x.ptr) + 8;  // overlaps x
    refused(bad, dw, "normed_out");
    cuda::PreparedActivation other = prep.act;
    other.layout = WeightKind::FP4_BLOCK32;
    bad = in;
    bad.prepared_out = &other;
    refused(bad, dw, "prepared_out");
    expect_named_error([&] { cuda::normed_gemv(in, dw, nullptr, OutKind::F32, 256, nullptr, nullptr); }, "output");
}

}  // namespace
}  // namespace flashseek::test
