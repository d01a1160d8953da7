// Kernel-level cases of the compute-bound dense GEMMs (cuda/gemm/dense_gemm.cuh, act_quant.cuh) against the CPU
// reference, for what the linear family's harness (test_linear.cpp: every case through fp8_gemm, fp8_gemm_mma and
// bf16_gemm on the automatic path, from their FP8_ROWS / MMA_F16 activations) cannot express: act_quant bit for bit
// against cpu::act_quant_fp8_block128 (and its SwiGLU form against the decode path's moe_swiglu_prepare); the FP8
// and BF16 GEMMs on every path this device runs (mma.sync ones on sm_90 too) with every wgmma tile height forced,
// against an fp64 product of the same quantized operands; layout self-checks with one-hot activations (exact in any
// accumulator); rows independent of the batch and of the tile height (bit for bit); the argument and TMA-map rules.
// Random data with fresh seeds (FS_TEST_SEED reproduces), odd sizes (n, k multiples of 16 with partial 128-blocks),
// m = 1 to 65536. Outputs are poisoned (NaN) before each run: an unwritten element fails the comparison, and the
// columns between n and the row stride must still hold the poison afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "cpu/ops.h"
#include "cuda/gemm/dense_gemm.cuh"
#include "cuda/gemm/tensor_map.h"
#include "cuda/moe/moe.cuh"
#include "harness.h"
#include "weights.h"

namespace flashseek::test {
namespace {

using cuda::GemmPath;
using cuda::OutKind;
using cuda::ScaleKind;
using cuda::WeightKind;

const char* path_name(GemmPath p) {
    switch (p) {
        case GemmPath::AUTO: return "auto";
        case GemmPath::WGMMA: return "wgmma";
        case GemmPath::MMA_NATIVE: return "mma-native";
        case GemmPath::MMA_F16: return "mma-f16";
    }
    return "?";
}

std::vector<GemmPath> supported_paths(bool fp8) {
    std::vector<GemmPath> r;
    for (GemmPath p : {GemmPath::WGMMA, GemmPath::MMA_NATIVE, GemmPath::MMA_F16})
        if (cuda::gemm_path_supported(p, fp8) && (fp8 || p != GemmPath::MMA_F16)) r.push_back(p);
    return r;
}

// Random bf16 activations [m, k] (as fp32 values), N(0, 1) with a per-row magnitude spread of 2^-6..2^6 so the
// per-row scales differ.
std::vector<float> random_activation(std::mt19937_64& rng, int64_t m, int64_t k) {
    std::normal_distribution<float> d(0.f, 1.f);
    std::uniform_int_distribution<int> e(-6, 6);
    std::vector<float> x(size_t(m * k));
    for (int64_t r = 0; r < m; ++r) {
        const float s = std::ldexp(1.f, e(rng));
        for (int64_t c = 0; c < k; ++c) x[size_t(r * k + c)] = round_bf16(d(rng) * s);
    }
    return x;
}

// bf16 copy of x on the device with row stride ld.
DeviceArray<uint16_t> upload_bf16(const std::vector<float>& x, int64_t m, int64_t k, int64_t ld) {
    std::vector<uint16_t> h(size_t(std::max<int64_t>(1, m * ld)), 0);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c) h[size_t(r * ld + c)] = f32_to_bf16(x[size_t(r * k + c)]);
    return DeviceArray<uint16_t>(h);
}

// A device FP8 activation of x (act_quant on the GPU).
struct DeviceFp8Act {
    DeviceArray<uint16_t> x;
    DeviceArray<uint8_t> codes;
    DeviceArray<float> scales;
    cuda::Fp8Activation act;
    DeviceFp8Act(const std::vector<float>& xs, int64_t m, int64_t k)
        : x(upload_bf16(xs, m, k, k + 8)),
          codes(cuda::fp8_activation_codes_bytes(m, k)),
          scales(cuda::fp8_activation_scales_bytes(m, k) / 4) {
        codes.poison();
        scales.poison();
        act = cuda::fp8_activation_view(codes.ptr, scales.ptr, m, k);
        cuda::quantize_fp8_activation(x.ptr, m, k + 8, nullptr, act, nullptr);
    }
};

// fp64 product y[m, n] = sum_k a[m, k] * w[n, k].
std::vector<double> product_f64(const std::vector<float>& a, const std::vector<float>& w, int64_t m, int64_t n,
                                int64_t k) {
    std::vector<double> y(size_t(m * n));
    for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
            const float* ar = &a[size_t(r * k)];
            const float* wr = &w[size_t(c * k)];
            double s = 0;
            for (int64_t i = 0; i < k; ++i) s += double(ar[i]) * double(wr[i]);
            y[size_t(r * n + c)] = s;
        }
    return y;
}

std::vector<float> to_f32(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// Output buffer [m, ldd] of bf16 or fp32, poisoned; read back as fp32 [m, n]; `untouched` tells whether the
// columns n..ldd-1 still hold the poison.
struct DeviceOut {
    OutKind kind;
    int64_t m, n, ldd;
    DeviceArray<uint8_t> mem;
    DeviceOut(OutKind k, int64_t m_, int64_t n_, int64_t ldd_)
        : kind(k), m(m_), n(n_), ldd(ldd_), mem(size_t(std::max<int64_t>(1, m_ * ldd_)) * (k == OutKind::F32 ? 4 : 2)) {
        mem.poison();
    }
    std::vector<float> read(bool* untouched = nullptr) const {
        const auto raw = mem.download();
        std::vector<float> r(size_t(m * n));
        bool clean = true;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldd; ++j) {
                float v;
                if (kind == OutKind::F32) {
                    std::memcpy(&v, &raw[size_t(i * ldd + j) * 4], 4);
                } else {
                    uint16_t h;
                    std::memcpy(&h, &raw[size_t(i * ldd + j) * 2], 2);
                    v = bf16_to_f32(h);
                }
                if (j < n) r[size_t(i * n + j)] = v;
                else if (!std::isnan(v)) clean = false;
            }
        if (untouched) *untouched = clean;
        return r;
    }
};

// The FP8 GEMM arguments of activation a, weight w and output d.
cuda::Fp8GemmArgs fp8_args(const cuda::Fp8Activation& a, const TestWeight& w, const DeviceOut& d) {
    cuda::Fp8GemmArgs args;
    args.a = a;
    args.w = w.w_dev->ptr;
    args.w_scales = w.s_dev->ptr;
    args.w_scale_kind = w.scale_kind;
    args.n = w.out;
    args.d = d.mem.ptr;
    args.d_kind = d.kind;
    args.ldd = d.ldd;
    return args;
}
cuda::Fp8GemmArgs fp8_args(const DeviceFp8Act& a, const TestWeight& w, const DeviceOut& d) {
    return fp8_args(a.act, w, d);
}

// The BF16 GEMM arguments of the first m rows of activation a (row stride lda), weight w and output d.
cuda::Bf16GemmArgs bf16_args(const uint16_t* a, int64_t m, int64_t lda, const TestWeight& w, const DeviceOut& d) {
    cuda::Bf16GemmArgs args;
    args.a = a;
    args.lda = lda;
    args.m = m;
    args.k = w.in;
    args.w = reinterpret_cast<const uint16_t*>(w.w_dev->ptr);
    args.n = w.out;
    args.d = d.mem.ptr;
    args.d_kind = d.kind;
    args.ldd = d.ldd;
    return args;
}

// ---------------------------------------------------------------------------------------------------------------
// act_quant: codes and scales bit for bit against the CPU, with a row map (one entry out of range: zero row), in
// both code orders (GROUP_INTERLEAVED: each column's code at fp8_code_position, padding included); with a map, also
// quantize_fp8_scatter (each x row once, stored at the rows that map to it) against the mapped quantization.

TEST(DenseGemm, ActQuantMatchesCpuBitForBit) {
    for (auto [m, k, mapped, order] :
         {std::tuple<int64_t, int64_t, bool, cuda::Fp8CodeOrder>{1, 16, false, cuda::Fp8CodeOrder::NATURAL},
          {7, 400, false, cuda::Fp8CodeOrder::NATURAL},
          {300, 4096, false, cuda::Fp8CodeOrder::NATURAL},
          {64, 1040, true, cuda::Fp8CodeOrder::NATURAL},
          {5, 128, true, cuda::Fp8CodeOrder::NATURAL},
          {3, 16, false, cuda::Fp8CodeOrder::GROUP_INTERLEAVED},
          {9, 400, true, cuda::Fp8CodeOrder::GROUP_INTERLEAVED},
          {130, 2048, false, cuda::Fp8CodeOrder::GROUP_INTERLEAVED}}) {
        const uint64_t seed = fresh_seed();
        std::ostringstream desc;
        desc << "m=" << m << " k=" << k << " mapped=" << mapped << " order=" << int(order) << " seed=" << seed;
        SCOPED_TRACE(desc.str());
        std::mt19937_64 rng(seed);
        const int64_t x_rows = m + 3;
        std::vector<float> x = random_activation(rng, x_rows, k);
        for (int64_t c = 0; c < k; ++c) x[size_t(c)] = 0.f;  // an all-zero row: the 1e-4 floor of the scale
        if (k >= 64) x[size_t(k + 3)] = round_bf16(1e6f);      // a huge value (row 1)
        std::vector<int32_t> map(static_cast<size_t>(m));
        for (int64_t r = 0; r < m; ++r) map[size_t(r)] = int32_t((r * 7 + 2) % x_rows);
        if (mapped) map[size_t(m - 1)] = int32_t(x_rows + 5);  // out of range: a zero row
        const int64_t ld = k + (m % 2 ? 27 : 24);  // odd m: a row stride off the 16-byte grid (the scalar loads)
        DeviceArray<uint16_t> xd = upload_bf16(x, x_rows, k, ld);
        DeviceArray<int32_t> md(map);
        DeviceArray<uint8_t> codes(cuda::fp8_activation_codes_bytes(m, k));
        DeviceArray<float> scales(cuda::fp8_activation_scales_bytes(m, k) / 4);
        codes.poison();
        scales.poison();
        auto act = cuda::fp8_activation_view(codes.ptr, scales.ptr, m, k);
        act.order = order;
        cuda::quantize_fp8_activation(xd.ptr, x_rows, ld, mapped ? md.ptr : nullptr, act, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto hc = codes.download();
        const auto hs = scales.download();
        if (mapped) {  // each x row quantized once and stored at the rows mapped to it: the same bits
            std::vector<int> uses(static_cast<size_t>(x_rows), 0);
            for (int64_t r = 0; r < m; ++r)
                if (map[size_t(r)] < x_rows) ++uses[size_t(map[size_t(r)])];
            const int per_row = std::max(1, *std::max_element(uses.begin(), uses.end()));
            std::vector<int32_t> row_slots(size_t(x_rows) * per_row, -1);
            std::fill(uses.begin(), uses.end(), 0);
            for (int64_t r = 0; r < m; ++r) {
                const int32_t src = map[size_t(r)];
                if (src < x_rows) row_slots[size_t(src) * per_row + uses[size_t(src)]++] = int32_t(r);
            }
            DeviceArray<int32_t> slots_d(row_slots);
            codes.poison();
            scales.poison();
            cuda::quantize_fp8_scatter(xd.ptr, x_rows, ld, slots_d.ptr, per_row, act, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const auto sc = codes.download();
            const auto ss = scales.download();
            size_t differ = 0;
            for (int64_t r = 0; r < m; ++r) {
                if (map[size_t(r)] >= x_rows) continue;  // no x row: not written
                for (int64_t c = 0; c < act.codes_ld; ++c)
                    differ += sc[size_t(r * act.codes_ld + c)] != hc[size_t(r * act.codes_ld + c)];
                for (int64_t b = 0; b < (k + 127) / 128; ++b)
                    differ += ss[size_t(b * act.scales_ld + r)] != hs[size_t(b * act.scales_ld + r)];
            }
            EXPECT_EQ(differ, 0u) << "quantize_fp8_scatter differs from the mapped quantization";
        }
        const int64_t blocks = (k + 127) / 128;
        int64_t bad = 0;
        std::vector<float> q(static_cast<size_t>(k)), s(static_cast<size_t>(blocks)), zero(static_cast<size_t>(k), 0.f);
        for (int64_t r = 0; r < m; ++r) {
            const int64_t src = mapped ? map[size_t(r)] : r;
            const float* xr = src >= 0 && src < x_rows ? &x[size_t(src * k)] : zero.data();
            cpu::act_quant_fp8_block128(xr, k, q.data(), s.data());
            for (int64_t b = 0; b < blocks; ++b) {
                const float gs = hs[size_t(b * act.scales_ld + r)];
                if (gs != s[size_t(b)] && bad++ < 5)
                    ADD_FAILURE() << "scale row " << r << " block " << b << ": " << gs << " vs " << s[size_t(b)];
            }
            for (int64_t c = 0; c < act.codes_ld; ++c) {
                const uint8_t code = hc[size_t(r * act.codes_ld + cuda::fp8_code_position(c, order))];
                if (c >= k) {
                    if (code != 0 && bad++ < 5)
                        ADD_FAILURE() << "padding code row " << r << " col " << c << " = " << int(code);
                    continue;
                }
                const float v = e4m3_to_f32(code) * s[size_t(c / 128)];
                if (v != q[size_t(c)] && bad++ < 5)
                    ADD_FAILURE() << "row " << r << " col " << c << ": code " << int(code) << " -> " << v << " vs "
                                  << q[size_t(c)];
            }
        }
        EXPECT_EQ(bad, 0);
    }
}

// f16 bits to fp32 (prepared activations hold e4m3 values as f16).
float f16_bits_to_f32(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

// The shared expert's down-projection input: quantize_fp8_swiglu against moe_swiglu_prepare (the decode path's
// SwiGLU + act_quant, same device formula: bit for bit, scales and values) and against the CPU (swiglu_clamp, bf16,
// act_quant: the device and host exp may differ in the last bit, which can move a bf16 rounding: rel 1e-3).
TEST(DenseGemm, SwigluQuantMatchesDecodePathAndCpu) {
    for (auto [m, inter] : {std::pair<int64_t, int64_t>{1, 2048}, {37, 400}, {300, 1024}}) {
        const uint64_t seed = fresh_seed();
        std::ostringstream desc;
        desc << "m=" << m << " inter=" << inter << " seed=" << seed;
        SCOPED_TRACE(desc.str());
        std::mt19937_64 rng(seed);
        const float limit = 10.f;
        const int64_t ld = inter + 8;
        std::normal_distribution<float> d(0.f, 5.f);  // |values| beyond the limit occur: the clamp matters
        std::vector<float> g(static_cast<size_t>(m * inter)), u(g.size());
        for (auto& v : g) v = round_bf16(d(rng));
        for (auto& v : u) v = round_bf16(d(rng));
        DeviceArray<uint16_t> gd = upload_bf16(g, m, inter, ld), ud = upload_bf16(u, m, inter, ld);
        DeviceArray<uint8_t> codes(cuda::fp8_activation_codes_bytes(m, inter));
        DeviceArray<float> scales(cuda::fp8_activation_scales_bytes(m, inter) / 4);
        codes.poison();
        scales.poison();
        const auto act = cuda::fp8_activation_view(codes.ptr, scales.ptr, m, inter);
        cuda::quantize_fp8_swiglu(gd.ptr, ud.ptr, ld, limit, act, nullptr);
        DeviceArray<uint16_t> pv(cuda::prepared_values_bytes(m, inter) / 2);
        DeviceArray<float> ps(cuda::prepared_scales_bytes(m, inter) / 4);
        cuda::PreparedActivation h;
        h.values = pv.ptr;
        h.scales = ps.ptr;
        cuda::moe_swiglu_prepare(gd.ptr, ud.ptr, ld, m, inter, limit, WeightKind::FP8_BLOCK128,
                                 cuda::ActNumerics::FP8_BLOCK128, h, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto hc = codes.download();
        const auto hs = scales.download();
        const auto pvh = pv.download();
        const auto psh = ps.download();
        const int64_t blocks = (inter + 127) / 128;
        int64_t bad = 0;
        std::vector<float> got, want;
        std::vector<float> hrow(static_cast<size_t>(inter)), q(static_cast<size_t>(inter));
        for (int64_t r = 0; r < m; ++r) {
            cpu::swiglu_clamp(&g[size_t(r * inter)], &u[size_t(r * inter)], inter, limit, hrow.data());
            for (auto& v : hrow) v = round_bf16(v);
            cpu::act_quant_fp8_block128(hrow.data(), inter, q.data());
            for (int64_t c = 0; c < inter; ++c) {
                const int64_t b = c / 128, p = c % 128, r4 = p & 3;
                const int64_t pos = (p & ~int64_t(3)) | (r4 == 1 ? 2 : r4 == 2 ? 1 : r4);  // FP8 prepared order
                const float sc = hs[size_t(b * act.scales_ld + r)];
                const float mine = e4m3_to_f32(hc[size_t(r * act.codes_ld + c)]);
                const float theirs = f16_bits_to_f32(pvh[size_t(r * h.k_pad + b * 128 + pos)]);
                if ((mine != theirs || sc != psh[size_t(r * blocks + b)]) && bad++ < 5)
                    ADD_FAILURE() << "row " << r << " col " << c << ": " << mine << " x " << sc << " vs decode path "
                                  << theirs << " x " << psh[size_t(r * blocks + b)];
                got.push_back(mine * sc);
                want.push_back(q[size_t(c)]);
            }
        }
        EXPECT_EQ(bad, 0);
        EXPECT_LE(rel_l2(got, want), 1e-3);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// FP8 GEMM against the fp64 product of the same quantized operands.

struct Fp8Case {
    int64_t m, n, k;
    ScaleKind scale;
    OutKind out;
    int64_t ldd_extra;  // even: vector stores; odd: the scalar store path
};

// Thresholds on ||gpu - ref|| / ||ref||. fp32 output: the f16 mma.sync path sums exact products in fp32 (2e-5);
// native e4m3 mma.sync (sm_89 / sm_120; on sm_90 lowered to f16, measured 1e-8 on the H200) 1e-4; wgmma sums each
// 128-K block's FP8 products in the tensor core, whose accumulation is not exact fp32: measured 1.03e-4 .. 1.42e-4
// over these cases on the H200, as the wgmma FP8 GEMV's 1.0e-4 .. 1.3e-4, whose bound is 3e-4 for the same
// reason: 3e-4. bf16 output adds one bf16 rounding per element (4e-3). F32 weight scales: the reference's
// dequantized weight is rounded to fp32 (negligible here).
double fp8_threshold(GemmPath p, OutKind out) {
    if (out == OutKind::BF16) return 4e-3;
    if (p == GemmPath::WGMMA) return 3e-4;
    return p == GemmPath::MMA_F16 ? 2e-5 : 1e-4;
}

// The wgmma path's tile heights (forced), or the automatic choice elsewhere.
std::vector<int> block_ms(GemmPath p) {
    return p == GemmPath::WGMMA ? std::vector<int>{64, 128, 256} : std::vector<int>{0};
}

void run_fp8_case(const Fp8Case& c, GemmPath path, std::mt19937_64& rng) {
    TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, c.scale, c.n, c.k);
    const std::vector<float> x = random_activation(rng, c.m, c.k);
    std::vector<float> xq(x.size());
    for (int64_t r = 0; r < c.m; ++r) cpu::act_quant_fp8_block128(&x[size_t(r * c.k)], c.k, &xq[size_t(r * c.k)]);
    const auto ref = to_f32(product_f64(xq, w.dequantized(), c.m, c.n, c.k));
    DeviceFp8Act a(x, c.m, c.k);
    for (int block_m : block_ms(path)) {
        DeviceOut d(c.out, c.m, c.n, c.n + c.ldd_extra);
        const cuda::Fp8GemmArgs args = fp8_args(a, w, d);
        EXPECT_TRUE(cuda::fp8_gemm_eligible(args, path));
        cuda::gemm_fp8(args, path, nullptr, block_m);
        CUDA_CHECK(cudaDeviceSynchronize());
        bool untouched = false;
        const auto y = d.read(&untouched);
        EXPECT_TRUE(untouched) << "wrote past n";
        const double err = rel_l2(y, ref);
        const auto plan = cuda::plan_fp8_gemm(args, path, block_m);
        EXPECT_LE(err, fp8_threshold(path, c.out)) << "block_m " << plan.block_m << " ctas " << plan.ctas;
        std::printf("  fp8 %-10s m=%-5lld n=%-5lld k=%-5lld %s %s block_m=%d rel_l2=%.3g\n", path_name(path),
                    (long long)c.m, (long long)c.n, (long long)c.k, c.scale == ScaleKind::F32 ? "f32-scales" : "e8m0",
                    c.out == OutKind::F32 ? "f32" : "bf16", plan.block_m, err);
    }
}

TEST(DenseGemm, Fp8MatchesF64ReferenceOnEveryPath) {
    const std::vector<Fp8Case> cases = {
        {1, 208, 400, ScaleKind::E8M0, OutKind::F32, 8},      // one row; partial blocks in n and k
        {7, 144, 1040, ScaleKind::F32, OutKind::F32, 3},      // fp32 scales, scalar stores
        {64, 256, 512, ScaleKind::E8M0, OutKind::BF16, 8},    // bf16 out
        {300, 528, 2064, ScaleKind::E8M0, OutKind::F32, 0},   // partial m tile, k % 128 = 16
        {300, 96, 160, ScaleKind::E8M0, OutKind::BF16, 1},    // n < 128, bf16 scalar stores
        {4096, 256, 1024, ScaleKind::E8M0, OutKind::F32, 8},  // 128-row tiles on the wgmma path
        {65536, 144, 160, ScaleKind::E8M0, OutKind::BF16, 0},  // the largest m (2^16 rows)
    };
    for (GemmPath path : supported_paths(true))
        for (const auto& c : cases) {
            const uint64_t seed = fresh_seed();
            std::ostringstream desc;
            desc << path_name(path) << " m=" << c.m << " n=" << c.n << " k=" << c.k << " seed=" << seed;
            SCOPED_TRACE(desc.str());
            std::mt19937_64 rng(seed);
            run_fp8_case(c, path, rng);
        }
}

// Grouped products (attention wo_a: groups = G in one launch) against cpu::grouped_out_proj over the same quantized
// operands, every path and tile height; columns of other groups must come from their own weights and activations.
TEST(DenseGemm, Fp8GroupedMatchesCpuGroupedOutProjection) {
    struct G { int64_t m; int groups; int64_t rows, group_in; };
    for (GemmPath path : supported_paths(true))
        for (const G& c : {G{300, 8, 128, 256}, G{7, 2, 256, 384}, G{1, 4, 128, 128}}) {
            const uint64_t seed = fresh_seed();
            std::ostringstream desc;
            desc << path_name(path) << " m=" << c.m << " groups=" << c.groups << " R=" << c.rows << " Kg=" << c.group_in
                 << " seed=" << seed;
            SCOPED_TRACE(desc.str());
            std::mt19937_64 rng(seed);
            const int64_t n = c.groups * c.rows, k = c.groups * c.group_in;
            TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, n, c.group_in);
            const std::vector<float> x = random_activation(rng, c.m, k);
            std::vector<float> xq(x.size()), ref(static_cast<size_t>(c.m * n));
            for (int64_t r = 0; r < c.m; ++r) cpu::act_quant_fp8_block128(&x[size_t(r * k)], k, &xq[size_t(r * k)]);
            const auto wf = w.dequantized();
            cpu::grouped_out_proj(xq.data(), c.m, c.groups, c.rows, c.group_in, wf.data(), ref.data(), nullptr);
            DeviceFp8Act a(x, c.m, k);
            for (int block_m : block_ms(path)) {
                DeviceOut d(OutKind::F32, c.m, n, n + 8);
                cuda::Fp8GemmArgs args = fp8_args(a, w, d);
                args.groups = c.groups;
                ASSERT_TRUE(cuda::fp8_gemm_eligible(args, path));
                cuda::gemm_fp8(args, path, nullptr, block_m);
                CUDA_CHECK(cudaDeviceSynchronize());
                bool untouched = false;
                const double err = rel_l2(d.read(&untouched), ref);
                EXPECT_TRUE(untouched) << "wrote past n";
                EXPECT_LE(err, fp8_threshold(path, OutKind::F32)) << "block_m " << block_m;
                std::printf("  fp8 grouped %-10s %s block_m=%d rel_l2=%.3g\n", path_name(path), desc.str().c_str(),
                            cuda::plan_fp8_gemm(args, path, block_m).block_m, err);
            }
        }
}

// One-hot activations: row r has one value 1.0 at column r % k, so D[r, c] = W[c, r % k] exactly whatever the
// accumulator; any fragment, swizzle, wave or tile-placement error shows as a mismatch at a named (row, column).
// Every tile height of the wgmma path.
TEST(DenseGemm, Fp8OneHotSelectsWeightColumns) {
    for (GemmPath path : supported_paths(true))
        for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{300, 272, 400}, {1000, 1280, 256}}) {
            const uint64_t seed = fresh_seed();
            std::ostringstream desc;
            desc << path_name(path) << " m=" << m << " n=" << n << " k=" << k << " seed=" << seed;
            SCOPED_TRACE(desc.str());
            std::mt19937_64 rng(seed);
            TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, n, k);
            const auto wf = w.dequantized();
            std::vector<float> x(size_t(m * k), 0.f);
            for (int64_t r = 0; r < m; ++r) x[size_t(r * k + r % k)] = 1.f;
            DeviceFp8Act a(x, m, k);
            for (int block_m : block_ms(path)) {
                DeviceOut d(OutKind::F32, m, n, n);
                const cuda::Fp8GemmArgs args = fp8_args(a, w, d);
                cuda::gemm_fp8(args, path, nullptr, block_m);
                CUDA_CHECK(cudaDeviceSynchronize());
                const auto y = d.read();
                int64_t bad = 0;
                for (int64_t r = 0; r < m; ++r)
                    for (int64_t c = 0; c < n; ++c) {
                        const float want = wf[size_t(c * k + r % k)], got = y[size_t(r * n + c)];
                        if (got != want && bad++ < 8)
                            ADD_FAILURE() << "block_m " << block_m << ": D[" << r << ", " << c << "] = " << got
                                          << ", want " << want;
                    }
                EXPECT_EQ(bad, 0) << "block_m " << block_m;
            }
        }
}

// Runs 1.. of `outs` (m x n each, m >= 1) hold the same first min(7, m) rows as run 0, bit for bit.
void expect_leading_rows_equal(const std::vector<std::vector<float>>& outs, const std::vector<std::string>& what,
                               int64_t n) {
    for (size_t i = 1; i < outs.size(); ++i) {
        const int64_t rows = std::min<int64_t>(7, int64_t(outs[i].size()) / n);
        EXPECT_EQ(std::memcmp(outs[0].data(), outs[i].data(), size_t(rows * n) * 4), 0)
            << what[0] << " vs " << what[i] << ": rows 0.." << rows - 1 << " differ";
    }
}

// A row's result does not depend on the batch or the tile: rows 0..6 of an m = 4096 product with every tile height
// of the wgmma path (the automatic choice elsewhere) equal the m = 7 and m = 1 products bit for bit.
TEST(DenseGemm, Fp8RowsIndependentOfBatchAndTiles) {
    for (GemmPath path : supported_paths(true)) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(std::string(path_name(path)) + " seed=" + std::to_string(seed));
        std::mt19937_64 rng(seed);
        const int64_t n = 1280, k = 528, big = 4096;
        TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, n, k);
        const std::vector<float> x = random_activation(rng, big, k);
        std::vector<std::vector<float>> outs;
        std::vector<std::string> what;
        auto run = [&](int64_t m, int block_m) {
            std::vector<float> xs(x.begin(), x.begin() + m * k);
            DeviceFp8Act a(xs, m, k);
            DeviceOut d(OutKind::F32, m, n, n);
            const cuda::Fp8GemmArgs args = fp8_args(a, w, d);
            cuda::gemm_fp8(args, path, nullptr, block_m);
            CUDA_CHECK(cudaDeviceSynchronize());
            outs.push_back(d.read());
            const int used = cuda::plan_fp8_gemm(args, path, block_m).block_m;
            what.push_back("m=" + std::to_string(m) + " block_m=" + std::to_string(used));
        };
        for (int block_m : block_ms(path)) run(big, block_m);
        run(7, 0);
        run(1, 0);
        expect_leading_rows_equal(outs, what, n);
    }
}

// A bf16 output is the fp32 output rounded to nearest even, element for element (the backend has the shared expert's
// w2 write bf16 where the MoE combine would round its fp32 output: the same term). Every path and tile height, the
// staged epilogue (ldd a multiple of 8) and the scalar stores (odd ldd).
TEST(DenseGemm, Fp8Bf16OutputIsRoundedF32Output) {
    for (GemmPath path : supported_paths(true)) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(std::string(path_name(path)) + " seed=" + std::to_string(seed));
        std::mt19937_64 rng(seed);
        const int64_t m = 300, n = 1280, k = 528;
        TestWeight w = make_weight(rng, WeightKind::FP8_BLOCK128, ScaleKind::E8M0, n, k);
        DeviceFp8Act a(random_activation(rng, m, k), m, k);
        for (int block_m : block_ms(path))
            for (int64_t extra : {int64_t(0), int64_t(3)}) {
                DeviceOut f(OutKind::F32, m, n, n + extra), b(OutKind::BF16, m, n, n + extra);
                cuda::gemm_fp8(fp8_args(a, w, f), path, nullptr, block_m);
                cuda::gemm_fp8(fp8_args(a, w, b), path, nullptr, block_m);
                CUDA_CHECK(cudaDeviceSynchronize());
                const auto yf = f.read(), yb = b.read();
                size_t differ = 0;
                for (size_t i = 0; i < yf.size(); ++i) differ += round_bf16(yf[i]) != yb[i];
                EXPECT_EQ(differ, 0u) << "block_m " << block_m << " ldd n + " << extra;
            }
    }
}

// The wgmma GEMMs' bf16 output tiles written by TMA from shared memory (tma_store, the default) equal the math
// warps' own stores bit for bit, FP8 and BF16, every tile height: partial row tiles (m = 1, 77, 300, 4,097), a
// partial 128-column tile (n % 128 = 16), a row stride wider than n, FP8 groups (each group's columns from its own
// product) and several tiles per CTA (m = 4,097: the output tile reused). The output has 16 poisoned rows past m and
// columns past n: TMA must leave them untouched (its boxes are clipped at the map's m rows and n columns).
TEST(DenseGemm, TmaStoredTilesEqualWarpStores) {
    if (!cuda::gemm_path_supported(GemmPath::WGMMA, true)) GTEST_SKIP() << "no wgmma path here";
    struct C { bool fp8; int64_t m, n, k; int groups; int64_t ldd_extra; };
    const C cases[] = {{true, 300, 1040, 528, 1, 8},  {true, 1, 256, 1024, 1, 0},  {true, 4097, 1040, 256, 1, 0},
                       {true, 77, 512, 512, 2, 16},   {false, 300, 1040, 528, 1, 8}, {false, 4097, 272, 256, 1, 0},
                       {false, 1, 144, 208, 1, 8}};
    for (const C& c : cases) {
        const uint64_t seed = fresh_seed();
        std::ostringstream desc;
        desc << (c.fp8 ? "fp8" : "bf16") << " m=" << c.m << " n=" << c.n << " k=" << c.k << " groups=" << c.groups
             << " ldd=n+" << c.ldd_extra << " seed=" << seed;
        SCOPED_TRACE(desc.str());
        std::mt19937_64 rng(seed);
        const int64_t ldd = c.n + c.ldd_extra;
        const std::vector<float> x = random_activation(rng, c.m, c.k);
        TestWeight w = make_weight(rng, c.fp8 ? WeightKind::FP8_BLOCK128 : WeightKind::BF16,
                                   c.fp8 ? ScaleKind::E8M0 : ScaleKind::NONE, c.n, c.k / c.groups);
        std::unique_ptr<DeviceFp8Act> a8;
        if (c.fp8) a8 = std::make_unique<DeviceFp8Act>(x, c.m, c.k);
        const DeviceArray<uint16_t> a16 = c.fp8 ? DeviceArray<uint16_t>(1) : upload_bf16(x, c.m, c.k, c.k);
        for (int block_m : block_ms(GemmPath::WGMMA)) {
            std::vector<float> outs[2];
            for (int tma : {0, 1}) {
                DeviceOut d(OutKind::BF16, c.m + 16, c.n, ldd);  // rows m .. m + 15: poison that must stay
                if (c.fp8) {
                    cuda::Fp8GemmArgs args = fp8_args(*a8, w, d);
                    args.groups = c.groups;
                    args.tma_store = tma != 0;
                    cuda::gemm_fp8(args, GemmPath::WGMMA, nullptr, block_m);
                } else {
                    cuda::Bf16GemmArgs args = bf16_args(a16.ptr, c.m, c.k, w, d);
                    args.tma_store = tma != 0;
                    cuda::gemm_bf16(args, GemmPath::WGMMA, nullptr, block_m);
                }
                CUDA_CHECK(cudaDeviceSynchronize());
                bool untouched = false;
                outs[tma] = d.read(&untouched);
                EXPECT_TRUE(untouched) << "block_m " << block_m << (tma ? " TMA stores" : " warp stores")
                                       << ": wrote past n";
                size_t written_past_m = 0, unwritten = 0;
                for (int64_t i = 0; i < (c.m + 16) * c.n; ++i) {
                    if (i >= c.m * c.n) written_past_m += !std::isnan(outs[tma][size_t(i)]);
                    else unwritten += std::isnan(outs[tma][size_t(i)]);
                }
                EXPECT_EQ(written_past_m, 0u) << "block_m " << block_m << (tma ? " TMA stores" : " warp stores");
                EXPECT_EQ(unwritten, 0u) << "block_m " << block_m << (tma ? " TMA stores" : " warp stores");
            }
            EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4), 0)
                << "block_m " << block_m << ": TMA-stored tiles differ from the warps' stores";
        }
    }
}

// The BF16 GEMM writing the act_quant rows of its bf16 output (Bf16GemmArgs::d_rows: wo_a into wo_b's input)
// gives bit for bit the codes and scales quantize_fp8_activation makes of the bf16 output: partial row tiles
// (m = 1, 77, 300), both tile heights it takes (64 is refused by name), a column offset inside a wider
// activation (rows_col0), codes outside the written columns untouched. wgmma path only (other paths refuse it).
TEST(DenseGemm, Bf16Fp8RowsOutputIsActQuantOfBf16Output) {
    if (!cuda::gemm_path_supported(GemmPath::WGMMA, false)) GTEST_SKIP() << "no wgmma path here";
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const int64_t n = 384, k = 528, width = 1024, col0 = 256;
    TestWeight w = make_weight(rng, WeightKind::BF16, ScaleKind::NONE, n, k);
    for (int64_t m : {int64_t(1), int64_t(77), int64_t(300)}) {
        const std::vector<float> x = random_activation(rng, m, k);
        const DeviceArray<uint16_t> xd = upload_bf16(x, m, k, k);
        DeviceOut d(OutKind::BF16, m, n, n);
        cuda::gemm_bf16(bf16_args(xd.ptr, m, k, w, d), GemmPath::WGMMA, nullptr);
        // The reference: the bf16 output quantized into the same columns of a poisoned activation.
        DeviceArray<uint8_t> want_c(cuda::fp8_activation_codes_bytes(m, width));
        DeviceArray<float> want_s(cuda::fp8_activation_scales_bytes(m, width) / 4);
        want_c.poison();
        want_s.poison();
        const cuda::Fp8Activation want = cuda::fp8_activation_view(want_c.ptr, want_s.ptr, m, width);
        cuda::quantize_fp8_activation(reinterpret_cast<const uint16_t*>(d.mem.ptr), m, n, nullptr,
                                      cuda::fp8_activation_columns(want, col0, n), nullptr);
        for (int block_m : {0, 128, 256}) {
            DeviceArray<uint8_t> got_c(cuda::fp8_activation_codes_bytes(m, width));
            DeviceArray<float> got_s(cuda::fp8_activation_scales_bytes(m, width) / 4);
            got_c.poison();
            got_s.poison();
            cuda::Bf16GemmArgs args = bf16_args(xd.ptr, m, k, w, d);
            args.d = nullptr;
            args.d_rows = cuda::fp8_activation_view(got_c.ptr, got_s.ptr, m, width);
            args.rows_col0 = col0;
            ASSERT_TRUE(cuda::bf16_gemm_eligible(args, GemmPath::WGMMA));
            EXPECT_FALSE(cuda::bf16_gemm_eligible(args, GemmPath::MMA_NATIVE));
            EXPECT_NE(cuda::plan_bf16_gemm(args, GemmPath::WGMMA, block_m).block_m, 64);
            cuda::gemm_bf16(args, GemmPath::WGMMA, nullptr, block_m);
            CUDA_CHECK(cudaDeviceSynchronize());
            const auto gc = got_c.download(), wc = want_c.download();
            const auto gs = got_s.download(), ws = want_s.download();
            size_t differ = 0;
            for (size_t i = 0; i < gc.size(); ++i) differ += gc[i] != wc[i];  // incl. the untouched columns
            EXPECT_EQ(differ, 0u) << "m " << m << " block_m " << block_m << ": codes";
            for (int64_t b = col0 / 128; b < (col0 + n) / 128; ++b)
                for (int64_t r = 0; r < m; ++r)
                    ASSERT_EQ(std::memcmp(&gs[size_t(b * want.scales_ld + r)], &ws[size_t(b * want.scales_ld + r)], 4), 0)
                        << "m " << m << " block_m " << block_m << ": scale of row " << r << ", block " << b;
            if (block_m == 128) {
                std::string error;
                try {
                    cuda::gemm_bf16(args, GemmPath::WGMMA, nullptr, 64);
                } catch (const std::exception& e) {
                    error = e.what();
                }
                EXPECT_NE(error.find("act_quant rows"), std::string::npos) << "error: '" << error << "'";
            }
        }
    }
}

// The same for the BF16 GEMM: rows 0..6 of m = 4096 (every wgmma tile height) equal m = 7 and m = 1 bit for bit.
TEST(DenseGemm, Bf16RowsIndependentOfBatchAndTiles) {
    for (GemmPath path : supported_paths(false)) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(std::string(path_name(path)) + " seed=" + std::to_string(seed));
        std::mt19937_64 rng(seed);
        const int64_t n = 640, k = 528, big = 4096;
        TestWeight w = make_weight(rng, WeightKind::BF16, ScaleKind::NONE, n, k);
        const std::vector<float> x = random_activation(rng, big, k);
        const DeviceArray<uint16_t> xd = upload_bf16(x, big, k, k);
        std::vector<std::vector<float>> outs;
        std::vector<std::string> what;
        auto run = [&](int64_t m, int block_m) {
            DeviceOut d(OutKind::F32, m, n, n);
            const cuda::Bf16GemmArgs args = bf16_args(xd.ptr, m, k, w, d);  // the first m rows of the same activation
            cuda::gemm_bf16(args, path, nullptr, block_m);
            CUDA_CHECK(cudaDeviceSynchronize());
            outs.push_back(d.read());
            what.push_back("m=" + std::to_string(m) + " block_m=" + std::to_string(block_m));
        };
        for (int block_m : block_ms(path)) run(big, block_m);
        run(7, 0);
        run(1, 0);
        expect_leading_rows_equal(outs, what, n);
    }
}

// A grouped BF16 product (Bf16GemmArgs::groups: wo_a widened to bf16, one launch over all groups) equals one launch
// per group over its slices bit for bit: fp32 and bf16 outputs (the bf16 one through the TMA-stored tiles and through
// the math warps' staged stores), every tile height of the single launch, a row stride wider than the output, and the act_quant rows output (d_rows: the
// whole width in one launch against each group's columns at rows_col0). wgmma path only; the others refuse groups.
TEST(DenseGemm, Bf16GroupedOneLaunchEqualsLaunchPerGroup) {
    if (!cuda::gemm_path_supported(GemmPath::WGMMA, false)) GTEST_SKIP() << "no wgmma path here";
    struct G { int64_t m; int groups; int64_t rows, group_in; };
    for (const G& c : {G{1, 8, 128, 512}, G{77, 2, 256, 320}, G{300, 8, 128, 256}, G{1000, 4, 256, 128}}) {
        const uint64_t seed = fresh_seed();
        std::ostringstream desc;
        desc << "m=" << c.m << " groups=" << c.groups << " R=" << c.rows << " Kg=" << c.group_in << " seed=" << seed;
        SCOPED_TRACE(desc.str());
        std::mt19937_64 rng(seed);
        const int64_t n = c.groups * c.rows, k = c.groups * c.group_in, lda = k + 8;
        TestWeight w = make_weight(rng, WeightKind::BF16, ScaleKind::NONE, n, c.group_in);
        const std::vector<float> x = random_activation(rng, c.m, k);
        const DeviceArray<uint16_t> xd = upload_bf16(x, c.m, k, lda);
        const uint16_t* wd = reinterpret_cast<const uint16_t*>(w.w_dev->ptr);
        for (auto [kind, tma_store] : {std::pair{OutKind::F32, true}, std::pair{OutKind::BF16, true},
                                       std::pair{OutKind::BF16, false}}) {
            const size_t esize = kind == OutKind::F32 ? 4 : 2;
            const int64_t ldd = n + (kind == OutKind::F32 ? 4 : 8);
            DeviceOut per_group(kind, c.m, n, ldd);
            for (int g = 0; g < c.groups; ++g) {
                cuda::Bf16GemmArgs a;
                a.a = xd.ptr + g * c.group_in;
                a.lda = lda;
                a.m = c.m;
                a.k = c.group_in;
                a.w = wd + size_t(g) * size_t(c.rows) * size_t(c.group_in);
                a.n = c.rows;
                a.d = per_group.mem.ptr + size_t(g) * size_t(c.rows) * esize;
                a.d_kind = kind;
                a.ldd = ldd;
                a.tma_store = tma_store;
                cuda::gemm_bf16(a, GemmPath::WGMMA, nullptr);
            }
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<float> want = per_group.read();
            for (int block_m : {0, 64, 128, 256}) {
                DeviceOut one(kind, c.m, n, ldd);
                cuda::Bf16GemmArgs a;
                a.a = xd.ptr;
                a.lda = lda;
                a.m = c.m;
                a.k = k;
                a.w = wd;
                a.n = n;
                a.d = one.mem.ptr;
                a.d_kind = kind;
                a.ldd = ldd;
                a.groups = c.groups;
                a.tma_store = tma_store;
                ASSERT_TRUE(cuda::bf16_gemm_eligible(a, GemmPath::WGMMA));
                EXPECT_FALSE(cuda::bf16_gemm_eligible(a, GemmPath::MMA_NATIVE));
                cuda::gemm_bf16(a, GemmPath::WGMMA, nullptr, block_m);
                CUDA_CHECK(cudaDeviceSynchronize());
                bool untouched = false;
                const std::vector<float> got = one.read(&untouched);
                EXPECT_TRUE(untouched) << "wrote past n";
                EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
                    << (kind == OutKind::F32 ? "f32" : tma_store ? "bf16 (TMA-stored tiles)" : "bf16 (warp stores)")
                    << " output, block_m " << block_m;
            }
        }
        // act_quant rows of the bf16 output: one launch over every group's columns against a launch per group.
        auto rows_out = [&](bool one_launch) {
            DeviceArray<uint8_t> codes(cuda::fp8_activation_codes_bytes(c.m, n));
            DeviceArray<float> scales(cuda::fp8_activation_scales_bytes(c.m, n) / 4);
            codes.poison();
            scales.poison();
            const cuda::Fp8Activation y = cuda::fp8_activation_view(codes.ptr, scales.ptr, c.m, n);
            for (int g = 0; g < (one_launch ? 1 : c.groups); ++g) {
                cuda::Bf16GemmArgs a;
                a.a = xd.ptr + (one_launch ? 0 : g * c.group_in);
                a.lda = lda;
                a.m = c.m;
                a.k = one_launch ? k : c.group_in;
                a.w = wd + (one_launch ? 0 : size_t(g) * size_t(c.rows) * size_t(c.group_in));
                a.n = one_launch ? n : c.rows;
                a.d_rows = y;
                a.rows_col0 = one_launch ? 0 : g * c.rows;
                a.groups = one_launch ? c.groups : 1;
                cuda::gemm_bf16(a, GemmPath::WGMMA, nullptr);
            }
            CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<uint8_t> bytes = codes.download();
            const std::vector<float> sc = scales.download();
            bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(sc.data()),
                         reinterpret_cast<const uint8_t*>(sc.data() + sc.size()));
            return bytes;
        };
        EXPECT_TRUE(rows_out(true) == rows_out(false)) << "act_quant rows output";
    }
    // Groups whose slices are not whole stages (k / G % 64) or tiles (n / G % 128) are refused by name.
    DeviceArray<uint16_t> buf(size_t(1) << 20);
    for (auto [groups, n, k] : {std::tuple<int, int64_t, int64_t>{3, 768, 288}, {2, 512, 192}, {2, 384, 256}}) {
        cuda::Bf16GemmArgs a;
        a.a = a.w = buf.ptr;
        a.lda = k;
        a.m = 4;
        a.k = k;
        a.n = n;
        a.d = buf.ptr;
        a.d_kind = OutKind::BF16;
        a.ldd = n;
        a.groups = groups;
        EXPECT_FALSE(cuda::bf16_gemm_eligible(a, GemmPath::WGMMA));
        std::string error;
        try {
            cuda::gemm_bf16(a, GemmPath::WGMMA, nullptr);
        } catch (const std::exception& e) {
            error = e.what();
        }
        EXPECT_NE(error.find("groups = " + std::to_string(groups)), std::string::npos) << "error: '" << error << "'";
    }
}

// ---------------------------------------------------------------------------------------------------------------
// BF16 GEMM against the fp64 product.

TEST(DenseGemm, Bf16MatchesF64ReferenceOnEveryPath) {
    struct C { int64_t m, n, k; OutKind out; int64_t ldd_extra; };
    const std::vector<C> cases = {{1, 272, 4096, OutKind::F32, 0}, {7, 256, 208, OutKind::BF16, 8},
                                  {64, 144, 1040, OutKind::F32, 3}, {300, 528, 2064, OutKind::F32, 8},
                                  {4096, 256, 1024, OutKind::F32, 0}};
    for (GemmPath path : supported_paths(false))
        for (const auto& c : cases) {
            const uint64_t seed = fresh_seed();
            std::ostringstream desc;
            desc << path_name(path) << " m=" << c.m << " n=" << c.n << " k=" << c.k << " seed=" << seed;
            SCOPED_TRACE(desc.str());
            std::mt19937_64 rng(seed);
            TestWeight w = make_weight(rng, WeightKind::BF16, ScaleKind::NONE, c.n, c.k);
            const std::vector<float> x = random_activation(rng, c.m, c.k);
            const auto ref = to_f32(product_f64(x, w.dequantized(), c.m, c.n, c.k));
            const int64_t lda = c.k + 8;
            DeviceArray<uint16_t> xd = upload_bf16(x, c.m, c.k, lda);
            DeviceOut d(c.out, c.m, c.n, c.n + c.ldd_extra);
            const cuda::Bf16GemmArgs args = bf16_args(xd.ptr, c.m, lda, w, d);
            EXPECT_TRUE(cuda::bf16_gemm_eligible(args, path));
            cuda::gemm_bf16(args, path, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            bool untouched = false;
            const auto y = d.read(&untouched);
            EXPECT_TRUE(untouched) << "wrote past n";
            const double err = rel_l2(y, ref);
            // fp32 sums of exact bf16 products: 2e-5; bf16 output adds one rounding (4e-3)
            EXPECT_LE(err, c.out == OutKind::F32 ? 2e-5 : 4e-3);
            std::printf("  bf16 %-10s m=%-5lld n=%-5lld k=%-5lld %s rel_l2=%.3g\n", path_name(path), (long long)c.m,
                        (long long)c.n, (long long)c.k, c.out == OutKind::F32 ? "f32" : "bf16", err);
        }
}

// ---------------------------------------------------------------------------------------------------------------
// Bad arguments: a clear error, no launch.

TEST(DenseGemm, RejectsBadArguments) {
    DeviceArray<uint8_t> buf(1 << 16);
    cuda::Fp8GemmArgs a;
    a.a = cuda::fp8_activation_view(buf.ptr, buf.ptr + 8192, 4, 64);
    a.w = buf.ptr;
    a.w_scales = buf.ptr;
    a.n = 32;
    a.d = buf.ptr;
    a.ldd = 32;
    EXPECT_TRUE(cuda::fp8_gemm_eligible(a));
    auto expect_error = [](const cuda::Fp8GemmArgs& x, const char* needle) {
        EXPECT_FALSE(cuda::fp8_gemm_eligible(x));
        try {
            cuda::gemm_fp8(x, GemmPath::AUTO, nullptr);
            ADD_FAILURE() << "no error for " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    cuda::Fp8GemmArgs b = a;
    b.n = 40;
    expect_error(b, "n = 40");
    b = a;
    b.ldd = 16;
    expect_error(b, "ldd");
    b = a;
    b.w = buf.ptr + 1;
    expect_error(b, "weight pointer");
    b = a;
    b.a.scales_ld = 2;
    expect_error(b, "scales_ld");
    b = a;
    b.a.k = 72;
    expect_error(b, "k = 72");
    b = a;
    b.groups = 2;  // k = 64 and n = 32 are not whole scale blocks per group
    expect_error(b, "groups = 2");
    // split-K: whole, non-empty 128-blocks of K per split, and a workspace (on a device without wgmma: the path)
    b = a;
    b.k_splits = 2;  // k = 64: one block
    expect_error(b, "k_splits = 2");
    b = a;
    b.k_splits = 0;
    expect_error(b, "k_splits = 0");
    b = a;
    b.a = cuda::fp8_activation_view(buf.ptr, buf.ptr + 8192, 4, 256);
    EXPECT_TRUE(cuda::fp8_gemm_eligible(b));
    b.k_splits = 2;  // two blocks, no workspace
    expect_error(b, "split-K");
}

// Host-side validation of the TMA maps (tensor_map.h): the maps the GEMMs encode at their extreme shapes pass (the
// grouped expert GEMM's scale map of its first failing test: 4 slots, 2 blocks, box of 132), and every rule that is
// broken gives an error naming the map and its parameters, before any encoding or launch.
TEST(DenseGemm, TensorMapParametersChecked) {
    namespace tma = cuda::tma;
    alignas(16) static unsigned char base[64];
    const tma::Map2d scales{base, tma::Element::F32, 2, 4, 16, 1, 132, tma::Swizzle::NONE};
    EXPECT_EQ(tma::check_2d(scales), "");
    const tma::Map2d codes{base, tma::Element::U8, 4, 256, 256, 128, 128, tma::Swizzle::B128};
    EXPECT_EQ(tma::check_2d(codes), "");
    const tma::Map2d head{base, tma::Element::BF16, 129280, 4096, 8192, 128, 64, tma::Swizzle::B128};
    EXPECT_EQ(tma::check_2d(head), "");
    // Each broken rule (from a valid map) and what the error must mention.
    const struct {
        void (*broken)(tma::Map2d&);
        const char* needle;
    } cases[] = {
        {[](tma::Map2d& m) { m.base = static_cast<const unsigned char*>(m.base) + 4; }, "16-byte aligned"},
        {[](tma::Map2d& m) { m.base = nullptr; }, "null"},
        {[](tma::Map2d& m) { m.cols = 0; }, "[1, 2^32]"},
        {[](tma::Map2d& m) { m.row_stride_bytes = 20; }, "row stride of 20"},
        {[](tma::Map2d& m) { m.row_stride_bytes = 8; }, "row stride of 8"},  // shorter than a row of 4 floats
        {[](tma::Map2d& m) { m.box_cols = 257; }, "[1, 256]"},
        {[](tma::Map2d& m) { m.box_cols = 130; }, "multiple of 16"},  // 520 bytes
    };
    for (const auto& c : cases) {
        tma::Map2d m = scales;
        c.broken(m);
        const std::string e = tma::check_2d(m);
        EXPECT_NE(e.find(c.needle), std::string::npos) << "'" << e << "' should mention '" << c.needle << "'";
    }
    tma::Map2d wide = codes;
    wide.box_cols = 256;
    EXPECT_NE(tma::check_2d(wide).find("128-byte swizzle"), std::string::npos) << tma::check_2d(wide);
    try {
        tma::make_2d(base + 4, tma::Element::F32, 2, 4, 16, 1, 132, tma::Swizzle::NONE, "the test's scale map");
        ADD_FAILURE() << "no error for a misaligned base";
    } catch (const Error& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("the test's scale map"), std::string::npos) << w;
        EXPECT_NE(w.find("box 1 x 132"), std::string::npos) << w;
    }
}

}  // namespace
}  // namespace flashseek::test
