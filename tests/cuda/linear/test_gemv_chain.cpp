// The persistent two-GEMV chain (cuda/gemm/gemv_chain.cuh) against the path it replaces: grouped simt_gemv for A
// (bf16 output), prepare_activation of that output for B, simt_gemv for B, with the K splits plan_linear gives
// simt_gemv. Every output of the chain — A's bf16 output, its prepared form and B's output — must equal the
// per-kernel path's bit for bit, on every launch of a run of several (the counters are reset by the kernel, which
// the last check reads back); the per-kernel result is also checked against the CPU reference (dequantized
// weights, fp32) so the comparison is not between two wrong answers. Random data with fresh seeds, outputs
// poisoned before every launch; cases: V4-Flash's wo_a / wo_b (8 groups of 1,024 rows x 4,096, then 4,096 x
// 8,192) with the production workspace's splits and with one split (two staged chunks per row of B), E8M0 and fp32
// scales, release and exact numerics for B's input, bf16 and fp32 outputs, other tile heights (2 to 16 rows); and
// the query path with its norm (V4-Flash's wq_a 1,024 x 4,096, q_norm, wq_b 32,768 x 1,024, against simt_gemv,
// rmsnorm writing the prepared copy as the backend calls it, simt_gemv), where the normed row must match too.
// --quick (compute-sanitizer) keeps the small cases. Then the refusals, each naming its field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "cpu/ops.h"
#include "cuda/common/arch.cuh"
#include "cuda/gemm/gemv_chain.cuh"
#include "cuda/gemm/linear_catalogue.h"
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

struct ChainCase {
    const char* name;
    int groups;
    int64_t rows_per_group, ka, nb;  // A: [groups * rows_per_group, ka]; B: [nb, groups * rows_per_group]
    ActNumerics numerics_b;
    OutKind out;
    ScaleKind scale;
    bool workspace_splits;  // plan with the split-K workspace (the backend's case) or without (one split)
    bool quick;             // in the --quick list (compute-sanitizer)
    bool norm = false;      // RMSNorm of A's output before B (the query path: q_norm), groups 1
};

struct Prepared {
    DeviceArray<uint16_t> values;
    DeviceArray<float> scales;
    cuda::PreparedActivation act;
    explicit Prepared(int64_t k)
        : values(cuda::prepared_values_bytes(1, k) / 2), scales(cuda::prepared_scales_bytes(1, k) / 4) {
        values.poison();
        scales.poison();
        act.values = values.ptr;
        act.scales = scales.ptr;
    }
};

template <typename T>
std::vector<T> first(const DeviceArray<T>& a, size_t n) {
    std::vector<T> h = a.download();
    h.resize(n);
    return h;
}

void check_chain(const ChainCase& c, const cuda::GemmWorkspace& ws) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(seed) + " (FS_TEST_SEED to reproduce)");
    std::mt19937_64 rng(seed);
    const int64_t ma = c.groups * c.rows_per_group, kx = c.groups * c.ka;
    const TestWeight wa = make_weight(rng, WeightKind::FP8_BLOCK128, c.scale, ma, c.ka);
    const TestWeight wb = make_weight(rng, WeightKind::FP8_BLOCK128, c.scale, c.nb, ma);
    // N(0, 1) with a quarter of the values scaled by 1e-3 (128-blocks of uneven magnitude), bf16.
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<uint16_t> xh(static_cast<size_t>(kx));
    for (auto& v : xh) v = f32_to_bf16(d(rng) * (rng() % 4 == 0 ? 1e-3f : 1.f));
    DeviceArray<uint16_t> x(xh);
    Prepared xa(kx);  // exact numerics, as the backend prepares wo_a's input
    cuda::prepare_activation(x.ptr, false, 1, kx, kx, WeightKind::FP8_BLOCK128, ActNumerics::EXACT, xa.act, nullptr);

    // The per-kernel path.
    const KernelPolicy simt = KernelPolicy::only("simt_gemv");
    const cuda::GemmWorkspace* plan_ws = c.workspace_splits ? &ws : nullptr;
    const cuda::DeviceLinear da = wa.device(), db = wb.device();
    const cuda::LinearPlan plan_a = cuda::plan_linear(xa.act, da, c.groups, plan_ws, simt);
    ASSERT_EQ(plan_a.variant, "simt_gemv");
    DeviceArray<uint16_t> mid_ref(static_cast<size_t>(ma));
    mid_ref.poison();
    if (c.groups > 1)
        cuda::grouped_linear(xa.act, da, c.groups, mid_ref.ptr, OutKind::BF16, ma, plan_ws, nullptr, simt);
    else
        cuda::linear(xa.act, da, mid_ref.ptr, OutKind::BF16, ma, plan_ws, nullptr, simt);
    Prepared az(ma);
    // The norm's weight (bf16 around 1) and eps, and its output as the backend's q_norm writes it: bf16 beside the
    // copy prepared for B in the same kernel.
    std::uniform_real_distribution<float> wd(0.5f, 1.5f);
    std::vector<uint16_t> nwh(static_cast<size_t>(ma));
    for (auto& v : nwh) v = f32_to_bf16(wd(rng));
    DeviceArray<uint16_t> norm_w(nwh);
    const float eps = 1e-6f;
    DeviceArray<uint16_t> normed_ref(static_cast<size_t>(ma));
    normed_ref.poison();
    if (c.norm) {
        az.act.layout = WeightKind::FP8_BLOCK128;
        az.act.numerics = c.numerics_b;
        az.act.format = cuda::ActFormat::MMA_F16;
        az.act.raw = false;
        cuda::rmsnorm(reinterpret_cast<const __nv_bfloat16*>(mid_ref.ptr), ma,
                      reinterpret_cast<__nv_bfloat16*>(normed_ref.ptr), ma,
                      reinterpret_cast<const __nv_bfloat16*>(norm_w.ptr), 1, int(ma), eps, nullptr, &az.act);
    } else {
        cuda::prepare_activation(mid_ref.ptr, false, 1, ma, ma, WeightKind::FP8_BLOCK128, c.numerics_b, az.act,
                                 nullptr);
    }
    const cuda::LinearPlan plan_b = cuda::plan_linear(az.act, db, 1, plan_ws, simt);
    ASSERT_EQ(plan_b.variant, "simt_gemv");
    const size_t elem = c.out == OutKind::F32 ? 4 : 2;
    DeviceArray<uint8_t> y_ref(size_t(c.nb) * elem);
    y_ref.poison();
    cuda::linear(az.act, db, y_ref.ptr, c.out, c.nb, plan_ws, nullptr, simt);
    CUDA_CHECK(cudaDeviceSynchronize());
    SCOPED_TRACE("splits " + std::to_string(plan_a.k_splits) + " / " + std::to_string(plan_b.k_splits));
    if (c.workspace_splits && c.ka >= 4096) {
        EXPECT_GT(plan_a.k_splits * plan_b.k_splits, 1) << "the workspace case should reach split-K";
    }
    const std::vector<uint16_t> mid_expect = mid_ref.download();
    const std::vector<uint16_t> normed_expect = normed_ref.download();
    const std::vector<uint16_t> midv_expect = first(az.values, size_t(ma));
    const std::vector<float> mids_expect = first(az.scales, size_t(ma / 128));
    const std::vector<uint8_t> y_expect = y_ref.download();

    // The CPU reference of the same chain (fp32 over the dequantized weights; B's input act_quant in release).
    {
        const std::vector<float> xf = bf16_to_f32_vec(xh), waf = wa.dequantized(), wbf = wb.dequantized();
        std::vector<float> mid(static_cast<size_t>(ma)), y(static_cast<size_t>(c.nb));
        cpu::grouped_out_proj(xf.data(), 1, c.groups, c.rows_per_group, c.ka, waf.data(), mid.data(), nullptr);
        for (auto& v : mid) v = round_bf16(v);
        std::vector<float> midn = mid;
        if (c.norm) {
            double ss = 0;
            for (float v : mid) ss += double(v) * v;
            const float r = float(1.0 / std::sqrt(ss / double(ma) + eps));
            for (int64_t i = 0; i < ma; ++i) midn[size_t(i)] = round_bf16(mid[size_t(i)] * r * bf16_to_f32(nwh[size_t(i)]));
            EXPECT_LE(rel_l2(bf16_to_f32_vec(normed_expect), midn), 1e-2) << "the norm against the CPU";
        }
        std::vector<float> midq = midn;
        if (c.numerics_b == ActNumerics::FP8_BLOCK128) cpu::act_quant_fp8_block128(midn.data(), ma, midq.data());
        cpu::linear_f32(midq.data(), 1, wbf.data(), c.nb, ma, y.data(), nullptr);
        EXPECT_LE(rel_l2(bf16_to_f32_vec(mid_expect), mid), 1e-2) << "A against the CPU";
        EXPECT_LE(rel_l2(output_as_f32(y_expect, c.out == OutKind::F32, size_t(c.nb)), y), 2e-2) << "B against the CPU";
    }

    // The chain, several launches.
    DeviceArray<uint16_t> mid(static_cast<size_t>(ma));
    Prepared mp(ma);
    DeviceArray<uint8_t> y(size_t(c.nb) * elem);
    cuda::GemvChain g;
    g.x = &xa.act;
    g.a = da;
    g.groups = c.groups;
    g.splits_a = plan_a.k_splits;
    g.b = db;
    g.splits_b = plan_b.k_splits;
    g.numerics_b = c.numerics_b;
    g.mid = mid.ptr;
    g.mid_values = mp.values.ptr;
    g.mid_scales = mp.scales.ptr;
    g.y = y.ptr;
    g.y_kind = c.out;
    DeviceArray<uint16_t> normed(static_cast<size_t>(ma));
    if (c.norm) {
        g.norm_weight = norm_w.ptr;
        g.norm_eps = eps;
        g.mid_normed = normed.ptr;
    }
    DeviceArray<uint32_t> counters(size_t(cuda::gemv_chain_counters(g)) + 5);
    CUDA_CHECK(cudaMemset(counters.ptr, 0, counters.n * 4));
    g.counters = counters.ptr;
    g.n_counters = int(counters.n);
    ASSERT_EQ(cuda::gemv_chain_refusal(g), "");
    for (int launch = 0; launch < 3; ++launch) {
        // The last launch leaves a third of the SMs to other grids: the rows' arithmetic, and so the bits, do not
        // depend on the grid.
        g.free_sms = launch == 2 ? cuda::current_arch().sm_count / 3 : 0;
        SCOPED_TRACE("launch " + std::to_string(launch) + ", grid " + std::to_string(cuda::gemv_chain_grid(g)));
        mid.poison();
        normed.poison();
        mp.values.poison();
        mp.scales.poison();
        y.poison();
        cuda::gemv_chain(g, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(same_bytes(mid.download(), mid_expect)) << "A's bf16 output";
        if (c.norm) {
            EXPECT_TRUE(same_bytes(normed.download(), normed_expect)) << "the normed bf16 output";
        }
        EXPECT_TRUE(same_bytes(first(mp.values, size_t(ma)), midv_expect)) << "A's output prepared for B (values)";
        EXPECT_TRUE(same_bytes(first(mp.scales, size_t(ma / 128)), mids_expect)) << "... (scales)";
        EXPECT_TRUE(same_bytes(y.download(), y_expect)) << "B's output";
        const std::vector<uint32_t> left = counters.download();
        EXPECT_EQ(std::count(left.begin(), left.end(), 0u), int64_t(left.size())) << "counters not left zeroed";
    }
}

class GemvChainTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::current_arch().cc < 90) GTEST_SKIP() << "the chain needs sm_90+";
        ws_ = cuda::create_gemm_workspace();  // the backend's workspace size: its splits
    }
    void TearDown() override {
        if (ws_.partials) cuda::destroy_gemm_workspace(ws_);
    }
    cuda::GemmWorkspace ws_;
};

TEST_F(GemvChainTest, BitIdenticalToThePerKernelPath) {
    const ChainCase cases[] = {
        {"V4 wo_a/wo_b, release", 8, 1024, 4096, 4096, ActNumerics::FP8_BLOCK128, OutKind::BF16, ScaleKind::E8M0,
         true, false},
        {"V4, exact, fp32 scales and output", 8, 1024, 4096, 4096, ActNumerics::EXACT, OutKind::F32, ScaleKind::F32,
         true, false},
        {"V4, one split each", 8, 1024, 4096, 4096, ActNumerics::FP8_BLOCK128, OutKind::BF16, ScaleKind::E8M0, false,
         false},
        {"4 groups x 512 rows of 2,048 (8-row tiles)", 4, 512, 2048, 1536, ActNumerics::EXACT, OutKind::BF16,
         ScaleKind::E8M0, true, true},
        {"ungrouped 1,024 x 1,024 (16-row tiles)", 1, 1024, 1024, 384, ActNumerics::FP8_BLOCK128, OutKind::F32,
         ScaleKind::F32, true, true},
        {"2 groups x 1,024 rows of 8,192 (2-row tiles)", 2, 1024, 8192, 640, ActNumerics::FP8_BLOCK128,
         OutKind::BF16, ScaleKind::E8M0, false, false},
        {"V4 wq_a / q_norm / wq_b, release", 1, 1024, 4096, 32768, ActNumerics::FP8_BLOCK128, OutKind::BF16,
         ScaleKind::E8M0, true, false, true},
        {"V4 query path, exact, fp32 scales, one split", 1, 1024, 4096, 32768, ActNumerics::EXACT, OutKind::BF16,
         ScaleKind::F32, false, false, true},
        {"norm of 1,024 rows of 2,048 (8-row tiles)", 1, 1024, 2048, 512, ActNumerics::FP8_BLOCK128, OutKind::F32,
         ScaleKind::E8M0, true, true, true},
        {"norm of 512 rows of 1,024", 1, 512, 1024, 512, ActNumerics::EXACT, OutKind::BF16, ScaleKind::E8M0, true,
         true, true},
    };
    for (const ChainCase& c : cases)
        if (c.quick || !quick_mode()) check_chain(c, ws_);
}

TEST_F(GemvChainTest, RefusalsNameTheField) {
    std::mt19937_64 rng(fresh_seed());
    const TestWeight wa = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 2048, 4096);
    const TestWeight wb = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 512, 2048);
    const TestWeight w4 = make_weight(rng, WeightKind::FP4_BLOCK32, ScaleKind::E8M0, 512, 2048);
    const TestWeight wide = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 2048, 8192);  // one group
    Prepared xa(2 * 4096), mp(2048);
    DeviceArray<uint16_t> x(random_bf16(rng, 2 * 4096, 1.f)), mid(2048);
    DeviceArray<float> y(512);
    DeviceArray<uint32_t> counters(64);
    cuda::prepare_activation(x.ptr, false, 1, 2 * 4096, 2 * 4096, WeightKind::FP8_BLOCK128, ActNumerics::EXACT,
                             xa.act, nullptr);
    cuda::GemvChain g;
    g.x = &xa.act;
    g.a = wa.device();
    g.groups = 2;
    g.b = wb.device();
    g.mid = mid.ptr;
    g.mid_values = mp.values.ptr;
    g.mid_scales = mp.scales.ptr;
    g.y = y.ptr;
    g.counters = counters.ptr;
    g.n_counters = 64;
    ASSERT_EQ(cuda::gemv_chain_refusal(g), "");
    const auto refused = [&](cuda::GemvChain bad, std::string_view field) {
        EXPECT_NE(cuda::gemv_chain_refusal(bad).find(field), std::string::npos) << cuda::gemv_chain_refusal(bad);
        expect_named_error([&] { cuda::gemv_chain(bad, nullptr); }, field);
    };
    cuda::GemvChain bad = g;
    bad.b = w4.device();
    refused(bad, "b: only FP8");
    bad = g;
    bad.groups = 4;
    refused(bad, "x: width");
    bad = g;
    bad.splits_b = 0;
    refused(bad, "splits");
    bad = g;
    bad.n_counters = 1;
    refused(bad, "counters");
    bad = g;
    bad.y = nullptr;
    refused(bad, "y:");
    bad = g;
    bad.norm_weight = x.ptr;  // any aligned bf16 storage: refused for the grouped A
    bad.mid_normed = mp.values.ptr;
    refused(bad, "norm_weight");
    bad.groups = 1;
    bad.a = wide.device();
    bad.mid_normed = mid.ptr;
    refused(bad, "mid_normed");
    cuda::PreparedActivation two = xa.act;
    two.m = 2;
    bad = g;
    bad.x = &two;
    refused(bad, "x: one prepared row");
}

}  // namespace
}  // namespace flashseek::test
