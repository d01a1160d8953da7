// Op-consistency cases for the GPU linear layers (cuda/gemm/linear.cuh) against cpu::dequantize_linear +
// cpu::act_quant_fp8_block128 + cpu::linear_f32 / cpu::grouped_out_proj, on random data with fresh seeds and
// odd shapes. Outputs are poisoned (NaN) before every run, so an unwritten element fails the comparison.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <sstream>

#include "cpu/ops.h"
#include "cuda/common/arch.cuh"
#include "cuda/gemm/linear.cuh"
#include "harness.h"
#include "weights.h"

namespace flashseek::test {
namespace {

using cuda::ActNumerics;
using cuda::OutKind;
using cuda::ScaleKind;
using cuda::WeightKind;

struct LinearCase {
    WeightKind kind;
    ScaleKind scale;
    ActNumerics numerics;
    int64_t M, N, K;
    OutKind out;
    bool f32_input = false;
};

// Thresholds on ||gpu - cpu|| / ||cpu||: fp32 outputs differ only by accumulation order (2e-5), except FP4 with
// F32 scales, where per-group scale ratios are rounded to f16 (1e-3), and fp32 inputs, which are rounded to f16
// (1e-3) or, for BF16 weights, to bf16 (4e-3); bf16 outputs add one bf16 rounding (4e-3).
double threshold(const LinearCase& c) {
    double t = 2e-5;
    if ((c.kind == WeightKind::FP4_BLOCK32 && c.scale == ScaleKind::F32) || c.f32_input) t = 1e-3;
    if (c.f32_input && c.kind == WeightKind::BF16) t = 4e-3;
    if (c.out == OutKind::BF16) t = std::max(t, 4e-3);
    return t;
}

std::string describe(const LinearCase& c, uint64_t seed) {
    std::ostringstream os;
    os << "kind=" << int(c.kind) << " scale=" << int(c.scale) << " numerics=" << int(c.numerics) << " M=" << c.M
       << " N=" << c.N << " K=" << c.K << " out=" << (c.out == OutKind::F32 ? "f32" : "bf16")
       << " f32_input=" << c.f32_input << " seed=" << seed << " (FS_TEST_SEED to reproduce)";
    return os.str();
}

// CPU reference: x [M, K] fp32 (already bf16-exact unless f32_input), optional act_quant, dequantized W.
std::vector<float> reference(const LinearCase& c, const std::vector<float>& x, const TestWeight& w) {
    std::vector<float> xq = x;
    if (c.numerics == ActNumerics::FP8_BLOCK128)
        for (int64_t m = 0; m < c.M; ++m) cpu::act_quant_fp8_block128(&x[m * c.K], c.K, &xq[m * c.K]);
    const std::vector<float> wf = w.dequantized();
    std::vector<float> y(size_t(c.M * c.N));
    cpu::linear_f32(xq.data(), c.M, wf.data(), c.N, c.K, y.data(), nullptr);
    return y;
}

struct GpuRun {
    std::vector<float> y;
    cuda::LinearPlan plan;
};

GpuRun run_gpu(const LinearCase& c, const std::vector<float>& x, const TestWeight& w, const cuda::GemmWorkspace* ws,
               int64_t ld_y_extra = 3) {
    // Input on the device as bf16 or fp32, with a row stride wider than K to exercise ld_x.
    const int64_t ld_x = c.K + 5;
    std::unique_ptr<DeviceArray<uint16_t>> xb;
    std::unique_ptr<DeviceArray<float>> xf;
    if (c.f32_input) {
        std::vector<float> h(size_t(c.M * ld_x), 0.f);
        for (int64_t m = 0; m < c.M; ++m)
            for (int64_t k = 0; k < c.K; ++k) h[m * ld_x + k] = x[m * c.K + k];
        xf = std::make_unique<DeviceArray<float>>(h);
    } else {
        std::vector<uint16_t> h(size_t(c.M * ld_x), 0);
        for (int64_t m = 0; m < c.M; ++m)
            for (int64_t k = 0; k < c.K; ++k) h[m * ld_x + k] = f32_to_bf16(x[m * c.K + k]);
        xb = std::make_unique<DeviceArray<uint16_t>>(h);
    }
    DeviceArray<uint16_t> pv(cuda::prepared_values_bytes(c.M, c.K) / 2);
    DeviceArray<float> ps(cuda::prepared_scales_bytes(c.M, c.K) / 4);
    pv.poison();
    ps.poison();
    const int64_t ld_y = c.N + ld_y_extra;
    GpuRun r;
    const void* xin = c.f32_input ? static_cast<const void*>(xf->ptr) : static_cast<const void*>(xb->ptr);
    if (c.out == OutKind::F32) {
        DeviceArray<float> y(size_t(c.M * ld_y));
        y.poison();
        auto p = cuda::prepare_and_linear(xin, c.f32_input, c.M, ld_x, w.device(), c.numerics, pv.ptr, ps.ptr, y.ptr,
                                          c.out, ld_y, ws, nullptr);
        r.plan = cuda::plan_linear(p, w.device(), 1, ws);
        CUDA_CHECK(cudaDeviceSynchronize());
        auto h = y.download();
        for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) r.y.push_back(h[m * ld_y + n]);
    } else {
        DeviceArray<uint16_t> y(size_t(c.M * ld_y));
        y.poison();
        auto p = cuda::prepare_and_linear(xin, c.f32_input, c.M, ld_x, w.device(), c.numerics, pv.ptr, ps.ptr, y.ptr,
                                          c.out, ld_y, ws, nullptr);
        r.plan = cuda::plan_linear(p, w.device(), 1, ws);
        CUDA_CHECK(cudaDeviceSynchronize());
        auto h = y.download();
        for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) r.y.push_back(bf16_to_f32(h[m * ld_y + n]));
    }
    return r;
}

cuda::LinearPlan check_case(const LinearCase& c, const cuda::GemmWorkspace* ws, double max_err = -1) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c, seed));
    std::mt19937_64 rng(seed);
    TestWeight w = make_weight(rng, c.kind, c.scale, c.N, c.K);
    std::vector<float> x(size_t(c.M * c.K));
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto& v : x) v = c.f32_input ? d(rng) : round_bf16(d(rng));
    const auto ref = reference(c, x, w);
    const auto gpu = run_gpu(c, x, w, ws);
    const double err = rel_l2(gpu.y, ref);
    EXPECT_LE(err, max_err >= 0 ? max_err : threshold(c))
        << "plan: gemv " << gpu.plan.gemv << " tokens/pass " << gpu.plan.tokens_per_pass << " k_splits "
        << gpu.plan.k_splits << " aligned " << gpu.plan.aligned;
    return gpu.plan;
}

// Turns the small-M GEMV off for one scope (the mma.sync kernel then serves M <= 8 too).
struct GemvOff {
    GemvOff() { cuda::set_small_m_gemv(false); }
    ~GemvOff() { cuda::set_small_m_gemv(true); }
};
// Lets the GEMV serve up to its capacity for one scope (kGemvMaxTokens; also the production default since the
// tensor-core GEMV, kept so that the tests do not depend on the default).
struct GemvUpTo8 {
    GemvUpTo8() { cuda::set_small_m_gemv_max_tokens(cuda::kGemvMaxTokens); }
    ~GemvUpTo8() { cuda::set_small_m_gemv_max_tokens(cuda::kGemvDefaultMaxTokens); }
};

// Turns the bulk-copy FP8 GEMV (bulk_gemv.cu) off for one scope: the tests written for the f16 GEMV kernels
// (raw vs prepared bit-identity) keep testing those kernels on sm_90.
struct BulkGemvOff {  // (and the wgmma one, wgmma_gemv.cu, which is taken first)
    BulkGemvOff() {
        cuda::set_bulk_gemv(false);
        cuda::set_wgmma_gemv(false);
    }
    ~BulkGemvOff() {
        cuda::set_bulk_gemv(true);
        cuda::set_wgmma_gemv(true);
    }
};

// The wgmma GEMV (taken first for FP8 in release numerics on sm_90a) is off in every case but WgmmaGemvMatchesCpu,
// so that each case keeps testing the kernel (and the threshold) it was written for.
class LinearTest : public ::testing::Test {
protected:
    void SetUp() override {
        ws_ = cuda::create_gemm_workspace(size_t(8) << 20, 4096);
        cuda::set_wgmma_gemv(false);
    }
    void TearDown() override {
        cuda::destroy_gemm_workspace(ws_);
        cuda::set_wgmma_gemv(true);
    }
    cuda::GemmWorkspace ws_;
};

const std::vector<std::array<int64_t, 3>> kShapes = {
    {1, 1024, 4096},  // wq_a-like decode row, split-K
    {1, 77, 256},     // odd row count
    {3, 200, 384},    // odd tokens, rows not a multiple of 16
    {16, 512, 1024},  // two token tiles per pass
    {5, 130, 416},    // K not a multiple of 128: guarded path
    {33, 96, 640},    // three token passes
    {64, 256, 512},   // prefill-like
    {9, 19, 160},     // tiny, K % 128 != 0
};

TEST_F(LinearTest, Fp8E8m0BothNumerics) {
    for (auto numerics : {ActNumerics::EXACT, ActNumerics::FP8_BLOCK128})
        for (const auto& s : kShapes)
            check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, numerics, s[0], s[1], s[2], OutKind::F32}, &ws_);
}

TEST_F(LinearTest, Fp8F32ScalesBf16Out) {
    for (const auto& s : kShapes)
        check_case({WeightKind::FP8_BLOCK128, ScaleKind::F32, ActNumerics::FP8_BLOCK128, s[0], s[1], s[2],
                    OutKind::BF16},
                   &ws_);
}

TEST_F(LinearTest, Fp4BothNumerics) {
    for (auto numerics : {ActNumerics::EXACT, ActNumerics::FP8_BLOCK128})
        for (const auto& s : kShapes)
            if (s[2] % 32 == 0)
                check_case({WeightKind::FP4_BLOCK32, ScaleKind::E8M0, numerics, s[0], s[1], s[2], OutKind::F32},
                           &ws_);
    check_case({WeightKind::FP4_BLOCK32, ScaleKind::F32, ActNumerics::EXACT, 4, 256, 512, OutKind::F32}, &ws_);
}

TEST_F(LinearTest, Bf16WeightsF32AndBf16Out) {
    for (const auto& s : kShapes) {
        check_case({WeightKind::BF16, ScaleKind::NONE, ActNumerics::EXACT, s[0], s[1], s[2], OutKind::F32}, &ws_);
        check_case({WeightKind::BF16, ScaleKind::NONE, ActNumerics::EXACT, s[0], s[1], s[2], OutKind::BF16}, &ws_);
    }
}

TEST_F(LinearTest, Fp32InputAndNoWorkspace) {
    check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::EXACT, 7, 300, 1024, OutKind::F32, true},
               &ws_);
    check_case({WeightKind::BF16, ScaleKind::NONE, ActNumerics::EXACT, 2, 160, 256, OutKind::F32, true}, nullptr);
    check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::EXACT, 1, 512, 4096, OutKind::F32}, nullptr);
}

TEST_F(LinearTest, SplitKIsDeterministic) {
    GemvOff off;  // the mma.sync kernel's split-K (GemvSplitKDeterministicAndMatchesMma covers the GEMV's)
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    LinearCase c{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::EXACT, 2, 512, 4096, OutKind::F32};
    TestWeight w = make_weight(rng, c.kind, c.scale, c.N, c.K);
    std::vector<float> x(size_t(c.M * c.K));
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto& v : x) v = round_bf16(d(rng));
    const auto a = run_gpu(c, x, w, &ws_);
    const auto b = run_gpu(c, x, w, &ws_);
    EXPECT_GT(a.plan.k_splits, 1);
    EXPECT_EQ(a.y, b.y);
}

// wo_a: G groups of [R, Kg] against cpu::grouped_out_proj.
TEST_F(LinearTest, GroupedOutProjection) {
    struct G { int64_t M, G, R, Kg; ActNumerics numerics; };
    for (const G& g : {G{1, 8, 64, 256, ActNumerics::EXACT}, G{3, 4, 64, 384, ActNumerics::FP8_BLOCK128},
                       G{17, 8, 1024, 128, ActNumerics::EXACT},
                       G{1, 4, 64, 640, ActNumerics::FP8_BLOCK128},  // small-M GEMV, 5 steps per group
                       // shapes of the tiny configs: element-wise fallback (R % 64 != 0 or Kg % 128 != 0)
                       G{2, 4, 24, 192, ActNumerics::EXACT}, G{3, 2, 32, 256, ActNumerics::EXACT}}) {
        const uint64_t seed = fresh_seed();
        std::ostringstream desc;
        desc << "M=" << g.M << " G=" << g.G << " R=" << g.R << " Kg=" << g.Kg << " seed=" << seed;
        SCOPED_TRACE(desc.str());
        std::mt19937_64 rng(seed);
        TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, g.G * g.R, g.Kg);
        const int64_t K = g.G * g.Kg, N = g.G * g.R;
        std::vector<float> x(size_t(g.M * K));
        std::normal_distribution<float> d(0.f, 1.f);
        for (auto& v : x) v = round_bf16(d(rng));
        std::vector<float> xq = x;
        if (g.numerics == ActNumerics::FP8_BLOCK128)
            for (int64_t m = 0; m < g.M; ++m) cpu::act_quant_fp8_block128(&x[m * K], K, &xq[m * K]);
        std::vector<float> ref(size_t(g.M * N));
        const auto wf = w.dequantized();
        cpu::grouped_out_proj(xq.data(), g.M, int(g.G), g.R, g.Kg, wf.data(), ref.data(), nullptr);
        std::vector<uint16_t> xb(x.size());
        for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
        DeviceArray<uint16_t> xd(xb), pv(cuda::prepared_values_bytes(g.M, K) / 2);
        DeviceArray<float> ps(cuda::prepared_scales_bytes(g.M, K) / 4), y(size_t(g.M * N));
        y.poison();
        cuda::PreparedActivation p;
        p.values = pv.ptr;
        p.scales = ps.ptr;
        cuda::prepare_activation(xd.ptr, false, g.M, K, K, WeightKind::FP8_BLOCK128, g.numerics, p, nullptr);
        cuda::grouped_linear(p, w.device(), int(g.G), y.ptr, OutKind::F32, N, &ws_, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_LE(rel_l2(y.download(), ref), 2e-5);  // fp32 output: accumulation order only
    }
}

// The small-M GEMV (gemv.cu), up to its 16-token capacity: M = 1..16 with odd row counts (not multiples of 16),
// K with step counts that do not divide among the CTA's 4 warps, both scale kinds and numerics,
// with and without split-K. Thresholds: fp32 outputs differ from the CPU only by summation order (2e-5; FP4
// with F32 scales too: the GEMV applies them in fp32, not folded into f16 as the mma path does); bf16 outputs
// add one bf16 rounding (4e-3).
TEST_F(LinearTest, SmallMGemvMatchesCpu) {
    GemvUpTo8 up_to_8;
    const std::vector<std::array<int64_t, 3>> shapes = {
        {1, 1024, 4096},  // wq_a-like: split-K
        {1, 77, 384},     // 3 steps, 77 rows
        {3, 203, 1152},   // 9 steps, odd tokens and rows
        {8, 130, 640},    // 8 tokens, 5 steps
        {2, 33, 128},     // one step
        {5, 500, 2304},   // 5 tokens (8-token tile), 18 steps
        {4, 1000, 8192},  // long rows: several staged chunks per CTA
        {11, 96, 1024},   // 11 tokens: two FP8 token tiles, FP4 in passes of 4
        {16, 272, 4096},  // 16 tokens, split-K
    };
    for (const cuda::GemmWorkspace* ws : {static_cast<const cuda::GemmWorkspace*>(&ws_),
                                          static_cast<const cuda::GemmWorkspace*>(nullptr)})
        for (const auto& s : shapes) {
            for (auto numerics : {ActNumerics::EXACT, ActNumerics::FP8_BLOCK128}) {
                auto p = check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, numerics, s[0], s[1], s[2],
                                     OutKind::F32}, ws, 2e-5);
                EXPECT_TRUE(p.gemv);
                p = check_case({WeightKind::FP4_BLOCK32, ScaleKind::E8M0, numerics, s[0], s[1], s[2], OutKind::F32},
                               ws, 2e-5);
                EXPECT_TRUE(p.gemv);
            }
            check_case({WeightKind::FP8_BLOCK128, ScaleKind::F32, ActNumerics::FP8_BLOCK128, s[0], s[1], s[2],
                        OutKind::BF16}, ws, 4e-3);
            check_case({WeightKind::FP4_BLOCK32, ScaleKind::F32, ActNumerics::EXACT, s[0], s[1], s[2], OutKind::F32},
                       ws, 2e-5);
        }
    // fp32 input (rounded to f16 when prepared: 1e-3)
    check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::EXACT, 3, 96, 512, OutKind::F32, true},
               &ws_, 1e-3);
}

// The same small-M shapes through the mma.sync kernel (GEMV off), so both paths stay covered.
TEST_F(LinearTest, SmallMMmaPathMatchesCpu) {
    GemvOff off;
    for (const auto& s : std::vector<std::array<int64_t, 3>>{{1, 1024, 4096}, {3, 203, 1152}, {8, 130, 640}}) {
        auto p = check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::FP8_BLOCK128, s[0], s[1], s[2],
                             OutKind::F32}, &ws_);
        EXPECT_FALSE(p.gemv);
        p = check_case({WeightKind::FP4_BLOCK32, ScaleKind::E8M0, ActNumerics::EXACT, s[0], s[1], s[2], OutKind::F32},
                       &ws_);
        EXPECT_FALSE(p.gemv);
    }
}

// GEMV split-K is deterministic and agrees with the mma path to summation order.
TEST_F(LinearTest, GemvSplitKDeterministicAndMatchesMma) {
    GemvUpTo8 up_to_8;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    for (int64_t M : {1, 3, 8, 16}) {
        LinearCase c{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::FP8_BLOCK128, M, 512, 4096, OutKind::F32};
        TestWeight w = make_weight(rng, c.kind, c.scale, c.N, c.K);
        std::vector<float> x(size_t(c.M * c.K));
        std::normal_distribution<float> d(0.f, 1.f);
        for (auto& v : x) v = round_bf16(d(rng));
        const auto a = run_gpu(c, x, w, &ws_);
        const auto b = run_gpu(c, x, w, &ws_);
        EXPECT_TRUE(a.plan.gemv);
        EXPECT_GT(a.plan.k_splits, 1);
        EXPECT_EQ(a.y, b.y);
        GemvOff off;
        const auto m = run_gpu(c, x, w, &ws_);
        EXPECT_FALSE(m.plan.gemv);
        EXPECT_LE(rel_l2(a.y, m.y), 2e-5) << "M=" << M;
    }
}

// Raw activations (raw_activation: bf16 rows prepared inside the tensor-core GEMV kernels) give bit-identical
// outputs to a prepare_activation + linear pair for M > 1: same act_quant scales, same e4m3 / f16 rounding, same
// kernels and summation order (a prepared single token takes the SIMT GEMV: summation order only, 2e-5). Covers both numerics, FP8 (E8M0 / F32 scales) and FP4, M = 1..16, split-K or not, grouped (wo_a-like)
// and a row stride wider than K; outputs poisoned; also against the CPU (2e-5, fp32 output).
TEST_F(LinearTest, RawActivationMatchesPreparedBitwise) {
    GemvUpTo8 up_to_16;
    BulkGemvOff bulk_off;
    struct R { WeightKind kind; ScaleKind scale; int64_t M, N, K; int groups; };
    for (const R& c : {R{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 1, 1024, 4096, 1},
                       R{WeightKind::FP8_BLOCK128, ScaleKind::F32, 3, 203, 1152, 1},
                       R{WeightKind::FP4_BLOCK32, ScaleKind::E8M0, 2, 130, 640, 1},
                       R{WeightKind::FP4_BLOCK32, ScaleKind::E8M0, 7, 77, 2048, 1},
                       R{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 16, 512, 2048, 1},
                       R{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 5, 4 * 64, 512, 4}}) {
        for (auto numerics : {ActNumerics::EXACT, ActNumerics::FP8_BLOCK128})
            for (const cuda::GemmWorkspace* ws : {static_cast<const cuda::GemmWorkspace*>(&ws_),
                                                  static_cast<const cuda::GemmWorkspace*>(nullptr)}) {
                const uint64_t seed = fresh_seed();
                std::ostringstream desc;
                desc << "kind=" << int(c.kind) << " scale=" << int(c.scale) << " M=" << c.M << " N=" << c.N
                     << " K=" << c.K << " groups=" << c.groups << " numerics=" << int(numerics) << " ws=" << (ws != nullptr)
                     << " seed=" << seed;
                SCOPED_TRACE(desc.str());
                std::mt19937_64 rng(seed);
                const int64_t Kx = c.K * c.groups;  // activation width
                TestWeight w = make_weight(rng, c.kind, c.scale, c.N, c.K);
                const int64_t ld_x = Kx + 24;  // wider than K, a multiple of 8
                std::normal_distribution<float> d(0.f, 1.f);
                std::vector<float> x(size_t(c.M * Kx));
                for (auto& v : x) v = round_bf16(d(rng) * (rng() % 4 == 0 ? 1e-3f : 1.f));  // uneven block amax
                std::vector<uint16_t> xb(size_t(c.M * ld_x), 0);
                for (int64_t m = 0; m < c.M; ++m)
                    for (int64_t k = 0; k < Kx; ++k) xb[size_t(m * ld_x + k)] = f32_to_bf16(x[size_t(m * Kx + k)]);
                DeviceArray<uint16_t> xd(xb), pv(cuda::prepared_values_bytes(c.M, Kx) / 2);
                DeviceArray<float> ps(cuda::prepared_scales_bytes(c.M, Kx) / 4), ya(size_t(c.M * c.N)),
                    yb(size_t(c.M * c.N));
                ya.poison();
                yb.poison();
                cuda::PreparedActivation p;
                p.values = pv.ptr;
                p.scales = ps.ptr;
                cuda::prepare_activation(xd.ptr, false, c.M, Kx, ld_x, c.kind, numerics, p, nullptr);
                ASSERT_TRUE(cuda::linear_takes_raw(c.M, w.device(), c.groups));
                const cuda::PreparedActivation r = cuda::raw_activation(xd.ptr, c.M, Kx, ld_x, c.kind, numerics);
                if (c.groups > 1) {
                    cuda::grouped_linear(p, w.device(), c.groups, ya.ptr, OutKind::F32, c.N, ws, nullptr);
                    cuda::grouped_linear(r, w.device(), c.groups, yb.ptr, OutKind::F32, c.N, ws, nullptr);
                } else {
                    cuda::linear(p, w.device(), ya.ptr, OutKind::F32, c.N, ws, nullptr);
                    cuda::linear(r, w.device(), yb.ptr, OutKind::F32, c.N, ws, nullptr);
                }
                CUDA_CHECK(cudaDeviceSynchronize());
                const auto a = ya.download(), b = yb.download();
                ASSERT_EQ(a.size(), b.size());
                if (c.M > 1)  // same kernel both ways (one prepared token takes the SIMT GEMV instead)
                    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
                else
                    EXPECT_LE(rel_l2(b, a), 2e-5);
                if (c.groups == 1) {
                    LinearCase lc{c.kind, c.scale, numerics, c.M, c.N, c.K, OutKind::F32};
                    EXPECT_LE(rel_l2(b, reference(lc, x, w)), 2e-5);
                }
            }
    }
}

// The bulk-copy FP8 GEMV (sm_90+, release numerics, M <= 16, K % 256 == 0, rows % 16 == 0): against the CPU on
// decode shapes (single stage, split-K, two token tiles, F32 / E8M0 scales, bf16 / fp32 out, with and without a
// workspace), deterministic, and against the f16 GEMV on a grouped (wo_a-like) projection. Thresholds as the other
// GEMV cases: fp32 sums of exact products differ by summation order only.
// plan_linear's choice (the LinearPlan member `flag`) for an FP8 release-numerics activation of M tokens against an
// [N, K] weight: eligibility only looks at shapes and pointer alignment, so no memory is touched.
bool planned(const cuda::GemmWorkspace& ws, int64_t M, int64_t N, int64_t K, bool cuda::LinearPlan::*flag) {
    cuda::PreparedActivation p;
    p.layout = WeightKind::FP8_BLOCK128;
    p.numerics = ActNumerics::FP8_BLOCK128;
    p.m = M;
    p.k = p.k_pad = K;
    p.m_pad = (M + 7) / 8 * 8;
    p.values = reinterpret_cast<uint16_t*>(uintptr_t(256));
    cuda::DeviceLinear d{WeightKind::FP8_BLOCK128, ScaleKind::E8M0, N, K, reinterpret_cast<const void*>(uintptr_t(4096)),
                         nullptr};
    return cuda::plan_linear(p, d, 1, &ws).*flag;
}

// Split-K determinism of a streaming GEMV and its agreement with another path, plain and grouped (wo_a-like):
// select(run) sets the paths for runs 0 and 1 (the GEMV under test, whose plan has `flag`) and run 2 (the other
// path); runs 0 and 1 must match bit for bit, run 2 within max_rel.
void check_split_k_and_agreement(const cuda::GemmWorkspace& ws, int64_t M, double max_rel,
                                 bool cuda::LinearPlan::*flag, const std::function<void(int)>& select) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    for (int groups : {1, 4}) {
        const int64_t N = 4 * 64, K = 1024, Kx = K * groups;
        TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, N, K);
        std::vector<uint16_t> xb = random_bf16(rng, size_t(M * Kx), 1.f);
        DeviceArray<uint16_t> xd(xb), pv(cuda::prepared_values_bytes(M, Kx) / 2);
        DeviceArray<float> ps(cuda::prepared_scales_bytes(M, Kx) / 4), y(size_t(M * N));
        cuda::PreparedActivation p;
        p.values = pv.ptr;
        p.scales = ps.ptr;
        cuda::prepare_activation(xd.ptr, false, M, Kx, Kx, WeightKind::FP8_BLOCK128, ActNumerics::FP8_BLOCK128, p,
                                 nullptr);
        std::vector<float> out[3];
        for (int run = 0; run < 3; ++run) {
            select(run);
            EXPECT_EQ(cuda::plan_linear(p, w.device(), groups, &ws).*flag, run < 2);
            y.poison();
            if (groups > 1)
                cuda::grouped_linear(p, w.device(), groups, y.ptr, OutKind::F32, N, &ws, nullptr);
            else
                cuda::linear(p, w.device(), y.ptr, OutKind::F32, N, &ws, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            out[run] = y.download();
        }
        EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0) << "groups=" << groups;
        EXPECT_LE(rel_l2(out[0], out[2]), max_rel) << "groups=" << groups;
    }
}

struct BulkGemvAnySize {  // the bulk GEMV also for 1 token and small matrices (edge shapes), wgmma off, one scope
    BulkGemvAnySize() {
        cuda::set_bulk_gemv(true, true);
        cuda::set_wgmma_gemv(false);
    }
    ~BulkGemvAnySize() {
        cuda::set_bulk_gemv(true);
        cuda::set_wgmma_gemv(true);
    }
};

TEST_F(LinearTest, BulkGemvMatchesCpu) {
    if (cuda::current_arch().cc < 90) GTEST_SKIP() << "bulk GEMV needs sm_90";
    GemvUpTo8 up_to_16;
    BulkGemvAnySize any_size;
    const std::vector<std::array<int64_t, 3>> shapes = {
        {1, 1024, 4096},   // wq_a-like: split-K
        {1, 4096, 8192},   // wo_b-like: many splits
        {2, 32, 256},      // one stage, two tiles
        {5, 512, 768},     // 3 stages, odd tokens
        {9, 272, 2048},    // two token tiles
        {16, 2048, 1024},  // wq_b-like rows, 16 tokens
    };
    for (const cuda::GemmWorkspace* ws : {static_cast<const cuda::GemmWorkspace*>(&ws_),
                                          static_cast<const cuda::GemmWorkspace*>(nullptr)})
        for (const auto& s : shapes) {
            auto p = check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::FP8_BLOCK128, s[0], s[1],
                                 s[2], OutKind::F32}, ws, 2e-5);
            EXPECT_TRUE(p.bulk) << "M=" << s[0] << " N=" << s[1] << " K=" << s[2];
            if (ws && s[2] >= 1024) {
                EXPECT_GT(p.k_splits, 1);
            }
            p = check_case({WeightKind::FP8_BLOCK128, ScaleKind::F32, ActNumerics::FP8_BLOCK128, s[0], s[1], s[2],
                            OutKind::BF16}, ws, 4e-3);
            EXPECT_TRUE(p.bulk);
        }
    // The production floors: one token and small matrices keep the other GEMVs, 2+ tokens on 16 MB take this one.
    cuda::set_bulk_gemv(true);
    EXPECT_FALSE(planned(ws_, 1, 4096, 4096, &cuda::LinearPlan::bulk));
    EXPECT_TRUE(planned(ws_, 2, 4096, 4096, &cuda::LinearPlan::bulk));
    EXPECT_FALSE(planned(ws_, 8, 1024, 4096, &cuda::LinearPlan::bulk));
    // Determinism (split-K) and agreement with the f16 GEMV.
    check_split_k_and_agreement(ws_, 7, 2e-5, &cuda::LinearPlan::bulk, [](int run) { cuda::set_bulk_gemv(run < 2, true); });
    cuda::set_bulk_gemv(true, true);
}

struct WgmmaGemvAnySize {  // the wgmma GEMV also for 1 token, for one scope
    WgmmaGemvAnySize() { cuda::set_wgmma_gemv(true, true); }
    ~WgmmaGemvAnySize() { cuda::set_wgmma_gemv(true); }
};

// The wgmma FP8 GEMV (wgmma_gemv.cu, sm_90a) against the CPU reference on random shapes (split-K with and without a
// workspace, odd token counts, one and two 8-token column blocks), then split-K determinism and agreement with the
// bulk-copy GEMV, plain and grouped. Thresholds: fp32 out 3e-4 (the tensor core's FP8 sums of 128 products are not
// exact fp32 additions: 1.0-1.3e-4 relative measured on the H200 for every shape here), bf16 out 4e-3 (bf16
// rounding).
TEST_F(LinearTest, WgmmaGemvMatchesCpu) {
    if (cuda::current_arch().cc != 90) GTEST_SKIP() << "wgmma GEMV needs sm_90a";
    GemvUpTo8 up_to_16;
    WgmmaGemvAnySize any_size;
    const std::vector<std::array<int64_t, 3>> shapes = {
        {1, 1024, 4096},   // wq_a-like: split-K
        {1, 4096, 8192},   // wo_b-like: many splits
        {2, 64, 256},      // one stage, one tile
        {5, 512, 768},     // 3 stages, odd tokens
        {9, 320, 2048},    // two 8-token column blocks
        {16, 2048, 1024},  // wq_b-like rows, 16 tokens
    };
    for (const cuda::GemmWorkspace* ws : {static_cast<const cuda::GemmWorkspace*>(&ws_),
                                          static_cast<const cuda::GemmWorkspace*>(nullptr)})
        for (const auto& s : shapes) {
            auto p = check_case({WeightKind::FP8_BLOCK128, ScaleKind::E8M0, ActNumerics::FP8_BLOCK128, s[0], s[1],
                                 s[2], OutKind::F32}, ws, 3e-4);
            EXPECT_TRUE(p.wgmma) << "M=" << s[0] << " N=" << s[1] << " K=" << s[2];
            if (ws && s[2] >= 1024) {
                EXPECT_GT(p.k_splits, 1);
            }
            p = check_case({WeightKind::FP8_BLOCK128, ScaleKind::F32, ActNumerics::FP8_BLOCK128, s[0], s[1], s[2],
                            OutKind::BF16}, ws, 4e-3);
            EXPECT_TRUE(p.wgmma);
        }
    // The production floors: 2+ tokens on >= 4 MB of weights.
    cuda::set_wgmma_gemv(true);
    EXPECT_FALSE(planned(ws_, 1, 32768, 1024, &cuda::LinearPlan::wgmma));  // wq_b, one token
    EXPECT_FALSE(planned(ws_, 1, 4096, 8192, &cuda::LinearPlan::wgmma));   // wo_b, one token
    EXPECT_TRUE(planned(ws_, 2, 1024, 4096, &cuda::LinearPlan::wgmma));     // wq_a
    EXPECT_TRUE(planned(ws_, 16, 32768, 1024, &cuda::LinearPlan::wgmma));
    EXPECT_FALSE(planned(ws_, 8, 512, 4096, &cuda::LinearPlan::wgmma));     // wkv, 2 MB
    // Determinism (split-K) and agreement with the bulk-copy GEMV.
    check_split_k_and_agreement(ws_, 11, 3e-4, &cuda::LinearPlan::wgmma, [](int run) {
        cuda::set_wgmma_gemv(run < 2, true);
        cuda::set_bulk_gemv(true, true);
    });
    cuda::set_bulk_gemv(true);
    cuda::set_wgmma_gemv(true, true);
}

TEST_F(LinearTest, BadArgumentsThrowNamedErrors) {
    std::mt19937_64 rng(1);
    TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, 128, 256);
    DeviceArray<uint16_t> pv(cuda::prepared_values_bytes(2, 256) / 2);
    DeviceArray<float> ps(cuda::prepared_scales_bytes(2, 256) / 4), y(512);
    DeviceArray<uint16_t> x(512);
    cuda::PreparedActivation p;
    p.values = pv.ptr;
    p.scales = ps.ptr;
    cuda::prepare_activation(x.ptr, false, 2, 256, 256, WeightKind::BF16, ActNumerics::EXACT, p, nullptr);
    try {
        cuda::linear(p, w.device(), y.ptr, OutKind::F32, 128, nullptr, nullptr);
        FAIL() << "layout mismatch not detected";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("prepared for BF16"), std::string::npos) << e.what();
    }
    cuda::DeviceLinear bad = w.device();
    bad.scale = nullptr;
    cuda::prepare_activation(x.ptr, false, 2, 256, 256, WeightKind::FP8_BLOCK128, ActNumerics::EXACT, p, nullptr);
    EXPECT_THROW(cuda::linear(p, bad, y.ptr, OutKind::F32, 128, nullptr, nullptr), Error);
    cuda::DeviceLinear wide = w.device();
    wide.in = 512;
    EXPECT_THROW(cuda::linear(p, wide, y.ptr, OutKind::F32, 128, nullptr, nullptr), Error);
    EXPECT_THROW(cuda::prepare_activation(x.ptr, false, 2, 256, 100, WeightKind::FP8_BLOCK128, ActNumerics::EXACT, p,
                                          nullptr),
                 Error);
}

}  // namespace
}  // namespace flashseek::test
