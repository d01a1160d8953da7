// GPU vs CPU reference: RMSNorm, per-head norm + RoPE, RoPE forward/inverse, mHC pre/post/head. Thresholds sit next
// to each case: outputs are bf16, so a correct kernel differs from the CPU op by at most one bf16 rounding flip of
// a few elements (rel_l2 ~1e-3); fp32 outputs (post, comb) only by summation order (~1e-5).
#include <cstring>
#include <memory>

#include "attn_reference.h"
#include "attn_test_util.h"
#include "cpu/ops.h"
#include "cuda/gemm/linear.cuh"
#include "cuda/mhc/mhc.cuh"
#include "cuda/moe/moe.cuh"
#include "cuda/norm/rmsnorm.cuh"
#include "cuda/rope/rope.cuh"

namespace flashseek::cuda::test {
namespace {

TEST(CudaNorm, RmsnormMatchesCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    // Padded strides (rows not 16-byte aligned) take the general kernel; packed rows with dim % 8 == 0 and
    // dim <= 2048 the register-resident one (q_norm: 1024); 4096, 130 and 62 the general one either way.
    for (int dim : {512, 1024, 2048, 4096, 136, 130, 62}) {
        for (int variant = 0; variant < 4; ++variant) {
            const bool weighted = variant & 1, packed = variant & 2;
            const int rows = rng.uniform_int(1, 9);
            const int64_t in_stride = packed ? dim : dim + 6, out_stride = packed ? dim : dim + 2;
            auto x = bf16_round(rng.normals(size_t(rows) * in_stride, 2.f));
            auto w = bf16_round(rng.normals(dim, 0.5f));
            Dev<uint16_t> dx(to_bf16_bits(x)), dw(to_bf16_bits(w)), dy(size_t(rows) * out_stride);
            dy.poison();
            rmsnorm(bf(dx), in_stride, bf(dy), out_stride, weighted ? bf(dw) : nullptr, rows, dim, 1e-6f, nullptr);
            auto got_all = from_bf16_bits(dy.download());
            std::vector<float> got, want;
            for (int r = 0; r < rows; ++r) {
                std::vector<float> o(dim);
                cpu::rmsnorm(x.data() + r * in_stride, weighted ? w.data() : nullptr, dim, 1e-6f, o.data());
                for (int d = 0; d < dim; ++d) {
                    want.push_back(round_bf16(o[d]));
                    got.push_back(got_all[r * out_stride + d]);
                }
            }
            EXPECT_CLOSE(got, want, 2e-3, "rmsnorm dim " << dim << " weighted " << weighted << " packed " << packed);
        }
    }
}

// A fused producer's prepared copy of its output against prepare_activation of that output: two poisoned buffer
// pairs for [T, D]; expect_equal() prepares `y` (row stride D) into the second and compares both bit for bit over
// every padded row and block.
struct PreparedPair {
    int T, D;
    Dev<uint16_t> fused_v, want_v;
    Dev<float> fused_s, want_s;
    PreparedPair(int T_, int D_)
        : T(T_), D(D_), fused_v(prepared_values_bytes(T_, D_) / 2), want_v(prepared_values_bytes(T_, D_) / 2),
          fused_s(prepared_scales_bytes(T_, D_) / 4), want_s(prepared_scales_bytes(T_, D_) / 4) {
        fused_v.poison();
        fused_s.poison();
        want_v.poison();
        want_s.poison();
    }
    static std::string describe(int T, int D, WeightKind kind, ActNumerics num) {
        return "T " + std::to_string(T) + " D " + std::to_string(D) + (kind == WeightKind::FP4_BLOCK32 ? " fp4" : " fp8") +
               (num == ActNumerics::EXACT ? " exact" : " release");
    }
    void expect_equal(const __nv_bfloat16* y, WeightKind kind, ActNumerics num, const std::string& what) {
        PreparedActivation want;
        want.values = want_v.ptr;
        want.scales = want_s.ptr;
        prepare_activation(y, false, T, D, D, kind, num, want, nullptr);
        CUDA_OK(cudaDeviceSynchronize());
        const size_t used_v = size_t(want.m_pad * want.k_pad), used_s = size_t(want.m_pad * want.k_pad / 128);
        const auto gv = fused_v.download(), wv = want_v.download();
        const auto gs = fused_s.download(), ws = want_s.download();
        EXPECT_TRUE(std::equal(gv.begin(), gv.begin() + long(used_v), wv.begin())) << what << " values";
        EXPECT_TRUE(std::memcmp(gs.data(), ws.data(), used_s * 4) == 0) << what << " scales";
    }
};

// rmsnorm's optional prepared copy of its output equals prepare_activation of that output bit for bit (FP8 / FP4
// layouts, both numerics, zero padding rows); dims off the fused path (not whole 128-blocks) take the fallback launch.
TEST(CudaNorm, RmsnormPreparedOutputEqualsPrepareActivation) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    // 1 to 16 rows take the sliced path (V warps per row, padding rows on their own warps); 300 the one-warp rows
    for (auto [T, D] : {std::pair{1, 1024}, std::pair{6, 1024}, std::pair{16, 1024}, std::pair{16, 1536},
                        std::pair{3, 200}, std::pair{300, 1024}}) {
        for (WeightKind kind : {WeightKind::FP8_BLOCK128, WeightKind::FP4_BLOCK32}) {
            for (ActNumerics num : {ActNumerics::FP8_BLOCK128, ActNumerics::EXACT}) {
                auto x = rng.normals(size_t(T) * D);
                for (size_t i = 0; i < x.size(); ++i) x[i] *= float(1 << (i / 128 % 6));
                auto w = bf16_round(rng.normals(D, 0.3f));
                Dev<uint16_t> dx(to_bf16_bits(bf16_round(x))), dw(to_bf16_bits(w));
                PreparedPair pair(T, D);
                PreparedActivation got;
                got.values = pair.fused_v.ptr;
                got.scales = pair.fused_s.ptr;
                got.layout = kind;
                got.numerics = num;
                rmsnorm(bf(dx), D, bf(dx), D, bf(dw), T, D, 1e-6f, nullptr, &got);  // in place, as q_norm runs
                const std::string what = PreparedPair::describe(T, D, kind, num);
                pair.expect_equal(bf(dx), kind, num, what);
                EXPECT_EQ(got.m, T) << what;
                EXPECT_EQ(got.m_pad, (T + 7) / 8 * 8) << what;
                EXPECT_EQ(got.k_pad, (D + 127) / 128 * 128) << what;
            }
        }
    }
}

// The FP8_ROWS form of rmsnorm's prepared copy (the compute-bound FP8 GEMMs' input in prefill passes: q_norm's
// output for wq_b) equals quantize_fp8_activation of the output bit for bit (codes with padding columns, every
// row's scales), sliced and one-warp rows; dims off the fused path take the fallback launch.
TEST(CudaNorm, RmsnormFp8RowsOutputEqualsActQuant) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    for (auto [T, D] : {std::pair{1, 1024}, std::pair{16, 1536}, std::pair{3, 200}, std::pair{300, 1024},
                        std::pair{513, 1024}}) {
        auto x = rng.normals(size_t(T) * D);
        for (size_t i = 0; i < x.size(); ++i) x[i] *= float(1 << (i / 128 % 6));
        auto w = bf16_round(rng.normals(D, 0.3f));
        Dev<uint16_t> dx(to_bf16_bits(bf16_round(x))), dw(to_bf16_bits(w));
        Dev<uint8_t> got_c(fp8_activation_codes_bytes(T, D)), want_c(fp8_activation_codes_bytes(T, D));
        Dev<float> got_s(fp8_activation_scales_bytes(T, D) / 4), want_s(fp8_activation_scales_bytes(T, D) / 4);
        for (auto* d : {&got_c, &want_c}) d->poison();
        for (auto* d : {&got_s, &want_s}) d->poison();
        PreparedActivation got;
        got.values = reinterpret_cast<uint16_t*>(got_c.ptr);
        got.scales = got_s.ptr;
        got.layout = WeightKind::FP8_BLOCK128;
        got.numerics = ActNumerics::FP8_BLOCK128;
        got.format = ActFormat::FP8_ROWS;
        rmsnorm(bf(dx), D, bf(dx), D, bf(dw), T, D, 1e-6f, nullptr, &got);  // in place, as q_norm runs
        const Fp8Activation want = fp8_activation_view(want_c.ptr, want_s.ptr, T, D);
        quantize_fp8_activation(dx.ptr, T, D, nullptr, want, nullptr);
        CUDA_OK(cudaDeviceSynchronize());
        const std::string what = "T " + std::to_string(T) + " D " + std::to_string(D);
        EXPECT_EQ(got.format, ActFormat::FP8_ROWS) << what;
        EXPECT_EQ(got.fp8.codes, got_c.ptr) << what;
        EXPECT_EQ(got.fp8.m, T) << what;
        EXPECT_EQ(got.fp8.k, D) << what;
        EXPECT_EQ(got_c.download(), want_c.download()) << what << ": codes";
        const auto gs = got_s.download(), wsc = want_s.download();
        for (int64_t b = 0; b < (D + 127) / 128; ++b)
            for (int t = 0; t < T; ++t)
                ASSERT_EQ(std::memcmp(&gs[size_t(b * want.scales_ld + t)], &wsc[size_t(b * want.scales_ld + t)], 4), 0)
                    << what << ": scale of row " << t << ", block " << b;
    }
}

TEST(CudaNorm, HeadNormRopeMatchesCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    struct Shape { int heads, dim, rope; };
    // T 0: random in 1..7. 64 heads: 1 and 4 tokens sliced, 16 one warp per row; a prefill's many rows (300 tokens
    // of 64 heads) and other head counts and widths past 256 rows, each against the per-row form below
    struct Case { Shape s; int T; };
    for (Case c : {Case{{64, 512, 64}, 1}, Case{{64, 512, 64}, 4}, Case{{64, 512, 64}, 16}, Case{{3, 512, 64}, 0},
                   Case{{5, 128, 64}, 0}, Case{{2, 96, 32}, 0}, Case{{64, 512, 64}, 300}, Case{{32, 512, 64}, 21},
                   Case{{64, 128, 64}, 40}}) {
        const Shape s = c.s;
        const int T = c.T > 0 ? c.T : rng.uniform_int(1, 7);
        const RopeTable rope = yarn_table(s.rope);
        const std::vector<float> inv = inv_of(rope);
        auto x = bf16_round(rng.normals(size_t(T) * s.heads * s.dim, 3.f));
        std::vector<int32_t> pos(T);
        for (auto& p : pos) p = rng.uniform_int(0, 1 << 20);
        Dev<uint16_t> dx(to_bf16_bits(x));
        Dev<int32_t> dpos(pos);
        head_rmsnorm_rope(bf(dx), int64_t(s.heads) * s.dim, T, s.heads, s.dim, nullptr, 1e-6f, dpos.ptr, rope, nullptr);
        const std::vector<uint16_t> got_bits = dx.download();
        auto got = from_bf16_bits(got_bits);
        {
            // The same rows as one head per "token" (positions repeated per head): CTAs then span tokens, and each
            // row evaluates its own rope angles instead of the CTA's table. The bits must not differ.
            std::vector<int32_t> pos_rows(size_t(T) * s.heads);
            for (size_t i = 0; i < pos_rows.size(); ++i) pos_rows[i] = pos[i / size_t(s.heads)];
            Dev<uint16_t> dx1(to_bf16_bits(x));
            Dev<int32_t> dpos1(pos_rows);
            head_rmsnorm_rope(bf(dx1), s.dim, T * s.heads, 1, s.dim, nullptr, 1e-6f, dpos1.ptr, rope, nullptr);
            EXPECT_TRUE(dx1.download() == got_bits) << "per-row rope angles differ, heads " << s.heads << " T " << T;
        }
        std::vector<float> want(x.size());
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < s.heads; ++h) {
                float* v = want.data() + (size_t(t) * s.heads + h) * s.dim;
                cpu::rmsnorm(x.data() + (size_t(t) * s.heads + h) * s.dim, nullptr, s.dim, 1e-6f, v);
                cpu::round_bf16_inplace(v, s.dim);
                cpu::rope_interleaved(v + s.dim - s.rope, s.rope, inv.data(), pos[t]);
                cpu::round_bf16_inplace(v, s.dim);
            }
        EXPECT_CLOSE(got, want, 2e-3, "head norm+rope heads " << s.heads << " dim " << s.dim);  // bf16 output
    }
}

TEST(CudaRope, ForwardAndInverseMatchCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    for (bool inverse : {false, true}) {
        for (bool yarn : {false, true}) {
            const int T = rng.uniform_int(1, 11), H = rng.uniform_int(1, 9), D = 192, R = 64;
            const RopeTable rope = yarn ? yarn_table(R) : make_rope_table(R, 10000.0, nullptr);
            const std::vector<float> inv = inv_of(rope);
            const int64_t stride = int64_t(H) * D + 8;
            auto x = bf16_round(rng.normals(size_t(T) * stride));
            std::vector<int32_t> pos(T);
            for (auto& p : pos) p = rng.uniform_int(0, 1000000);
            Dev<uint16_t> dx(to_bf16_bits(x));
            Dev<int32_t> dpos(pos);
            rope_apply(bf(dx), stride, T, H, D, dpos.ptr, rope, inverse, nullptr);
            auto got = from_bf16_bits(dx.download());
            auto want = x;
            for (int t = 0; t < T; ++t)
                for (int h = 0; h < H; ++h) {
                    float* v = want.data() + t * stride + int64_t(h) * D + (D - R);
                    cpu::rope_interleaved(v, R, inv.data(), pos[t], inverse);
                    cpu::round_bf16_inplace(v, R);
                }
            EXPECT_CLOSE(got, want, 2e-3, "rope inverse " << inverse << " yarn " << yarn);  // bf16 output
        }
    }
}

// shift: x and y start one element past a 16-byte boundary (the kernels' scalar fallbacks).
struct MhcCase { int T, N, D; bool head; bool norm; bool shift = false; };

TEST(CudaMhc, PreMatchesCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    // V4 shapes at decode batches 1/3/16/64 (token tiles of 8: partial and full), odd shapes, and the scalar paths:
    // D % 8 != 0 (finalize), K % 4 != 0 (partial), misaligned x/y (both).
    for (MhcCase c : {MhcCase{1, 4, 4096, false, true}, MhcCase{7, 4, 4096, false, false},
                      MhcCase{16, 4, 4096, false, true}, MhcCase{64, 4, 4096, false, true},
                      MhcCase{5, 4, 200, false, true}, MhcCase{3, 4, 4096, true, true}, MhcCase{1, 4, 4096, true, true},
                      MhcCase{16, 4, 4096, true, true}, MhcCase{9, 2, 136, true, false},
                      MhcCase{2, 3, 520, false, true}, MhcCase{3, 3, 130, false, true} /* K % 4 != 0 */,
                      MhcCase{3, 4, 4100, false, true} /* D % 8 != 0, last K split partial */,
                      MhcCase{11, 4, 4096, false, true, true}, MhcCase{2, 4, 4096, true, true, true}}) {
        const int T = c.T, N = c.N, D = c.D;
        const int n_mix = c.head ? N : (2 + N) * N;
        auto x = bf16_round(rng.normals(size_t(T) * N * D));
        auto fn = rng.normals(size_t(n_mix) * N * D, 0.02f);
        auto base = rng.normals(n_mix, 0.5f);
        auto scale = rng.normals(3, 0.5f);
        auto nw = bf16_round(rng.normals(D, 0.3f));
        const int sh = c.shift ? 1 : 0;
        std::vector<float> x_dev(sh, 0.f);
        x_dev.insert(x_dev.end(), x.begin(), x.end());
        Dev<uint16_t> dx(to_bf16_bits(x_dev)), dnw(to_bf16_bits(nw)), dy(size_t(T) * D + sh);
        Dev<float> dfn(fn), dbase(base), dscale(scale), dpost(size_t(T) * N), dcomb(size_t(T) * N * N);
        Dev<unsigned char> ws(mhc_pre_workspace_bytes(T, N, D, c.head));
        dy.poison();
        dpost.poison();
        dcomb.poison();
        MhcPreParams p;
        p.n_tokens = T;
        p.n_streams = N;
        p.dim = D;
        p.head_mode = c.head;
        p.x = bf(dx) + sh;
        p.fn = dfn.ptr;
        p.base = dbase.ptr;
        p.scale = dscale.ptr;
        p.norm_weight = c.norm ? bf(dnw) : nullptr;
        p.y = bf(dy) + sh;
        p.post = c.head ? nullptr : dpost.ptr;
        p.comb = c.head ? nullptr : dcomb.ptr;
        mhc_pre(p, ws.ptr, ws.n, nullptr);
        CUDA_OK(cudaDeviceSynchronize());
        auto got_y = from_bf16_bits(dy.download());
        got_y.erase(got_y.begin(), got_y.begin() + sh);
        auto got_post = dpost.download();
        auto got_comb = dcomb.download();
        std::vector<float> want_y, want_post, want_comb;
        for (int t = 0; t < T; ++t) {
            std::vector<float> y(D), post(N), comb(size_t(N) * N);
            const float* xt = x.data() + size_t(t) * N * D;
            if (c.head) {
                cpu::hc_head(xt, N, D, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, y.data());
            } else {
                cpu::mhc_pre(xt, N, D, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, 20, y.data(), post.data(),
                             comb.data());
                want_post.insert(want_post.end(), post.begin(), post.end());
                want_comb.insert(want_comb.end(), comb.begin(), comb.end());
            }
            cpu::round_bf16_inplace(y.data(), D);
            if (c.norm) cpu::rmsnorm(y.data(), nw.data(), D, 1e-6f, y.data());
            cpu::round_bf16_inplace(y.data(), D);
            want_y.insert(want_y.end(), y.begin(), y.end());
        }
        const std::string what = "mhc T " + std::to_string(T) + " N " + std::to_string(N) + " D " +
                                 std::to_string(D) + (c.head ? " head" : "") + (c.shift ? " misaligned" : "");
        EXPECT_CLOSE(got_y, want_y, 3e-3, what + " y");  // bf16 output, fp32 split-K sums in another order
        if (!c.head) {
            EXPECT_CLOSE(got_post, want_post, 1e-4, what + " post");  // fp32
            EXPECT_CLOSE(got_comb, want_comb, 1e-4, what + " comb");  // fp32 after 20 Sinkhorn iterations
        }
    }
}

// mhc_pre's inputs for the tests of its norm's prepared outputs: T tokens of 4 streams of D features, shifted by one
// element when `shift` (misaligned rows: the fallback paths), norm weights whose 128-blocks differ by up to 2^7 (block
// scales across the range). params() is the call without a prepared output.
struct MhcNormInputs {
    static constexpr int N = 4, n_mix = (2 + N) * N;
    int T, D, sh;
    Dev<uint16_t> dx, dnw, dy;
    Dev<float> dfn, dbase, dscale, dpost, dcomb;
    Dev<unsigned char> ws;
    static std::vector<float> streams(Rng& rng, int T, int D, int sh) {
        std::vector<float> v(sh, 0.f);
        const auto x = bf16_round(rng.normals(size_t(T) * N * D));
        v.insert(v.end(), x.begin(), x.end());
        return v;
    }
    static std::vector<float> wide_weights(Rng& rng, int D) {
        auto nw = rng.normals(D, 0.3f);
        for (int i = 0; i < D; ++i) nw[size_t(i)] *= float(1 << (i / 128 % 8));
        return bf16_round(nw);
    }
    MhcNormInputs(Rng& rng, int T_, int D_, bool shift)
        : T(T_), D(D_), sh(shift ? 1 : 0), dx(to_bf16_bits(streams(rng, T_, D_, sh))),
          dnw(to_bf16_bits(wide_weights(rng, D_))), dy(size_t(T_) * D_ + sh),
          dfn(rng.normals(size_t(n_mix) * N * D_, 0.02f)), dbase(rng.normals(n_mix, 0.5f)),
          dscale(rng.normals(3, 0.5f)), dpost(size_t(T_) * N), dcomb(size_t(T_) * N * N),
          ws(mhc_pre_workspace_bytes(T_, N, D_, false)) {}
    MhcPreParams params() {
        MhcPreParams p;
        p.n_tokens = T;
        p.n_streams = N;
        p.dim = D;
        p.x = bf(dx) + sh;
        p.fn = dfn.ptr;
        p.base = dbase.ptr;
        p.scale = dscale.ptr;
        p.norm_weight = bf(dnw);
        p.y = bf(dy) + sh;
        p.post = dpost.ptr;
        p.comb = dcomb.ptr;
        return p;
    }
};

// The prepared copy of y that mhc_pre's norm writes for the next linear (MhcPreParams::prepared_values) equals
// prepare_activation of the y it wrote, bit for bit (values, scales, zero padding rows), for the FP8 and FP4 layouts
// in both numerics; shapes off the fused path (D % 128 != 0, misaligned) take the fallback launch with the same result.
TEST(CudaMhc, PreparedOutputEqualsPrepareActivation) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    for (auto [T, D, shift] : {std::tuple{1, 4096, false}, std::tuple{5, 4096, false}, std::tuple{16, 4096, false},
                               std::tuple{9, 640, false}, std::tuple{3, 200, false}, std::tuple{2, 4096, true}}) {
        for (WeightKind kind : {WeightKind::FP8_BLOCK128, WeightKind::FP4_BLOCK32}) {
            for (ActNumerics num : {ActNumerics::FP8_BLOCK128, ActNumerics::EXACT}) {
                MhcNormInputs in(rng, T, D, shift);
                PreparedPair pair(T, D);
                MhcPreParams p = in.params();
                p.prepared_values = pair.fused_v.ptr;
                p.prepared_scales = pair.fused_s.ptr;
                p.prepared_layout = int(kind);
                p.prepared_numerics = int(num);
                mhc_pre(p, in.ws.ptr, in.ws.n, nullptr);
                pair.expect_equal(p.y, kind, num, PreparedPair::describe(T, D, kind, num) + (shift ? " misaligned" : ""));
            }
        }
    }
}

// The FP8_ROWS copy of y that mhc_pre's norm writes for the compute-bound FP8 GEMMs (MhcPreParams::prepared_fp8)
// equals quantize_fp8_activation of the y it wrote, bit for bit (codes with their padding columns, every row's
// scales), for decode-sized and prefill-sized passes (the tiled partial kernel from 256 tokens); shapes off the
// fused path (D % 128 != 0, misaligned) take the fallback launch with the same result.
TEST(CudaMhc, Fp8RowsOutputEqualsActQuant) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    for (auto [T, D, shift] : {std::tuple{1, 4096, false}, std::tuple{5, 4096, false}, std::tuple{300, 4096, false},
                               std::tuple{9, 640, false}, std::tuple{3, 200, false}, std::tuple{2, 4096, true}}) {
        MhcNormInputs in(rng, T, D, shift);
        Dev<uint8_t> fused_c(fp8_activation_codes_bytes(T, D)), want_c(fp8_activation_codes_bytes(T, D));
        Dev<float> fused_s(fp8_activation_scales_bytes(T, D) / 4), want_s(fp8_activation_scales_bytes(T, D) / 4);
        for (auto* d : {&fused_c, &want_c}) d->poison();
        for (auto* d : {&fused_s, &want_s}) d->poison();
        MhcPreParams p = in.params();
        p.prepared_fp8 = fp8_activation_view(fused_c.ptr, fused_s.ptr, T, D);
        mhc_pre(p, in.ws.ptr, in.ws.n, nullptr);
        const Fp8Activation want = fp8_activation_view(want_c.ptr, want_s.ptr, T, D);
        quantize_fp8_activation(reinterpret_cast<const uint16_t*>(p.y), T, D, nullptr, want, nullptr);
        CUDA_OK(cudaDeviceSynchronize());
        const std::string what = "T " + std::to_string(T) + " D " + std::to_string(D) + (shift ? " misaligned" : "");
        EXPECT_EQ(fused_c.download(), want_c.download()) << what << ": codes";
        const auto gs = fused_s.download(), wsc = want_s.download();
        for (int64_t b = 0; b < (D + 127) / 128; ++b)
            for (int t = 0; t < T; ++t)
                ASSERT_EQ(std::memcmp(&gs[size_t(b * want.scales_ld + t)], &wsc[size_t(b * want.scales_ld + t)], 4), 0)
                    << what << ": scale of row " << t << ", block " << b;
    }
    // Both prepared forms at once are refused by name.
    MhcNormInputs in(rng, 1, 4096, false);
    Dev<uint16_t> v(8 * 4096);
    Dev<float> sc(8 * 32);
    Dev<uint8_t> c8(fp8_activation_codes_bytes(1, 4096));
    MhcPreParams p = in.params();
    p.prepared_values = v.ptr;
    p.prepared_scales = sc.ptr;
    p.prepared_layout = int(WeightKind::FP8_BLOCK128);
    p.prepared_numerics = int(ActNumerics::FP8_BLOCK128);
    p.prepared_fp8 = fp8_activation_view(c8.ptr, sc.ptr, 1, 4096);
    std::string error;
    try {
        mhc_pre(p, in.ws.ptr, in.ws.n, nullptr);
    } catch (const std::exception& e) {
        error = e.what();
    }
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_NE(error.find("prepared_fp8"), std::string::npos) << "error: '" << error << "'";
}

TEST(CudaMhc, PostMatchesCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    // vector path (D % 8 == 0) at decode batches 1/16/64 and N = 3, 1; scalar path D = 333
    for (auto [T, N, D] : {std::tuple{1, 4, 4096}, std::tuple{16, 4, 4096}, std::tuple{64, 4, 4096},
                           std::tuple{5, 3, 520}, std::tuple{6, 4, 333}, std::tuple{3, 1, 64}}) {
        auto x = bf16_round(rng.normals(size_t(T) * N * D));
        auto o = bf16_round(rng.normals(size_t(T) * D));
        auto post = rng.normals(size_t(T) * N);
        auto comb = rng.normals(size_t(T) * N * N);
        Dev<uint16_t> dx(to_bf16_bits(x)), dout(size_t(T) * N * D), dob(to_bf16_bits(o));
        Dev<float> dpost(post), dcomb(comb);
        dout.poison();
        mhc_post(T, N, D, bf(dx), bf(dob), dpost.ptr, dcomb.ptr, bf(dout), nullptr);
        auto got = from_bf16_bits(dout.download());
        std::vector<float> want(got.size());
        for (int t = 0; t < T; ++t)
            cpu::mhc_post(x.data() + size_t(t) * N * D, o.data() + size_t(t) * D, post.data() + t * N,
                          comb.data() + t * N * N, N, D, want.data() + size_t(t) * N * D);
        cpu::round_bf16_inplace(want.data(), int64_t(want.size()));
        EXPECT_CLOSE(got, want, 2e-3, "mhc_post T " << T << " N " << N << " D " << D);  // bf16 output
        // in place
        mhc_post(T, N, D, bf(dx), bf(dob), dpost.ptr, dcomb.ptr, bf(dx), nullptr);
        EXPECT_CLOSE(from_bf16_bits(dx.download()), want, 2e-3, "mhc_post in place");
    }
}

// mhc_pre with the previous sub-block's mhc_post fused in front (MhcPreParams::prev_o) equals mhc_post in place
// followed by mhc_pre, bit for bit: the rewritten streams, y (with the prepared copy), post and comb. The previous
// post / comb are the output buffers themselves (as in the backend) or separate ones; token tiles partial and full.
TEST(CudaMhc, FusedPostEqualsPostThenPre) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    EXPECT_TRUE(mhc_pre_fuses_post(4, 4096));
    EXPECT_FALSE(mhc_pre_fuses_post(3, 4096));
    EXPECT_FALSE(mhc_pre_fuses_post(4, 4100));
    for (auto [T, N, D, shared_bufs] : {std::tuple{1, 4, 4096, true}, std::tuple{16, 4, 4096, true},
                                        std::tuple{17, 4, 4096, false}, std::tuple{17, 4, 4096, true},
                                        std::tuple{9, 4, 4096, false}, std::tuple{3, 4, 96, false},
                                        std::tuple{9, 2, 192, true}, std::tuple{2, 1, 256, false}}) {
        ASSERT_TRUE(mhc_pre_fuses_post(N, D));
        const int n_mix = (2 + N) * N;
        const auto x = bf16_round(rng.normals(size_t(T) * N * D));
        const auto o = bf16_round(rng.normals(size_t(T) * D));
        const auto prev_post = rng.normals(size_t(T) * N, 0.7f);
        const auto prev_comb = rng.normals(size_t(T) * N * N, 0.5f);
        Dev<float> dfn(rng.normals(size_t(n_mix) * N * D, 0.02f)), dbase(rng.normals(n_mix, 0.5f)),
            dscale(rng.normals(3, 0.5f));
        Dev<uint16_t> dnw(to_bf16_bits(bf16_round(rng.normals(D, 0.3f)))), dob(to_bf16_bits(o));
        struct Run {
            Dev<uint16_t> x, y;
            Dev<float> post, comb, prev_post, prev_comb;
            PreparedPair prep;
            Run(const std::vector<float>& x0, const std::vector<float>& pp, const std::vector<float>& pc, int T_, int D_)
                : x(to_bf16_bits(x0)), y(size_t(T_) * D_), post(pp), comb(pc), prev_post(pp), prev_comb(pc),
                  prep(T_, D_) {
                y.poison();
            }
        };
        auto run = [&](Run& r, bool fused) {
            const float* pp = shared_bufs ? r.post.ptr : r.prev_post.ptr;
            const float* pc = shared_bufs ? r.comb.ptr : r.prev_comb.ptr;
            if (!fused) mhc_post(T, N, D, bf(r.x), bf(dob), pp, pc, bf(r.x), nullptr);
            Dev<unsigned char> ws(mhc_pre_workspace_bytes(T, N, D, false));
            MhcPreParams p;
            p.n_tokens = T;
            p.n_streams = N;
            p.dim = D;
            p.x = bf(r.x);
            p.fn = dfn.ptr;
            p.base = dbase.ptr;
            p.scale = dscale.ptr;
            p.norm_weight = bf(dnw);
            p.y = bf(r.y);
            p.post = r.post.ptr;
            p.comb = r.comb.ptr;
            if (D % 128 == 0) {
                p.prepared_values = r.prep.fused_v.ptr;
                p.prepared_scales = r.prep.fused_s.ptr;
                p.prepared_layout = int(WeightKind::FP8_BLOCK128);
                p.prepared_numerics = int(ActNumerics::FP8_BLOCK128);
            }
            if (fused) {
                p.prev_o = bf(dob);
                p.prev_post = pp;
                p.prev_comb = pc;
            }
            mhc_pre(p, ws.ptr, ws.n, nullptr);
            CUDA_OK(cudaDeviceSynchronize());
        };
        Run a(x, prev_post, prev_comb, T, D), b(x, prev_post, prev_comb, T, D);
        run(a, false);
        run(b, true);
        const std::string what = "T " + std::to_string(T) + " N " + std::to_string(N) + " D " + std::to_string(D) +
                                 (shared_bufs ? " shared buffers" : "");
        {
            const auto xa = a.x.download(), xb = b.x.download();
            size_t n_diff = 0, first = xa.size();
            for (size_t i = 0; i < xa.size(); ++i)
                if (xa[i] != xb[i]) n_diff++, first = std::min(first, i);
            EXPECT_EQ(n_diff, 0u) << what << ": streams differ at " << n_diff << " elements, first token "
                                  << first / (size_t(N) * D) << " stream " << first / D % N << " feature " << first % D;
        }
        EXPECT_EQ(a.y.download(), b.y.download()) << what << ": y";
        EXPECT_EQ(a.post.download(), b.post.download()) << what << ": post";
        EXPECT_EQ(a.comb.download(), b.comb.download()) << what << ": comb";
        if (D % 128 == 0) {
            EXPECT_EQ(a.prep.fused_v.download(), b.prep.fused_v.download()) << what << ": prepared values";
            EXPECT_EQ(a.prep.fused_s.download(), b.prep.fused_s.download()) << what << ": prepared scales";
        }
    }
}

// The MoE form of the fusion: mhc_pre given the combine inputs (MhcPreParams::prev_y_routed ...) equals moe_combine,
// then mhc_post in place, then mhc_pre, bit for bit; missing pairs (slot -1), both term roundings, partial tiles.
TEST(CudaMhc, FusedCombinePostEqualsSeparate) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const int N = 4, D = 4096, n_mix = (2 + N) * N, top_k = 6;
    // shared_bf16 / routed_bf16: the shared expert's / routed experts' outputs given as bf16 (rounded already),
    // against the fp32 ones rounded; 300 tokens take the tiled partial kernel (prefill), the others the split one.
    for (auto [T, round_terms, shared_bf16, routed_bf16] :
         {std::tuple{1, true, false, false}, std::tuple{16, true, false, false}, std::tuple{11, false, false, false},
          std::tuple{16, true, true, false}, std::tuple{3, true, true, false}, std::tuple{16, true, true, true},
          std::tuple{5, true, false, true}, std::tuple{300, true, true, true}, std::tuple{300, true, false, false}}) {
        const int slots = T * top_k;
        const auto x = bf16_round(rng.normals(size_t(T) * N * D));
        std::vector<int32_t> pair_slot(static_cast<size_t>(slots));
        for (int i = 0; i < slots; ++i) pair_slot[size_t(i)] = (i * 7 + 3) % 11 == 0 ? -1 : (i * 5 + 1) % slots;
        Dev<float> dyr(rng.normals(size_t(slots) * D)), dys(rng.normals(size_t(T) * D)),
            dfn(rng.normals(size_t(n_mix) * N * D, 0.02f)), dbase(rng.normals(n_mix, 0.5f)), dscale(rng.normals(3, 0.5f));
        Dev<int32_t> dslot(pair_slot);
        Dev<uint16_t> dys_bf16(to_bf16_bits(dys.download()));  // to_bf16_bits rounds to nearest even
        Dev<uint16_t> dyr_bf16(to_bf16_bits(dyr.download()));
        Dev<uint16_t> dnw(to_bf16_bits(bf16_round(rng.normals(D, 0.3f))));
        const auto post0 = rng.normals(size_t(T) * N, 0.7f), comb0 = rng.normals(size_t(T) * N * N, 0.5f);
        struct Run {
            Dev<uint16_t> x, y, o;
            Dev<float> post, comb;
            Run(const std::vector<float>& x0, const std::vector<float>& p0, const std::vector<float>& c0, int T_, int D_)
                : x(to_bf16_bits(x0)), y(size_t(T_) * D_), o(size_t(T_) * D_), post(p0), comb(c0) {
                y.poison();
            }
        } a(x, post0, comb0, T, D), b(x, post0, comb0, T, D);
        MoeGrouping g;
        g.pair_slot = dslot.ptr;
        moe_combine(dyr.ptr, g, dys.ptr, T, top_k, D, a.o.ptr, OutKind::BF16, D, nullptr, round_terms);
        if (shared_bf16 || routed_bf16) {  // the separate combine with the bf16 terms: the same o
            Dev<uint16_t> o16(size_t(T) * D);
            o16.poison();
            moe_combine(routed_bf16 ? nullptr : dyr.ptr, g, shared_bf16 ? nullptr : dys.ptr, T, top_k, D, o16.ptr,
                        OutKind::BF16, D, nullptr, round_terms, shared_bf16 ? dys_bf16.ptr : nullptr,
                        routed_bf16 ? dyr_bf16.ptr : nullptr);
            EXPECT_EQ(o16.download(), a.o.download()) << "T " << T << ": moe_combine with bf16 terms";
        }
        mhc_post(T, N, D, bf(a.x), bf(a.o), a.post.ptr, a.comb.ptr, bf(a.x), nullptr);
        for (Run* r : {&a, &b}) {
            Dev<unsigned char> ws(mhc_pre_workspace_bytes(T, N, D, false));
            MhcPreParams p;
            p.n_tokens = T;
            p.n_streams = N;
            p.dim = D;
            p.x = bf(r->x);
            p.fn = dfn.ptr;
            p.base = dbase.ptr;
            p.scale = dscale.ptr;
            p.norm_weight = bf(dnw);
            p.y = bf(r->y);
            p.post = r->post.ptr;
            p.comb = r->comb.ptr;
            if (r == &b) {
                if (routed_bf16)
                    p.prev_y_routed_bf16 = bf(dyr_bf16);
                else
                    p.prev_y_routed = dyr.ptr;
                p.prev_pair_slot = dslot.ptr;
                if (shared_bf16)
                    p.prev_y_shared_bf16 = bf(dys_bf16);
                else
                    p.prev_y_shared = dys.ptr;
                p.prev_top_k = top_k;
                p.prev_round_terms = round_terms;
                p.prev_post = r->post.ptr;
                p.prev_comb = r->comb.ptr;
            }
            mhc_pre(p, ws.ptr, ws.n, nullptr);
            CUDA_OK(cudaDeviceSynchronize());
        }
        const std::string what =
            "T " + std::to_string(T) + (round_terms ? " rounded terms" : "") + (shared_bf16 ? ", bf16 shared" : "") +
            (routed_bf16 ? ", bf16 routed" : "");
        EXPECT_EQ(a.x.download(), b.x.download()) << what << ": streams";
        EXPECT_EQ(a.y.download(), b.y.download()) << what << ": y";
        EXPECT_EQ(a.post.download(), b.post.download()) << what << ": post";
        EXPECT_EQ(a.comb.download(), b.comb.download()) << what << ": comb";
    }
}

// One mhc_pre comparison's case and inputs: the front fused into it (nothing, the previous mhc_post, or the MoE
// combine and that post), head mode, a stream copy misaligned by one element (the scalar loads).
enum MhcFront { NONE, POST, COMBINE };
struct MhcFrontCase {
    int T, N, D;
    bool head;
    MhcFront front;
    bool shift;
    std::string describe() const {
        return "T " + std::to_string(T) + " N " + std::to_string(N) + " D " + std::to_string(D) + (head ? " head" : "") +
               (front == POST ? " +post" : "") + (front == COMBINE ? " +combine+post" : "") +
               (shift ? " misaligned" : "");
    }
};
struct MhcFrontInputs {
    static constexpr int kTopK = 6;
    MhcFrontCase c;
    int n_mix, slots;
    bool prepared;  // the fused prepared copy of y (FP8 layout, release numerics)
    std::vector<float> x0, post0, comb0;
    Dev<float> fn, base, scale, y_routed, y_shared;
    Dev<uint16_t> norm_w, o;
    Dev<int32_t> pair_slot;
    MhcFrontInputs(const MhcFrontCase& k, Rng& rng)
        : c(k), n_mix(k.head ? k.N : (2 + k.N) * k.N), slots(k.T * kTopK), prepared(!k.head && k.D % 128 == 0 && !k.shift),
          x0(k.shift ? 1 : 0, 0.f) {
        const auto xr = bf16_round(rng.normals(size_t(k.T) * k.N * k.D));
        x0.insert(x0.end(), xr.begin(), xr.end());
        std::vector<int32_t> ps(static_cast<size_t>(slots));
        for (int i = 0; i < slots; ++i) ps[size_t(i)] = rng.uniform_int(0, 9) == 0 ? -1 : rng.uniform_int(0, slots - 1);
        pair_slot = Dev<int32_t>(ps);
        fn = Dev<float>(rng.normals(size_t(n_mix) * k.N * k.D, 0.02f));
        base = Dev<float>(rng.normals(n_mix, 0.5f));
        scale = Dev<float>(rng.normals(3, 0.5f));
        y_routed = Dev<float>(rng.normals(size_t(slots) * k.D));
        y_shared = Dev<float>(rng.normals(size_t(k.T) * k.D));
        norm_w = Dev<uint16_t>(to_bf16_bits(bf16_round(rng.normals(k.D, 0.3f))));
        o = Dev<uint16_t>(to_bf16_bits(bf16_round(rng.normals(size_t(k.T) * k.D))));
        post0 = rng.normals(size_t(k.T) * k.N, 0.7f);
        comb0 = rng.normals(size_t(k.T) * k.N * k.N, 0.5f);
    }
};
// One run's buffers (streams, which a fused front rewrites; outputs; workspace), from the same inputs each time.
struct MhcFrontRun {
    Dev<uint16_t> x, y;
    Dev<float> post, comb;
    PreparedPair prep;
    Dev<unsigned char> ws;
    explicit MhcFrontRun(const MhcFrontInputs& in)
        : x(to_bf16_bits(in.x0)), y(size_t(in.c.T) * in.c.D + 1), post(in.post0), comb(in.comb0),
          prep(in.c.T, in.c.D), ws(mhc_pre_workspace_bytes(in.c.T, in.c.N, in.c.D, in.c.head)) {
        y.poison();
        ws.poison();
    }
    // mix_apart: post and comb by mhc_pre_mix after the call (on `mix_stream`, after an event on the default stream).
    void run(const MhcFrontInputs& in, MhcPartialKernel kernel, uint32_t* one_launch_counter = nullptr,
             bool mix_apart = false, cudaStream_t mix_stream = nullptr) {
        const MhcFrontCase& c = in.c;
        const int sh = c.shift ? 1 : 0;
        MhcPreParams p;
        p.n_tokens = c.T;
        p.n_streams = c.N;
        p.dim = c.D;
        p.head_mode = c.head;
        p.x = bf(x) + sh;
        p.fn = in.fn.ptr;
        p.base = in.base.ptr;
        p.scale = in.scale.ptr;
        p.norm_weight = reinterpret_cast<const __nv_bfloat16*>(in.norm_w.ptr);
        p.y = bf(y) + sh;
        p.post = c.head ? nullptr : post.ptr;
        p.comb = c.head ? nullptr : comb.ptr;
        p.partial_kernel = kernel;
        p.one_launch_counter = one_launch_counter;
        if (in.prepared) {
            p.prepared_values = prep.fused_v.ptr;
            p.prepared_scales = prep.fused_s.ptr;
            p.prepared_layout = int(WeightKind::FP8_BLOCK128);
            p.prepared_numerics = int(ActNumerics::FP8_BLOCK128);
        }
        if (c.front != NONE) {
            p.prev_post = post.ptr;
            p.prev_comb = comb.ptr;
        }
        if (c.front == POST) p.prev_o = reinterpret_cast<const __nv_bfloat16*>(in.o.ptr);
        if (c.front == COMBINE) {
            p.prev_y_routed = in.y_routed.ptr;
            p.prev_pair_slot = in.pair_slot.ptr;
            p.prev_y_shared = in.y_shared.ptr;
            p.prev_top_k = MhcFrontInputs::kTopK;
            p.prev_round_terms = c.T % 2 == 0;
        }
        p.mix_apart = mix_apart;
        mhc_pre(p, ws.ptr, ws.n, nullptr);
        if (mix_apart) {
            cudaEvent_t done;
            CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
            CUDA_OK(cudaEventRecord(done, nullptr));
            CUDA_OK(cudaStreamWaitEvent(mix_stream, done, 0));
            mhc_pre_mix(p, ws.ptr, ws.n, mix_stream);
            CUDA_OK(cudaEventDestroy(done));
        }
        CUDA_OK(cudaDeviceSynchronize());
    }
    // Every output of b equal to this run's, bit for bit (not the workspace).
    void expect_same_outputs(const MhcFrontInputs& in, const MhcFrontRun& b) const {
        EXPECT_EQ(x.download(), b.x.download()) << "streams";
        EXPECT_EQ(y.download(), b.y.download()) << "y";
        if (!in.c.head) {
            EXPECT_EQ(post.download(), b.post.download()) << "post";
            EXPECT_EQ(comb.download(), b.comb.download()) << "comb";
        }
        if (in.prepared) {
            EXPECT_EQ(prep.fused_v.download(), b.prep.fused_v.download()) << "prepared values";
            EXPECT_EQ(prep.fused_s.download(), b.prep.fused_s.download()) << "prepared scales";
        }
    }
};

// mhc_pre's two partial kernels (MhcPartialKernel: split for decode, tiled for prefill) write the same partial
// sums bit for bit, and so the same streams, y, prepared copy, post and comb: with the previous mhc_post and the
// MoE combine fused in front or without, head mode, 64-token tiles partial and full, chunks not interleaved
// (N = 3), K % 4 != 0, D % 8 != 0 (last chunk partial) and misaligned streams (scalar loads).
TEST(CudaMhc, TiledPartialEqualsSplit) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    using C = MhcFrontCase;
    for (C c : {C{1, 4, 4096, false, NONE, false}, C{63, 4, 4096, false, POST, false},
                C{64, 4, 4096, false, COMBINE, false}, C{65, 4, 4096, false, NONE, false},
                C{200, 4, 4096, false, COMBINE, false}, C{130, 4, 4096, true, NONE, false},
                C{70, 3, 130, false, NONE, false}, C{67, 4, 4100, false, NONE, false},
                C{129, 2, 192, false, POST, false}, C{77, 1, 256, false, POST, false},
                C{100, 4, 4096, false, NONE, true}, C{9, 4, 96, false, COMBINE, false}}) {
        SCOPED_TRACE(c.describe());
        const MhcFrontInputs in(c, rng);
        MhcFrontRun a(in), b(in);
        a.run(in, MhcPartialKernel::SPLIT);
        b.run(in, MhcPartialKernel::TILED);
        {  // the partial sums themselves: [T][splits][n_mix + 1] fp32
            const size_t n = size_t(c.T) * (in.n_mix + 1) * ((size_t(c.N) * c.D + 127) / 128) * sizeof(float);
            const auto wa = a.ws.download(), wb = b.ws.download();
            size_t n_diff = 0;
            for (size_t i = 0; i < n; ++i) n_diff += wa[i] != wb[i];
            EXPECT_EQ(n_diff, 0u) << "partial-sum bytes differ";
        }
        a.expect_same_outputs(in, b);
    }
}

// mhc_pre's one-launch form (MhcPreParams::one_launch_counter: at one token the partial CTA that finishes last runs
// the finalize) against the two launches, bit for bit: streams (rewritten where the post or the combine is fused),
// y, post, comb, the prepared copy; three launches on one counter, which each must leave zeroed. Shapes the form
// does not take (more tokens, the scalar paths, partials whose block is not whole 16-byte copies, a misaligned x)
// run the two launches with the counter given and must also match.
TEST(CudaMhc, OneLaunchEqualsTwoLaunches) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    using C = MhcFrontCase;
    for (C c : {C{1, 4, 4096, false, NONE, false}, C{1, 4, 4096, false, POST, false},
                C{1, 4, 4096, false, COMBINE, false}, C{1, 4, 4096, true, NONE, false},
                C{1, 1, 256, false, POST, false}, C{1, 2, 192, false, POST, false}, C{1, 3, 130, false, NONE, false},
                C{1, 4, 4100, false, NONE, false}, C{1, 4, 4096, false, NONE, true},
                C{2, 4, 4096, false, COMBINE, false}}) {
        SCOPED_TRACE(c.describe());
        const MhcFrontInputs in(c, rng);
        Dev<uint32_t> counter(4);
        CUDA_OK(cudaMemset(counter.ptr, 0, 16));
        MhcFrontRun a(in);
        a.run(in, MhcPartialKernel::AUTO);
        for (int launch = 0; launch < 3; ++launch) {
            SCOPED_TRACE("one-launch call " + std::to_string(launch));
            MhcFrontRun b(in);
            b.run(in, MhcPartialKernel::AUTO, counter.ptr);
            a.expect_same_outputs(in, b);
            EXPECT_EQ(counter.download(), std::vector<uint32_t>(4, 0u)) << "the counter is not left zeroed";
        }
    }
}

// post and comb left apart (MhcPreParams::mix_apart) and written by mhc_pre_mix on another stream: every output bit
// for bit what one mhc_pre call writes (the finalize's warp 0 and mhc_mix_kernel run one body, write_mix_rows, on
// sums reduced in one order): one token (also in one launch), a few, 16, a tiled pass; the fused post and combine
// in front (whose prev_post / prev_comb are the buffers the mix rewrites); hc_mult 1-4; the scalar paths. In head
// mode, or without its mhc_pre's flag, mhc_pre_mix is refused by name.
TEST(CudaMhc, MixApartEqualsFinalize) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    cudaStream_t side;
    CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    using C = MhcFrontCase;
    for (C c : {C{1, 4, 4096, false, COMBINE, false}, C{1, 4, 4096, false, POST, false},
                C{3, 4, 4096, false, NONE, false}, C{16, 4, 4096, false, COMBINE, false},
                C{300, 4, 4096, false, POST, false}, C{5, 3, 130, false, NONE, false},
                C{2, 2, 192, false, POST, false}, C{1, 1, 256, false, POST, false},
                C{4, 4, 4096, false, NONE, true}}) {
        SCOPED_TRACE(c.describe());
        const MhcFrontInputs in(c, rng);
        MhcFrontRun a(in), b(in);
        a.run(in, MhcPartialKernel::AUTO);
        b.run(in, MhcPartialKernel::AUTO, nullptr, /*mix_apart=*/true, side);
        a.expect_same_outputs(in, b);
        if (c.T == 1) {  // the one-launch form with the mix apart
            Dev<uint32_t> counter(4);
            CUDA_OK(cudaMemset(counter.ptr, 0, 16));
            MhcFrontRun d(in);
            d.run(in, MhcPartialKernel::AUTO, counter.ptr, /*mix_apart=*/true, side);
            a.expect_same_outputs(in, d);
        }
    }
    CUDA_OK(cudaStreamDestroy(side));
    MhcPreParams p;
    p.n_tokens = 1;
    p.n_streams = 4;
    p.dim = 4096;
    p.head_mode = true;
    p.mix_apart = true;
    EXPECT_THROW(
        {
            try {
                mhc_pre_mix(p, nullptr, 0, nullptr);
            } catch (const std::exception& e) {
                EXPECT_NE(std::string(e.what()).find("mix_apart"), std::string::npos) << e.what();
                throw;
            }
        },
        std::exception);
    p.head_mode = false;
    p.mix_apart = false;
    EXPECT_THROW(mhc_pre_mix(p, nullptr, 0, nullptr), std::exception);
}

}  // namespace
}  // namespace flashseek::cuda::test
