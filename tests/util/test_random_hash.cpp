// The portable RNG (exact math helpers close to libm, normal statistics, determinism pinned by golden values) and
// FNV-1a against its published test vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "util/hash.h"
#include "util/random.h"

using namespace flashseek;

TEST(Random, MathHelpersMatchLibm) {
    const uint64_t seed = std::random_device{}();
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    for (int i = 0; i < 200000; ++i) {
        const double x = std::ldexp(u01(g) + 1e-300, -int(g() % 60));
        if (x <= 0) continue;
        ASSERT_NEAR(ln_exact(x), std::log(x), 1e-13 * std::max(1.0, std::fabs(std::log(x)))) << "seed " << seed;
        const double t = u01(g);
        double c, s;
        cos_sin_2pi(t, &c, &s);
        ASSERT_NEAR(c, std::cos(2 * M_PI * t), 1e-13) << "seed " << seed << " t " << t;
        ASSERT_NEAR(s, std::sin(2 * M_PI * t), 1e-13) << "seed " << seed << " t " << t;
        const double e = u01(g) * 2 - 1;
        ASSERT_NEAR(exp2_exact(e), std::exp2(e), 1e-15) << "seed " << seed;
    }
    EXPECT_EQ(ln_exact(1.0), 0.0);
}

TEST(Random, NormalStatistics) {
    Rng r(std::random_device{}());
    const int n = 400000;
    double sum = 0, sq = 0, quart = 0;
    int beyond3 = 0;
    for (int i = 0; i < n; ++i) {
        const double v = r.normal();
        sum += v;
        sq += v * v;
        quart += v * v * v * v;
        beyond3 += std::fabs(v) > 3;
    }
    EXPECT_NEAR(sum / n, 0.0, 0.01);
    EXPECT_NEAR(sq / n, 1.0, 0.01);
    EXPECT_NEAR(quart / n, 3.0, 0.06);                       // Gaussian kurtosis
    EXPECT_NEAR(double(beyond3) / n, 0.0027, 0.0006);        // P(|z| > 3)
}

TEST(Random, UniformAndBelow) {
    Rng r(std::random_device{}());
    std::vector<int> hist(7);
    for (int i = 0; i < 70000; ++i) {
        const double u = r.uniform();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        const uint64_t b = r.below(7);
        ASSERT_LT(b, 7u);
        hist[b]++;
    }
    for (int h : hist) EXPECT_NEAR(h, 10000, 500);
}

// Pinned outputs: if these change, regenerated checkpoints (and every golden made from them) change too.
TEST(Random, DeterministicGoldenValues) {
    Rng r(42);
    EXPECT_EQ(r.next_u64(), 0x15780b2e0c2ec716ull) << std::hex << Rng(42).next_u64();
    Rng n(7);
    double acc = 0;
    for (int i = 0; i < 1000; ++i) acc += n.normal() * double(i + 1);
    EXPECT_EQ(acc, -0x1.50d93a6df0adep+14) << std::hexfloat << acc;
    EXPECT_EQ(mix_seed(1, 2, 3), 0xef6df66c0a54b8f2ull) << std::hex << mix_seed(1, 2, 3);
}

TEST(Random, SeedsGiveDistinctStreams) {
    std::set<uint64_t> firsts;
    for (uint64_t s = 0; s < 1000; ++s) firsts.insert(Rng(mix_seed(s, 99, 0)).next_u64());
    EXPECT_EQ(firsts.size(), 1000u);
}

TEST(Hash, FnvTestVectors) {
    EXPECT_EQ(fnv1a_str(""), 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv1a_str("a"), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(fnv1a_str("foobar"), 0x85944171f73967e8ull);
    // Incremental hashing equals one-shot hashing.
    EXPECT_EQ(fnv1a_str("bar", fnv1a_str("foo")), fnv1a_str("foobar"));
}
