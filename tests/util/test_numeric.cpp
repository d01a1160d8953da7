// Exact conversions of util/numeric.h against brute-force references: for e4m3 and e2m1 the nearest representable
// value (ties to the even code) is found by scanning every code, over every bf16 bit pattern (the inputs that
// matter in practice), every midpoint between codes and its neighbouring floats, and random float32 patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "util/numeric.h"

using namespace flashseek;

namespace {

uint64_t fresh_seed() { return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32); }

// Reference e4m3 encoder: saturate to ±448, then the nearest of the 127 magnitudes, ties to the even code.
uint8_t ref_e4m3(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const double a = std::min(std::fabs(double(f)), 448.0);
    int best = 0;
    double best_err = INFINITY;
    for (int m = 0; m <= 126; ++m) {
        const double err = std::fabs(double(e4m3_to_f32(uint8_t(m))) - a);
        if (err < best_err || (err == best_err && (m & 1) == 0)) {
            best = m;
            best_err = err;
        }
    }
    return uint8_t(sign | best);
}

uint8_t ref_e2m1(float f) {
    const uint8_t sign = std::signbit(f) ? 8 : 0;
    const double a = std::min(std::fabs(double(f)), 6.0);
    int best = 0;
    double best_err = INFINITY;
    for (int m = 0; m <= 7; ++m) {
        const double err = std::fabs(double(kE2M1Values[m]) - a);
        if (err < best_err || (err == best_err && (m & 1) == 0)) {
            best = m;
            best_err = err;
        }
    }
    return uint8_t(sign | best);
}

// Reference bf16: the nearer of the two truncations, ties to even; NaN stays NaN.
uint16_t ref_bf16(float f) {
    const uint32_t u = f32_to_bits(f);
    if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    // Above the largest bf16 the next "value" is infinity, which rounding treats as 2^128 (IEEE overflow rule).
    const double d = f, dl = bits_to_f32(lo),
                 dh = std::isinf(bits_to_f32(hi)) ? std::copysign(std::ldexp(1.0, 128), d) : double(bits_to_f32(hi));
    if ((u & 0xffffu) == 0) return uint16_t(u >> 16);
    const double el = std::fabs(d - dl), eh = std::fabs(dh - d);
    if ((u & 0xffffu) == 0x8000u) return uint16_t((((lo >> 16) & 1) ? hi : lo) >> 16);  // exact tie
    return uint16_t((el < eh ? lo : hi) >> 16);
}

}  // namespace

TEST(E4M3, DecodesEveryCode) {
    EXPECT_EQ(e4m3_to_f32(0x00), 0.f);
    EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));   // smallest subnormal
    EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.f, -6));   // smallest normal
    EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
    EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
    EXPECT_EQ(e4m3_to_f32(0xfe), -448.f);
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
    // Strictly increasing magnitudes: the encoder reference relies on it.
    for (int m = 1; m <= 126; ++m) EXPECT_LT(e4m3_to_f32(uint8_t(m - 1)), e4m3_to_f32(uint8_t(m))) << m;
}

TEST(E4M3, RoundTripsEveryCode) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(c))), c) << "code " << c;
    }
    EXPECT_EQ(f32_to_e4m3(NAN), 0x7f);
}

TEST(E4M3, ExhaustiveOverBf16Inputs) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(uint16_t(h));
        if (std::isnan(f)) {
            EXPECT_EQ(f32_to_e4m3(f), 0x7f);
            continue;
        }
        ASSERT_EQ(f32_to_e4m3(f), ref_e4m3(f)) << "bf16 bits 0x" << std::hex << h << " value " << f;
    }
}

TEST(E4M3, MidpointsAndNeighbours) {
    for (int m = 0; m < 126; ++m) {
        const float a = e4m3_to_f32(uint8_t(m)), b = e4m3_to_f32(uint8_t(m + 1));
        const float mid = (a + b) / 2;  // exact in float
        for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1000.f), a, b}) {
            ASSERT_EQ(f32_to_e4m3(x), ref_e4m3(x)) << x;
            ASSERT_EQ(f32_to_e4m3(-x), ref_e4m3(-x)) << -x;
        }
    }
    // Saturation and values around the top and bottom of the range.
    for (float x : {448.f, 449.f, 464.f, 465.f, 1e6f, INFINITY, 1e-30f, std::ldexp(1.f, -10), std::ldexp(1.f, -11),
                    std::nextafter(std::ldexp(1.f, -10), 1.f)})
        for (float s : {1.f, -1.f}) ASSERT_EQ(f32_to_e4m3(s * x), ref_e4m3(s * x)) << s * x;
}

TEST(E4M3, RandomFloat32Patterns) {
    const uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 300000; ++i) {
        // Exponents concentrated where e4m3 is interesting (2^-12 .. 2^10), plus fully random patterns.
        uint32_t u = uint32_t(rng());
        if (i % 2) u = (u & 0x807fffffu) | (uint32_t(115 + rng() % 23) << 23);
        const float f = bits_to_f32(u);
        if (std::isnan(f)) continue;
        ASSERT_EQ(f32_to_e4m3(f), ref_e4m3(f)) << "seed " << seed << " bits 0x" << std::hex << u;
    }
}

TEST(E2M1, ExhaustiveOverBf16InputsAndTies) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(uint16_t(h));
        if (std::isnan(f)) continue;  // e2m1 has no NaN; callers never pass one
        ASSERT_EQ(f32_to_e2m1(f), ref_e2m1(f)) << "bf16 bits 0x" << std::hex << h << " value " << f;
    }
    // Ties go to the even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
    const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
    const float want[] = {0.f, 1.f, 1.f, 2.f, 2.f, 4.f, 4.f};
    for (int i = 0; i < 7; ++i) {
        EXPECT_EQ(round_e2m1(ties[i]), want[i]) << ties[i];
        EXPECT_EQ(round_e2m1(-ties[i]), -want[i]) << -ties[i];
    }
    for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_to_f32(f32_to_e2m1(e2m1_to_f32(uint8_t(c)))), e2m1_to_f32(uint8_t(c)));
    EXPECT_EQ(f32_to_e2m1(100.f), 7);
    EXPECT_EQ(f32_to_e2m1(-100.f), 15);
}

TEST(Bf16, MatchesReference) {
    const uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 500000; ++i) {
        uint32_t u = uint32_t(rng());
        if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
        const float f = bits_to_f32(u);
        ASSERT_EQ(f32_to_bf16(f), ref_bf16(f)) << "seed " << seed << " bits 0x" << std::hex << u;
    }
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.f)), 1.f);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
    EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
}

TEST(E8M0, Values) {
    EXPECT_EQ(e8m0_to_f32(127), 1.f);
    EXPECT_EQ(e8m0_to_f32(128), 2.f);
    EXPECT_EQ(e8m0_to_f32(120), 1.f / 128);
    EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.f, -127));
    EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.f, 127));
    EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
}
