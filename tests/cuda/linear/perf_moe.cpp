// Perf suite of the expert family (`test_cuda_linear --perf`): the V4-Flash MoE layer of the perf list
// (expert_family.cpp: 256 routed FP4 experts, hidden 4096, inter 2048, top-6) at each token count, the routed
// up-projection + down-projection (the two weight-streaming launches) through every expert variant that supports
// them, the default choice marked; then the shared FP8 expert (dense mode) the same way. Routing is uniform random
// top-6 (about 6 distinct experts at M = 1, 81 at M = 16); calls rotate over three sets of all 256 experts (10 GB)
// so every call reads DRAM. Bytes: the distinct experts' three matrices with scales, plus activations; FLOPs:
// 2 x 3 x hidden x inter per (token, expert) pair, against the FP8 GEMM rate.
#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "device_buffer.h"
#include "cuda/moe/moe_catalogue.h"
#include "expert_family.h"
#include "perf_report.h"
#include "perf_suite.h"
#include "perf_weights.h"

namespace flashseek::test {
namespace {

using cuda::KernelPolicy;

// E experts of w1 / w3 [I, D] and w2 [D, I] with the device pointer tables of an ExpertTable.
struct ExpertWeights {
    std::vector<PerfWeight> mats;  // expert e: 3e (w1), 3e + 1 (w3), 3e + 2 (w2)
    std::vector<std::unique_ptr<DeviceBuffer>> tables;
    cuda::ExpertTable table;
    size_t expert_bytes = 0;  // one expert's three matrices with scales

    ExpertWeights(cuda::WeightKind kind, int E, int64_t D, int64_t I, uint64_t seed) {
        std::vector<const void*> ptrs[6];
        for (int e = 0; e < E; ++e)
            for (int m = 0; m < 3; ++m) {
                mats.emplace_back(kind, m == 2 ? D : I, m == 2 ? I : D, seed + uint64_t(3 * e + m) * 2);
                ptrs[2 * m].push_back(mats.back().w);
                ptrs[2 * m + 1].push_back(mats.back().s);
            }
        const void** dev[6];
        for (int i = 0; i < 6; ++i) {
            tables.push_back(std::make_unique<DeviceBuffer>(size_t(E) * sizeof(void*)));
            CUDA_CHECK(cudaMemcpy(tables.back()->ptr, ptrs[i].data(), size_t(E) * sizeof(void*), cudaMemcpyHostToDevice));
            dev[i] = static_cast<const void**>(tables.back()->ptr);
        }
        table.kind = kind;
        table.scale_kind = cuda::ScaleKind::E8M0;
        table.hidden = D;
        table.inter = I;
        table.w1 = dev[0];
        table.w1_scale = dev[1];
        table.w3 = dev[2];
        table.w3_scale = dev[3];
        table.w2 = dev[4];
        table.w2_scale = dev[5];
        table.scales_aligned16 = true;  // every scale tensor is its own allocation
        for (int m = 0; m < 3; ++m) expert_bytes += mats[size_t(m)].bytes;
    }
};

std::string names(const std::string& up, const std::string& down) { return up == down ? up : up + "/" + down; }

// Times up + down of one expert configuration for every variant that supports the up-projection.
void time_projections(PerfReport& report, const std::string& op, const std::string& shape, const ExpertCase& c,
                      const std::vector<const ExpertWeights*>& sets, const cuda::MoeGrouping* g, int64_t rows,
                      double bytes, double flops) {
    const int64_t D = c.D, I = c.I;
    const cuda::WeightKind kind = sets[0]->table.kind;
    DeviceBuffer x(size_t(c.M * D) * 2), pv(cuda::prepared_values_bytes(c.M, D)), ps(cuda::prepared_scales_bytes(c.M, D)),
        hv(cuda::prepared_values_bytes(rows, I)), hs(cuda::prepared_scales_bytes(rows, I)), y(size_t(rows * D) * 4);
    cuda::fill_random(x.ptr, size_t(c.M * D), cuda::FillKind::BF16, 9, 1.f, nullptr);
    cuda::PreparedActivation p;
    p.values = static_cast<uint16_t*>(pv.ptr);
    p.scales = static_cast<float*>(ps.ptr);
    cuda::prepare_activation(x.ptr, false, c.M, D, D, kind, c.numerics, p, nullptr);
    cuda::PreparedActivation h;
    h.values = static_cast<uint16_t*>(hv.ptr);
    h.scales = static_cast<float*>(hs.ptr);
    auto call = [&](const KernelPolicy& policy, const cuda::ExpertTable& t, cudaStream_t s, std::string* up_name,
                    std::string* down_name) {
        const std::string_view u = cuda::moe_expert_up(p, t, g, c.M, c.top_k, 10.f, c.numerics, h, s, policy);
        const std::string_view d = cuda::moe_expert_down(h, t, g, c.M, c.top_k, static_cast<float*>(y.ptr), s, policy);
        if (up_name) *up_name = std::string(u);
        if (down_name) *down_name = std::string(d);
    };
    std::string def_up, def_down;
    call(KernelPolicy{}, sets[0]->table, nullptr, &def_up, &def_down);
    CUDA_CHECK(cudaDeviceSynchronize());
    const int n_sets = int(sets.size());
    for (const cuda::ExpertVariant& v : cuda::expert_variants()) {
        if (!v.supports(cuda::ExpertCall{true, p, sets[0]->table, g, c.M, c.top_k, c.numerics})) continue;
        const KernelPolicy only = KernelPolicy::only(v.name);
        std::string up, down;
        call(only, sets[0]->table, nullptr, &up, &down);
        const double us = time_graph_per_call(
            [&](cudaStream_t s, int i) { call(only, sets[size_t(i % n_sets)]->table, s, nullptr, nullptr); },
            std::max(2 * n_sets, c.M >= 64 ? 4 : 12));
        PerfRow r;
        r.op = op;
        r.shape = shape;
        r.m = c.M;
        r.variant = names(up, down);
        r.is_default = up == def_up && down == def_down;
        r.us = us;
        r.bytes = bytes;
        r.flops = flops;
        r.flop_ceiling = c.numerics == cuda::ActNumerics::FP8_BLOCK128 ? FlopCeiling::FP8 : FlopCeiling::BF16;
        r.note = "up+down, " + std::to_string(n_sets) + " weight sets";
        report.add(std::move(r));
    }
}

void expert_perf(PerfReport& report) {
    const auto cases = expert_cases();
    if (cases.empty()) return;
    const ExpertCase& v4 = cases[0];
    const int E = v4.E, K = v4.top_k;
    const int64_t D = v4.D, I = v4.I;
    // Routed experts: three full sets (3 x 256 x 13.4 MB).
    std::vector<std::unique_ptr<ExpertWeights>> routed;
    for (int s = 0; s < 3; ++s)
        routed.push_back(std::make_unique<ExpertWeights>(cuda::WeightKind::FP4_BLOCK32, E, D, I, 1000000 * uint64_t(s)));
    const std::vector<const ExpertWeights*> routed_sets = {routed[0].get(), routed[1].get(), routed[2].get()};
    std::mt19937_64 rng(42);
    for (const ExpertCase& c : cases) {
        const int M = c.M;
        std::vector<int32_t> idx(size_t(M * K));
        std::vector<float> wts(size_t(M * K), 1.f / float(K));
        std::set<int> distinct;
        std::vector<int> perm(static_cast<size_t>(E));
        for (int m = 0; m < M; ++m) {
            for (int e = 0; e < E; ++e) perm[size_t(e)] = e;
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int j = 0; j < K; ++j) {
                idx[size_t(m * K + j)] = perm[size_t(j)];
                distinct.insert(perm[size_t(j)]);
            }
        }
        DeviceBuffer didx(idx.size() * 4), dw(wts.size() * 4), gmem(cuda::moe_grouping_bytes(E, int64_t(M) * K)),
            tiles(cuda::moe_act_tile_bytes(E, int64_t(M) * K, std::max(D, I)));
        CUDA_CHECK(cudaMemcpy(didx.ptr, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dw.ptr, wts.data(), wts.size() * 4, cudaMemcpyHostToDevice));
        cuda::MoeGrouping g = cuda::moe_grouping_view(gmem.ptr, E, int64_t(M) * K);
        cuda::moe_attach_act_tiles(g, tiles.ptr, std::max(D, I));
        cuda::moe_group(static_cast<int32_t*>(didx.ptr), static_cast<float*>(dw.ptr), M, K, g, nullptr);
        const int64_t pairs = int64_t(M) * K;
        const double bytes = double(distinct.size()) * double(routed[0]->expert_bytes) +
                             double(pairs) * double(I + D) * 2.0;  // + h and y rows (activations)
        const double flops = 2.0 * 3.0 * double(pairs) * double(D) * double(I);
        time_projections(report, "routed experts (" + std::to_string(distinct.size()) + " active)",
                         std::to_string(E) + "x FP4 " + std::to_string(D) + "/" + std::to_string(I), c, routed_sets,
                         &g, pairs, bytes, flops);
    }
    routed.clear();
    // The shared expert (FP8, dense: every token, one expert), rotated over enough copies to defeat L2.
    std::vector<std::unique_ptr<ExpertWeights>> shared;
    const size_t one = 3 * weight_bytes(cuda::WeightKind::FP8_BLOCK128, I, D);
    for (int s = 0, n = rotation_copies(one); s < n; ++s)
        shared.push_back(std::make_unique<ExpertWeights>(cuda::WeightKind::FP8_BLOCK128, 1, D, I, 7000 + 10 * uint64_t(s)));
    std::vector<const ExpertWeights*> shared_sets;
    for (const auto& s : shared) shared_sets.push_back(s.get());
    for (const ExpertCase& c : cases) {
        if (c.M > 64) continue;
        const double bytes = double(shared[0]->expert_bytes) + double(c.M) * double(I + D) * 2.0;
        const double flops = 2.0 * 3.0 * double(c.M) * double(D) * double(I);
        time_projections(report, "shared expert (dense)", "FP8 " + std::to_string(D) + "/" + std::to_string(I), c,
                         shared_sets, nullptr, c.M, bytes, flops);
    }
}

FS_PERF_SUITE("experts", expert_perf);

}  // namespace
}  // namespace flashseek::test
