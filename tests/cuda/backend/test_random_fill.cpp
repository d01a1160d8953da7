// The on-device random fill (cuda/common/random_fill.cuh), bit for bit against a host evaluation of its documented
// formulas: the dummy weights of `flashseek bench` and of the end-to-end tests are these values, so a change of the
// hash, a constant or a rounding shows here rather than as a silent shift of benchmark numbers. Also: the grid-stride
// loop covers counts beyond one grid, bytes past the end stay untouched, a fill on a stream is ordered on it, and bad
// parameters are refused with the parameter named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/common/random_fill.cuh"
#include "test_support.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek {
namespace {

using cuda::FillKind;
using cuda::FillParams;

class RandomFill : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    }
};

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
uint64_t element_hash(uint64_t seed, uint64_t i) { return splitmix64(seed ^ splitmix64(i)); }
float uniform_pm1(uint64_t h) { return float(int64_t(h >> 40) - (int64_t(1) << 23)) * (1.f / float(1 << 23)); }

size_t element_bytes(FillKind k) {
    switch (k) {
        case FillKind::BF16: return 2;
        case FillKind::F32: return 4;
        case FillKind::I64_ROUTE: return 8;
        default: return 1;
    }
}

// The bytes element i of a fill must hold (the device evaluates center + scale * u as one fused multiply-add).
void expected_element(const FillParams& p, uint64_t seed, uint64_t i, uint8_t* out) {
    const uint64_t h = element_hash(seed, i);
    switch (p.kind) {
        case FillKind::BYTES: out[0] = uint8_t(h >> 56); return;
        case FillKind::E4M3: {
            uint8_t b = uint8_t(h >> 56);
            if ((b & 0x7f) == 0x7f) b ^= 1;
            out[0] = b;
            return;
        }
        case FillKind::E4M3_UNIFORM: out[0] = f32_to_e4m3(p.scale * uniform_pm1(h)); return;
        case FillKind::BF16: {
            const uint16_t b = f32_to_bf16(std::fma(p.scale, uniform_pm1(h), p.center));
            std::memcpy(out, &b, 2);
            return;
        }
        case FillKind::F32: {
            const float f = std::fma(p.scale, uniform_pm1(h), p.center);
            std::memcpy(out, &f, 4);
            return;
        }
        case FillKind::E8M0: out[0] = uint8_t(p.e8m0_hi - int(h % uint64_t(p.e8m0_hi - p.e8m0_lo + 1))); return;
        case FillKind::I64_ROUTE: {
            const uint64_t row = i / uint64_t(p.top_k), j = i % uint64_t(p.top_k);
            const uint64_t hr = splitmix64(seed ^ splitmix64(row * 0x51ull));
            const uint64_t spread = uint64_t(std::max(1, p.n_experts / p.top_k));
            const int64_t id = int64_t((hr % uint64_t(p.n_experts) + j * spread) % uint64_t(p.n_experts));
            std::memcpy(out, &id, 8);
            return;
        }
    }
}

// Fills n elements (plus a guard region that must keep its poison) and compares every byte with the host.
void expect_fill_matches(const FillParams& p, uint64_t seed, size_t n, const std::string& what) {
    SCOPED_TRACE(what + ", seed " + std::to_string(seed) + ", n " + std::to_string(n));
    const size_t eb = element_bytes(p.kind), guard = 64;
    std::vector<uint8_t> got(n * eb + guard);
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, got.size()), cudaSuccess);
    ASSERT_EQ(cudaMemset(dev, 0xA5, got.size()), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    cuda::fill_random(dev, n, p, seed, stream);
    ASSERT_EQ(cudaMemcpyAsync(got.data(), dev, got.size(), cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaStreamDestroy(stream);
    cudaFree(dev);
    uint8_t want[8];
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
        expected_element(p, seed, i, want);
        if (std::memcmp(want, got.data() + i * eb, eb) != 0 && ++mismatches <= 5)
            ADD_FAILURE() << "element " << i << " differs from the formula";
    }
    EXPECT_EQ(mismatches, 0u);
    for (size_t b = n * eb; b < got.size(); ++b) ASSERT_EQ(got[b], 0xA5) << "byte " << b << " past the end was written";
}

FillParams params(FillKind kind, float center, float scale) {
    FillParams p;
    p.kind = kind;
    p.center = center;
    p.scale = scale;
    return p;
}

TEST_F(RandomFill, EveryKindMatchesItsFormulaBitForBit) {
    const uint64_t seed = test::fresh_seed();
    // Past one grid (8192 blocks of 256 threads), so that the grid-stride loop's second round is checked too.
    const size_t n = size_t(8192) * 256 + 4099;
    expect_fill_matches(params(FillKind::BYTES, 0.f, 1.f), seed, n, "BYTES");
    expect_fill_matches(params(FillKind::E4M3, 0.f, 1.f), seed + 1, n, "E4M3 codes");
    // Scale 600 drives a quarter of the values into saturation at 448; 0.05 keeps many in the subnormal range.
    expect_fill_matches(params(FillKind::E4M3_UNIFORM, 0.f, 600.f), seed + 2, n, "E4M3_UNIFORM saturating");
    expect_fill_matches(params(FillKind::E4M3_UNIFORM, 0.f, 0.05f), seed + 3, n, "E4M3_UNIFORM small");
    // The dummy norm weights (centre 1, scale 0.2) and the F32 block scales (centre 0.05, scale 0.01).
    expect_fill_matches(params(FillKind::BF16, 1.f, 0.2f), seed + 4, n, "BF16 centred");
    expect_fill_matches(params(FillKind::BF16, 0.f, 0.0370f), seed + 5, n, "BF16");
    expect_fill_matches(params(FillKind::F32, 0.05f, 0.01f), seed + 6, n, "F32 centred");
    expect_fill_matches(params(FillKind::F32, 0.f, 3.f), seed + 7, n, "F32");
    FillParams jitter = params(FillKind::E8M0, 0.f, 1.f);
    jitter.e8m0_lo = 118;
    jitter.e8m0_hi = 119;  // the dummy weights' scales: 2^(hi-127) or half of it
    expect_fill_matches(jitter, seed + 8, n, "E8M0 jitter");
    FillParams range = params(FillKind::E8M0, 0.f, 1.f);
    range.e8m0_lo = 100;
    range.e8m0_hi = 140;
    expect_fill_matches(range, seed + 9, n, "E8M0 range");
    for (const auto& [experts, k] : {std::pair{256, 6}, std::pair{7, 7}, std::pair{5, 2}}) {
        FillParams route = params(FillKind::I64_ROUTE, 0.f, 1.f);
        route.n_experts = experts;
        route.top_k = k;
        expect_fill_matches(route, seed + 10 + uint64_t(experts), size_t(4099) * size_t(k),
                            "I64_ROUTE " + std::to_string(experts) + "/" + std::to_string(k));
    }
}

TEST_F(RandomFill, ShortFormPacksTheE8m0RangeAndSeedsDiffer) {
    const uint64_t seed = test::fresh_seed();
    FillParams range = params(FillKind::E8M0, 0.f, 1.f);
    range.e8m0_lo = 118;
    range.e8m0_hi = 124;
    const size_t n = 100003;
    std::vector<uint8_t> a(n), b(n);
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, n), cudaSuccess);
    cuda::fill_random(dev, n, FillKind::E8M0, seed, float(118 + 256 * 124), nullptr);
    ASSERT_EQ(cudaMemcpy(a.data(), dev, n, cudaMemcpyDeviceToHost), cudaSuccess);
    cuda::fill_random(dev, n, range, seed, nullptr);
    ASSERT_EQ(cudaMemcpy(b.data(), dev, n, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(a, b);
    cuda::fill_random(dev, n, FillKind::E8M0, seed + 1, float(118 + 256 * 124), nullptr);
    ASSERT_EQ(cudaMemcpy(b.data(), dev, n, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_NE(a, b);
    cudaFree(dev);
}

TEST_F(RandomFill, RefusesBadParametersNamingThem) {
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 1024), cudaSuccess);
    auto expect_refused = [](const std::function<void()>& fn, const std::string& needle) {
        try {
            fn();
            ADD_FAILURE() << "no error; expected one naming " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    FillParams bad_range = params(FillKind::E8M0, 0.f, 1.f);
    bad_range.e8m0_lo = 120;
    bad_range.e8m0_hi = 255;
    expect_refused([&] { cuda::fill_random(dev, 16, bad_range, 1, nullptr); }, "E8M0 range [120, 255]");
    FillParams bad_route = params(FillKind::I64_ROUTE, 0.f, 1.f);
    bad_route.n_experts = 4;
    bad_route.top_k = 6;
    expect_refused([&] { cuda::fill_random(dev, 16, bad_route, 1, nullptr); }, "top_k (6)");
    expect_refused([&] { cuda::fill_random(nullptr, 16, FillKind::BYTES, 1, 0.f, nullptr); }, "destination is null");
    expect_refused([&] { cuda::fill_random(dev, 16, FillKind::I64_ROUTE, 1, 0.f, nullptr); }, "n_experts, top_k");
    cudaFree(dev);
}

}  // namespace
}  // namespace flashseek
