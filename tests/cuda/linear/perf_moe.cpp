// Perf suites of the expert family (`test_cuda_linear --perf`): the V4-Flash MoE layer of the perf list
// (expert_family.cpp: 256 routed FP4 experts, hidden 4096, inter 2048, top-6) at each token count, the routed
// up-projection + down-projection through every expert variant that supports them, each from the input it takes
// (prepared, or raw bf16 rows: grouped_experts gathers and quantizes them itself, into the grouping's GEMM
// workspace), the default choice for that input marked; then the shared FP8 expert (dense mode) the same way at
// decode sizes. Two tables: "experts" (fewer than kPerfPrefillTokens tokens) and "experts prefill", which adds
// cuBLASLt FP8 (gemm_rate.h) on the dense products of the same FLOPs (w1|w3 and w2 over tokens x top-6 rows) as the
// reference. Routing is uniform random top-6 (about 6 distinct experts at M = 1, 81 at M = 16, all 256 from a few
// dozen tokens); calls rotate over three sets of all 256 experts (10 GB) so every call reads DRAM. Bytes: the
// distinct experts' three matrices with scales, plus activations; FLOPs: 2 x 3 x hidden x inter per (token, expert)
// pair, against the FP8 GEMM rate.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "device_buffer.h"
#include "cuda/moe/moe_catalogue.h"
#include "cuda/moe/moe_gemm.cuh"
#include "expert_family.h"
#include "gemm_rate.h"
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
        if (kind == cuda::WeightKind::FP4_BLOCK32 && D % 128 == 0 && I % 128 == 0) {
            tables.push_back(std::make_unique<DeviceBuffer>(cuda::moe_grouped_extras_bytes(table, E)));
            cuda::moe_attach_grouped_extras(table, E, tables.back()->ptr);
        }
        for (int m = 0; m < 3; ++m) expert_bytes += mats[size_t(m)].bytes;
    }
};

std::string names(const std::string& up, const std::string& down) { return up == down ? up : up + "/" + down; }

// Times up + down of one expert configuration for every variant that supports the up-projection, from the prepared
// input where the variant takes it, else from the raw bf16 rows.
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
    const cuda::PreparedActivation raw = cuda::raw_activation(x.ptr, c.M, D, D, kind, c.numerics);
    CUDA_CHECK(cudaDeviceSynchronize());
    auto call = [&](const KernelPolicy& policy, const cuda::PreparedActivation& in, const cuda::ExpertTable& t,
                    cudaStream_t s, std::string* up_name, std::string* down_name) {
        cuda::PreparedActivation h;
        h.values = static_cast<uint16_t*>(hv.ptr);
        h.scales = static_cast<float*>(hs.ptr);
        const std::string_view u = cuda::moe_expert_up(in, t, g, c.M, c.top_k, 10.f, c.numerics, h, s, policy);
        const std::string_view d = cuda::moe_expert_down(h, t, g, c.M, c.top_k, static_cast<float*>(y.ptr), s, policy);
        if (up_name) *up_name = std::string(u);
        if (down_name) *down_name = std::string(d);
    };
    // The default policy's choice for each input form (the down-projection follows the h its up-projection writes).
    std::string def_prepared_up, def_prepared_down, def_raw_up, def_raw_down;
    call(KernelPolicy{}, p, sets[0]->table, nullptr, &def_prepared_up, &def_prepared_down);
    const cuda::ExpertCall raw_up{true, raw, sets[0]->table, g, c.M, c.top_k, c.numerics};
    if (!chosen_expert_variant(raw_up, KernelPolicy{}).empty())
        call(KernelPolicy{}, raw, sets[0]->table, nullptr, &def_raw_up, &def_raw_down);
    CUDA_CHECK(cudaDeviceSynchronize());
    const int n_sets = int(sets.size());
    for (const cuda::ExpertVariant& v : cuda::expert_variants()) {
        const bool prepared_in = v.supports(cuda::ExpertCall{true, p, sets[0]->table, g, c.M, c.top_k, c.numerics});
        if (!prepared_in && !v.supports(raw_up)) continue;
        const cuda::PreparedActivation& in = prepared_in ? p : raw;
        const KernelPolicy only = KernelPolicy::only(v.name);
        std::string up, down;
        call(only, in, sets[0]->table, nullptr, &up, &down);
        const double us = time_graph_per_call(
            [&](cudaStream_t s, int i) { call(only, in, sets[size_t(i % n_sets)]->table, s, nullptr, nullptr); },
            std::max(2 * n_sets, c.M >= 64 ? 4 : 12));
        PerfRow r;
        r.op = op;
        r.shape = shape;
        r.m = c.M;
        r.variant = names(up, down);
        r.is_default = prepared_in ? up == def_prepared_up && down == def_prepared_down
                                   : up == def_raw_up && down == def_raw_down;
        r.us = us;
        r.bytes = bytes;
        r.flops = flops;
        r.flop_ceiling = c.numerics == cuda::ActNumerics::FP8_BLOCK128 ? FlopCeiling::FP8 : FlopCeiling::BF16;
        r.note = std::string("up+down from ") + (prepared_in ? "prepared" : "raw bf16") + " input, " +
                 std::to_string(n_sets) + " weight sets";
        report.add(std::move(r));
    }
}

// cuBLASLt FP8 on the dense products of a routed layer's FLOPs: [pairs, hidden] x [2 inter, hidden]^T (w1|w3) and
// [pairs, inter] x [hidden, inter]^T (w2), the rate a library reaches on the same work without grouping or block
// scales.
void time_dense_reference(PerfReport& report, const std::string& op, const std::string& shape, const ExpertCase& c,
                          double bytes, double flops) {
    const int64_t pairs = int64_t(c.M) * c.top_k;
    std::string why;
    const double up = cublaslt_gemm_us(GemmPrecision::FP8_E4M3, pairs, 2 * c.I, c.D, &why);
    const double down = up > 0 ? cublaslt_gemm_us(GemmPrecision::FP8_E4M3, pairs, c.D, c.I, &why) : -1;
    if (up <= 0 || down <= 0) {
        std::printf("perf: no cuBLASLt row for %s M=%d: %s\n", op.c_str(), c.M, why.c_str());
        return;
    }
    PerfRow r;
    r.op = op;
    r.shape = shape;
    r.m = c.M;
    r.variant = "cuBLASLt (ref)";
    r.us = up + down;
    r.bytes = bytes;
    r.flops = flops;
    r.flop_ceiling = FlopCeiling::FP8;
    r.note = "dense e4m3 over " + std::to_string(pairs) + " rows, per-tensor scales";
    report.add(std::move(r));
}

// The routed experts of every case with M in [min_tokens, max_tokens), then (decode sizes) the shared expert.
void time_cases(PerfReport& report, int min_tokens, int max_tokens, bool prefill) {
    std::vector<ExpertCase> cases = expert_cases();
    std::erase_if(cases, [&](const ExpertCase& c) { return c.M < min_tokens || c.M >= max_tokens; });
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
        const int64_t pairs = int64_t(M) * K;
        std::vector<int32_t> idx(static_cast<size_t>(pairs));
        std::vector<float> wts(static_cast<size_t>(pairs), 1.f / float(K));
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
        DeviceBuffer didx(idx.size() * 4), dw(wts.size() * 4), gmem(cuda::moe_grouping_bytes(E, pairs)),
            tiles(cuda::moe_act_tile_bytes(E, pairs, std::max(D, I))),
            gemm_ws(cuda::moe_gemm_workspace_bytes(pairs, D, I));
        CUDA_CHECK(cudaMemcpy(didx.ptr, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dw.ptr, wts.data(), wts.size() * 4, cudaMemcpyHostToDevice));
        cuda::MoeGrouping g = cuda::moe_grouping_view(gmem.ptr, E, pairs);
        cuda::moe_attach_act_tiles(g, tiles.ptr, std::max(D, I));
        cuda::moe_attach_gemm_workspace(g, gemm_ws.ptr, D, I);
        cuda::moe_group(static_cast<int32_t*>(didx.ptr), static_cast<float*>(dw.ptr), M, K, g, nullptr);
        const double bytes = double(distinct.size()) * double(routed[0]->expert_bytes) +
                             double(pairs) * double(I + D) * 2.0;  // + h and y rows (activations)
        const double flops = 2.0 * 3.0 * double(pairs) * double(D) * double(I);
        const std::string op = "routed experts (" + std::to_string(distinct.size()) + " active)";
        const std::string shape = std::to_string(E) + "x FP4 " + std::to_string(D) + "/" + std::to_string(I);
        time_projections(report, op, shape, c, routed_sets, &g, pairs, bytes, flops);
        if (prefill) time_dense_reference(report, op, shape, c, bytes, flops);
    }
    routed.clear();
    if (prefill) return;  // at prefill sizes the shared expert runs as linears (the linear tables' shared w1|w3, w2)
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

void expert_perf(PerfReport& report) { time_cases(report, 0, kPerfPrefillTokens, false); }
void expert_prefill_perf(PerfReport& report) {
    time_cases(report, kPerfPrefillTokens, std::numeric_limits<int>::max(), true);
}

FS_PERF_SUITE("experts", expert_perf);
FS_PERF_SUITE("experts prefill", expert_prefill_perf);

}  // namespace
}  // namespace flashseek::test
