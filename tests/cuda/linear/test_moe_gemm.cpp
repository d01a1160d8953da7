// Kernel-level cases of the grouped FP4 expert GEMMs (cuda/moe/moe_gemm.cuh) on every path this device runs
// (mma.sync ones on sm_90 too), for what the expert family's harness (test_moe.cpp: whole layers through
// grouped_experts, the catalogue row of these GEMMs, on the automatic path) cannot express: against the CPU release
// numerics of a routed expert (cpu::act_quant_fp8_block128, cpu::dequantize_linear, fp64 products rounded to bf16
// like the reference's expert GEMM outputs, cpu::swiglu_clamp, the routing weight, bf16 h and its act_quant, which
// the up-projection writes), h_q and the down GEMM alone checked separately. Groups come from the GPU's own
// moe_group on routings that give one expert a single token, leave others empty and fill the rest unevenly (partial
// 128-row tiles, several tiles per expert), or start groups at every row residue (the TMA scale boxes), on the
// sm_90a kernel with each slot tile width (32, 64, 128 rows); slot rows independent of the batch and of the tile
// width, bit for bit; the scale folding at its limit. Random data with fresh seeds; the workspace and y are
// poisoned before the run and every used slot row must be written. The bf16 output (moe_gemm_down_bf16) is the fp32
// output rounded, bit for bit, in every case of check_against_cpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include "cpu/ops.h"
#include "cuda/moe/moe_gemm.cuh"
#include "harness.h"
#include "harness_mode.h"
#include "named_error.h"
#include "weights.h"

namespace flashseek::test {
namespace {

using cuda::ScaleKind;
using cuda::WeightKind;

struct Experts {
    std::vector<TestWeight> w1, w3, w2;
    std::vector<std::vector<float>> f1, f3, f2;  // dequantized
    std::unique_ptr<DeviceArray<const void*>> d_ptrs[6];  // w1, w1 scales, w3, w3 scales, w2, w2 scales
    std::unique_ptr<DeviceArray<uint8_t>> refs;            // the table's row references
    std::unique_ptr<DeviceArray<uint8_t>> maps;            // and weight maps
    cuda::ExpertTable table;
    // (Re)computes the row references from the scales on the device (after a test rewrote them), and the maps.
    void update_references() {
        const int E = int(w1.size());
        if (!refs) refs = std::make_unique<DeviceArray<uint8_t>>(cuda::moe_row_references_bytes(table, E));
        cuda::moe_row_references(table, E, refs->ptr, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        table.row_ref = refs->ptr;
        if (table.hidden % 128 == 0 && table.inter % 128 == 0) {
            if (!maps) maps = std::make_unique<DeviceArray<uint8_t>>(cuda::moe_weight_maps_bytes(E));
            cuda::moe_weight_maps(table, E, maps->ptr);
            table.w_maps = maps->ptr;
        }
    }
};

std::unique_ptr<Experts> make_experts(std::mt19937_64& rng, int E, int64_t hidden, int64_t inter) {
    auto x = std::make_unique<Experts>();
    std::vector<const void*> p[6];
    for (int e = 0; e < E; ++e) {
        x->w1.push_back(make_weight(rng, WeightKind::FP4_BLOCK32, ScaleKind::E8M0, inter, hidden));
        x->w3.push_back(make_weight(rng, WeightKind::FP4_BLOCK32, ScaleKind::E8M0, inter, hidden));
        x->w2.push_back(make_weight(rng, WeightKind::FP4_BLOCK32, ScaleKind::E8M0, hidden, inter));
    }
    for (int e = 0; e < E; ++e) {
        x->f1.push_back(x->w1[size_t(e)].dequantized());
        x->f3.push_back(x->w3[size_t(e)].dequantized());
        x->f2.push_back(x->w2[size_t(e)].dequantized());
        const TestWeight* ws[3] = {&x->w1[size_t(e)], &x->w3[size_t(e)], &x->w2[size_t(e)]};
        for (int m = 0; m < 3; ++m) {
            p[2 * m].push_back(ws[m]->w_dev->ptr);
            p[2 * m + 1].push_back(ws[m]->s_dev->ptr);
        }
    }
    for (int i = 0; i < 6; ++i) x->d_ptrs[i] = std::make_unique<DeviceArray<const void*>>(p[i]);
    cuda::ExpertTable& t = x->table;
    t.kind = WeightKind::FP4_BLOCK32;
    t.scale_kind = ScaleKind::E8M0;
    t.hidden = hidden;
    t.inter = inter;
    t.w1 = x->d_ptrs[0]->ptr;
    t.w1_scale = x->d_ptrs[1]->ptr;
    t.w3 = x->d_ptrs[2]->ptr;
    t.w3_scale = x->d_ptrs[3]->ptr;
    t.w2 = x->d_ptrs[4]->ptr;
    t.w2_scale = x->d_ptrs[5]->ptr;
    x->update_references();
    return x;
}

// row . w[o] for every o, fp64 sums of the fp32 operands.
void product_row(const float* x, const std::vector<float>& w, int64_t out, int64_t in, double* y) {
    for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        const float* wr = &w[size_t(o * in)];
        for (int64_t i = 0; i < in; ++i) s += double(x[i]) * double(wr[i]);
        y[o] = s;
    }
}

std::vector<cuda::GemmPath> moe_paths() {
    std::vector<cuda::GemmPath> r;
    for (auto p : {cuda::GemmPath::WGMMA, cuda::GemmPath::MMA_NATIVE, cuda::GemmPath::MMA_F16})
        if (cuda::moe_gemm_supported(p)) r.push_back(p);
    return r;
}
const char* path_name(cuda::GemmPath p) {
    return p == cuda::GemmPath::WGMMA ? "wgmma" : p == cuda::GemmPath::MMA_NATIVE ? "mma-native" : "mma-f16";
}

// The act_quant of h the up-projection wrote, dequantized: [slots, inter] (codes x their row block's scale).
// h_q as values in column order (its codes are in the path's order, moe_gemm_code_order).
std::vector<float> dequantized_h(const cuda::Fp8Activation& hq, int64_t slots, cuda::GemmPath path) {
    const cuda::Fp8CodeOrder order = cuda::moe_gemm_code_order(path);
    std::vector<uint8_t> codes(static_cast<size_t>(slots * hq.codes_ld));
    std::vector<float> scales(static_cast<size_t>(((hq.k + 127) / 128) * hq.scales_ld));
    CUDA_CHECK(cudaMemcpy(codes.data(), hq.codes, codes.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(scales.data(), hq.scales, scales.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> v(static_cast<size_t>(slots * hq.k));
    for (int64_t s = 0; s < slots; ++s)
        for (int64_t c = 0; c < hq.k; ++c)
            v[size_t(s * hq.k + c)] =
                e4m3_to_f32(codes[size_t(s * hq.codes_ld + cuda::fp8_code_position(c, order))]) *
                scales[size_t((c / 128) * hq.scales_ld + s)];
    return v;
}

struct Case {
    int64_t M;
    int E, top_k;
    int64_t hidden, inter;
};

// The bound on y of the down GEMM alone (from the GPU's own h_q) against fp64: the dense FP8 GEMM's (wgmma sums a
// 128-K block's FP8 products in the tensor core, measured ~1.2e-4 there; the f16 path is fp32-exact per product).
double down_threshold(cuda::GemmPath p) { return p == cuda::GemmPath::WGMMA ? 3e-4 : 1e-4; }

// A routing (idx, weights of M x top_k picks) and the bf16 input rows uploaded, grouped by the GPU's own moe_group.
struct DeviceGrouping {
    DeviceArray<int32_t> idx;
    DeviceArray<float> wts;
    DeviceArray<uint16_t> x;
    DeviceArray<uint8_t> mem;
    cuda::MoeGrouping g;
    DeviceGrouping(const std::vector<int32_t>& i, const std::vector<float>& w, const std::vector<uint16_t>& xb,
                   int64_t M, int top_k, int E)
        : idx(i), wts(w), x(xb), mem(cuda::moe_grouping_bytes(E, M * top_k)) {
        g = cuda::moe_grouping_view(mem.ptr, E, M * top_k);
        cuda::moe_group(idx.ptr, wts.ptr, M, top_k, g, nullptr);
    }
};

// Routing of c.M tokens to c.top_k distinct experts each: idx and weights [M, top_k].
struct Routing {
    std::vector<int32_t> idx;
    std::vector<float> wts;
};

// The sm_90a kernel's slot tile widths (moe_gemm_slot_rows) on the wgmma path; the mma.sync paths have one (0).
std::vector<int> slot_widths(cuda::GemmPath p) {
    return p == cuda::GemmPath::WGMMA ? std::vector<int>{32, 64, 128} : std::vector<int>{0};
}

// Runs up + down on `path` with `slot_rows` per tile for this routing (random activations and experts from rng) and
// checks h_q and y against the CPU release experts. Returns the per-expert slot counts the GPU grouping made.
std::vector<int32_t> check_against_cpu(cuda::GemmPath path, int slot_rows, const Case& c, const Routing& r,
                                       std::mt19937_64& rng, const std::string& desc) {
    const int64_t slots = c.M * c.top_k, H = c.hidden, I = c.inter;
    const float limit = 10.f;
    auto ex = make_experts(rng, c.E, H, I);
    const std::vector<float> x = [&] {
        std::normal_distribution<float> d(0.f, 1.f);
        std::vector<float> v(size_t(c.M * H));
        for (auto& f : v) f = round_bf16(d(rng));
        return v;
    }();
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
    DeviceGrouping dg(r.idx, r.wts, xb, c.M, c.top_k, c.E);
    const cuda::MoeGrouping& g = dg.g;
    EXPECT_TRUE(cuda::moe_gemm_eligible(ex->table, g, c.M, c.top_k, path));
    DeviceArray<uint8_t> wsmem(cuda::moe_gemm_workspace_bytes(slots, H, I));
    wsmem.poison();
    const cuda::MoeGemmWorkspace ws = cuda::moe_gemm_workspace_view(wsmem.ptr, slots, H, I);
    DeviceArray<float> y(size_t(slots * H));
    y.poison();
    cuda::moe_gemm_up(dg.x.ptr, H, c.M, c.top_k, ex->table, g, limit, ws, nullptr, path, slot_rows);
    cuda::moe_gemm_down(c.M, c.top_k, ex->table, g, ws, y.ptr, nullptr, path, slot_rows);
    // The bf16 output (the combine's form in release numerics): every fp32 value rounded, bit for bit.
    DeviceArray<uint16_t> y16(size_t(slots * H));
    y16.poison();
    cuda::moe_gemm_down_bf16(c.M, c.top_k, ex->table, g, ws, y16.ptr, nullptr, path, slot_rows);
    CUDA_CHECK(cudaDeviceSynchronize());

    // The grouping as the GPU made it: slot -> (token, weight, expert).
    auto graw = dg.mem.download();
    const cuda::MoeGrouping hg_view = cuda::moe_grouping_view(graw.data(), c.E, slots);
    const int32_t* counts = hg_view.expert_count;
    const int32_t* offsets = hg_view.expert_offset;
    const int32_t* slot_token = hg_view.slot_token;
    const float* slot_weight = hg_view.slot_weight;
    const auto hq_gpu = dequantized_h(ws.h_q, slots, path);
    const auto y_gpu = y.download();
    const auto y16_gpu = y16.download();
    int64_t bf16_mismatches = 0;

    // h_q against the CPU's act_quant of its h; y from the GPU's own h_q (the down GEMM alone) and from the
    // CPU's (up + down).
    std::vector<float> h_ref, h_got, y_ref, y_got, y_own;
    std::vector<float> xq(static_cast<size_t>(H)), hq(static_cast<size_t>(I));
    std::vector<double> gd(static_cast<size_t>(I)), ud(static_cast<size_t>(I)), yd(static_cast<size_t>(H));
    for (int e = 0; e < c.E; ++e)
        for (int32_t s = offsets[e]; s < offsets[e] + counts[e]; ++s) {
            const int32_t tok = slot_token[s];
            cpu::act_quant_fp8_block128(&x[size_t(tok * H)], H, xq.data());
            product_row(xq.data(), ex->f1[size_t(e)], I, H, gd.data());
            product_row(xq.data(), ex->f3[size_t(e)], I, H, ud.data());
            std::vector<float> gf(static_cast<size_t>(I)), uf(static_cast<size_t>(I));
            std::vector<float> hf(static_cast<size_t>(I));
            for (int64_t i = 0; i < I; ++i) {
                gf[size_t(i)] = round_bf16(float(gd[size_t(i)]));
                uf[size_t(i)] = round_bf16(float(ud[size_t(i)]));
            }
            cpu::swiglu_clamp(gf.data(), uf.data(), I, limit, hf.data());
            for (int64_t i = 0; i < I; ++i) hf[size_t(i)] = round_bf16(hf[size_t(i)] * slot_weight[s]);
            cpu::act_quant_fp8_block128(hf.data(), I, hq.data());
            const float* hg = &hq_gpu[size_t(s * I)];
            h_ref.insert(h_ref.end(), hq.begin(), hq.end());
            h_got.insert(h_got.end(), hg, hg + I);
            product_row(hq.data(), ex->f2[size_t(e)], H, I, yd.data());
            for (int64_t o = 0; o < H; ++o) y_ref.push_back(float(yd[size_t(o)]));
            product_row(hg, ex->f2[size_t(e)], H, I, yd.data());
            for (int64_t o = 0; o < H; ++o) {
                y_own.push_back(float(yd[size_t(o)]));
                y_got.push_back(y_gpu[size_t(s * H + o)]);
                bf16_mismatches += y16_gpu[size_t(s * H + o)] != f32_to_bf16(y_gpu[size_t(s * H + o)]);
            }
        }
    EXPECT_EQ(bf16_mismatches, 0) << "moe_gemm_down_bf16 differs from moe_gemm_down's output rounded to bf16";
    // h_q: the FP8 tensor-core sums (~5e-5) can flip a bf16 rounding of g or u and then an e4m3 rounding:
    // 1e-2, as the wgmma decode experts' h; y from the GPU's own h_q: the down GEMM alone (down_threshold); y end
    // to end: 1e-2.
    const double eh = rel_l2(h_got, h_ref), ey = rel_l2(y_got, y_own), ey_all = rel_l2(y_got, y_ref);
    std::printf("  grouped experts %s: h_q rel_l2 %.3g, y (down alone) %.3g, y (up + down) %.3g\n", desc.c_str(), eh,
                ey, ey_all);
    EXPECT_LE(eh, 1e-2);
    EXPECT_LE(ey, down_threshold(path));
    EXPECT_LE(ey_all, 1e-2);
    return std::vector<int32_t>(counts, counts + c.E);
}

// Routing: token 0 picks expert 0 first (the only token there: a one-token group), expert 1 stays empty, the other
// picks are distinct experts from 2..E-1, skewed toward low ids (uneven groups).
Routing skewed_routing(const Case& c, std::mt19937_64& rng) {
    const int64_t slots = c.M * c.top_k;
    Routing r{std::vector<int32_t>(static_cast<size_t>(slots)), std::vector<float>(static_cast<size_t>(slots))};
    std::uniform_real_distribution<float> uw(0.1f, 1.5f);
    for (int64_t t = 0; t < c.M; ++t) {
        std::vector<int> pool;
        for (int e = 2; e < c.E; ++e) pool.push_back(e);
        for (int j = 0; j < c.top_k; ++j) {
            int e;
            if (t == 0 && j == 0) {
                e = 0;
            } else {
                const double skew = std::pow(uw(rng) / 1.5, 2.0) * double(pool.size());
                const size_t k = size_t(std::min<double>(double(pool.size() - 1), std::floor(skew)));
                e = pool[k];
                pool.erase(pool.begin() + long(k));
            }
            r.idx[size_t(t * c.top_k + j)] = e;
            r.wts[size_t(t * c.top_k + j)] = uw(rng);
        }
    }
    return r;
}

void check_skewed_cases(std::initializer_list<Case> cases) {
    for (cuda::GemmPath path : moe_paths())
    for (int width : slot_widths(path))
        for (const Case& c : cases) {
            const uint64_t seed = fresh_seed();
            std::ostringstream desc;
            desc << path_name(path) << " slot_rows=" << width << " M=" << c.M << " E=" << c.E << " top_k=" << c.top_k
                 << " hidden=" << c.hidden << " inter=" << c.inter << " seed=" << seed;
            SCOPED_TRACE(desc.str());
            std::mt19937_64 rng(seed);
            const Routing r = skewed_routing(c, rng);
            const std::vector<int32_t> counts = check_against_cpu(path, width, c, r, rng, desc.str());
            EXPECT_EQ(counts[0], 1);
            EXPECT_EQ(counts[1], 0);
        }
}

TEST(MoeGemm, GroupedFp4MatchesCpuReleaseExperts) {
    check_skewed_cases({Case{1, 8, 4, 256, 384}, Case{7, 16, 4, 256, 384}, Case{300, 16, 4, 512, 256},
                        Case{700, 4, 2, 256, 384}});
}

// Every CTA runs several tiles and refills every stage of its pipeline, several times for the narrow slot tiles
// (2,048 slots over six experts of ~340: up 264 tiles of 16 stages at 32 slot rows, down 528 of 4; the sm_90a
// ring has 11 / 8 / 6 stages at 32 / 64 / 128 rows). Of the cases above only M = 300 at 128 slot rows refills a
// stage (8 stages per up tile against the ring's 6), once; everywhere else each CTA's stages run one phase, so a
// stage's later phases (the parity waits, the refill after the release) are checked here. They are also where
// racecheck reports the sm_90a kernel's mbarrier hand-offs, which it does not follow across phases: run 233 (that
// M = 300 case) and run 234 (an expert family case that refills), docs/perf-log/2026-12-06_query-chain-verdict-and-sanitize.md.
// The sanitizer runs (--quick) take half the slots and a narrower inter: the up tiles still refill (16 stages each).
TEST(MoeGemm, EveryStageRefilled) {
    if (quick_mode()) check_skewed_cases({Case{512, 8, 2, 1024, 256}});
    else check_skewed_cases({Case{1024, 8, 2, 1024, 512}});
}

// Expert groups starting at every slot residue modulo 4 and 128: the sm_90a kernel loads a tile's activation scales
// as one TMA box from the 4-aligned row at or below the group's first slot (a box starting at the slot itself is an
// illegal instruction: the first H200 run of these kernels died there). Expert e of E = 12 gets e + 1 of 16 tokens
// (top_k = 1 keeps the counts exact), so groups start at 0, 1, 3, 6, 10, ...; then the failing tests' first shape
// (M = 1, top_k = 4: groups of one slot at offsets 0..3) with hidden and inter of the real layer's 128-multiples.
TEST(MoeGemm, GroupsStartAtEveryRowResidue) {
    for (cuda::GemmPath path : moe_paths())
    for (int width : slot_widths(path)) {
        const std::string where = std::string(path_name(path)) + " slot_rows=" + std::to_string(width);
        {
            const Case c{78, 12, 1, 256, 384};  // 1 + 2 + ... + 12 = 78 tokens
            const uint64_t seed = fresh_seed();
            const std::string desc = where + " counts 1..12 seed=" + std::to_string(seed);
            SCOPED_TRACE(desc);
            std::mt19937_64 rng(seed);
            Routing r;
            std::uniform_real_distribution<float> uw(0.1f, 1.5f);
            for (int e = 0; e < c.E; ++e)
                for (int n = 0; n <= e; ++n) {
                    r.idx.push_back(e);
                    r.wts.push_back(uw(rng));
                }
            std::shuffle(r.idx.begin(), r.idx.end(), rng);  // tokens in random order: slots gathered out of order
            const std::vector<int32_t> counts = check_against_cpu(path, width, c, r, rng, desc);
            for (int e = 0; e < c.E; ++e) EXPECT_EQ(counts[size_t(e)], e + 1) << "expert " << e;
        }
        {
            const Case c{1, 8, 4, 256, 384};
            const uint64_t seed = fresh_seed();
            const std::string desc = where + " one token, 4 experts seed=" + std::to_string(seed);
            SCOPED_TRACE(desc);
            std::mt19937_64 rng(seed);
            const Routing r{{5, 2, 7, 3}, {0.7f, 0.4f, 1.1f, 0.25f}};
            const std::vector<int32_t> counts = check_against_cpu(path, width, c, r, rng, desc);
            for (int e : {2, 3, 5, 7}) EXPECT_EQ(counts[size_t(e)], 1) << "expert " << e;
        }
    }
}

// A slot's result does not depend on the other tokens (batch invariance): token 0 routed alone and inside a batch of
// 300 tokens (its slots at other positions of larger expert groups, other tiles) gets bit-identical h_q rows and y
// rows, on every path. The slot tile width follows the pass (slot_rows 0: on the wgmma path 32 rows alone, 128 in
// the batch), as in the backend's prefill passes.
TEST(MoeGemm, SlotRowsIndependentOfBatch) {
    for (cuda::GemmPath path : moe_paths()) {
        const uint64_t seed = fresh_seed();
        SCOPED_TRACE(std::string(path_name(path)) + " seed=" + std::to_string(seed));
        std::mt19937_64 rng(seed);
        const int E = 8, top_k = 4;
        const int64_t H = 256, I = 256, big = 300;
        auto ex = make_experts(rng, E, H, I);
        std::vector<int32_t> idx(static_cast<size_t>(big * top_k));
        std::vector<float> wts(idx.size());
        std::uniform_real_distribution<float> uw(0.1f, 1.5f);
        for (int64_t t = 0; t < big; ++t) {
            std::vector<int> pool = {0, 1, 2, 3, 4, 5, 6, 7};
            std::shuffle(pool.begin(), pool.end(), rng);
            for (int j = 0; j < top_k; ++j) {
                idx[size_t(t * top_k + j)] = pool[size_t(j)];
                wts[size_t(t * top_k + j)] = uw(rng);
            }
        }
        std::normal_distribution<float> d(0.f, 1.f);
        std::vector<uint16_t> xb(static_cast<size_t>(big * H));
        for (auto& v : xb) v = f32_to_bf16(d(rng));
        struct Run {
            std::vector<float> y, hq;
            std::vector<int32_t> pair_slot;
        };
        auto run = [&](int64_t M) {
            const int64_t slots = M * top_k;
            std::vector<int32_t> i2(idx.begin(), idx.begin() + slots);
            std::vector<float> w2(wts.begin(), wts.begin() + slots);
            std::vector<uint16_t> x2(xb.begin(), xb.begin() + M * H);
            DeviceGrouping dg(i2, w2, x2, M, top_k, E);
            const cuda::MoeGrouping& g = dg.g;
            DeviceArray<uint8_t> wsmem(cuda::moe_gemm_workspace_bytes(slots, H, I));
            wsmem.poison();
            const cuda::MoeGemmWorkspace ws = cuda::moe_gemm_workspace_view(wsmem.ptr, slots, H, I);
            DeviceArray<float> y(static_cast<size_t>(slots * H));
            y.poison();
            cuda::moe_gemm_up(dg.x.ptr, H, M, top_k, ex->table, g, 10.f, ws, nullptr, path);
            cuda::moe_gemm_down(M, top_k, ex->table, g, ws, y.ptr, nullptr, path);
            CUDA_CHECK(cudaDeviceSynchronize());
            auto graw = dg.mem.download();
            const cuda::MoeGrouping hv = cuda::moe_grouping_view(graw.data(), E, slots);
            return Run{y.download(), dequantized_h(ws.h_q, slots, path),
                       std::vector<int32_t>(hv.pair_slot, hv.pair_slot + slots)};
        };
        const Run alone = run(1), batch = run(big);
        for (int j = 0; j < top_k; ++j) {
            const int32_t sa = alone.pair_slot[size_t(j)], sb = batch.pair_slot[size_t(j)];
            ASSERT_GE(sa, 0);
            ASSERT_GE(sb, 0);
            EXPECT_EQ(std::memcmp(&alone.y[size_t(sa * H)], &batch.y[size_t(sb * H)], size_t(H) * 4), 0)
                << "y of token 0, pick " << j << " (slot " << sa << " alone, " << sb << " in the batch)";
            EXPECT_EQ(std::memcmp(&alone.hq[size_t(sa * I)], &batch.hq[size_t(sb * I)], size_t(I) * 4), 0)
                << "h_q of token 0, pick " << j;
        }
    }
}

// The sm_90a kernel's slot tile widths (32, 64, 128 slot rows) give every slot bit-identical h_q and y (fp32 and
// bf16): the premise of choosing the width by the pass (moe_gemm_slot_rows) in prefill, whose tokens must not
// depend on their pass's size. Expert groups of 1, 31-33, 63-65, 127-129 and 200 slots (one pick per token, the
// tokens shuffled) put group ends on both sides of every width's tile boundary; one expert stays empty. Other
// widths are refused.
TEST(MoeGemm, SlotTileWidthsGiveTheSameBits) {
    if (!cuda::moe_gemm_supported(cuda::GemmPath::WGMMA)) GTEST_SKIP() << "no sm_90a wgmma path on this device";
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    // hidden 256 / inter 384: 2-3 K blocks per tile; hidden 2,048 / inter 1,024: 16 / 8 K blocks, more than the
    // narrow tiles' 11 / 8 stages (the ring wraps), several tiles per CTA, 16-byte scale copies (K % 512 == 0).
    for (const auto& [H, I] : {std::pair<int64_t, int64_t>{256, 384}, std::pair<int64_t, int64_t>{2048, 1024}}) {
        SCOPED_TRACE("hidden=" + std::to_string(H) + " inter=" + std::to_string(I));
        const std::vector<int> counts = {1, 31, 32, 33, 63, 64, 0, 65, 127, 128, 129, 200};
        const int E = int(counts.size()), top_k = 1;
        auto ex = make_experts(rng, E, H, I);
        std::vector<int32_t> idx;
        for (int e = 0; e < E; ++e) idx.insert(idx.end(), size_t(counts[size_t(e)]), e);
        std::shuffle(idx.begin(), idx.end(), rng);
        const int64_t M = int64_t(idx.size()), slots = M * top_k;
        std::uniform_real_distribution<float> uw(0.1f, 1.5f);
        std::vector<float> wts(idx.size());
        for (auto& w : wts) w = uw(rng);
        std::normal_distribution<float> d(0.f, 1.f);
        std::vector<uint16_t> xb(static_cast<size_t>(M * H));
        for (auto& v : xb) v = f32_to_bf16(d(rng));
        DeviceGrouping dg(idx, wts, xb, M, top_k, E);
        const cuda::MoeGrouping& g = dg.g;
        struct Out {
            std::vector<float> y, hq;
            std::vector<uint16_t> y16;
        };
        auto run = [&](int width) {
            DeviceArray<uint8_t> wsmem(cuda::moe_gemm_workspace_bytes(slots, H, I));
            wsmem.poison();
            const cuda::MoeGemmWorkspace ws = cuda::moe_gemm_workspace_view(wsmem.ptr, slots, H, I);
            DeviceArray<float> y(static_cast<size_t>(slots * H));
            DeviceArray<uint16_t> y16(static_cast<size_t>(slots * H));
            y.poison();
            y16.poison();
            const auto path = cuda::GemmPath::WGMMA;
            cuda::moe_gemm_up(dg.x.ptr, H, M, top_k, ex->table, g, 10.f, ws, nullptr, path, width);
            cuda::moe_gemm_down(M, top_k, ex->table, g, ws, y.ptr, nullptr, path, width);
            cuda::moe_gemm_down_bf16(M, top_k, ex->table, g, ws, y16.ptr, nullptr, path, width);
            CUDA_CHECK(cudaDeviceSynchronize());
            return Out{y.download(), dequantized_h(ws.h_q, slots, path), y16.download()};
        };
        const Out wide = run(128);
        for (float v : wide.y) ASSERT_TRUE(std::isfinite(v)) << "a slot row was not written (poison left)";
        for (int width : {32, 64}) {
            const Out narrow = run(width);
            int64_t y_diff = 0, h_diff = 0, y16_diff = 0;
            for (size_t i = 0; i < wide.y.size(); ++i) {
                y_diff += std::memcmp(&wide.y[i], &narrow.y[i], 4) != 0;
                y16_diff += wide.y16[i] != narrow.y16[i];
            }
            for (size_t i = 0; i < wide.hq.size(); ++i) h_diff += std::memcmp(&wide.hq[i], &narrow.hq[i], 4) != 0;
            EXPECT_EQ(y_diff, 0) << "y values differing between slot rows " << width << " and 128";
            EXPECT_EQ(y16_diff, 0) << "bf16 y values differing between slot rows " << width << " and 128";
            EXPECT_EQ(h_diff, 0) << "h_q values differing between slot rows " << width << " and 128";
        }
        // A width the kernel does not have is refused, naming the parameter.
        for (int width : {16, 48, 256})
            expect_named_error([&] { (void)run(width); }, "slot_rows");
    }
}

// The width a pass gets: 32 slot rows up to 16 slots per expert on average, 64 up to 64, else 128; V4-Flash's
// 256 experts and 6 picks: prompts of 256 and 512 tokens take 32, 1,024 and 2,048 take 64, 4,096 take 128.
TEST(MoeGemm, SlotRowsFollowThePass) {
    EXPECT_EQ(cuda::moe_gemm_slot_rows(6, 256), 32);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(256 * 6, 256), 32);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(512 * 6, 256), 32);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(16 * 256, 256), 32);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(16 * 256 + 1, 256), 64);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(1024 * 6, 256), 64);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(2048 * 6, 256), 64);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(4096 * 6, 256), 128);
    EXPECT_EQ(cuda::moe_gemm_slot_rows(300 * 4, 8), 128);
}

// The scale folding of moe_gemm.cuh at its documented limit: in every weight row (hidden = inter = 128, one block)
// the four 32-group exponents are r, r - 5, r - 9, r - 14 and only the last group holds non-zero values, so the
// whole product runs through values rescaled by 2^-14 into e4m3 (exact there). Rows of two blocks (256): the first
// block's four groups at r and zero, the second's at r - 14, which the mma.sync kernels fold against the block's
// own reference (r - 14) and the sm_90a kernel against the row's (r, ExpertTable::row_ref): exact either way.
// A wrong folding (flushed, shifted, a reference from the wrong block) shows in h (against the CPU release expert)
// and in y (the down GEMM alone, from the GPU's own h).
TEST(MoeGemm, ScaleFoldingIsExactAt14Octaves) {
    for (cuda::GemmPath path : moe_paths())
        for (const int64_t width : {128, 256}) {
            const uint64_t seed = fresh_seed();
            SCOPED_TRACE(std::string(path_name(path)) + " width=" + std::to_string(width) +
                         " seed=" + std::to_string(seed));
            std::mt19937_64 rng(seed);
            const int E = 1, top_k = 1;
            const int64_t M = 5, H = width, I = width;
            const float limit = 10.f;
            auto ex = make_experts(rng, E, H, I);
            for (TestWeight* w : {&ex->w1[0], &ex->w3[0], &ex->w2[0]}) {
                const size_t row_bytes = size_t(width / 2), groups = size_t(width / 32);
                for (size_t r = 0; r < size_t(w->out); ++r) {
                    if (width == 128) {
                        for (size_t b = 0; b < 48; ++b) w->w_bytes[r * row_bytes + b] = 0;  // groups 0..2 zero
                        const std::array<int, 4> exps = {130, 125, 121, 116};
                        for (size_t gi = 0; gi < 4; ++gi) w->s_bytes[r * groups + gi] = uint8_t(exps[gi]);
                    } else {
                        // block 0: zero values, its scales still count
                        for (size_t b = 0; b < 64; ++b) w->w_bytes[r * row_bytes + b] = 0;
                        for (size_t gi = 0; gi < 8; ++gi) w->s_bytes[r * groups + gi] = uint8_t(gi < 4 ? 130 : 116);
                    }
                }
                w->w_dev->upload(w->w_bytes);
                w->s_dev->upload(w->s_bytes);
            }
            ex->update_references();
            ex->f1[0] = ex->w1[0].dequantized();
            ex->f3[0] = ex->w3[0].dequantized();
            ex->f2[0] = ex->w2[0].dequantized();
            std::vector<int32_t> idx(static_cast<size_t>(M), 0);
            std::vector<float> wts(static_cast<size_t>(M), 1.f);
            DeviceArray<int32_t> d_idx(idx);
            DeviceArray<float> d_wts(wts);
            DeviceArray<uint8_t> gmem(cuda::moe_grouping_bytes(E, M));
            cuda::MoeGrouping g = cuda::moe_grouping_view(gmem.ptr, E, M);
            cuda::moe_group(d_idx.ptr, d_wts.ptr, M, top_k, g, nullptr);
            std::normal_distribution<float> d(0.f, 1.f);
            std::vector<float> x(static_cast<size_t>(M * H));
            std::vector<uint16_t> xb(x.size());
            for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i] = round_bf16(d(rng) * 64.f));
            DeviceArray<uint16_t> d_x(xb);
            DeviceArray<uint8_t> wsmem(cuda::moe_gemm_workspace_bytes(M, H, I));
            wsmem.poison();
            const cuda::MoeGemmWorkspace ws = cuda::moe_gemm_workspace_view(wsmem.ptr, M, H, I);
            DeviceArray<float> y(static_cast<size_t>(M * H));
            y.poison();
            cuda::moe_gemm_up(d_x.ptr, H, M, top_k, ex->table, g, limit, ws, nullptr, path);
            cuda::moe_gemm_down(M, top_k, ex->table, g, ws, y.ptr, nullptr, path);
            CUDA_CHECK(cudaDeviceSynchronize());
            const auto hq_gpu = dequantized_h(ws.h_q, M, path);
            auto graw = gmem.download();
            const cuda::MoeGrouping hv = cuda::moe_grouping_view(graw.data(), E, M);
            const auto yg = y.download();
            std::vector<float> h_got, h_want, y_got, y_want, xq(static_cast<size_t>(H)), hq(static_cast<size_t>(I));
            std::vector<float> gf(static_cast<size_t>(I)), uf(static_cast<size_t>(I)), hf(static_cast<size_t>(I));
            std::vector<double> gd(static_cast<size_t>(I)), ud(static_cast<size_t>(I)), yd(static_cast<size_t>(H));
            for (int64_t s = 0; s < M; ++s) {
                const int32_t tok = hv.slot_token[s];
                cpu::act_quant_fp8_block128(&x[size_t(tok * H)], H, xq.data());
                product_row(xq.data(), ex->f1[0], I, H, gd.data());
                product_row(xq.data(), ex->f3[0], I, H, ud.data());
                for (int64_t i = 0; i < I; ++i) {
                    gf[size_t(i)] = round_bf16(float(gd[size_t(i)]));
                    uf[size_t(i)] = round_bf16(float(ud[size_t(i)]));
                }
                cpu::swiglu_clamp(gf.data(), uf.data(), I, limit, hf.data());
                for (int64_t i = 0; i < I; ++i) hf[size_t(i)] = round_bf16(hf[size_t(i)] * hv.slot_weight[s]);
                cpu::act_quant_fp8_block128(hf.data(), I, hq.data());
                h_want.insert(h_want.end(), hq.begin(), hq.end());
                const float* hg = &hq_gpu[size_t(s * I)];
                h_got.insert(h_got.end(), hg, hg + I);
                product_row(hg, ex->f2[0], H, I, yd.data());
                for (int64_t o = 0; o < H; ++o) {
                    y_want.push_back(float(yd[size_t(o)]));
                    y_got.push_back(yg[size_t(s * H + o)]);
                }
            }
            double h_norm = 0;
            for (float v : h_want) h_norm += double(v) * v;
            EXPECT_GT(h_norm, 0.0) << "the test's h is all zero: it checks nothing";
            // h is compared after its act_quant, value by value in units of one e4m3 step of the reference (1/8 of
            // the value, or twice the block's subnormal step 2^-9 x scale, for a block quantized one scale apart). An h whose sums land on the other side of a bf16
            // or e4m3 rounding boundary than the fp64 reference's moves by one step: wgmma keeps ~14 bits of its FP8
            // sums, so ~1% of the values here; where one hits a block's dominant value it costs several % of that
            // block's L2 (the relative L2 of all of h: median 7e-4, up to 3.9% over 120 seeds). A wrong folding (a
            // group flushed or shifted by a power of two) moves most values by a factor of two or more. y runs from
            // the GPU's own h and is checked tightly.
            size_t off = 0;
            for (size_t b0 = 0; b0 < h_want.size(); b0 += 128) {
                const size_t e = std::min(h_want.size(), b0 + 128);
                float amax = 0;
                for (size_t i = b0; i < e; ++i) amax = std::max(amax, std::fabs(h_want[i]));
                const float scale = std::exp2(std::ceil(std::log2(std::max(amax, 1e-4f) / 448.f)));
                for (size_t i = b0; i < e; ++i) {
                    const float step = std::max(std::fabs(h_want[i]) / 8.f, 2.f * scale * std::exp2(-9.f));
                    off += std::fabs(h_got[i] - h_want[i]) > 1.01f * step;
                }
            }
            const double eh = rel_l2(h_got, h_want), ey = rel_l2(y_got, y_want);
            std::printf("  [fold] %s width %d: h rel %.3e, %zu of %zu values off by more than one step, y rel %.3e\n",
                        path_name(path), int(width), eh, off, h_want.size(), ey);
            EXPECT_LE(off, h_want.size() / 100) << "h values off by more than one e4m3 step";
            EXPECT_LE(eh, 0.1);
            EXPECT_LE(ey, down_threshold(path));
        }
}

// moe_row_references against the host maxima: random E8M0 bytes over the whole range, the vector path (rows of
// 16k scales at 16-byte aligned addresses: w1 and w3 with hidden 512) and the byte path (w2 rows of 3 scales:
// inter 96), several experts; the output poisoned first.
TEST(MoeGemm, RowReferencesAreTheRowMaxima) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const int E = 3;
    const int64_t H = 512, I = 96;
    auto ex = make_experts(rng, E, H, I);
    std::uniform_int_distribution<int> byte(0, 254);
    for (int e = 0; e < E; ++e)
        for (TestWeight* w : {&ex->w1[size_t(e)], &ex->w3[size_t(e)], &ex->w2[size_t(e)]}) {
            for (uint8_t& b : w->s_bytes) b = uint8_t(byte(rng));
            w->s_dev->upload(w->s_bytes);
        }
    ex->refs->poison();
    ex->update_references();
    const auto got = ex->refs->download();
    const size_t per = size_t(2 * I + H);
    ASSERT_EQ(got.size(), size_t(E) * per);
    for (int e = 0; e < E; ++e) {
        const TestWeight* ws[3] = {&ex->w1[size_t(e)], &ex->w3[size_t(e)], &ex->w2[size_t(e)]};
        size_t r0 = 0;
        for (const TestWeight* w : ws) {
            const size_t groups = size_t(w->in / 32);
            for (size_t r = 0; r < size_t(w->out); ++r) {
                uint8_t want = 0;
                for (size_t gi = 0; gi < groups; ++gi) want = std::max(want, w->s_bytes[r * groups + gi]);
                ASSERT_EQ(int(got[size_t(e) * per + r0 + r]), int(want)) << "expert " << e << ", row " << r0 + r;
            }
            r0 += size_t(w->out);
        }
    }
}

}  // namespace
}  // namespace flashseek::test
