// Unit tests of the CPU reference ops (src/cpu/ops.h) against small independent double-precision implementations
// and hand-derived values. Random inputs use a fresh seed per run, printed on failure.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "cpu/ops.h"
#include "model/rope.h"
#include "cpu/thread_pool.h"
#include "util/numeric.h"

using namespace flashseek;
using namespace flashseek::cpu;

namespace {

struct Rand {
    uint64_t seed;
    std::mt19937_64 gen;
    Rand() : seed(std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32)), gen(seed) {}
    float normal(float sd = 1.f) { return std::normal_distribution<float>(0.f, sd)(gen); }
    std::vector<float> vec(size_t n, float sd = 1.f) {
        std::vector<float> v(n);
        for (auto& x : v) x = normal(sd);
        return v;
    }
};
#define SEED_TRACE(r) SCOPED_TRACE("seed " + std::to_string((r).seed))

}  // namespace

TEST(ThreadPool, CoversEveryIndexOnceAndPropagatesErrors) {
    ThreadPool pool(4);
    for (int64_t n : {1, 3, 17, 1000, 12345}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " i " << i;
    }
    EXPECT_THROW(pool.parallel_for(100, [](int64_t b, int64_t) {
        if (b >= 0) throw std::runtime_error("boom");
    }),
                 std::runtime_error);
    // still usable after an error
    std::atomic<int64_t> total{0};
    pool.parallel_for(500, [&](int64_t b, int64_t e) { total += e - b; });
    EXPECT_EQ(total.load(), 500);
}

TEST(Linear, MatchesDoubleAndIsBatchInvariant) {
    Rand r;
    SEED_TRACE(r);
    ThreadPool pool(3);
    for (auto [rows, out, in] : {std::tuple{1, 5, 7}, {7, 33, 130}, {13, 64, 256}, {4, 3, 16}}) {
        auto x = r.vec(size_t(rows * in)), w = r.vec(size_t(out * in));
        std::vector<float> y(static_cast<size_t>(rows * out));
        linear_f32(x.data(), rows, w.data(), out, in, y.data(), &pool);
        for (int i = 0; i < rows; ++i)
            for (int o = 0; o < out; ++o) {
                double ref = 0;
                for (int k = 0; k < in; ++k) ref += double(x[size_t(i * in + k)]) * w[size_t(o * in + k)];
                EXPECT_NEAR(y[size_t(i * out + o)], ref, 1e-4 * (1 + std::sqrt(double(in))));
            }
        // each row alone gives bit-identical results
        for (int i = 0; i < rows; ++i) {
            std::vector<float> y1(static_cast<size_t>(out));
            linear_f32(x.data() + i * in, 1, w.data(), out, in, y1.data(), nullptr);
            ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + i * out, size_t(out) * 4)) << "row " << i;
        }
        // bf16 weights give the same result as their fp32 expansion
        std::vector<uint16_t> wb(w.size());
        std::vector<float> wf(w.size());
        for (size_t k = 0; k < w.size(); ++k) {
            wb[k] = f32_to_bf16(w[k]);
            wf[k] = bf16_to_f32(wb[k]);
        }
        std::vector<float> ya(y.size()), yb(y.size());
        linear_f32(x.data(), rows, wf.data(), out, in, ya.data(), &pool);
        linear_bf16w(x.data(), rows, wb.data(), out, in, yb.data(), &pool);
        ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * 4));
    }
}

TEST(Dequantize, Fp8Block128AndFp4Block32) {
    // FP8: 2 x 130 weight -> scale grid [1, 2]; scale bytes 127 (1.0) and 129 (4.0).
    std::vector<uint8_t> w8(2 * 130), s8 = {127, 129};
    for (size_t i = 0; i < w8.size(); ++i) w8[i] = uint8_t(i % 120);  // avoid NaN codes
    Linear fp8;
    fp8.format = WeightFormat::FP8_BLOCK128;
    fp8.out = 2;
    fp8.in = 130;
    fp8.weight = {"w8", DType::F8_E4M3, {2, 130}, w8.data(), w8.size()};
    fp8.scale = {"w8.scale", DType::F8_E8M0, {1, 2}, s8.data(), s8.size()};
    auto d8 = dequantize_linear(fp8);
    for (int o = 0; o < 2; ++o)
        for (int i = 0; i < 130; ++i)
            ASSERT_EQ(d8[size_t(o * 130 + i)], e4m3_to_f32(w8[size_t(o * 130 + i)]) * (i < 128 ? 1.f : 4.f));
    // FP4: 1 x 64, bytes 0x21 -> elements (1: 0.5, 2: 1.0); scale 2^-1 for block 0, 2^2 for block 1.
    std::vector<uint8_t> w4(32, 0x21), s4 = {126, 129};
    w4[31] = 0x9f;  // element 62 = code 0xf (-6), element 63 = code 0x9 (-0.5)
    Linear fp4;
    fp4.format = WeightFormat::FP4_BLOCK32;
    fp4.out = 1;
    fp4.in = 64;
    fp4.weight = {"w4", DType::I8, {1, 32}, w4.data(), w4.size()};
    fp4.scale = {"w4.scale", DType::F8_E8M0, {1, 2}, s4.data(), s4.size()};
    auto d4 = dequantize_linear(fp4);
    EXPECT_EQ(d4[0], 0.5f * 0.5f);
    EXPECT_EQ(d4[1], 1.0f * 0.5f);
    EXPECT_EQ(d4[32], 0.5f * 4.f);
    EXPECT_EQ(d4[62], -6.f * 4.f);
    EXPECT_EQ(d4[63], -0.5f * 4.f);
    // wrong scale shape is an error naming the tensor
    fp8.scale.shape = {1, 1};
    fp8.scale.nbytes = 1;
    try {
        dequantize_linear(fp8);
        FAIL() << "expected an error";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("w8.scale"), std::string::npos) << e.what();
    }
}

TEST(Quant, ActQuantFp8Block128) {
    std::vector<float> x(200, 0.f), out(200), scales(2);
    x[0] = 1.0f;
    x[1] = 1.1f;    // * 256 = 281.6 -> e4m3 quantum 32 at [256, 512) -> 288 -> 1.125
    x[2] = -0.01f;  // tiny values keep 3 mantissa bits relative to their own exponent
    x[150] = 3.0f;  // second block: amax 3 -> s = 2^ceil(log2(3/448)) = 2^-7
    act_quant_fp8_block128(x.data(), 200, out.data(), scales.data());
    EXPECT_EQ(scales[0], std::ldexp(1.f, -8));
    EXPECT_EQ(scales[1], std::ldexp(1.f, -7));
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 1.125f);
    EXPECT_EQ(out[2], round_e4m3(-0.01f * 256.f) / 256.f);
    EXPECT_EQ(out[150], 3.0f);
    // random: every output is e4m3 * s exactly and within half a quantum
    Rand r;
    SEED_TRACE(r);
    auto v = r.vec(384, 3.f);
    std::vector<float> q(384), s(3);
    act_quant_fp8_block128(v.data(), 384, q.data(), s.data());
    for (int i = 0; i < 384; ++i) {
        const float sc = s[size_t(i / 128)];
        EXPECT_EQ(q[size_t(i)], round_e4m3(q[size_t(i)] / sc) * sc);
        EXPECT_LE(std::fabs(q[size_t(i)] - v[size_t(i)]), std::fabs(v[size_t(i)]) / 16 + sc * std::ldexp(1.f, -9));
    }
}

TEST(Quant, KvFp8Block64AndFp4Block32) {
    std::vector<float> v(128, 0.25f);
    v[70] = 448.f;  // block 1 amax 448 -> s = 1
    kv_fp8_sim_block64(v.data(), 128);
    EXPECT_EQ(v[0], 0.25f);
    EXPECT_EQ(v[64], 0.25f);
    EXPECT_EQ(v[70], 448.f);
    std::vector<float> f = {6.f, 0.7f, 2.6f, -1.25f, 5.1f, 0.24f, -0.26f, 1.75f};
    f.resize(32, 0.f);
    fp4_sim_block32(f.data(), 32);  // amax 6 -> s = 1
    EXPECT_EQ(f[0], 6.f);
    EXPECT_EQ(f[1], 0.5f);
    EXPECT_EQ(f[2], 3.f);
    EXPECT_EQ(f[3], -1.f);  // tie 1.25 -> even mantissa (1.0)
    EXPECT_EQ(f[4], 6.f);
    EXPECT_EQ(f[5], 0.f);
    EXPECT_EQ(f[6], -0.5f);
    EXPECT_EQ(f[7], 2.f);  // tie 1.75 -> 2
    std::vector<float> g(32, 0.f);
    g[0] = 12.f;  // amax 12 -> s = 2; 12/2 = 6
    g[1] = 1.f;   // 0.5 -> 0.5 -> 1
    fp4_sim_block32(g.data(), 32);
    EXPECT_EQ(g[0], 12.f);
    EXPECT_EQ(g[1], 1.f);
}

TEST(Quant, HadamardIsOrthonormalAndInvolutive) {
    Rand r;
    SEED_TRACE(r);
    auto v = r.vec(128);
    auto w = v;
    hadamard128(w.data());
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 128; ++i) {
        n0 += double(v[size_t(i)]) * v[size_t(i)];
        n1 += double(w[size_t(i)]) * w[size_t(i)];
    }
    EXPECT_NEAR(n1, n0, 1e-4 * n0);
    hadamard128(w.data());
    for (int i = 0; i < 128; ++i) EXPECT_NEAR(w[size_t(i)], v[size_t(i)], 1e-5);
    std::vector<float> e(8, 0.f);
    e[1] = 1.f;  // Sylvester order: column 1 = (+,-,+,-,...)
    hadamard_transform(e.data(), 8);
    for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(e[size_t(i)], (i % 2 ? -1.f : 1.f) / std::sqrt(8.f));
}

TEST(Norm, RmsNorm) {
    Rand r;
    SEED_TRACE(r);
    auto x = r.vec(77), w = r.vec(77);
    std::vector<float> y(77), u(77);
    rmsnorm(x.data(), w.data(), 77, 1e-6f, y.data());
    rmsnorm(x.data(), nullptr, 77, 1e-6f, u.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double rr = 1 / std::sqrt(ss / 77 + 1e-6);
    for (int i = 0; i < 77; ++i) {
        EXPECT_NEAR(y[size_t(i)], w[size_t(i)] * x[size_t(i)] * rr, 1e-5);
        EXPECT_NEAR(u[size_t(i)], x[size_t(i)] * rr, 1e-5);
    }
}

TEST(Rope, YarnTableAndRotationProperties) {
    RopeScaling y;
    y.type = "yarn";
    y.factor = 16;
    y.original_max_position_embeddings = 65536;
    y.beta_fast = 32;
    y.beta_slow = 1;
    auto plain = rope_inv_freq(64, 160000.0, nullptr);
    auto yarn = rope_inv_freq(64, 160000.0, &y);
    ASSERT_EQ(plain.size(), 32u);
    for (int i = 0; i < 32; ++i) {
        EXPECT_NEAR(plain[size_t(i)], std::pow(160000.0, -2.0 * i / 64), 1e-6 * plain[size_t(i)]);
        if (i <= 15) {
            EXPECT_EQ(yarn[size_t(i)], plain[size_t(i)]) << i;  // low = 15
        }
        if (i >= 25) {
            EXPECT_NEAR(yarn[size_t(i)], plain[size_t(i)] / 16, 1e-6 * plain[size_t(i)]) << i;  // high = 25
        }
    }
    EXPECT_LT(yarn[20], plain[20]);
    EXPECT_GT(yarn[20], plain[20] / 16);
    Rand r;
    SEED_TRACE(r);
    auto v = r.vec(64);
    auto w = v;
    rope_interleaved(w.data(), 64, yarn.data(), 12345);
    for (int i = 0; i < 32; ++i) {
        const double a = std::hypot(v[size_t(2 * i)], v[size_t(2 * i + 1)]);
        const double b = std::hypot(w[size_t(2 * i)], w[size_t(2 * i + 1)]);
        EXPECT_NEAR(a, b, 1e-5 * (1 + a));
    }
    // pair 0 at position p rotates by p * 1 rad
    const double c = std::cos(12345.0), s = std::sin(12345.0);
    EXPECT_NEAR(w[0], v[0] * c - v[1] * s, 1e-3);
    EXPECT_NEAR(w[1], v[1] * c + v[0] * s, 1e-3);
    rope_interleaved(w.data(), 64, yarn.data(), 12345, /*inverse=*/true);
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(w[size_t(i)], v[size_t(i)], 1e-5);
    // relative position: <rope(q, p), rope(k, p')> depends only on p - p'
    auto q = r.vec(64), k = r.vec(64);
    auto dotrot = [&](int64_t pq, int64_t pk) {
        auto a = q, b = k;
        rope_interleaved(a.data(), 64, plain.data(), pq);
        rope_interleaved(b.data(), 64, plain.data(), pk);
        double d = 0;
        for (int i = 0; i < 64; ++i) d += double(a[size_t(i)]) * b[size_t(i)];
        return d;
    };
    EXPECT_NEAR(dotrot(10, 3), dotrot(107, 100), 1e-3);
}

TEST(Mhc, SinkhornIsDoublyStochasticAndMatchesDouble) {
    Rand r;
    SEED_TRACE(r);
    for (int N : {2, 4}) {
        auto C = r.vec(size_t(N * N), 2.f);
        std::vector<double> D(C.begin(), C.end());
        sinkhorn(C.data(), N, 20, 1e-6f);
        // independent double implementation
        for (int j = 0; j < N; ++j) {
            double m = -1e300, s = 0;
            for (int k = 0; k < N; ++k) m = std::max(m, D[size_t(j * N + k)]);
            for (int k = 0; k < N; ++k) s += std::exp(D[size_t(j * N + k)] - m);
            for (int k = 0; k < N; ++k) D[size_t(j * N + k)] = std::exp(D[size_t(j * N + k)] - m) / s + 1e-6;
        }
        auto cols = [&] {
            for (int k = 0; k < N; ++k) {
                double s = 0;
                for (int j = 0; j < N; ++j) s += D[size_t(j * N + k)];
                for (int j = 0; j < N; ++j) D[size_t(j * N + k)] /= s + 1e-6;
            }
        };
        cols();
        for (int t = 0; t < 19; ++t) {
            for (int j = 0; j < N; ++j) {
                double s = 0;
                for (int k = 0; k < N; ++k) s += D[size_t(j * N + k)];
                for (int k = 0; k < N; ++k) D[size_t(j * N + k)] /= s + 1e-6;
            }
            cols();
        }
        for (int i = 0; i < N * N; ++i) EXPECT_NEAR(C[size_t(i)], D[size_t(i)], 1e-6);
        for (int j = 0; j < N; ++j) {
            double rs = 0, cs = 0;
            for (int k = 0; k < N; ++k) {
                rs += C[size_t(j * N + k)];
                cs += C[size_t(k * N + j)];
            }
            EXPECT_NEAR(rs, 1.0, 5e-2);  // 20 iterations do not fully converge on extreme logits
            EXPECT_NEAR(cs, 1.0, 1e-5);  // ends on a column step
        }
    }
}

TEST(Mhc, PrePostHeadMatchNaive) {
    Rand r;
    SEED_TRACE(r);
    const int N = 4;
    const int64_t D = 24;
    auto X = r.vec(size_t(N * D)), fn = r.vec(size_t(24 * N * D), 0.1f), base = r.vec(24), scale = r.vec(3);
    std::vector<float> y(static_cast<size_t>(D)), post(N), comb(N * N);
    mhc_pre(X.data(), N, D, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, 20, y.data(), post.data(),
            comb.data());
    double ss = 0;
    for (float v : X) ss += double(v) * v;
    const double rho = 1 / std::sqrt(ss / double(N * D) + 1e-6);
    std::vector<double> mu(24);
    for (int i = 0; i < 24; ++i) {
        double s = 0;
        for (int64_t k = 0; k < N * D; ++k) s += double(fn[size_t(i * N * D + k)]) * X[size_t(k)];
        mu[size_t(i)] = s * rho;
    }
    auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
    for (int j = 0; j < N; ++j) EXPECT_NEAR(post[size_t(j)], 2 * sig(mu[size_t(N + j)] * scale[1] + base[size_t(N + j)]), 1e-5);
    std::vector<float> Cref(N * N);
    for (int i = 0; i < N * N; ++i) Cref[size_t(i)] = float(mu[size_t(2 * N + i)] * scale[2] + base[size_t(2 * N + i)]);
    sinkhorn(Cref.data(), N, 20, 1e-6f);
    for (int i = 0; i < N * N; ++i) EXPECT_NEAR(comb[size_t(i)], Cref[size_t(i)], 1e-5);
    for (int64_t d = 0; d < D; ++d) {
        double s = 0;
        for (int j = 0; j < N; ++j) s += (sig(mu[size_t(j)] * scale[0] + base[size_t(j)]) + 1e-6) * X[size_t(j * D + d)];
        EXPECT_NEAR(y[size_t(d)], s, 1e-4);
    }
    // post: X'_k = post_k o + sum_j comb[j,k] X_j (comb transposed)
    auto o = r.vec(size_t(D));
    std::vector<float> Xo(static_cast<size_t>(N * D));
    mhc_post(X.data(), o.data(), post.data(), comb.data(), N, D, Xo.data());
    for (int k = 0; k < N; ++k)
        for (int64_t d = 0; d < D; ++d) {
            double s = double(post[size_t(k)]) * o[size_t(d)];
            for (int j = 0; j < N; ++j) s += double(comb[size_t(j * N + k)]) * X[size_t(j * D + d)];
            EXPECT_NEAR(Xo[size_t(k * D + d)], s, 1e-5);
        }
    // head
    std::vector<float> yh(static_cast<size_t>(D));
    hc_head(X.data(), N, D, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, yh.data());
    for (int64_t d = 0; d < D; ++d) {
        double s = 0;
        for (int j = 0; j < N; ++j) s += (sig(mu[size_t(j)] * scale[0] + base[size_t(j)]) + 1e-6) * X[size_t(j * D + d)];
        EXPECT_NEAR(yh[size_t(d)], s, 1e-4);
    }
}

TEST(Compressor, PoolIsPerChannelSoftmaxAndSkipsMinusInf) {
    Rand r;
    SEED_TRACE(r);
    const int S = 8, dc = 5;
    auto kv = r.vec(S * dc), sc = r.vec(S * dc);
    for (int c = 0; c < dc; ++c) sc[size_t(c)] = -INFINITY;  // slot 0 absent
    std::vector<float> out(dc);
    compressor_pool(kv.data(), sc.data(), S, dc, out.data());
    for (int c = 0; c < dc; ++c) {
        double den = 0, num = 0;
        for (int s = 1; s < S; ++s) den += std::exp(double(sc[size_t(s * dc + c)]));
        for (int s = 1; s < S; ++s) num += std::exp(double(sc[size_t(s * dc + c)])) * kv[size_t(s * dc + c)];
        EXPECT_NEAR(out[size_t(c)], num / den, 1e-5);
    }
}

TEST(Indexer, ScoresAndTopK) {
    Rand r;
    SEED_TRACE(r);
    const int H = 16, d = 32, E = 40;
    auto q = r.vec(H * d), k = r.vec(E * d), w = r.vec(H);
    std::vector<float> s(E);
    indexer_scores(q.data(), H, d, w.data(), k.data(), E, s.data());
    for (int j = 0; j < E; ++j) {
        double t = 0;
        for (int h = 0; h < H; ++h) {
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += double(q[size_t(h * d + c)]) * k[size_t(j * d + c)];
            t += w[size_t(h)] * std::max(dot, 0.0);
        }
        EXPECT_NEAR(s[size_t(j)], t, 1e-3 * (1 + std::fabs(t)));
    }
    std::vector<float> sc = {1, 5, 3, 5, -2, 4};
    std::vector<int32_t> idx;
    topk_indices(sc.data(), 6, 3, idx);
    EXPECT_EQ(idx, (std::vector<int32_t>{1, 3, 5}));
    topk_indices(sc.data(), 6, 2, idx);  // tie at 5: both kept
    EXPECT_EQ(idx, (std::vector<int32_t>{1, 3}));
    std::vector<float> tie = {2, 2, 2, 2};
    topk_indices(tie.data(), 4, 2, idx);  // ties go to the lower index
    EXPECT_EQ(idx, (std::vector<int32_t>{0, 1}));
    topk_indices(sc.data(), 6, 10, idx);  // k > n: all
    EXPECT_EQ(idx.size(), 6u);
}

TEST(Attention, SinkAttentionEqualsBruteForceSoftmax) {
    Rand r;
    SEED_TRACE(r);
    const int H = 3, d = 20, n_kv = 9;
    auto q = r.vec(H * d), kv = r.vec(n_kv * d), sink = r.vec(H, 2.f);
    std::vector<int32_t> idx = {4, -1, 0, 8, 2, -1};
    std::vector<float> out(H * d);
    const float scale = 1.f / std::sqrt(float(d));
    sparse_attention_sink(q.data(), H, d, kv.data(), idx.data(), int(idx.size()), sink.data(), scale, false,
                          out.data());
    for (int h = 0; h < H; ++h) {
        std::vector<double> logits;
        std::vector<int> used;
        for (int i : idx) {
            if (i < 0) continue;
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += double(q[size_t(h * d + c)]) * kv[size_t(i * d + c)];
            logits.push_back(dot * scale);
            used.push_back(i);
        }
        logits.push_back(sink[size_t(h)]);  // softmax over [s..., sink], sink's probability dropped
        double m = *std::max_element(logits.begin(), logits.end()), z = 0;
        for (double l : logits) z += std::exp(l - m);
        for (int c = 0; c < d; ++c) {
            double o = 0;
            for (size_t i = 0; i < used.size(); ++i) o += std::exp(logits[i] - m) / z * kv[size_t(used[i] * d + c)];
            EXPECT_NEAR(out[size_t(h * d + c)], o, 1e-5);
        }
    }
    // all candidates invalid: output 0 (only the sink)
    std::vector<int32_t> none = {-1, -1};
    sparse_attention_sink(q.data(), H, d, kv.data(), none.data(), 2, sink.data(), scale, false, out.data());
    for (float v : out) EXPECT_EQ(v, 0.f);
}

// Release numerics round P where the reference kernel does (spec §2.7): P_i = bf16(e^(s_i - max_i s_i)) in the PV
// product, the fp32 sum of the unrounded exps plus e^(sink - max_i s_i) divides afterwards. Inputs are multiples of
// 1/8 with d = 16 (scale 1/4), so every score is exact and the test's P equals the implementation's bit for bit; the
// normalized rounding bf16(p_i) differs from it by up to 2^-8 relative. One head's sink sits far above the scores.
TEST(Attention, SinkAttentionReleaseRoundsUnnormalizedProbabilities) {
    Rand r;
    SEED_TRACE(r);
    const int H = 3, d = 16, n_kv = 7;
    auto eighths = [&](size_t n) {
        auto v = r.vec(n, 1.f);
        for (float& x : v) x = std::round(x * 8.f) / 8.f;
        return v;
    };
    auto q = eighths(H * d), kv = eighths(n_kv * d), sink = r.vec(H, 2.f);
    sink[2] = 100.f;
    std::vector<int32_t> idx = {3, -1, 0, 6, 5};
    std::vector<float> out(H * d);
    const float scale = 0.25f;
    sparse_attention_sink(q.data(), H, d, kv.data(), idx.data(), int(idx.size()), sink.data(), scale, true,
                          out.data());
    int differs_from_normalized_rounding = 0;
    for (int h = 0; h < H; ++h) {
        std::vector<float> s;
        std::vector<int> used;
        for (int i : idx) {
            if (i < 0) continue;
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += double(q[size_t(h * d + c)]) * kv[size_t(i * d + c)];
            s.push_back(float(dot) * scale);  // exact
            used.push_back(i);
        }
        const float ms = *std::max_element(s.begin(), s.end());
        const double M = std::max(double(ms), double(sink[size_t(h)]));
        double l = 0;
        for (float x : s) l += std::exp(double(x) - M);
        const double denom = l + std::exp(double(sink[size_t(h)]) - M);
        for (int c = 0; c < d; ++c) {
            double o = 0, o_norm = 0;
            for (size_t i = 0; i < used.size(); ++i) {
                const float v = kv[size_t(used[i] * d + c)];
                o += double(round_bf16(std::exp(s[i] - ms))) * v;
                o_norm += double(round_bf16(float(std::exp(double(s[i]) - M) / denom))) * v;
            }
            o *= std::exp(double(ms) - M) / denom;
            const float got = out[size_t(h * d + c)];
            EXPECT_NEAR(got, o, 1e-6 * (1 + std::fabs(o))) << "h " << h << " c " << c;
            differs_from_normalized_rounding += std::fabs(got - o_norm) > 1e-6 * (1 + std::fabs(o));
        }
    }
    EXPECT_GT(differs_from_normalized_rounding, 0) << "the test does not separate the two rounding points";
}

// More than one tile (kSoftmaxTile candidate slots, -1 slots included): each P is rounded relative to the max of its
// own tile and brought to the global max in fp32, as the CUDA kernels do whatever their split count.
TEST(Attention, SinkAttentionReleaseRoundsPerTile) {
    Rand r;
    SEED_TRACE(r);
    const int d = 16, n_kv = 80;
    auto eighths = [&](size_t n, float sd) {
        auto v = r.vec(n, sd);
        for (float& x : v) x = std::round(x * 8.f) / 8.f;
        return v;
    };
    auto q = eighths(d, 1.f), kv = eighths(size_t(n_kv) * d, 1.f);
    std::vector<float> sink = {0.5f};
    std::vector<int32_t> idx;
    for (int i = 0; i < 75; ++i) idx.push_back(i % 9 == 4 ? -1 : (i * 7) % n_kv);
    std::vector<float> out(d);
    sparse_attention_sink(q.data(), 1, d, kv.data(), idx.data(), int(idx.size()), sink.data(), 0.25f, true,
                          out.data());
    std::vector<float> s(idx.size(), -INFINITY);
    float ms = -INFINITY;
    for (size_t i = 0; i < idx.size(); ++i) {
        if (idx[i] < 0) continue;
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += double(q[size_t(c)]) * kv[size_t(idx[i] * d + c)];
        s[i] = float(dot) * 0.25f;  // exact
        ms = std::max(ms, s[i]);
    }
    const double M = std::max(double(ms), double(sink[0]));
    std::vector<double> o(d, 0.0), o_global(d, 0.0);
    double l = 0;
    for (size_t t0 = 0; t0 < idx.size(); t0 += size_t(kSoftmaxTile)) {
        const size_t t1 = std::min(idx.size(), t0 + size_t(kSoftmaxTile));
        float mt = -INFINITY;
        for (size_t i = t0; i < t1; ++i) mt = std::max(mt, s[i]);
        for (size_t i = t0; i < t1; ++i) {
            if (idx[i] < 0) continue;
            const double p_tile = double(round_bf16(std::exp(s[i] - mt))) * std::exp(double(mt) - M);
            const double p_global = double(round_bf16(std::exp(s[i] - ms))) * std::exp(double(ms) - M);
            l += std::exp(double(s[i]) - M);
            for (int c = 0; c < d; ++c) {
                o[size_t(c)] += p_tile * kv[size_t(idx[i] * d + c)];
                o_global[size_t(c)] += p_global * kv[size_t(idx[i] * d + c)];
            }
        }
    }
    const double denom = l + std::exp(double(sink[0]) - M);
    int differs = 0;
    for (int c = 0; c < d; ++c) {
        const double want = o[size_t(c)] / denom, global = o_global[size_t(c)] / denom;
        EXPECT_NEAR(out[size_t(c)], want, 2e-6 * (1 + std::fabs(want))) << "c " << c;
        differs += std::fabs(want - global) > 2e-6 * (1 + std::fabs(want));
    }
    EXPECT_GT(differs, 0) << "the tiles' maxima coincide with the global one: the test does not see the tile rule";
}

TEST(Attention, GroupedOutputProjection) {
    Rand r;
    SEED_TRACE(r);
    const int rows = 3, G = 2;
    const int64_t R = 5, gin = 6;
    auto o = r.vec(size_t(rows * G * gin)), wa = r.vec(size_t(G * R * gin));
    std::vector<float> z(static_cast<size_t>(rows * G * R));
    grouped_out_proj(o.data(), rows, G, R, gin, wa.data(), z.data(), nullptr);
    for (int t = 0; t < rows; ++t)
        for (int g = 0; g < G; ++g)
            for (int64_t i = 0; i < R; ++i) {
                double s = 0;
                for (int64_t c = 0; c < gin; ++c)
                    s += double(wa[size_t((g * R + i) * gin + c)]) * o[size_t(t * G * gin + g * gin + c)];
                EXPECT_NEAR(z[size_t(t * G * R + g * R + i)], s, 1e-5);
            }
}

TEST(Moe, RouterAndSwiglu) {
    std::vector<float> logits = {0.5f, -1.f, 2.f, 0.f, 1.f};
    std::vector<float> bias = {0.f, 10.f, 0.f, 0.f, 0.f};
    int32_t idx[2];
    float w[2];
    router_select(logits.data(), 5, bias.data(), nullptr, 2, 1.5f, idx, w);
    EXPECT_EQ(idx[0], 1);  // bias only selects
    EXPECT_EQ(idx[1], 2);
    auto sps = [](double x) { return std::sqrt(std::log1p(std::exp(x))); };
    const double s1 = sps(-1), s2 = sps(2);
    EXPECT_NEAR(w[0], s1 / (s1 + s2) * 1.5, 1e-6);
    EXPECT_NEAR(w[1], s2 / (s1 + s2) * 1.5, 1e-6);
    const int64_t hash[2] = {4, 0};
    router_select(logits.data(), 5, nullptr, hash, 2, 1.f, idx, w);
    EXPECT_EQ(idx[0], 4);
    EXPECT_EQ(idx[1], 0);
    EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
    const int64_t bad[2] = {5, 0};
    EXPECT_THROW(router_select(logits.data(), 5, nullptr, bad, 2, 1.f, idx, w), std::exception);
    float gate[4] = {20.f, -20.f, 1.f, 0.f}, up[4] = {30.f, -30.f, 2.f, 5.f}, out[4];
    swiglu_clamp(gate, up, 4, 10.f, out);
    EXPECT_NEAR(out[0], 10.0 / (1 + std::exp(-10.0)) * 10.0, 1e-4);  // gate clamped to 10, up to 10
    EXPECT_NEAR(out[1], -20.0 / (1 + std::exp(20.0)) * -10.0, 1e-7);  // gate not clamped below
    EXPECT_NEAR(out[2], 1.0 / (1 + std::exp(-1.0)) * 2.0, 1e-6);
    EXPECT_EQ(out[3], 0.f);
}

TEST(Linear, ReleasePathsQuantizeAndRound) {
    Rand r;
    SEED_TRACE(r);
    const int rows = 3, out = 9, in = 200;
    auto x = r.vec(rows * in), w = r.vec(out * in, 0.1f);
    std::vector<float> y(rows * out), ref(rows * out), xq(rows * in);
    // FP8 layer: activation quantized per 1x128 block, output rounded to bf16
    linear_release(x.data(), rows, w.data(), WeightFormat::FP8_BLOCK128, out, in, y.data(), nullptr);
    for (int i = 0; i < rows; ++i) act_quant_fp8_block128(x.data() + i * in, in, xq.data() + i * in);
    linear_f32(xq.data(), rows, w.data(), out, in, ref.data(), nullptr);
    for (int i = 0; i < rows * out; ++i) EXPECT_EQ(y[size_t(i)], round_bf16(ref[size_t(i)]));
    // the quantization is visible: not the plain product
    std::vector<float> plain(rows * out);
    linear_f32(x.data(), rows, w.data(), out, in, plain.data(), nullptr);
    double diff = 0;
    for (int i = 0; i < rows * out; ++i) diff += std::fabs(round_bf16(plain[size_t(i)]) - y[size_t(i)]);
    EXPECT_GT(diff, 0.0);
    // BF16 layer: plain product rounded; F32 layer: plain product
    linear_release(x.data(), rows, w.data(), WeightFormat::BF16, out, in, y.data(), nullptr);
    for (int i = 0; i < rows * out; ++i) EXPECT_EQ(y[size_t(i)], round_bf16(plain[size_t(i)]));
    linear_release(x.data(), rows, w.data(), WeightFormat::F32, out, in, y.data(), nullptr);
    for (int i = 0; i < rows * out; ++i) EXPECT_EQ(y[size_t(i)], plain[size_t(i)]);
}

TEST(Moe, SwigluExpertMatchesNaive) {
    Rand r;
    SEED_TRACE(r);
    const int rows = 2, D = 24, I = 10;
    auto x = r.vec(rows * D), w1 = r.vec(I * D, 2.f), w3 = r.vec(I * D, 2.f), w2 = r.vec(D * I), wt = r.vec(rows);
    std::vector<float> y(rows * D);
    swiglu_expert(x.data(), rows, w1.data(), w3.data(), w2.data(), I, D, 3.f, wt.data(), y.data(), nullptr);
    for (int t = 0; t < rows; ++t) {
        std::vector<double> h(I);
        for (int i = 0; i < I; ++i) {
            double g = 0, u = 0;
            for (int c = 0; c < D; ++c) {
                g += double(w1[size_t(i * D + c)]) * x[size_t(t * D + c)];
                u += double(w3[size_t(i * D + c)]) * x[size_t(t * D + c)];
            }
            g = std::min(g, 3.0);
            u = std::clamp(u, -3.0, 3.0);
            h[size_t(i)] = g / (1 + std::exp(-g)) * u;
        }
        for (int c = 0; c < D; ++c) {
            double s = 0;
            for (int i = 0; i < I; ++i) s += double(w2[size_t(c * I + i)]) * h[size_t(i)];
            EXPECT_NEAR(y[size_t(t * D + c)], s * wt[size_t(t)], 1e-3 * (1 + std::fabs(s)));
        }
    }
}
