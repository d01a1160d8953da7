// Op-consistency cases for the GPU MoE (cuda/moe/moe.cuh) against the CPU reference ops: cpu::router_select
// (biased top-k and hash routing), and a whole MoE layer (routed FP4 experts + shared FP8 expert, SwiGLU clamp,
// routing weights, combine) built from cpu::dequantize_linear, cpu::act_quant_fp8_block128, cpu::linear_f32 and
// cpu::swiglu_clamp. Random data, fresh seeds, outputs poisoned before each run.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "cpu/ops.h"
#include "cuda/moe/moe.cuh"
#include "harness.h"
#include "weights.h"

namespace flashseek::test {
namespace {

using cuda::ActNumerics;
using cuda::ScaleKind;
using cuda::WeightKind;

TEST(MoeRoute, BiasedTopKAndHashMatchCpu) {
    for (int hash = 0; hash < 2; ++hash)
        for (auto [M, E, K] : {std::tuple<int, int, int>{1, 256, 6}, {37, 256, 6}, {5, 19, 3}, {8, 64, 8}}) {
            const uint64_t seed = fresh_seed();
            std::ostringstream d;
            d << "hash=" << hash << " M=" << M << " E=" << E << " K=" << K << " seed=" << seed;
            SCOPED_TRACE(d.str());
            std::mt19937_64 rng(seed);
            std::normal_distribution<float> nd(0.f, 2.f);
            std::vector<float> logits(size_t(M * E)), bias(static_cast<size_t>(E));
            for (auto& v : logits) v = nd(rng);
            for (auto& v : bias) v = nd(rng) * 0.1f;
            const int64_t vocab = 1000;
            std::vector<int64_t> tid2eid(size_t(vocab * K));
            for (int64_t t = 0; t < vocab; ++t) {
                std::vector<int> perm(static_cast<size_t>(E));
                for (int e = 0; e < E; ++e) perm[size_t(e)] = e;
                std::shuffle(perm.begin(), perm.end(), rng);
                for (int j = 0; j < K; ++j) tid2eid[size_t(t * K + j)] = perm[size_t(j)];
            }
            std::vector<int32_t> tokens(static_cast<size_t>(M));
            for (auto& t : tokens) t = int32_t(rng() % vocab);
            DeviceArray<float> dl(logits), db(bias), w(size_t(M * K));
            DeviceArray<int64_t> dt(tid2eid);
            DeviceArray<int32_t> dtok(tokens), idx(size_t(M * K));
            w.poison();
            idx.poison();
            cuda::moe_route(dl.ptr, M, E, E, hash ? nullptr : db.ptr, hash ? dt.ptr : nullptr, dtok.ptr, vocab, K, 1.5f,
                            idx.ptr, w.ptr, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const auto gi = idx.download();
            const auto gw = w.download();
            for (int m = 0; m < M; ++m) {
                std::vector<int32_t> ri(static_cast<size_t>(K));
                std::vector<float> rw(static_cast<size_t>(K));
                cpu::router_select(&logits[size_t(m * E)], E, hash ? nullptr : bias.data(),
                                   hash ? &tid2eid[size_t(tokens[size_t(m)]) * K] : nullptr, K, 1.5f, ri.data(),
                                   rw.data());
                for (int j = 0; j < K; ++j) {
                    EXPECT_EQ(gi[size_t(m * K + j)], ri[size_t(j)]) << "token " << m << " pick " << j;
                    EXPECT_NEAR(gw[size_t(m * K + j)], rw[size_t(j)], 1e-5f * std::fabs(rw[size_t(j)]) + 1e-7f);
                }
            }
        }
}

struct ExpertSet {
    std::vector<TestWeight> w1, w3, w2;
    std::unique_ptr<DeviceArray<const void*>> ptrs[6];
    cuda::ExpertTable table;
};

ExpertSet make_experts(std::mt19937_64& rng, int E, WeightKind kind, int64_t D, int64_t I) {
    ExpertSet s;
    std::vector<const void*> p[6];
    for (int e = 0; e < E; ++e) {
        s.w1.push_back(make_weight(rng, kind, ScaleKind::E8M0, I, D));
        s.w3.push_back(make_weight(rng, kind, ScaleKind::E8M0, I, D));
        s.w2.push_back(make_weight(rng, kind, ScaleKind::E8M0, D, I));
        p[0].push_back(s.w1.back().w_dev->ptr);
        p[1].push_back(s.w1.back().s_dev->ptr);
        p[2].push_back(s.w3.back().w_dev->ptr);
        p[3].push_back(s.w3.back().s_dev->ptr);
        p[4].push_back(s.w2.back().w_dev->ptr);
        p[5].push_back(s.w2.back().s_dev->ptr);
    }
    for (int i = 0; i < 6; ++i) s.ptrs[i] = std::make_unique<DeviceArray<const void*>>(p[i]);
    s.table.kind = kind;
    s.table.scale_kind = ScaleKind::E8M0;
    s.table.hidden = D;
    s.table.inter = I;
    s.table.w1 = s.ptrs[0]->ptr;
    s.table.w1_scale = s.ptrs[1]->ptr;
    s.table.w3 = s.ptrs[2]->ptr;
    s.table.w3_scale = s.ptrs[3]->ptr;
    s.table.w2 = s.ptrs[4]->ptr;
    s.table.w2_scale = s.ptrs[5]->ptr;
    return s;
}

// One expert on the CPU: w2 . q(round_bf16(swiglu_clamp(w1 . q(x), w3 . q(x)) * weight)), q = act_quant or identity;
// in release numerics w1 . q(x) and w3 . q(x) are rounded to bf16 first (the reference's GEMM outputs).
std::vector<float> cpu_expert(const ExpertSet& s, int e, const std::vector<float>& x, float weight, float limit,
                              ActNumerics numerics) {
    const int64_t D = s.table.hidden, I = s.table.inter;
    std::vector<float> xq = x;
    if (numerics == ActNumerics::FP8_BLOCK128) cpu::act_quant_fp8_block128(x.data(), D, xq.data());
    std::vector<float> gate(static_cast<size_t>(I)), up(static_cast<size_t>(I)), act(static_cast<size_t>(I)), y(static_cast<size_t>(D));
    const auto w1 = s.w1[size_t(e)].dequantized(), w3 = s.w3[size_t(e)].dequantized(),
               w2 = s.w2[size_t(e)].dequantized();
    cpu::linear_f32(xq.data(), 1, w1.data(), I, D, gate.data(), nullptr);
    cpu::linear_f32(xq.data(), 1, w3.data(), I, D, up.data(), nullptr);
    if (numerics == ActNumerics::FP8_BLOCK128) {  // release: the reference's expert GEMMs output bf16
        for (auto& v : gate) v = round_bf16(v);
        for (auto& v : up) v = round_bf16(v);
    }
    cpu::swiglu_clamp(gate.data(), up.data(), I, limit, act.data());
    for (auto& v : act) v = round_bf16(v * weight);
    std::vector<float> aq = act;
    if (numerics == ActNumerics::FP8_BLOCK128) cpu::act_quant_fp8_block128(act.data(), I, aq.data());
    cpu::linear_f32(aq.data(), 1, w2.data(), D, I, y.data(), nullptr);
    return y;
}

// A whole MoE layer: route (biased top-k) -> group -> up -> down for routed FP4 experts, dense up/down for the
// shared FP8 expert, combine. Threshold 3e-3 on ||gpu - cpu|| / ||cpu||: both sides compute the same fp32 math,
// but a bf16 (intermediate) or e4m3 (release act_quant) rounding can land on the other side of a tie for a few
// elements when the fp32 sums differ in their last bits.
// Each case runs through both expert paths for M <= 16 (below); the threshold is the same for both. The per-tile
// GEMV path also runs with raw bf16 inputs (raw_activation), which must give bit-identical outputs.
// Paths: 1 = mma.sync kernels (GEMV off), 2 = per-tile GEMV kernels (moe_gemv.cu; also checks raw inputs). (Path
// numbers kept from when persistent streaming kernels were paths 0, 3 and 4: measured slower, racecheck hazards,
// removed; docs/perf.md.)
struct GemvSwitch {
    explicit GemvSwitch(int path) {
        cuda::set_small_m_gemv(path != 1);
        cuda::set_small_m_gemv_max_tokens(cuda::kGemvMaxTokens);
    }
    ~GemvSwitch() {
        cuda::set_small_m_gemv(true);
        cuda::set_small_m_gemv_max_tokens(cuda::kGemvDefaultMaxTokens);
    }
};

TEST(MoeLayer, RoutedFp4PlusSharedFp8MatchesCpu) {
    for (int path = 1; path <= 2; ++path)
    for (auto numerics : {ActNumerics::EXACT, ActNumerics::FP8_BLOCK128})
        // Sizes that are multiples of 128 take the GEMV (M <= 8) or tensor-core kernels; 160/96 (golden-b) the
        // element-wise fallback.
        for (auto [M, E, K, D, I] : {std::tuple<int, int, int, int64_t, int64_t>{1, 16, 4, 256, 384},
                                     {5, 16, 4, 256, 384},
                                     {3, 16, 6, 384, 640},   // odd tokens, 3 / 5 steps
                                     {8, 32, 6, 512, 256},   // 8 tokens
                                     {16, 64, 6, 512, 384},  // decode C=16: 1-4+ tokens per expert, FP8 2 tiles
                                     {11, 128, 6, 256, 256}, // odd token count, many single-token experts
                                     {16, 8, 4, 2048, 1024}, // ~8 tokens per expert (2-3 token passes), aligned
                                                             // scales, 2 / 1 chunks per row
                                     {1, 4, 2, 1024, 2048},  // M = 1, one expert slot per 64 / 128 tiles
                                     {23, 8, 3, 256, 384},
                                     {5, 16, 3, 160, 96}}) {
            if (path == 2 && M > cuda::kGemvMaxTokens) continue;  // no GEMV above 16 tokens: same kernels as path 1
            GemvSwitch gemv(path);
            const uint64_t seed = fresh_seed();
            std::ostringstream d;
            d << "path=" << path << " numerics=" << int(numerics) << " M=" << M << " E=" << E << " K=" << K
              << " D=" << D << " I=" << I << " seed=" << seed;
            SCOPED_TRACE(d.str());
            std::mt19937_64 rng(seed);
            const float limit = 10.f, scale = 1.5f;
            ExpertSet routed = make_experts(rng, E, WeightKind::FP4_BLOCK32, D, I);
            ExpertSet shared = make_experts(rng, 1, WeightKind::FP8_BLOCK128, D, I);
            std::normal_distribution<float> nd(0.f, 1.f);
            std::vector<float> x(size_t(M * D)), logits(size_t(M * E)), bias(static_cast<size_t>(E));
            for (auto& v : x) v = round_bf16(nd(rng));
            for (auto& v : logits) v = nd(rng);
            for (auto& v : bias) v = 0.1f * nd(rng);
            std::vector<uint16_t> xb(x.size());
            for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
            // GPU
            DeviceArray<uint16_t> dx(xb);
            DeviceArray<float> dl(logits), db(bias), w(size_t(M * K));
            DeviceArray<int32_t> idx(size_t(M * K));
            DeviceArray<uint8_t> gmem(cuda::moe_grouping_bytes(E, M * K));
            const cuda::MoeGrouping g = cuda::moe_grouping_view(gmem.ptr, E, M * K);
            DeviceArray<uint16_t> pv4(cuda::prepared_values_bytes(M, D) / 2), pv8(cuda::prepared_values_bytes(M, D) / 2),
                hv(cuda::prepared_values_bytes(M * K, I) / 2), hsv(cuda::prepared_values_bytes(M, I) / 2);
            DeviceArray<float> ps4(cuda::prepared_scales_bytes(M, D) / 4), ps8(cuda::prepared_scales_bytes(M, D) / 4),
                hs(cuda::prepared_scales_bytes(M * K, I) / 4), hss(cuda::prepared_scales_bytes(M, I) / 4),
                y(size_t(M * K * D)), ys(size_t(M * D)), out(size_t(M * D));
            for (auto* a : {&y, &ys, &out}) a->poison();
            hv.poison();
            hs.poison();
            cuda::moe_route(dl.ptr, M, E, E, db.ptr, nullptr, nullptr, 0, K, scale, idx.ptr, w.ptr, nullptr);
            cuda::moe_group(idx.ptr, w.ptr, M, K, g, nullptr);
            cuda::PreparedActivation p4{WeightKind::FP4_BLOCK32, 0, 0, 0, 0, pv4.ptr, ps4.ptr};
            cuda::PreparedActivation p8{WeightKind::FP8_BLOCK128, 0, 0, 0, 0, pv8.ptr, ps8.ptr};
            cuda::prepare_activation(dx.ptr, false, M, D, D, WeightKind::FP4_BLOCK32, numerics, p4, nullptr);
            cuda::prepare_activation(dx.ptr, false, M, D, D, WeightKind::FP8_BLOCK128, numerics, p8, nullptr);
            cuda::PreparedActivation h{}, hsh{};
            h.values = hv.ptr;
            h.scales = hs.ptr;
            hsh.values = hsv.ptr;
            hsh.scales = hss.ptr;
            cuda::moe_expert_up(p4, routed.table, &g, M, K, limit, numerics, h, nullptr);
            cuda::moe_expert_down(h, routed.table, &g, M, K, y.ptr, nullptr);
            cuda::moe_expert_up(p8, shared.table, nullptr, M, K, limit, numerics, hsh, nullptr);
            cuda::moe_expert_down(hsh, shared.table, nullptr, M, K, ys.ptr, nullptr);
            cuda::moe_combine(y.ptr, g, ys.ptr, M, K, D, out.ptr, cuda::OutKind::F32, D, nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            const auto gpu = out.download();
            if (path == 2 && cuda::moe_expert_takes_raw(routed.table, M) && cuda::moe_expert_takes_raw(shared.table, M)) {
                // Raw bf16 input (prepared inside the GEMV kernels): bit-identical to the prepared input.
                for (auto* a : {&y, &ys, &out}) a->poison();
                hv.poison();
                const auto r4 = cuda::raw_activation(dx.ptr, M, D, D, WeightKind::FP4_BLOCK32, numerics);
                const auto r8 = cuda::raw_activation(dx.ptr, M, D, D, WeightKind::FP8_BLOCK128, numerics);
                cuda::moe_expert_up(r4, routed.table, &g, M, K, limit, numerics, h, nullptr);
                cuda::moe_expert_down(h, routed.table, &g, M, K, y.ptr, nullptr);
                cuda::moe_expert_up(r8, shared.table, nullptr, M, K, limit, numerics, hsh, nullptr);
                cuda::moe_expert_down(hsh, shared.table, nullptr, M, K, ys.ptr, nullptr);
                cuda::moe_combine(y.ptr, g, ys.ptr, M, K, D, out.ptr, cuda::OutKind::F32, D, nullptr);
                CUDA_CHECK(cudaDeviceSynchronize());
                const auto raw = out.download();
                EXPECT_EQ(std::memcmp(raw.data(), gpu.data(), gpu.size() * sizeof(float)), 0) << "raw input differs";
            }
            // CPU
            std::vector<float> ref(size_t(M * D), 0.f);
            for (int m = 0; m < M; ++m) {
                std::vector<int32_t> ri(static_cast<size_t>(K));
                std::vector<float> rw(static_cast<size_t>(K));
                cpu::router_select(&logits[size_t(m * E)], E, bias.data(), nullptr, K, scale, ri.data(), rw.data());
                std::vector<float> xm(x.begin() + m * D, x.begin() + (m + 1) * D);
                for (int j = 0; j < K; ++j) {
                    const auto yj = cpu_expert(routed, ri[size_t(j)], xm, rw[size_t(j)], limit, numerics);
                    for (int64_t dd = 0; dd < D; ++dd) ref[size_t(m * D + dd)] += yj[size_t(dd)];
                }
                const auto sh = cpu_expert(shared, 0, xm, 1.f, limit, numerics);
                for (int64_t dd = 0; dd < D; ++dd) ref[size_t(m * D + dd)] += sh[size_t(dd)];
            }
            EXPECT_LE(rel_l2(gpu, ref), 3e-3);
        }
}

}  // namespace
}  // namespace flashseek::test
