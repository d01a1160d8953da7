// The MoE ops (cuda/moe/moe.cuh) in the op harness, against the CPU reference ops on random data with fresh seeds,
// outputs poisoned before each run: routing (cpu::router_select: biased top-k and hash; the one-launch decode form
// against the two launches); the expert family: each case of expert_cases() is a whole MoE layer (routed FP4
// experts + shared FP8 expert, SwiGLU clamp, routing weights, combine; reference built from cpu::dequantize_linear,
// cpu::act_quant_fp8_block128, cpu::linear_f32 and cpu::swiglu_clamp; the grouping carries the grouped GEMMs'
// workspace) run through every variant of the expert catalogue (KernelPolicy::only; each up-projection from the
// input the variant takes, prepared or raw bf16 rows; each projection must run the forced variant exactly where it
// supports it, the down-projection judged on the h its up-projection wrote), rerun bit-identical, with raw inputs
// bit-identical where the variant takes both; the default policy from prepared and from raw inputs; then stage by
// stage against a base variant (h dequantized whatever its format, the down-projections from the same h values);
// the family's test ends by checking every variant available here ran. Then the one-hot down-projection per
// variant, the default choice rules, and the shared expert's SwiGLU-and-prepare.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "cpu/ops.h"
#include "cuda/common/arch.cuh"
#include "cuda/moe/moe_catalogue.h"
#include "cuda/moe/moe_gemm.cuh"
#include "expert_family.h"
#include "harness.h"
#include "harness_mode.h"
#include "named_error.h"
#include "variant_coverage.h"
#include "weights.h"

namespace flashseek::test {
namespace {

using cuda::ActNumerics;
using cuda::KernelPolicy;
using cuda::ScaleKind;
using cuda::WeightKind;

// Router inputs for M tokens over E experts: logits and bias (normal, sd 2 and 0.2), a token-id hash table of
// `vocab` rows (K distinct experts per row, or K uniform draws that may repeat), token ids; host and device copies.
struct RouterInputs {
    std::vector<float> logits, bias;
    std::vector<int64_t> tid2eid;
    std::vector<int32_t> tokens;
    DeviceArray<float> d_logits, d_bias;
    DeviceArray<int64_t> d_tid2eid;
    DeviceArray<int32_t> d_tokens;
    static RouterInputs make(std::mt19937_64& rng, int M, int E, int K, int64_t vocab, bool distinct_hash) {
        std::normal_distribution<float> nd(0.f, 2.f);
        std::vector<float> logits(size_t(M * E)), bias(static_cast<size_t>(E));
        for (auto& v : logits) v = nd(rng);
        for (auto& v : bias) v = nd(rng) * 0.1f;
        std::vector<int64_t> tid2eid(size_t(vocab * K));
        for (int64_t t = 0; t < vocab; ++t) {
            if (distinct_hash) {
                std::vector<int> perm(static_cast<size_t>(E));
                for (int e = 0; e < E; ++e) perm[size_t(e)] = e;
                std::shuffle(perm.begin(), perm.end(), rng);
                for (int j = 0; j < K; ++j) tid2eid[size_t(t * K + j)] = perm[size_t(j)];
            } else {
                for (int j = 0; j < K; ++j) tid2eid[size_t(t * K + j)] = int64_t(rng() % uint64_t(E));
            }
        }
        std::vector<int32_t> tokens(static_cast<size_t>(M));
        for (auto& t : tokens) t = int32_t(rng() % uint64_t(vocab));
        return RouterInputs{logits, bias, tid2eid, tokens, DeviceArray<float>(logits), DeviceArray<float>(bias),
                            DeviceArray<int64_t>(tid2eid), DeviceArray<int32_t>(tokens)};
    }
};

TEST(MoeRoute, BiasedTopKAndHashMatchCpu) {
    for (int hash = 0; hash < 2; ++hash)
        for (auto [M, E, K] : {std::tuple<int, int, int>{1, 256, 6}, {37, 256, 6}, {5, 19, 3}, {8, 64, 8}}) {
            const uint64_t seed = fresh_seed();
            std::ostringstream d;
            d << "hash=" << hash << " M=" << M << " E=" << E << " K=" << K << " seed=" << seed;
            SCOPED_TRACE(d.str());
            std::mt19937_64 rng(seed);
            const int64_t vocab = 1000;
            const RouterInputs in = RouterInputs::make(rng, M, E, K, vocab, /*distinct_hash=*/true);
            const auto& logits = in.logits;
            const auto& bias = in.bias;
            const auto& tid2eid = in.tid2eid;
            const auto& tokens = in.tokens;
            const auto &dl = in.d_logits, &db = in.d_bias;
            const auto& dt = in.d_tid2eid;
            const auto& dtok = in.d_tokens;
            DeviceArray<float> w(size_t(M * K));
            DeviceArray<int32_t> idx(size_t(M * K));
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

// n int32 from device memory.
std::vector<int32_t> download_ints(const void* ptr, size_t n) {
    std::vector<int32_t> v(n);
    if (n) CUDA_CHECK(cudaMemcpy(v.data(), ptr, n * 4, cudaMemcpyDeviceToHost));
    return v;
}

// Two groupings with the same offsets (`off`) hold, per expert, the same (token, weight bits) slots; their order
// inside an expert comes from atomics and is not compared.
void expect_same_slots_per_expert(int E, const std::vector<int32_t>& off, const std::vector<int32_t>& tok1,
                                  const std::vector<int32_t>& w1, const std::vector<int32_t>& tok2,
                                  const std::vector<int32_t>& w2) {
    for (int e = 0; e < E; ++e) {
        std::vector<std::pair<int32_t, int32_t>> a, b;
        for (int s = off[size_t(e)]; s < off[size_t(e) + 1]; ++s) {
            a.emplace_back(tok1[size_t(s)], w1[size_t(s)]);
            b.emplace_back(tok2[size_t(s)], w2[size_t(s)]);
        }
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << "expert " << e;
    }
}

// A routing's outputs for M tokens of top_k picks over E experts: picks, weights and the grouping with its list of
// 16-token tiles, all poisoned.
struct RoutingOut {
    DeviceArray<float> w;
    DeviceArray<int32_t> idx;
    DeviceArray<uint8_t> mem, tiles;
    cuda::MoeGrouping g;
    RoutingOut(int M, int E, int K)
        : w(size_t(M * K)), idx(size_t(M * K)), mem(cuda::moe_grouping_bytes(E, M * K)),
          tiles(cuda::moe_act_tile_bytes(E, M * K, 128)) {
        w.poison();
        idx.poison();
        mem.poison();
        tiles.poison();
        g = cuda::moe_grouping_view(mem.ptr, E, M * K);
        cuda::moe_attach_act_tiles(g, tiles.ptr, 128);  // the grouping also lists the 16-token tiles
    }
};

// Two routings of the same logits agree: the same picks and weights bit for bit, the same counts, offsets and active
// list, per expert the same (token, weight) slots (their order inside an expert comes from atomics and is not
// compared), every pair's slot holding its token, and the 16-token tiles: ceil(count / 16) per active expert,
// ascending, in both.
void expect_same_routing(const RoutingOut& one, const RoutingOut& two, int M, int E, int K) {
    EXPECT_EQ(one.idx.download(), two.idx.download());
    const auto w1 = one.w.download(), w2 = two.w.download();
    EXPECT_EQ(std::memcmp(w1.data(), w2.data(), w1.size() * 4), 0) << "routing weights differ";
    const std::vector<uint8_t> raw1 = one.mem.download(), raw2 = two.mem.download();
    const cuda::MoeGrouping &g1 = one.g, &g2 = two.g;
    auto ints = [](const std::vector<uint8_t>& raw, const cuda::MoeGrouping& g, const int32_t* field, size_t n) {
        const size_t off = size_t(reinterpret_cast<const uint8_t*>(field) - reinterpret_cast<const uint8_t*>(g.expert_count));
        std::vector<int32_t> v(n);
        std::memcpy(v.data(), raw.data() + off, n * 4);
        return v;
    };
    const auto n1 = ints(raw1, g1, g1.n_active, 1), n2 = ints(raw2, g2, g2.n_active, 1);
    ASSERT_EQ(n1, n2);
    EXPECT_EQ(ints(raw1, g1, g1.expert_count, size_t(E)), ints(raw2, g2, g2.expert_count, size_t(E)));
    const auto off1 = ints(raw1, g1, g1.expert_offset, size_t(E + 1));
    EXPECT_EQ(off1, ints(raw2, g2, g2.expert_offset, size_t(E + 1)));
    EXPECT_EQ(ints(raw1, g1, g1.active, size_t(n1[0])), ints(raw2, g2, g2.active, size_t(n2[0])));
    const size_t P = size_t(M * K);
    const auto tok1 = ints(raw1, g1, g1.slot_token, P), tok2 = ints(raw2, g2, g2.slot_token, P);
    const auto sw1 = ints(raw1, g1, reinterpret_cast<const int32_t*>(g1.slot_weight), P);
    const auto sw2 = ints(raw2, g2, reinterpret_cast<const int32_t*>(g2.slot_weight), P);
    expect_same_slots_per_expert(E, off1, tok1, sw1, tok2, sw2);
    const auto ps = ints(raw1, g1, g1.pair_slot, P);
    for (size_t p = 0; p < P; ++p)
        if (ps[p] >= 0) {
            EXPECT_EQ(tok1[size_t(ps[p])], int32_t(p / size_t(K))) << "pair " << p;
        }
    std::vector<int32_t> want_expert, want_col;
    const auto counts = ints(raw1, g1, g1.expert_count, size_t(E));
    for (int e = 0; e < E; ++e)
        for (int c = 0; c < counts[size_t(e)]; c += 16) {
            want_expert.push_back(e);
            want_col.push_back(c);
        }
    ASSERT_LE(int64_t(want_expert.size()), int64_t(g1.act_tile_count));
    for (const RoutingOut* o : {&one, &two}) {
        SCOPED_TRACE(o == &one ? "first" : "second");
        ASSERT_EQ(download_ints(o->g.n_tiles, 1)[0], int32_t(want_expert.size()));
        EXPECT_EQ(download_ints(o->g.tile_expert, want_expert.size()), want_expert);
        EXPECT_EQ(download_ints(o->g.tile_col, want_col.size()), want_col);
    }
}

// The one-launch routing + grouping of decode (moe_route_and_group, up to 16 tokens; more fall back to the two
// launches) gives what moe_route then moe_group give (expect_same_routing).
TEST(MoeRoute, FusedRouteAndGroupMatchesTwoLaunches) {
    for (int hash = 0; hash < 2; ++hash)
        for (auto [M, E, K] : {std::tuple<int, int, int>{1, 256, 6}, {16, 256, 6}, {17, 256, 6}, {40, 256, 6},
                               {7, 19, 3}, {40, 8, 6}}) {
            const uint64_t seed = fresh_seed();
            std::ostringstream d;
            d << "hash=" << hash << " M=" << M << " E=" << E << " K=" << K << " seed=" << seed;
            SCOPED_TRACE(d.str());
            std::mt19937_64 rng(seed);
            const int64_t vocab = 500;
            const RouterInputs in = RouterInputs::make(rng, M, E, K, vocab, /*distinct_hash=*/false);
            const auto &dl = in.d_logits, &db = in.d_bias;
            const auto& dt = in.d_tid2eid;
            const auto& dtok = in.d_tokens;
            RoutingOut two(M, E, K), one(M, E, K);
            const float* bp = hash ? nullptr : db.ptr;
            const int64_t* tp = hash ? dt.ptr : nullptr;
            cuda::moe_route(dl.ptr, M, E, E, bp, tp, dtok.ptr, vocab, K, 1.5f, two.idx.ptr, two.w.ptr, nullptr);
            cuda::moe_group(two.idx.ptr, two.w.ptr, M, K, two.g, nullptr);
            cuda::moe_route_and_group(dl.ptr, M, E, E, bp, tp, dtok.ptr, vocab, K, 1.5f, one.idx.ptr, one.w.ptr, one.g,
                                      nullptr);
            CUDA_CHECK(cudaDeviceSynchronize());
            expect_same_routing(one, two, M, E, K);
        }
}

// The router's GEMV with the routing and grouping in its last CTA (moe_router_route_and_group, decode: up to 8
// tokens, E <= 256) gives what the router's linear (bf16_gemv) then moe_route_and_group give: the logits bit for bit
// and the same routing (expect_same_routing); a second call gives the same again (the tail's counter was left
// zero). Odd shapes: E not a multiple of 32, K of 640 columns (the GEMV's split over 20 chunks), biased and hash
// routing. Where it does not apply moe_router_routes says so and a call is refused with a named error before any
// launch: 9 tokens, E > 256, the switch disabled, no workspace.
TEST(MoeRoute, RouterWithRoutingMatchesLinearThenRouting) {
    cuda::GemmWorkspace ws = cuda::create_gemm_workspace();  // the backend's size: the router's splits
    for (int hash = 0; hash < 2; ++hash)
        for (auto [M, E, K, D] : {std::tuple<int, int, int, int>{1, 256, 6, 4096}, {8, 256, 6, 4096}, {5, 48, 3, 640},
                                  {3, 64, 8, 512}}) {
            const uint64_t seed = fresh_seed();
            std::ostringstream d;
            d << "hash=" << hash << " M=" << M << " E=" << E << " K=" << K << " D=" << D << " seed=" << seed;
            SCOPED_TRACE(d.str());
            std::mt19937_64 rng(seed);
            const int64_t vocab = 500;
            const RouterInputs in = RouterInputs::make(rng, M, E, K, vocab, /*distinct_hash=*/false);
            const TestWeight gate = make_weight(rng, WeightKind::BF16, ScaleKind::NONE, E, D);
            const cuda::DeviceLinear gw = gate.device();
            const DeviceArray<uint16_t> x(random_bf16(rng, size_t(M) * size_t(D), 1.f));
            DeviceArray<uint8_t> values(cuda::prepared_values_bytes(M, D)), scales(cuda::prepared_scales_bytes(M, D));
            DeviceArray<float> logits_two(size_t(M * E)), logits_one(size_t(M * E)), logits_again(size_t(M * E));
            logits_two.poison();
            logits_one.poison();
            logits_again.poison();
            const float* bp = hash ? nullptr : in.d_bias.ptr;
            const int64_t* tp = hash ? in.d_tid2eid.ptr : nullptr;
            RoutingOut two(M, E, K), one(M, E, K), again(M, E, K);
            const KernelPolicy policy;
            const cuda::PreparedActivation ax = cuda::prepare_and_linear(
                x.ptr, false, M, D, gw, ActNumerics::EXACT, reinterpret_cast<uint16_t*>(values.ptr),
                reinterpret_cast<float*>(scales.ptr), logits_two.ptr, cuda::OutKind::F32, E, &ws, nullptr, policy);
            ASSERT_EQ(cuda::plan_linear(ax, gw, 1, &ws, policy).variant, "bf16_gemv");
            cuda::moe_route_and_group(logits_two.ptr, M, E, E, bp, tp, in.d_tokens.ptr, vocab, K, 1.5f, two.idx.ptr,
                                      two.w.ptr, two.g, nullptr);
            ASSERT_TRUE(cuda::moe_router_routes(ax, gw, K, one.g, &ws, policy));
            for (auto [logits, out] : {std::pair<float*, RoutingOut*>{logits_one.ptr, &one}, {logits_again.ptr, &again}})
                cuda::moe_router_route_and_group(ax, gw, logits, bp, tp, in.d_tokens.ptr, vocab, K, 1.5f, out->idx.ptr,
                                                 out->w.ptr, out->g, &ws, nullptr, policy);
            CUDA_CHECK(cudaDeviceSynchronize());
            const auto l2 = logits_two.download(), l1 = logits_one.download(), l3 = logits_again.download();
            EXPECT_EQ(std::memcmp(l1.data(), l2.data(), l1.size() * 4), 0) << "logits differ";
            EXPECT_EQ(std::memcmp(l3.data(), l2.data(), l3.size() * 4), 0) << "logits differ in the second call";
            expect_same_routing(one, two, M, E, K);
            expect_same_routing(again, two, M, E, K);
        }
    // Refusals: moe_router_routes says no, and a call throws a named error having written nothing.
    std::mt19937_64 rng(fresh_seed());
    auto refused = [&](int M, int E, const KernelPolicy& policy, const cuda::GemmWorkspace* w) {
        const int K = 6, D = 512;
        const TestWeight gate = make_weight(rng, WeightKind::BF16, ScaleKind::NONE, E, D);
        const cuda::DeviceLinear gw = gate.device();
        const DeviceArray<uint16_t> x(random_bf16(rng, size_t(M) * size_t(D), 1.f));
        cuda::PreparedActivation ax;
        cuda::describe_prepared(ax, WeightKind::BF16, ActNumerics::EXACT, M, D);
        ax.values = x.ptr;
        DeviceArray<float> logits(size_t(M * E));
        logits.poison();
        RoutingOut out(M, E, K);
        const bool applies = cuda::moe_router_routes(ax, gw, K, out.g, w, policy);
        expect_named_error(
            [&] {
                cuda::moe_router_route_and_group(ax, gw, logits.ptr, nullptr, nullptr, nullptr, 0, K, 1.f, out.idx.ptr,
                                                 out.w.ptr, out.g, w, nullptr, policy);
            },
            "moe_router_route_and_group");
        CUDA_CHECK(cudaDeviceSynchronize());
        for (float v : logits.download()) EXPECT_TRUE(std::isnan(v)) << "a refused call wrote the logits";
        return !applies;
    };
    KernelPolicy off;
    off.disabled.emplace_back("route_in_router");
    EXPECT_TRUE(refused(9, 256, KernelPolicy{}, &ws)) << "9 tokens";
    EXPECT_TRUE(refused(1, 272, KernelPolicy{}, &ws)) << "272 experts";
    EXPECT_TRUE(refused(1, 256, off, &ws)) << "switch disabled";
    EXPECT_TRUE(refused(1, 256, KernelPolicy{}, nullptr)) << "no workspace";
    cuda::destroy_gemm_workspace(ws);
}

// Passes of more than kGroupOneCtaPairs pairs are grouped by many CTAs (count, offsets, place); without the
// scratch (block_counts) the same call takes the one-CTA path. Both give the same counts, offsets, active list and
// 16-token tile list, and per expert the same (token, weight) slots; every pair's slot holds its token, and pairs
// with no expert or one outside the shard's range (expert_begin) get -1. Odd sizes: a partial last CTA.
TEST(MoeGroup, ManyCtaGroupingMatchesOneCta) {
    using Case = std::tuple<int, int, int, int, int>;  // M, E, K, expert_begin, experts routed to
    for (auto [M, E, K, begin, total] :
         {Case{4096, 256, 6, 0, 256}, {700, 256, 6, 0, 256}, {1537, 19, 3, 0, 19}, {2000, 64, 6, 64, 256},
          {683, 256, 6, 0, 256}}) {
        const uint64_t seed = fresh_seed();
        std::ostringstream d;
        d << "M=" << M << " E=" << E << " K=" << K << " begin=" << begin << " seed=" << seed;
        SCOPED_TRACE(d.str());
        std::mt19937_64 rng(seed);
        const size_t P = size_t(M) * K;
        ASSERT_GT(int64_t(P), cuda::kGroupOneCtaPairs);
        std::vector<int32_t> idx(P);
        std::vector<float> w(P);
        for (size_t p = 0; p < P; ++p) {
            idx[p] = rng() % 23 == 0 ? -1 : int32_t(rng() % uint64_t(total));  // skewed: low experts a bit hotter
            if (rng() % 5 == 0) idx[p] = int32_t(rng() % uint64_t(std::min(total, 8)));
            w[p] = float(rng() % 1000) / 997.f;
        }
        DeviceArray<int32_t> didx(idx);
        DeviceArray<float> dw(w);
        struct Out {
            DeviceArray<uint8_t> mem, tiles;
            cuda::MoeGrouping g;
            Out(int E, int begin, size_t P) : mem(cuda::moe_grouping_bytes(E, int64_t(P))),
                                              tiles(cuda::moe_act_tile_bytes(E, int64_t(P), 128)) {
                mem.poison();
                tiles.poison();
                g = cuda::moe_grouping_view(mem.ptr, E, int64_t(P));
                g.expert_begin = begin;
                cuda::moe_attach_act_tiles(g, tiles.ptr, 128);
            }
        } many(E, begin, P), one(E, begin, P);
        one.g.block_counts = nullptr;  // the one-CTA path
        cuda::moe_group(didx.ptr, dw.ptr, M, K, many.g, nullptr);
        cuda::moe_group(didx.ptr, dw.ptr, M, K, one.g, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto n_many = download_ints(many.g.n_active, 1), n_one = download_ints(one.g.n_active, 1);
        ASSERT_EQ(n_many, n_one);
        const auto counts = download_ints(many.g.expert_count, size_t(E));
        EXPECT_EQ(counts, download_ints(one.g.expert_count, size_t(E)));
        const auto off = download_ints(many.g.expert_offset, size_t(E + 1));
        EXPECT_EQ(off, download_ints(one.g.expert_offset, size_t(E + 1)));
        EXPECT_EQ(download_ints(many.g.active, size_t(n_many[0])), download_ints(one.g.active, size_t(n_one[0])));
        const auto nt = download_ints(many.g.n_tiles, 1);
        ASSERT_EQ(nt, download_ints(one.g.n_tiles, 1));
        const size_t listed = size_t(std::min(nt[0], many.g.act_tile_count));  // the list stops at its capacity
        EXPECT_EQ(download_ints(many.g.tile_expert, listed), download_ints(one.g.tile_expert, listed));
        EXPECT_EQ(download_ints(many.g.tile_col, listed), download_ints(one.g.tile_col, listed));
        int64_t in_range = 0;
        for (size_t p = 0; p < P; ++p) in_range += idx[p] >= begin && idx[p] < begin + E;
        ASSERT_EQ(int64_t(off[size_t(E)]), in_range);
        const size_t S = size_t(in_range);
        const auto tok_m = download_ints(many.g.slot_token, S), tok_o = download_ints(one.g.slot_token, S);
        const auto sw_m = download_ints(many.g.slot_weight, S), sw_o = download_ints(one.g.slot_weight, S);
        expect_same_slots_per_expert(E, off, tok_m, sw_m, tok_o, sw_o);
        const auto ps = download_ints(many.g.pair_slot, P);
        for (size_t p = 0; p < P; ++p) {
            const bool mine = idx[p] >= begin && idx[p] < begin + E;
            if (!mine) {
                EXPECT_EQ(ps[p], -1) << "pair " << p;
                continue;
            }
            ASSERT_GE(ps[p], off[size_t(idx[p] - begin)]) << "pair " << p;
            ASSERT_LT(ps[p], off[size_t(idx[p] - begin) + 1]) << "pair " << p;
            EXPECT_EQ(tok_m[size_t(ps[p])], int32_t(p / size_t(K))) << "pair " << p;
            float wv;
            std::memcpy(&wv, &sw_m[size_t(ps[p])], 4);
            EXPECT_EQ(wv, w[p]) << "pair " << p;
        }
    }
}

// Ties in the biased scores (logits and bias drawn from a few values, and scores of exactly zero where softplus
// underflows) are broken by the smaller expert index, as the CPU reference sorts: the selection's warp argmax keeps
// that order in the routing alone (moe_route) and in the one-launch routing + grouping of decode (1 and 16 tokens).
TEST(MoeRoute, TiedScoresPickTheSmallerExpertLikeCpu) {
    for (auto [M, E, K] : {std::tuple<int, int, int>{1, 256, 6}, {16, 256, 6}, {5, 64, 8}}) {
        const uint64_t seed = fresh_seed();
        std::ostringstream d;
        d << "M=" << M << " E=" << E << " K=" << K << " seed=" << seed;
        SCOPED_TRACE(d.str());
        std::mt19937_64 rng(seed);
        const float logit_values[] = {-200.f, -1.f, 0.5f, 2.f};  // -200: softplus underflows, the score is 0
        const float bias_values[] = {0.f, 0.25f, -0.25f};
        std::vector<float> logits(static_cast<size_t>(M * E)), bias(static_cast<size_t>(E));
        for (auto& v : logits) v = logit_values[rng() % 4];
        for (auto& v : bias) v = bias_values[rng() % 3];
        for (int e = 0; e < E; ++e) logits[size_t(e)] = -1.f;  // token 0: one score for all, ties by bias only
        DeviceArray<float> dl(logits), db(bias);
        DeviceArray<float> w(size_t(M * K)), w1(size_t(M * K));
        DeviceArray<int32_t> idx(size_t(M * K)), idx1(size_t(M * K));
        DeviceArray<uint8_t> mem(cuda::moe_grouping_bytes(E, M * K));
        w.poison();
        idx.poison();
        w1.poison();
        idx1.poison();
        const cuda::MoeGrouping g = cuda::moe_grouping_view(mem.ptr, E, M * K);
        cuda::moe_route(dl.ptr, M, E, E, db.ptr, nullptr, nullptr, 0, K, 1.5f, idx.ptr, w.ptr, nullptr);
        cuda::moe_route_and_group(dl.ptr, M, E, E, db.ptr, nullptr, nullptr, 0, K, 1.5f, idx1.ptr, w1.ptr, g, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto gi = idx.download(), gi1 = idx1.download();
        const auto gw = w.download(), gw1 = w1.download();
        for (int m = 0; m < M; ++m) {
            std::vector<int32_t> ri(static_cast<size_t>(K));
            std::vector<float> rw(static_cast<size_t>(K));
            cpu::router_select(&logits[size_t(m * E)], E, bias.data(), nullptr, K, 1.5f, ri.data(), rw.data());
            for (int j = 0; j < K; ++j) {
                const size_t i = size_t(m * K + j);
                EXPECT_EQ(gi[i], ri[size_t(j)]) << "moe_route token " << m << " pick " << j;
                EXPECT_EQ(gi1[i], ri[size_t(j)]) << "moe_route_and_group token " << m << " pick " << j;
                EXPECT_NEAR(gw[i], rw[size_t(j)], 1e-5f * std::fabs(rw[size_t(j)]) + 1e-7f);
                EXPECT_EQ(std::memcmp(&gw[i], &gw1[i], 4), 0) << "weights of the two paths, token " << m;
            }
        }
    }
}

// Routes M tokens over E experts on the device (biased top-K of `logits` with route_scale `scale`; bias may be
// empty) and groups the (token, expert) pairs: the setup every expert case starts from. The grouping carries the
// activation tiles of the wgmma expert kernels (moe_wgmma.cu) for K up to max_k and, where hidden and inter are
// given, the grouped expert GEMMs' workspace (grouped_experts).
struct DeviceRouting {
    DeviceArray<float> logits, bias, weight;
    DeviceArray<int32_t> idx;
    DeviceArray<uint8_t> mem, tiles, gemm_ws;
    cuda::MoeGrouping g;
    DeviceRouting(const std::vector<float>& lg, const std::vector<float>& b, int M, int E, int K, float scale,
                  int64_t max_k, int64_t hidden = 0, int64_t inter = 0)
        : logits(lg), bias(b), weight(size_t(M * K)), idx(size_t(M * K)), mem(cuda::moe_grouping_bytes(E, M * K)),
          tiles(cuda::moe_act_tile_bytes(E, M * K, max_k)),
          gemm_ws(hidden > 0 ? cuda::moe_gemm_workspace_bytes(int64_t(M) * K, hidden, inter) : 0) {
        g = cuda::moe_grouping_view(mem.ptr, E, M * K);
        tiles.poison();  // before attaching: attaching zeroes the split counters
        cuda::moe_attach_act_tiles(g, tiles.ptr, max_k);
        if (hidden > 0) cuda::moe_attach_gemm_workspace(g, gemm_ws.ptr, hidden, inter);
        cuda::moe_route(logits.ptr, M, E, E, b.empty() ? nullptr : bias.ptr, nullptr, nullptr, 0, K, scale, idx.ptr,
                        weight.ptr, nullptr);
        cuda::moe_group(idx.ptr, weight.ptr, M, K, g, nullptr);
    }
};

struct ExpertSet {
    std::vector<TestWeight> w1, w3, w2;
    std::unique_ptr<DeviceArray<const void*>> ptrs[6];
    std::unique_ptr<DeviceArray<uint8_t>> extras;  // FP4 on the 128 grid: the grouped GEMMs' references and maps
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
    s.table.scales_aligned16 = true;  // every scale is its own cudaMalloc
    if (kind == WeightKind::FP4_BLOCK32 && D % 128 == 0 && I % 128 == 0) {
        s.extras = std::make_unique<DeviceArray<uint8_t>>(cuda::moe_grouped_extras_bytes(s.table, E));
        cuda::moe_attach_grouped_extras(s.table, E, s.extras->ptr);
    }
    return s;
}

// The experts on the CPU, each dequantized once: w2 . q(round_bf16(swiglu_clamp(w1 . q(x), w3 . q(x)) * weight)),
// q = act_quant or identity; in release numerics w1 . q(x) and w3 . q(x) are rounded to bf16 first (the
// reference's expert GEMMs output bf16).
class CpuExperts {
public:
    explicit CpuExperts(const ExpertSet& s) : s_(s) {}
    std::vector<float> run(int e, const std::vector<float>& x, float weight, float limit, ActNumerics numerics) {
        const int64_t D = s_.table.hidden, I = s_.table.inter;
        const auto& w = dequantized(e);
        std::vector<float> xq = x;
        if (numerics == ActNumerics::FP8_BLOCK128) cpu::act_quant_fp8_block128(x.data(), D, xq.data());
        std::vector<float> gate(static_cast<size_t>(I)), up(static_cast<size_t>(I)), act(static_cast<size_t>(I)),
            y(static_cast<size_t>(D));
        cpu::linear_f32(xq.data(), 1, w[0].data(), I, D, gate.data(), nullptr);
        cpu::linear_f32(xq.data(), 1, w[1].data(), I, D, up.data(), nullptr);
        if (numerics == ActNumerics::FP8_BLOCK128) {
            for (auto& v : gate) v = round_bf16(v);
            for (auto& v : up) v = round_bf16(v);
        }
        cpu::swiglu_clamp(gate.data(), up.data(), I, limit, act.data());
        for (auto& v : act) v = round_bf16(v * weight);
        std::vector<float> aq = act;
        if (numerics == ActNumerics::FP8_BLOCK128) cpu::act_quant_fp8_block128(act.data(), I, aq.data());
        cpu::linear_f32(aq.data(), 1, w[2].data(), D, I, y.data(), nullptr);
        return y;
    }

private:
    const std::array<std::vector<float>, 3>& dequantized(int e) {
        auto it = cache_.find(e);
        if (it == cache_.end())
            it = cache_.emplace(e, std::array<std::vector<float>, 3>{s_.w1[size_t(e)].dequantized(),
                                                                     s_.w3[size_t(e)].dequantized(),
                                                                     s_.w2[size_t(e)].dequantized()})
                     .first;
        return it->second;
    }
    const ExpertSet& s_;
    std::map<int, std::array<std::vector<float>, 3>> cache_;
};

float half_bits_to_f32(uint16_t h) {  // f16 (finite) -> fp32
    const int e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 1024), e - 25);
    return (h >> 15) ? -v : v;
}

// Stored position of column p (0..127) inside its 128-column block of a prepared (MMA_F16) activation of `layout`:
// the FP8 layout swaps the middle pair of every 4 columns, the FP4 layout interleaves every 8 as 0,4,1,5,2,6,3,7
// (mma_core.cuh, prepared_pos).
int64_t stored_pos(WeightKind layout, int64_t p) {
    if (layout == WeightKind::FP8_BLOCK128) {
        const int64_t r = p & 3;
        return (p & ~int64_t(3)) | (r == 1 ? 2 : r == 2 ? 1 : r);
    }
    if (layout == WeightKind::FP4_BLOCK32) return (p & ~int64_t(7)) | (2 * (p & 3) + ((p >> 2) & 1));
    return p;
}

// An expert intermediate h on the host in natural column order, whatever its device format: each element is
// q x the power-of-two scale of its (row, 128-column block).
struct HostH {
    int64_t rows = 0, cols = 0, blocks = 0;
    std::vector<float> q;      // [rows, cols]: the stored value (an e4m3 value in release numerics)
    std::vector<float> scale;  // [rows, blocks]
    std::vector<float> values() const {
        std::vector<float> v(q.size());
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                v[size_t(r * cols + c)] = q[size_t(r * cols + c)] * scale[size_t(r * blocks + c / 128)];
        return v;
    }
};

// h as an up-projection described it: MMA_F16 (f16 values permuted for the layout, scales per row) or FP8_ROWS
// (e4m3 codes in rows in the activation's code order, scales transposed).
HostH download_h(const cuda::PreparedActivation& h, int64_t cols) {
    HostH o;
    o.rows = h.m;
    o.cols = cols;
    o.blocks = (cols + 127) / 128;
    o.q.resize(size_t(o.rows * cols));
    o.scale.resize(size_t(o.rows * o.blocks));
    if (h.format == cuda::ActFormat::FP8_ROWS) {
        std::vector<uint8_t> codes(size_t(o.rows * h.fp8.codes_ld));
        std::vector<float> scales(size_t(o.blocks * h.fp8.scales_ld));
        CUDA_CHECK(cudaMemcpy(codes.data(), h.fp8.codes, codes.size(), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(scales.data(), h.fp8.scales, scales.size() * 4, cudaMemcpyDeviceToHost));
        for (int64_t r = 0; r < o.rows; ++r) {
            for (int64_t c = 0; c < cols; ++c)
                o.q[size_t(r * cols + c)] =
                    e4m3_to_f32(codes[size_t(r * h.fp8.codes_ld + cuda::fp8_code_position(c, h.fp8.order))]);
            for (int64_t b = 0; b < o.blocks; ++b)
                o.scale[size_t(r * o.blocks + b)] = scales[size_t(b * h.fp8.scales_ld + r)];
        }
        return o;
    }
    const int64_t kb = h.k_pad / 128;
    std::vector<uint16_t> vals(size_t(o.rows * h.k_pad));
    std::vector<float> scales(size_t(o.rows * kb));
    CUDA_CHECK(cudaMemcpy(vals.data(), h.values, vals.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(scales.data(), h.scales, scales.size() * 4, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < o.rows; ++r) {
        for (int64_t c = 0; c < cols; ++c)
            o.q[size_t(r * cols + c)] =
                half_bits_to_f32(vals[size_t(r * h.k_pad + c / 128 * 128 + stored_pos(h.layout, c % 128))]);
        for (int64_t b = 0; b < o.blocks; ++b) o.scale[size_t(r * o.blocks + b)] = scales[size_t(r * kb + b)];
    }
    return o;
}

// Writes `src` (release numerics: every q an e4m3 value) into the FP8_ROWS storage `dst` describes, exactly: the
// same values and scales in the other format. Rows past src.rows and padding columns keep what the device held.
void upload_rows_h(const HostH& src, const cuda::PreparedActivation& dst) {
    ASSERT_EQ(dst.format, cuda::ActFormat::FP8_ROWS);
    ASSERT_GE(dst.fp8.m, src.rows);
    ASSERT_EQ(dst.fp8.k, src.cols);
    std::vector<uint8_t> codes(size_t(src.rows * dst.fp8.codes_ld));
    std::vector<float> scales(size_t(src.blocks * dst.fp8.scales_ld));
    CUDA_CHECK(cudaMemcpy(codes.data(), dst.fp8.codes, codes.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(scales.data(), dst.fp8.scales, scales.size() * 4, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < src.rows; ++r) {
        for (int64_t c = 0; c < src.cols; ++c) {
            const float q = src.q[size_t(r * src.cols + c)];
            const uint8_t code = f32_to_e4m3(q);
            ASSERT_EQ(e4m3_to_f32(code), q) << "h[" << r << ", " << c << "] is no e4m3 value";
            codes[size_t(r * dst.fp8.codes_ld + cuda::fp8_code_position(c, dst.fp8.order))] = code;
        }
        for (int64_t b = 0; b < src.blocks; ++b)
            scales[size_t(b * dst.fp8.scales_ld + r)] = src.scale[size_t(r * src.blocks + b)];
    }
    CUDA_CHECK(cudaMemcpy(dst.fp8.codes, codes.data(), codes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dst.fp8.scales, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
}

constexpr float kSwigluLimit = 10.f, kRouteScale = 1.5f;

// One case's MoE layer: routed FP4 experts and the shared FP8 expert, inputs, routing, device buffers and the CPU
// reference output.
struct MoeLayerData {
    const ExpertCase& c;
    ExpertSet routed, shared;
    std::vector<float> x, logits, bias, ref;
    std::unique_ptr<DeviceRouting> routing;
    DeviceArray<uint16_t> dx, pv4, pv8, hv, hsv, hv_base;
    DeviceArray<float> ps4, ps8, hs, hss, hs_base, y, ys, out;
    cuda::PreparedActivation p4, p8, r4, r8;

    MoeLayerData(const ExpertCase& c_, std::mt19937_64& rng)
        : c(c_), routed(make_experts(rng, c_.E, WeightKind::FP4_BLOCK32, c_.D, c_.I)),
          shared(make_experts(rng, 1, WeightKind::FP8_BLOCK128, c_.D, c_.I)),
          dx(size_t(c_.M * c_.D)), pv4(cuda::prepared_values_bytes(c_.M, c_.D) / 2),
          pv8(cuda::prepared_values_bytes(c_.M, c_.D) / 2),
          hv(cuda::prepared_values_bytes(int64_t(c_.M) * c_.top_k, c_.I) / 2),
          hsv(cuda::prepared_values_bytes(c_.M, c_.I) / 2),
          hv_base(cuda::prepared_values_bytes(int64_t(c_.M) * c_.top_k, c_.I) / 2),
          ps4(cuda::prepared_scales_bytes(c_.M, c_.D) / 4), ps8(cuda::prepared_scales_bytes(c_.M, c_.D) / 4),
          hs(cuda::prepared_scales_bytes(int64_t(c_.M) * c_.top_k, c_.I) / 4),
          hss(cuda::prepared_scales_bytes(c_.M, c_.I) / 4),
          hs_base(cuda::prepared_scales_bytes(int64_t(c_.M) * c_.top_k, c_.I) / 4),
          y(size_t(c_.M) * c_.top_k * size_t(c_.D)), ys(size_t(c_.M * c_.D)), out(size_t(c_.M * c_.D)) {
        const int M = c.M, E = c.E, K = c.top_k;
        const int64_t D = c.D;
        std::normal_distribution<float> nd(0.f, 1.f);
        x.resize(size_t(M * D));
        logits.resize(size_t(M * E));
        bias.resize(size_t(E));
        for (auto& v : x) v = round_bf16(nd(rng));
        for (auto& v : logits) v = nd(rng);
        for (auto& v : bias) v = 0.1f * nd(rng);
        if (c.pinned_groups) {
            // Expert 0: score sqrt(softplus(30)) - 1 ~ 4.5 for token 0 (above any other expert's), -1 for the rest
            // (below any other's: sqrt(softplus(l)) >= 0 plus a bias of 0.1 N(0, 1)); expert 1: at most ~-7.5.
            for (int m = 0; m < M; ++m) logits[size_t(m * E)] = m == 0 ? 30.f : -30.f;
            bias[0] = -1.f;
            bias[1] = -10.f;
        }
        std::vector<uint16_t> xb(x.size());
        for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
        dx.upload(xb);
        const int64_t max_k = std::max<int64_t>(128, (std::max(c.D, c.I) + 127) / 128 * 128);
        routing = std::make_unique<DeviceRouting>(logits, bias, M, E, K, kRouteScale, max_k, c.D, c.I);
        for (auto* a : {&pv4, &pv8}) a->poison();
        for (auto* a : {&ps4, &ps8}) a->poison();
        p4 = cuda::PreparedActivation{};
        p4.values = pv4.ptr;
        p4.scales = ps4.ptr;
        p8 = p4;
        p8.values = pv8.ptr;
        p8.scales = ps8.ptr;
        cuda::prepare_activation(dx.ptr, false, M, D, D, WeightKind::FP4_BLOCK32, c.numerics, p4, nullptr);
        cuda::prepare_activation(dx.ptr, false, M, D, D, WeightKind::FP8_BLOCK128, c.numerics, p8, nullptr);
        r4 = cuda::raw_activation(dx.ptr, M, D, D, WeightKind::FP4_BLOCK32, c.numerics);
        r8 = cuda::raw_activation(dx.ptr, M, D, D, WeightKind::FP8_BLOCK128, c.numerics);
        CUDA_CHECK(cudaDeviceSynchronize());
        ref = reference();
    }

    std::vector<float> reference() {
        const int M = c.M, E = c.E, K = c.top_k;
        const int64_t D = c.D;
        CpuExperts routed_cpu(routed), shared_cpu(shared);
        std::vector<float> r(size_t(M * D), 0.f);
        for (int m = 0; m < M; ++m) {
            std::vector<int32_t> picks(static_cast<size_t>(K));
            std::vector<float> weights(static_cast<size_t>(K));
            cpu::router_select(&logits[size_t(m * E)], E, bias.data(), nullptr, K, kRouteScale, picks.data(),
                               weights.data());
            const std::vector<float> xm(x.begin() + m * D, x.begin() + (m + 1) * D);
            for (int j = 0; j < K; ++j) {
                const auto yj = routed_cpu.run(picks[size_t(j)], xm, weights[size_t(j)], kSwigluLimit, c.numerics);
                for (int64_t d = 0; d < D; ++d) r[size_t(m * D + d)] += yj[size_t(d)];
            }
            const auto sh = shared_cpu.run(0, xm, 1.f, kSwigluLimit, c.numerics);
            for (int64_t d = 0; d < D; ++d) r[size_t(m * D + d)] += sh[size_t(d)];
        }
        return r;
    }

    const cuda::MoeGrouping& grouping() const { return routing->g; }
    int64_t pairs() const { return int64_t(c.M) * c.top_k; }

    // h (routed: M*top_k rows) / the shared expert's h (M rows) as the up-projection will describe them: what the
    // down-projection's ExpertCall sees.
    cuda::PreparedActivation described_h(bool routed_h, uint16_t* values, float* scales) const {
        cuda::PreparedActivation h;
        cuda::describe_prepared(h, routed_h ? WeightKind::FP4_BLOCK32 : WeightKind::FP8_BLOCK128, c.numerics,
                                routed_h ? pairs() : c.M, c.I);
        h.values = values;
        h.scales = scales;
        return h;
    }
    // The four expert projections of the layer, as the catalogue sees them (x: prepared or raw input).
    cuda::ExpertCall routed_up(const cuda::PreparedActivation& in) const {
        return {true, in, routed.table, &grouping(), c.M, c.top_k, c.numerics};
    }
    cuda::ExpertCall routed_down(const cuda::PreparedActivation& h) const {
        return {false, h, routed.table, &grouping(), c.M, c.top_k, h.numerics};
    }
    cuda::ExpertCall shared_up(const cuda::PreparedActivation& in) const {
        return {true, in, shared.table, nullptr, c.M, c.top_k, c.numerics};
    }
    cuda::ExpertCall shared_down(const cuda::PreparedActivation& h) const {
        return {false, h, shared.table, nullptr, c.M, c.top_k, h.numerics};
    }
};

struct LayerRun {
    std::vector<float> out;   // [M, D]
    std::string variant[4];   // routed up, routed down, shared up, shared down
    cuda::PreparedActivation h, hsh;  // the routed and shared h as their up-projections described them
};

// route -> group (done once) -> up -> down for the routed experts, dense up / down for the shared one, combine;
// every output poisoned first (h too, in the caller's storage and in the grouping's GEMM workspace).
// routed_in (optional): the routed up-projection's input instead of L's (a copy of it marked as packed ahead).
LayerRun run_layer(MoeLayerData& L, const KernelPolicy& policy, bool raw_routed, bool raw_shared,
                   const cuda::PreparedActivation* routed_in = nullptr) {
    const ExpertCase& c = L.c;
    for (auto* a : {&L.y, &L.ys, &L.out, &L.hs, &L.hss}) a->poison();
    for (auto* a : {&L.hv, &L.hsv}) a->poison();
    L.routing->gemm_ws.poison();
    LayerRun r;
    r.h.values = L.hv.ptr;
    r.h.scales = L.hs.ptr;
    r.hsh.values = L.hsv.ptr;
    r.hsh.scales = L.hss.ptr;
    const cuda::MoeGrouping& g = L.grouping();
    r.variant[0] = cuda::moe_expert_up(routed_in ? *routed_in : raw_routed ? L.r4 : L.p4, L.routed.table, &g, c.M, c.top_k, kSwigluLimit,
                                       c.numerics, r.h, nullptr, policy);
    r.variant[1] = cuda::moe_expert_down(r.h, L.routed.table, &g, c.M, c.top_k, L.y.ptr, nullptr, policy);
    r.variant[2] = cuda::moe_expert_up(raw_shared ? L.r8 : L.p8, L.shared.table, nullptr, c.M, c.top_k, kSwigluLimit,
                                       c.numerics, r.hsh, nullptr, policy);
    r.variant[3] = cuda::moe_expert_down(r.hsh, L.shared.table, nullptr, c.M, c.top_k, L.ys.ptr, nullptr, policy);
    cuda::moe_combine(L.y.ptr, g, L.ys.ptr, c.M, c.top_k, c.D, L.out.ptr, cuda::OutKind::F32, c.D, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    r.out = L.out.download();
    return r;
}

// The routed up- and down-projection stage by stage against a base variant on the same inputs: gemv_experts where
// it serves the case (1-16 tokens), else tile_experts. Up: each variant's h (from the input it takes: prepared, or
// raw bf16 rows) against the base's, both dequantized in natural column order (the formats differ: MMA_F16 permutes
// columns per weight layout, FP8_ROWS keeps codes in rows and scales transposed). Down: each variant from the base's
// h values, written into the format the variant takes (FP8_ROWS: the same e4m3 values and scales, exactly), against
// the base's y.
void compare_stages(MoeLayerData& L) {
    const ExpertCase& c = L.c;
    const cuda::ExpertVariant* base = nullptr;
    for (std::string_view name : {"gemv_experts", "tile_experts"})
        for (const cuda::ExpertVariant& v : cuda::expert_variants())
            if (!base && v.name == name && v.supports(L.routed_up(L.p4))) base = &v;
    if (base == nullptr) return;  // off the 128 grid: only the element-wise fallback, nothing to compare with
    const cuda::MoeGrouping& g = L.grouping();
    auto up = [&](std::string_view variant, bool raw, DeviceArray<uint16_t>& values, DeviceArray<float>& scales) {
        values.poison();
        scales.poison();
        L.routing->gemm_ws.poison();
        cuda::PreparedActivation h{};
        h.values = values.ptr;
        h.scales = scales.ptr;
        const std::string_view ran = cuda::moe_expert_up(raw ? L.r4 : L.p4, L.routed.table, &g, c.M, c.top_k,
                                                         kSwigluLimit, c.numerics, h, nullptr,
                                                         KernelPolicy::only(variant));
        EXPECT_EQ(ran, variant);
        CUDA_CHECK(cudaDeviceSynchronize());
        return h;
    };
    auto down = [&](std::string_view variant, const cuda::PreparedActivation& h) {
        L.y.poison();
        const std::string_view ran = cuda::moe_expert_down(h, L.routed.table, &g, c.M, c.top_k, L.y.ptr, nullptr,
                                                           KernelPolicy::only(variant));
        EXPECT_EQ(ran, variant);
        CUDA_CHECK(cudaDeviceSynchronize());
        return L.y.download();
    };
    const cuda::PreparedActivation hb = up(base->name, false, L.hv_base, L.hs_base);
    const HostH h_base = download_h(hb, c.I);
    const std::vector<float> h_base_values = h_base.values();
    const std::vector<float> y_base = down(base->name, hb);
    const std::string base_name(base->name);
    for (const cuda::ExpertVariant& v : cuda::expert_variants()) {
        if (v.name == base->name) continue;
        const std::string name(v.name);
        const bool prepared_in = v.supports(L.routed_up(L.p4));
        if (!prepared_in && !v.supports(L.routed_up(L.r4))) continue;
        const cuda::PreparedActivation h = up(v.name, !prepared_in, L.hv, L.hs);
        const double eh = rel_l2(download_h(h, c.I).values(), h_base_values);
        std::printf("  [stage] %s vs %s: h rel %.3e\n", name.c_str(), base_name.c_str(), eh);
        EXPECT_LE(eh, expert_h_threshold(v.name)) << name << " up vs " << base_name;
        // The down-projection's input: the base's h itself where the variant takes that format, else its own h
        // description with the base's values written in.
        cuda::PreparedActivation h_in = hb;
        if (h.format != hb.format) {
            ASSERT_EQ(c.numerics, ActNumerics::FP8_BLOCK128) << "only release h converts between formats exactly";
            upload_rows_h(h_base, h);
            if (::testing::Test::HasFatalFailure()) return;
            h_in = h;
            h_in.packed_tiles = nullptr;  // the values were rewritten: tiles packed from them are stale
        }
        if (!v.supports(L.routed_down(h_in))) continue;
        const double ey = rel_l2(down(v.name, h_in), y_base);
        std::printf("  [stage] %s vs %s: y (same h) rel %.3e\n", name.c_str(), base_name.c_str(), ey);
        EXPECT_LE(ey, expert_y_threshold(v.name)) << name << " down vs " << base_name;
    }
}

// The layer's bound: the largest of its projections' variants'.
double layer_threshold(const LayerRun& r) {
    double t = 0;
    for (const std::string& v : r.variant) t = std::max(t, expert_layer_threshold(v));
    return t;
}

// Expert counts of the case's grouping (host copy).
std::vector<int32_t> expert_counts(const MoeLayerData& L) {
    std::vector<int32_t> counts(static_cast<size_t>(L.c.E));
    CUDA_CHECK(cudaMemcpy(counts.data(), L.grouping().expert_count, counts.size() * 4, cudaMemcpyDeviceToHost));
    return counts;
}

void check_case(const ExpertCase& c, VariantCoverage& coverage) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed) + " (FS_TEST_SEED to reproduce)");
    std::mt19937_64 rng(seed);
    MoeLayerData L(c, rng);
    if (c.pinned_groups) {
        const std::vector<int32_t> counts = expert_counts(L);
        ASSERT_EQ(counts[0], 1) << "expert 0 should hold token 0 alone";
        ASSERT_EQ(counts[1], 0) << "expert 1 should be empty";
    }

    // The default policy, from prepared inputs and, where some variant is preferred for them, raw bf16 rows: each
    // projection runs what choose_experts() picks for its input (the down-projection: the h its up-projection wrote).
    const KernelPolicy defaults;
    const bool default_raw_routed = !chosen_expert_variant(L.routed_up(L.r4), defaults).empty();
    const bool default_raw_shared = !chosen_expert_variant(L.shared_up(L.r8), defaults).empty();
    for (const bool raw : {false, true}) {
        if (raw && !default_raw_routed && !default_raw_shared) continue;
        SCOPED_TRACE(raw ? "default policy, raw inputs" : "default policy, prepared inputs");
        const bool rr = raw && default_raw_routed, rs = raw && default_raw_shared;
        const LayerRun d = run_layer(L, defaults, rr, rs);
        const cuda::ExpertCall calls[4] = {L.routed_up(rr ? L.r4 : L.p4), L.routed_down(d.h),
                                           L.shared_up(rs ? L.r8 : L.p8), L.shared_down(d.hsh)};
        for (int i = 0; i < 4; ++i)
            EXPECT_EQ(d.variant[i], chosen_expert_variant(calls[i], defaults)) << "projection " << i;
        EXPECT_LE(rel_l2(d.out, L.ref), layer_threshold(d));
    }

    for (const cuda::ExpertVariant& v : cuda::expert_variants()) {
        // Each up-projection from the input the variant takes: prepared where it supports that, else raw bf16 rows
        // (grouped_experts gathers and quantizes them itself).
        const bool routed_raw = !v.supports(L.routed_up(L.p4)) && v.supports(L.routed_up(L.r4));
        const bool shared_raw = !v.supports(L.shared_up(L.p8)) && v.supports(L.shared_up(L.r8));
        const bool up_routed = v.supports(L.routed_up(routed_raw ? L.r4 : L.p4));
        const bool up_shared = v.supports(L.shared_up(shared_raw ? L.r8 : L.p8));
        // A variant that takes no up-projection may still take a down-projection: asked on an MMA_F16 h as the other
        // variants write it.
        const cuda::PreparedActivation h = L.described_h(true, L.hv.ptr, L.hs.ptr);
        const cuda::PreparedActivation hsh = L.described_h(false, L.hsv.ptr, L.hss.ptr);
        if (!up_routed && !up_shared && !v.supports(L.routed_down(h)) && !v.supports(L.shared_down(hsh))) continue;
        SCOPED_TRACE(std::string("variant ") + std::string(v.name) + (routed_raw ? " (raw routed input)" : ""));
        const KernelPolicy only = KernelPolicy::only(v.name);
        const LayerRun a = run_layer(L, only, routed_raw, shared_raw);
        // The down-projections as they ran: on the h their up-projection wrote.
        const bool supported[4] = {up_routed, v.supports(L.routed_down(a.h)), up_shared,
                                   v.supports(L.shared_down(a.hsh))};
        for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(a.variant[i] == v.name, supported[i]) << "projection " << i << " ran " << a.variant[i];
            coverage.ran(a.variant[i], i < 2 ? "routed" : "dense");
        }
        // An h is read back only by variants of its format (the others would misread it).
        for (const cuda::ExpertVariant& u : cuda::expert_variants())
            if (u.format != a.h.format) {
                EXPECT_FALSE(u.supports(L.routed_down(a.h))) << u.name << " took an h of another format";
            }
        if (routed_raw && up_routed) coverage.ran(v.name, "raw");
        if (c.pinned_groups && supported[1]) coverage.ran(v.name, "pinned-groups");
        EXPECT_LE(rel_l2(a.out, L.ref), layer_threshold(a));
        EXPECT_TRUE(bit_identical(run_layer(L, only, routed_raw, shared_raw).out, a.out)) << "rerun differs";
        // wgmma_experts' up-projection writes h both as the prepared activation and as the down-projection's packed
        // tiles (quantize_h_tiles_kernel); its down-projection from the prepared h alone (packing it itself) must
        // give the same bits.
        if (v.name == "wgmma_experts" && a.variant[0] == v.name && a.variant[1] == v.name) {
            ASSERT_NE(a.h.packed_tiles, nullptr) << "the up-projection did not mark h as packed";
            auto down_y = [&](const cuda::PreparedActivation& h) {
                L.y.poison();
                EXPECT_EQ(cuda::moe_expert_down(h, L.routed.table, &L.grouping(), c.M, c.top_k, L.y.ptr, nullptr, only),
                          v.name);
                CUDA_CHECK(cudaDeviceSynchronize());
                return L.y.download();
            };
            const std::vector<float> fused = down_y(a.h);
            cuda::PreparedActivation unpacked = a.h;
            unpacked.packed_tiles = nullptr;
            EXPECT_TRUE(bit_identical(down_y(unpacked), fused)) << "the down-projection's own packing differs";
            coverage.ran(v.name, "h tiles");
        }
        // One token: wgmma_experts' up-projection from the tile packed ahead of the routing, on another stream, into
        // tile memory poisoned first (moe_expert_up_pack_ahead; every expert then reads that one tile), must give the
        // same bits as from its own packing after the routing.
        if (v.name == "wgmma_experts" && supported[0] && c.M == 1 && !routed_raw) {
            const cuda::MoeGrouping& g = L.grouping();
            ASSERT_TRUE(cuda::moe_expert_up_packs_ahead(L.p4, L.routed.table, &g, c.M, c.top_k, c.numerics, only));
            KernelPolicy no_ahead = only;
            no_ahead.disabled.push_back("moe_pack_ahead");
            EXPECT_FALSE(cuda::moe_expert_up_packs_ahead(L.p4, L.routed.table, &g, c.M, c.top_k, c.numerics, no_ahead));
            CUDA_CHECK(cudaMemset(g.act_tiles, 0x7f, size_t(g.act_tile_count) * size_t(g.act_tile_k / 32) * 512));
            CUDA_CHECK(cudaMemset(g.act_tile_scales, 0xff, size_t(g.act_tile_count) * size_t(g.act_tile_k / 128) * 64));
            cudaStream_t side = nullptr;
            CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
            cuda::PreparedActivation ahead = L.p4;
            cuda::moe_expert_up_pack_ahead(ahead, L.routed.table, &g, c.M, c.top_k, c.numerics, side, only);
            CUDA_CHECK(cudaStreamSynchronize(side));
            CUDA_CHECK(cudaStreamDestroy(side));
            EXPECT_EQ(ahead.packed_tiles, g.act_tiles) << "the input was not marked as packed ahead";
            EXPECT_TRUE(bit_identical(run_layer(L, only, false, shared_raw, &ahead).out, a.out))
                << "the up-projection from the tile packed ahead differs from its own packing";
            coverage.ran(v.name, "packed ahead");
        }
        // wgmma_experts' kernels (warp-specialized with mbarrier releases, the default; the same with named-barrier
        // releases; round robin) compute each item the same way (the same products, sums and order) wherever it runs:
        // the same bits.
        if (v.name == "wgmma_experts" && supported[0]) {
            for (auto [kernel, order] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{2, 0}, std::pair{1, 1},
                                         std::pair{1, 2}, std::pair{2, 2}}) {
                if (kernel == only.moe_wgmma_specialized && order == only.moe_wgmma_ws_order) continue;
                KernelPolicy other = only;
                other.moe_wgmma_specialized = kernel;
                other.moe_wgmma_ws_order = order;
                EXPECT_TRUE(bit_identical(run_layer(L, other, routed_raw, shared_raw).out, a.out))
                    << "wgmma_experts' kernel " << kernel << " (item order " << order << ") differs from the default";
            }
            // The warp-specialized kernels take half items (one 64-row part each) where a call has few items: with
            // half items forced or disabled, the same bits, in the static and the dynamic item orders.
            for (int order : {0, 2}) {
                for (const char* form : {"half items", "whole items"}) {
                    KernelPolicy other = only;
                    other.moe_wgmma_ws_order = order;
                    if (form[0] == 'h') other.forced.push_back("moe_half_items");
                    if (form[0] == 'w') other.disabled.push_back("moe_half_items");
                    EXPECT_TRUE(bit_identical(run_layer(L, other, routed_raw, shared_raw).out, a.out))
                        << "wgmma_experts with " << form << " (item order " << order << ") differs from the default";
                }
            }
        }
        // Raw bf16 inputs where the variant takes the prepared ones too (prepared inside the kernels while staging)
        // must give the same bits.
        const bool raw_routed = !routed_raw && v.supports(L.routed_up(L.r4));
        const bool raw_shared = !shared_raw && v.supports(L.shared_up(L.r8));
        if (raw_routed || raw_shared) {
            const LayerRun r = run_layer(L, only, raw_routed, raw_shared);
            EXPECT_TRUE(bit_identical(r.out, a.out)) << "raw input differs from the prepared one";
            coverage.ran(v.name, "raw");
        }
    }
    compare_stages(L);
}

TEST(ExpertFamily, EveryCaseThroughEveryVariant) {
    VariantCoverage coverage("experts");
    coverage.declare_all(cuda::expert_variants());
    coverage.require("gemv_experts", "raw");
    coverage.require("gemv_experts", "dense");
    coverage.require("simt_experts", "dense");
    coverage.require("tile_experts", "dense");
    // The grouped GEMMs with a one-token and an empty expert group (their per-expert tiles and masks).
    coverage.require("grouped_experts", "pinned-groups");
    // One token's up-projection tile packed ahead of the routing (the V4-like one-token cases; not in --quick).
    if (!quick_mode() && cuda::wgmma_usable()) coverage.require("wgmma_experts", "packed ahead");
    const auto cases = expert_cases();
    std::printf("[ cases    ] %zu expert cases (%s)\n", cases.size(), quick_mode() ? "quick" : "test");
    for (const ExpertCase& c : cases) check_case(c, coverage);
    coverage.expect_complete();
}

// The down-projection on one-hot activations, through every variant that supports it: token t is 1.0 at column j_t
// only, so y[t][row] must be exactly w2[row][j_t] (dequantized): any permutation or scale mix-up in the fragment
// bookkeeping shows as a mismatch at a recognizable (lane, k-block, stage) position. The first mismatches are
// printed.
TEST(ExpertFamily, DownOneHotPicksWeightColumn) {
    const int M = 16, E = 1, K = 1;
    const int64_t D = 512, I = 1024;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    ExpertSet routed = make_experts(rng, E, WeightKind::FP4_BLOCK32, D, I);
    const auto w2 = routed.w2[0].dequantized();  // [D, I]
    std::vector<int64_t> col(M);
    std::vector<uint16_t> hb(size_t(M * I), f32_to_bf16(0.f));
    for (int t = 0; t < M; ++t) {
        col[size_t(t)] = (t * 73 + 5 + int64_t(rng() % 8)) % I;  // spread over lanes, k-blocks and both stages
        hb[size_t(t * I + col[size_t(t)])] = f32_to_bf16(1.f);
    }
    DeviceArray<uint16_t> dh(hb);
    const DeviceRouting routing(std::vector<float>(size_t(M * E), 1.f), {}, M, E, K, 1.f, I);
    const cuda::MoeGrouping& g = routing.g;
    DeviceArray<uint16_t> hv(cuda::prepared_values_bytes(M, I) / 2);
    DeviceArray<float> hs(cuda::prepared_scales_bytes(M, I) / 4), y(size_t(M * D));
    cuda::PreparedActivation h{};
    h.values = hv.ptr;
    h.scales = hs.ptr;
    cuda::prepare_activation(dh.ptr, false, M, I, I, WeightKind::FP4_BLOCK32, ActNumerics::FP8_BLOCK128, h, nullptr);
    std::vector<int32_t> slots(static_cast<size_t>(M));
    CUDA_CHECK(cudaMemcpy(slots.data(), g.slot_token, size_t(M) * 4, cudaMemcpyDeviceToHost));
    const cuda::ExpertCall call{false, h, routed.table, &g, M, K, h.numerics};
    int ran = 0;
    for (const cuda::ExpertVariant& v : cuda::expert_variants()) {
        if (!v.supports(call)) continue;
        ++ran;
        SCOPED_TRACE(std::string("variant ") + std::string(v.name));
        y.poison();
        EXPECT_EQ(cuda::moe_expert_down(h, routed.table, &g, M, K, y.ptr, nullptr, KernelPolicy::only(v.name)), v.name);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto gy = y.download();
        int bad = 0;
        for (int s = 0; s < M; ++s) {
            const int t = slots[size_t(s)];
            for (int64_t r = 0; r < D; ++r) {
                const float want = w2[size_t(r * I + col[size_t(t)])], got = gy[size_t(s * D + r)];
                if (got != want && ++bad <= 12)
                    std::printf("  %s slot %d token %d col %lld row %lld: got %g want %g\n", std::string(v.name).c_str(),
                                s, t, (long long)col[size_t(t)], (long long)r, got, want);
            }
        }
        EXPECT_EQ(bad, 0);
    }
    EXPECT_GT(ran, 0);
}

// What choose_experts() takes with the default policy (docs/perf.md, kernel choice) for a V4-Flash-like layer: the
// GEMV at 1-7 tokens; from 8 to 16 tokens the wgmma experts where they exist, else the bulk-copy experts on sm_90+;
// routed experts past 16 tokens on the wgmma experts or the GEMV, then the tile experts from a prepared input or
// the grouped GEMMs from raw input; the element-wise fallback off the 128 grid. The calls point at fake, aligned
// addresses: choosing touches no memory.
TEST(ExpertChoice, DefaultRules) {
    const bool wgmma = cuda::wgmma_usable();
    const bool sm90 = cuda::current_arch().cc >= 90;
    auto fake = [](int i) { return reinterpret_cast<void*>(uintptr_t(i) << 20); };
    cuda::ExpertTable t;
    t.kind = WeightKind::FP4_BLOCK32;
    t.scale_kind = ScaleKind::E8M0;
    t.hidden = 4096;
    t.inter = 2048;
    const void* const* table_ptr = static_cast<const void* const*>(fake(1));
    t.w1 = t.w1_scale = t.w3 = t.w3_scale = t.w2 = t.w2_scale = table_ptr;
    t.scales_aligned16 = true;
    t.row_ref = static_cast<const uint8_t*>(fake(14));
    t.w_maps = fake(15);
    auto grouping = [&](int64_t M, bool tiles) {
        cuda::MoeGrouping g;
        g.E = 256;
        g.max_pairs = M * 6;
        if (tiles) {
            g.act_tiles = static_cast<uint8_t*>(fake(2));
            g.act_tile_scales = static_cast<float*>(fake(3));
            g.act_tile_k = 4096;
            g.act_tile_count = int(cuda::moe_act_tiles_needed(g.E, std::min(g.max_pairs, cuda::kActTileMaxPairs)));
            g.tile_expert = g.tile_col = g.n_tiles = static_cast<int32_t*>(fake(13));
            g.split_partials = static_cast<float*>(fake(4));
            g.split_counters = static_cast<uint32_t*>(fake(5));
            g.split_slots = 4096;
        }
        return g;
    };
    // The up-projection's input of M tokens for the experts of `tt`, prepared or raw.
    auto input = [&](int64_t M, ActNumerics num, bool raw, const cuda::ExpertTable& tt) {
        cuda::PreparedActivation x;
        cuda::describe_prepared(x, tt.kind, num, M, tt.hidden);
        x.values = static_cast<uint16_t*>(fake(6));
        x.scales = static_cast<float*>(fake(7));
        if (raw) {
            x.raw = true;
            x.raw_ld = tt.hidden;
        }
        return x;
    };
    auto choose = [&](int64_t M, ActNumerics num, const KernelPolicy& policy, bool routed = true, bool tiles = true,
                      bool raw = false, const cuda::ExpertTable* table = nullptr) {
        const cuda::ExpertTable& tt = table ? *table : t;
        const cuda::PreparedActivation x = input(M, num, raw, tt);
        const cuda::MoeGrouping g = grouping(M, tiles);
        const cuda::ExpertCall up{true, x, tt, routed ? &g : nullptr, M, 6, num};
        const std::string up_name(cuda::choose_experts(up, policy).name);
        if (!raw) {  // the down-projection of a prepared h chooses by the same rules; "up/down" where they differ
            cuda::PreparedActivation h;
            cuda::describe_prepared(h, tt.kind, num, routed ? M * 6 : M, tt.inter);
            h.values = x.values;
            h.scales = x.scales;
            const cuda::ExpertCall down{false, h, tt, routed ? &g : nullptr, M, 6, num};
            const std::string down_name(cuda::choose_experts(down, policy).name);
            if (down_name != up_name) return up_name + "/" + down_name;
        }
        return up_name;
    };
    const auto R = ActNumerics::FP8_BLOCK128;
    const KernelPolicy def;
    const std::string fast = wgmma ? "wgmma_experts" : sm90 ? "bulk_experts" : "gemv_experts";
    // One token: the wgmma experts where they exist (from moe_wgmma_min_tokens, 1), else simt_experts for FP8 experts
    // and FP4 down-projections, gemv_experts for FP4 up-projections (measured: docs/perf.md, kernel choice); raw inputs
    // only gemv_experts.
    cuda::ExpertTable fp8 = t;
    fp8.kind = WeightKind::FP8_BLOCK128;
    fp8.scale_kind = cuda::ScaleKind::F32;
    EXPECT_EQ(choose(1, R, def), wgmma ? "wgmma_experts" : "gemv_experts/simt_experts");
    KernelPolicy two_tokens;  // the floor before the TMA stages
    two_tokens.moe_wgmma_min_tokens = 2;
    EXPECT_EQ(choose(1, R, two_tokens), "gemv_experts/simt_experts");
    EXPECT_EQ(choose(1, R, def, /*routed=*/false), "gemv_experts/simt_experts");
    EXPECT_EQ(choose(1, R, def, false, true, false, &fp8), "simt_experts");  // the shared expert of V4-Flash
    EXPECT_EQ(choose(1, R, def, true, true, /*raw=*/true), "gemv_experts");
    // 2-7 tokens: the wgmma experts where they exist, else gemv_experts (bulk_experts starts at 8).
    const std::string few = wgmma ? "wgmma_experts" : "gemv_experts";
    EXPECT_EQ(choose(2, R, def), few);
    EXPECT_EQ(choose(4, R, def), few);
    EXPECT_EQ(choose(7, R, def), few);
    EXPECT_EQ(choose(8, R, def), fast);
    EXPECT_EQ(choose(16, R, def), fast);
    // Routed experts of decode passes past 16 tokens: the wgmma experts (several 16-token tiles per expert) up to
    // moe_wgmma_max_tokens (256), else gemv_experts up to routed_gemv_max_tokens (128), each reading an active
    // expert's weights once per step; the dense (shared) expert stops at 16.
    const std::string wide = wgmma ? "wgmma_experts" : "gemv_experts";
    EXPECT_EQ(choose(17, R, def), wide);
    EXPECT_EQ(choose(64, R, def), wide);
    EXPECT_EQ(choose(128, R, def), wide);
    EXPECT_EQ(choose(256, R, def), wgmma ? "wgmma_experts" : "tile_experts");
    EXPECT_EQ(choose(257, R, def), "tile_experts");
    EXPECT_EQ(choose(17, R, def, /*routed=*/false), "tile_experts");
    // The rules before the routed GEMVs went past 16 tokens.
    KernelPolicy short_routed;
    short_routed.routed_gemv_max_tokens = 16;
    short_routed.moe_wgmma_max_tokens = 16;
    EXPECT_EQ(choose(17, R, short_routed), "tile_experts");
    EXPECT_EQ(choose(4, R, short_routed), few);
    EXPECT_EQ(choose(16, R, short_routed), fast);
    KernelPolicy no_wgmma;
    no_wgmma.disabled = {"wgmma_experts"};
    EXPECT_EQ(choose(8, R, no_wgmma), sm90 ? "bulk_experts" : "gemv_experts");
    EXPECT_EQ(choose(8, R, def, true, /*tiles=*/false), sm90 ? "bulk_experts" : "gemv_experts");
    KernelPolicy late_wgmma;  // a floor of 8 tokens
    late_wgmma.moe_wgmma_min_tokens = 8;
    EXPECT_EQ(choose(2, R, late_wgmma), "gemv_experts");
    EXPECT_EQ(choose(7, R, late_wgmma), "gemv_experts");
    EXPECT_EQ(choose(8, R, late_wgmma), fast);
    EXPECT_EQ(choose(8, ActNumerics::EXACT, def), "gemv_experts");  // the streaming experts need release numerics
    EXPECT_EQ(choose(8, R, def, /*routed=*/false), "gemv_experts");  // the shared expert (dense)
    EXPECT_EQ(choose(4, R, def, true, true, /*raw=*/true), "gemv_experts");
    KernelPolicy no_gemv;
    no_gemv.gemv_max_tokens = 0;
    no_gemv.routed_gemv_max_tokens = 0;
    EXPECT_EQ(choose(1, R, no_gemv), wgmma ? "wgmma_experts" : "tile_experts");
    EXPECT_EQ(choose(1, R, KernelPolicy::only("tile_experts")), "tile_experts");
    EXPECT_EQ(choose(1, ActNumerics::EXACT, KernelPolicy::only("bulk_experts")), "gemv_experts/simt_experts");
    cuda::ExpertTable odd = t;
    odd.hidden = 160;
    odd.inter = 96;
    EXPECT_EQ(choose(5, ActNumerics::EXACT, def, true, false, false, &odd), "generic_experts");
    EXPECT_EQ(choose(17, R, def, true, true, /*raw=*/true), "gemv_experts");
    EXPECT_THROW(choose(257, R, def, true, true, /*raw=*/true), Error);  // raw, past every GEMV's range
    EXPECT_THROW(choose(17, R, def, false, true, /*raw=*/true), Error);   // raw dense, past the GEMV's 16 tokens
    // grouped_experts: raw bf16 rows of routed experts in release numerics, from grouped_experts_min_tokens (32)
    // tokens past gemv_experts' routed range (the `short_routed` policy ends it at 16), where the grouping carries
    // the GEMM workspace; its h is FP8_ROWS over that workspace, which only it reads back. Below the floor (and
    // above the GEMVs' range) a raw input has no variant: callers prepare.
    auto choose_grouped = [&](int64_t M, const KernelPolicy& policy, bool raw, bool gemm_ws,
                              ActNumerics num = ActNumerics::FP8_BLOCK128) {
        const cuda::PreparedActivation x = input(M, num, raw, t);
        cuda::MoeGrouping g = grouping(M, true);
        if (gemm_ws) {
            g.gemm_x = cuda::fp8_activation_view(fake(8), fake(9), M * 6, t.hidden);
            g.gemm_h = cuda::fp8_activation_view(fake(10), fake(11), M * 6, t.inter);
        }
        const std::string up = chosen_expert_variant(cuda::ExpertCall{true, x, t, &g, M, 6, num}, policy);
        if (up == "grouped_experts") {  // its h, as its up-projection describes it, goes back to it alone
            cuda::PreparedActivation h;
            cuda::describe_prepared(h, t.kind, num, M * 6, t.inter);
            h.format = cuda::ActFormat::FP8_ROWS;
            h.fp8 = g.gemm_h;
            h.fp8.order = cuda::moe_gemm_code_order();  // the order its up-projection writes on this device
            h.values = reinterpret_cast<uint16_t*>(g.gemm_h.codes);
            h.scales = g.gemm_h.scales;
            EXPECT_EQ(chosen_expert_variant(cuda::ExpertCall{false, h, t, &g, M, 6, num}, policy), "grouped_experts")
                << "M=" << M;
            cuda::PreparedActivation reordered = h;  // the same storage in the other code order: not its input
            reordered.fp8.order = h.fp8.order == cuda::Fp8CodeOrder::NATURAL ? cuda::Fp8CodeOrder::GROUP_INTERLEAVED
                                                                             : cuda::Fp8CodeOrder::NATURAL;
            EXPECT_NE(chosen_expert_variant(cuda::ExpertCall{false, reordered, t, &g, M, 6, num}, policy),
                      "grouped_experts")
                << "M=" << M;
            cuda::PreparedActivation elsewhere = h;  // an FP8_ROWS h outside the workspace: no variant reads it
            elsewhere.fp8.codes = static_cast<uint8_t*>(fake(12));
            EXPECT_EQ(chosen_expert_variant(cuda::ExpertCall{false, elsewhere, t, &g, M, 6, num}, policy), "")
                << "M=" << M;
        }
        return up;
    };
    EXPECT_EQ(choose_grouped(32, def, true, true), "gemv_experts");  // decode passes: the routed GEMV first
    EXPECT_EQ(choose_grouped(128, def, true, true), "gemv_experts");
    EXPECT_EQ(choose_grouped(129, def, true, true), "grouped_experts");
    EXPECT_EQ(choose_grouped(32, short_routed, true, true), "grouped_experts");
    EXPECT_EQ(choose_grouped(4096, def, true, true), "grouped_experts");
    EXPECT_EQ(choose_grouped(31, short_routed, true, true), "");
    EXPECT_EQ(choose_grouped(4096, def, true, /*gemm_ws=*/false), "");
    EXPECT_EQ(choose_grouped(4096, def, /*raw=*/false, true), "tile_experts");
    EXPECT_EQ(choose_grouped(4096, def, true, true, ActNumerics::EXACT), "");
    KernelPolicy late_grouped = short_routed;
    late_grouped.grouped_experts_min_tokens = 64;
    EXPECT_EQ(choose_grouped(32, late_grouped, true, true), "");
    EXPECT_EQ(choose_grouped(64, late_grouped, true, true), "grouped_experts");
    KernelPolicy no_grouped;
    no_grouped.disabled = {"grouped_experts"};
    EXPECT_EQ(choose_grouped(4096, no_grouped, true, true), "");
    EXPECT_EQ(choose_grouped(8, KernelPolicy::only("grouped_experts"), true, true), "grouped_experts");
    // What the backend asks before preparing the routed experts' input: does the choice over both forms take the
    // raw rows? Only where grouped_experts wins; the GEMV and the wgmma experts get the prepared input.
    auto takes_raw = [&](int64_t M, const KernelPolicy& policy) {
        cuda::MoeGrouping g = grouping(M, true);
        g.gemm_x = cuda::fp8_activation_view(fake(8), fake(9), M * 6, t.hidden);
        g.gemm_h = cuda::fp8_activation_view(fake(10), fake(11), M * 6, t.inter);
        return cuda::moe_expert_up_takes_raw(input(M, R, true, t), input(M, R, false, t), t, &g, M, 6, R, policy);
    };
    EXPECT_FALSE(takes_raw(1, def));
    EXPECT_FALSE(takes_raw(16, def));
    EXPECT_FALSE(takes_raw(128, def));
    EXPECT_EQ(takes_raw(256, def), !wgmma);
    EXPECT_TRUE(takes_raw(512, def));
    EXPECT_TRUE(takes_raw(16, def.for_pass(/*prefill=*/true)));  // prefill passes: the grouped GEMMs always
    EXPECT_FALSE(takes_raw(512, no_grouped));
    for (const cuda::ExpertVariant& v : cuda::expert_variants()) EXPECT_NO_THROW(archs_available(v.archs)) << v.name;
}

// Bad arguments of the expert ops are refused with an error naming what is wrong, before any launch.
TEST(ExpertArgs, BadArgumentsThrowNamedErrors) {
    std::mt19937_64 rng(fresh_seed());
    const int M = 2, E = 2, K = 1;
    const int64_t D = 256, I = 256;
    ExpertSet routed = make_experts(rng, E, WeightKind::FP4_BLOCK32, D, I);
    const DeviceRouting routing(std::vector<float>(size_t(M * E), 1.f), {}, M, E, K, 1.f, 256);
    DeviceArray<uint16_t> x(random_bf16(rng, size_t(M * D), 1.f)), pv(cuda::prepared_values_bytes(M, D) / 2),
        hv(cuda::prepared_values_bytes(M * K, I) / 2);
    DeviceArray<float> ps(cuda::prepared_scales_bytes(M, D) / 4), hs(cuda::prepared_scales_bytes(M * K, I) / 4),
        y(size_t(M * K * D)), out(size_t(M * D));
    cuda::PreparedActivation p{}, h{};
    p.values = pv.ptr;
    p.scales = ps.ptr;
    h.values = hv.ptr;
    h.scales = hs.ptr;
    const cuda::MoeGrouping& g = routing.g;
    // an activation prepared for FP8 weights given to FP4 experts
    cuda::prepare_activation(x.ptr, false, M, D, D, WeightKind::FP8_BLOCK128, ActNumerics::EXACT, p, nullptr);
    expect_named_error([&] { cuda::moe_expert_up(p, routed.table, &g, M, K, 10.f, ActNumerics::EXACT, h, nullptr); },
                 "not prepared for these experts");
    cuda::prepare_activation(x.ptr, false, M, D, D, WeightKind::FP4_BLOCK32, ActNumerics::EXACT, p, nullptr);
    cuda::PreparedActivation no_storage{};
    expect_named_error([&] { cuda::moe_expert_up(p, routed.table, &g, M, K, 10.f, ActNumerics::EXACT, no_storage, nullptr); },
                 "output storage is null");
    cuda::ExpertTable odd = routed.table;
    odd.hidden = 100;
    expect_named_error([&] { cuda::moe_expert_up(p, odd, &g, M, K, 10.f, ActNumerics::EXACT, h, nullptr); }, "multiples of 32");
    cuda::ExpertTable unscaled = routed.table;
    unscaled.scale_kind = ScaleKind::NONE;
    expect_named_error([&] { cuda::moe_expert_up(p, unscaled, &g, M, K, 10.f, ActNumerics::EXACT, h, nullptr); }, "scales");
    // a tile packed ahead of the routing for two tokens (one token only), or without a grouping
    EXPECT_FALSE(cuda::moe_expert_up_packs_ahead(p, routed.table, &g, M, K, ActNumerics::EXACT));
    expect_named_error([&] { cuda::moe_expert_up_pack_ahead(p, routed.table, &g, M, K, ActNumerics::EXACT, nullptr); },
                       "moe_expert_up_pack_ahead: the call (M = 2)");
    expect_named_error([&] { cuda::moe_expert_up_pack_ahead(p, routed.table, nullptr, 1, K, ActNumerics::EXACT, nullptr); },
                       "does not take a tile packed ahead");
    // an intermediate of the wrong width given to the down-projection
    cuda::PreparedActivation wide = h;
    cuda::describe_prepared(wide, WeightKind::FP4_BLOCK32, ActNumerics::EXACT, M * K, I + 128);
    expect_named_error([&] { cuda::moe_expert_down(wide, routed.table, &g, M, K, y.ptr, nullptr); }, "does not match");
    expect_named_error([&] { cuda::moe_combine(y.ptr, g, nullptr, M, K, D, out.ptr, cuda::OutKind::F32, D - 1, nullptr); },
                 "stride");
    // the grouped GEMMs' row references and weight maps: other formats, unaligned storage, a table without them
    DeviceArray<uint8_t> extras(cuda::moe_grouped_extras_bytes(routed.table, E) + 64);
    cuda::ExpertTable fp8 = routed.table;
    fp8.kind = WeightKind::FP8_BLOCK128;
    expect_named_error([&] { cuda::moe_row_references(fp8, E, extras.ptr, nullptr); }, "not FP4 with E8M0");
    expect_named_error([&] { cuda::moe_weight_maps(routed.table, E, extras.ptr + 1); }, "unaligned output");
    cuda::ExpertTable narrow = routed.table;
    narrow.hidden = 96;
    expect_named_error([&] { cuda::moe_weight_maps(narrow, E, extras.ptr); }, "multiples of 128");
    cuda::ExpertTable bare = routed.table;
    expect_named_error([&] { cuda::moe_attach_grouped_extras(bare, E, extras.ptr + 16); }, "not 64-byte aligned");
    bare.row_ref = nullptr;
    bare.w_maps = nullptr;
    expect_named_error(
        [&] { cuda::moe_gemm_up(x.ptr, D, M, K, bare, g, 10.f, cuda::moe_gemm_workspace_of(g), nullptr); },
        "missing: moe_attach_grouped_extras");
}

// moe_swiglu_prepare (the shared expert's SwiGLU when w1 / w3 run as linears) against the CPU: h =
// act_quant(round_bf16(silu(min(g, limit)) * clamp(u))) read back through the prepared layout (FP8: stored
// x0 x2 x1 x3 per group of four). Both numerics, a row stride wider than inter, inter not a multiple of 128
// (a partial last block), values large enough to hit the clamp. Threshold 1e-3: the GPU's expf may differ from the
// CPU's in the last bit and move a bf16 / e4m3 rounding for a few elements.
TEST(MoeSwiglu, PrepareMatchesCpu) {
    const int64_t M = 5, inter = 600, ld = 704;
    const float limit = 7.f;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 4.f);
    std::vector<uint16_t> gb(size_t(M * ld)), ub(size_t(M * ld));
    for (auto& v : gb) v = f32_to_bf16(nd(rng));
    for (auto& v : ub) v = f32_to_bf16(nd(rng));
    DeviceArray<uint16_t> g(gb), u(ub);
    for (auto numerics : {ActNumerics::EXACT, ActNumerics::FP8_BLOCK128}) {
        DeviceArray<uint16_t> hv(cuda::prepared_values_bytes(M, inter) / 2);
        DeviceArray<float> hs(cuda::prepared_scales_bytes(M, inter) / 4);
        hv.poison();
        hs.poison();
        cuda::PreparedActivation h{};
        h.values = hv.ptr;
        h.scales = hs.ptr;
        cuda::moe_swiglu_prepare(g.ptr, u.ptr, ld, M, inter, limit, WeightKind::FP8_BLOCK128, numerics, h, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        ASSERT_EQ(h.k_pad, 640);
        const auto vals = hv.download();
        const auto scs = hs.download();
        std::vector<float> got, want;
        for (int64_t r = 0; r < M; ++r) {
            std::vector<float> act(static_cast<size_t>(inter)), q(static_cast<size_t>(inter));
            for (int64_t c = 0; c < inter; ++c) {
                const float gate = std::min(bf16_to_f32(gb[size_t(r * ld + c)]), limit);
                const float up = std::min(std::max(bf16_to_f32(ub[size_t(r * ld + c)]), -limit), limit);
                act[size_t(c)] = round_bf16(gate / (1.f + std::exp(-gate)) * up);
            }
            q = act;
            if (numerics == ActNumerics::FP8_BLOCK128) cpu::act_quant_fp8_block128(act.data(), inter, q.data());
            for (int64_t c = 0; c < inter; ++c) {
                const int64_t p = c % 4, stored = (c & ~int64_t(3)) | (p == 1 ? 2 : p == 2 ? 1 : p);
                got.push_back(half_bits_to_f32(vals[size_t(r * h.k_pad + stored)]) * scs[size_t(r * 5 + c / 128)]);
                want.push_back(q[size_t(c)]);
            }
        }
        EXPECT_LE(rel_l2(got, want), 1e-3) << "numerics=" << int(numerics);
    }
}

}  // namespace
}  // namespace flashseek::test
