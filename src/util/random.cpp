// Portable deterministic RNG (see random.h). The math helpers use fixed polynomial evaluations in double so the
// result depends only on IEEE-754 arithmetic, never on the C library.
#include "util/random.h"

#include <cmath>

namespace flashseek {

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
constexpr double kLn2 = 0.6931471805599453094;
constexpr double kPi = 3.14159265358979323846;

struct Tables {
    double inv_pair_product[20] = {};  // 1 / (k (k-1))
    double inv_int[24] = {};           // 1 / k
    constexpr Tables() {
        for (int k = 2; k < 20; ++k) inv_pair_product[k] = 1.0 / double(k * (k - 1));
        for (int k = 1; k < 24; ++k) inv_int[k] = 1.0 / double(k);
    }
};
constexpr Tables kTables{};
constexpr const double* kInvPairProduct = kTables.inv_pair_product;
constexpr const double* kInvInt = kTables.inv_int;
}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t s = a;
    uint64_t h = splitmix64(s);
    s = h ^ (b * 0xd1b54a32d192ed03ull);
    h = splitmix64(s);
    s = h ^ (c * 0x8cb92ba72f3d8dd7ull);
    return splitmix64(s);
}

Rng::Rng(uint64_t seed) {
    uint64_t st = seed;
    for (auto& w : s_) w = splitmix64(st);
}

uint64_t Rng::next_u64() {  // xoshiro256**
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

uint64_t Rng::below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // values >= limit would bias the modulo
    for (;;) {
        const uint64_t v = next_u64();
        if (v < limit) return v % n;
    }
}

double Rng::normal() {
    if (has_cached_) {
        has_cached_ = false;
        return cached_normal_;
    }
    double u1 = 1.0 - uniform();  // (0, 1]: keeps the log finite
    double u2 = uniform();
    const double r = std::sqrt(-2.0 * ln_exact(u1));  // sqrt is correctly rounded by IEEE-754
    double c, s;
    cos_sin_2pi(u2, &c, &s);
    cached_normal_ = r * s;
    has_cached_ = true;
    return r * c;
}

double ln_exact(double x) {
    // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(z), z = (m-1)/(m+1), |z| < 0.172.
    int e = 0;
    double m = std::frexp(x, &e);  // exact; m in [0.5, 1)
    if (m < 0.70710678118654752440) {
        m *= 2.0;
        e -= 1;
    }
    const double z = (m - 1.0) / (m + 1.0);
    const double z2 = z * z;
    // atanh series to z^15: the next term is below 0.172^17 / 17 < 1e-14 (the samples end up as float or
    // coarser, so more terms would only cost time).
    double p = kInvInt[15];
    for (int k = 13; k >= 1; k -= 2) p = p * z2 + kInvInt[k];
    return 2.0 * z * p + double(e) * kLn2;
}

double exp2_exact(double x) {
    // e^y with y = x ln 2, |y| <= 0.7: Taylor to y^22 (remainder < 0.7^23 / 23! < 1e-25).
    const double y = x * kLn2;
    double p = 1.0;
    for (int k = 22; k >= 1; --k) p = 1.0 + p * y * kInvInt[k];
    return p;
}

void cos_sin_2pi(double t, double* c, double* s) {
    // Reduce to an octant so the Taylor series runs on |a| <= pi/4.
    const double q = t * 4.0;            // quarter turns, [0, 4)
    const int quadrant = int(q + 0.5);   // nearest quarter: 0..4
    const double a = (q - double(quadrant)) * (kPi / 2.0);  // |a| <= pi/4
    const double a2 = a * a;
    // Taylor to a^14 / a^15: the remainder is below (pi/4)^16/16! < 1e-14.
    // Horner forms of cos a = 1 - a^2/2! (1 - a^2/(4*3) (...)) and sin a = a (1 - a^2/3! (1 - a^2/(5*4) (...))).
    // The reciprocals are compile-time constants: IEEE division is correctly rounded, so they are the same on
    // every machine, and multiplying by them keeps the hot loop free of divisions.
    double cs = 1.0;
    for (int k = 14; k >= 2; k -= 2) cs = 1.0 - cs * a2 * kInvPairProduct[k];
    double ps = 1.0;
    for (int k = 15; k >= 3; k -= 2) ps = 1.0 - ps * a2 * kInvPairProduct[k];
    const double sn = a * ps;
    switch (quadrant & 3) {
        case 0: *c = cs; *s = sn; break;
        case 1: *c = -sn; *s = cs; break;
        case 2: *c = -cs; *s = -sn; break;
        default: *c = sn; *s = -cs; break;
    }
}

}  // namespace flashseek
