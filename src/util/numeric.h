// Scalar number formats used by DeepSeek-V4 checkpoints and kernels (host side, exact bit-level conversions):
// bf16, FP8 e4m3fn (max 448, no inf, NaN = 0x7F/0xFF), E8M0 power-of-two scales (byte 255 = NaN),
// FP4 e2m1 (bit 3 = sign; packed two per byte, low nibble first). Round-to-nearest-even everywhere.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace flashseek {

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// FP8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa. Subnormals at exponent 0.
inline float e4m3_to_f32(uint8_t b) {
    const uint32_t sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
    if (exp == 15 && man == 7) return NAN;
    float v = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(float(8 + man), int(exp) - 10);
    return sign ? -v : v;
}
// Saturating conversion (values beyond ±448 clamp to ±448), as torch's .to(float8_e4m3fn) after clamp.
inline uint8_t f32_to_e4m3(float f) {
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    float a = std::fabs(f);
    if (a >= 448.f) return sign | 0x7e;
    int e;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5,1)
    int exp_unbiased = e - 1;          // a in [2^exp, 2^(exp+1))
    if (exp_unbiased < -6) exp_unbiased = -6;  // subnormal range uses quantum 2^-9
    const float quantum = std::ldexp(1.f, exp_unbiased - 3);
    float q = std::nearbyint(a / quantum);  // default rounding mode: nearest-even
    float r = q * quantum;
    if (r >= 448.f) return sign | 0x7e;
    if (r == 0.f) return sign;
    int re;
    std::frexp(r, &re);
    int rexp = re - 1;
    if (rexp < -6) {  // subnormal
        return sign | uint8_t(int(r / std::ldexp(1.f, -9)));
    }
    const int man = int(r / std::ldexp(1.f, rexp - 3)) - 8;
    return sign | uint8_t(((rexp + 7) << 3) | man);
}
inline float round_e4m3(float f) { return e4m3_to_f32(f32_to_e4m3(f)); }

// E8M0: value 2^(b-127); 255 is NaN.
inline float e8m0_to_f32(uint8_t b) { return b == 255 ? NAN : std::ldexp(1.f, int(b) - 127); }

// FP4 e2m1 code table, bit 3 = sign.
inline constexpr float kE2M1Values[16] = {0.f,  0.5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                          -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
inline float e2m1_to_f32(uint8_t code) { return kE2M1Values[code & 0xf]; }
// Nearest e2m1 code (ties to even mantissa), saturating at ±6.
inline uint8_t f32_to_e2m1(float f) {
    const uint8_t sign = std::signbit(f) ? 8 : 0;
    const float a = std::fabs(f);
    // Midpoints between 0,.5,1,1.5,2,3,4,6; ties go to the code with even mantissa bit (0, 1, 2, 4 ... i.e. codes 0,2,4,6).
    static constexpr float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
    uint8_t code = 7;
    for (uint8_t i = 0; i < 7; ++i) {
        if (a < mids[i] || (a == mids[i] && (i % 2 == 0))) { code = i; break; }
    }
    return sign | code;
}
inline float round_e2m1(float f) { return e2m1_to_f32(f32_to_e2m1(f)); }

}  // namespace flashseek
