// Deterministic pseudo-random numbers that are bit-identical on every machine: splitmix64 seeding, xoshiro256**
// streams and normal samples from Box-Muller built only on IEEE-exact operations (+ - * / sqrt, no libm log/cos,
// whose last bits differ between C libraries). gen-checkpoint depends on this: committed golden logits are only
// reproducible if a regenerated checkpoint is bit-identical.
#pragma once
#include <cstdint>

namespace flashseek {

inline uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Mixes several 64-bit values into one seed (order matters).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

class Rng {
public:
    explicit Rng(uint64_t seed);
    uint64_t next_u64();
    // Uniform in [0, 1) with 53 random bits.
    double uniform();
    // Uniform integer in [0, n), n > 0 (unbiased, by rejection).
    uint64_t below(uint64_t n);
    // Standard normal (Box-Muller; the second value of each pair is cached).
    double normal();

private:
    uint64_t s_[4];
    double cached_normal_ = 0.0;
    bool has_cached_ = false;
};

// Natural log and (cos, sin)(2*pi*t) from +, -, *, / only, so they are identical everywhere (relative error
// below 1e-13 on their domains). ln_exact: x > 0 and finite. cos_sin_2pi: t in [0, 1).
double ln_exact(double x);
// 2^x for |x| <= 1 (enough for the generator's scale spreads).
double exp2_exact(double x);
void cos_sin_2pi(double t, double* c, double* s);

}  // namespace flashseek
