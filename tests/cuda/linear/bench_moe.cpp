// MoE part of the micro-benchmark mode: one V4-Flash MoE layer's routed experts (FP4, hidden 4096, inter 2048,
// 256 experts) at decode batch sizes, routing chosen so that exactly 6 (M=1) or ~81 (M=16, uniform random top-6)
// distinct experts are active, timed as up + down kernels (the two weight-streaming launches), rotating over
// several expert sets to defeat L2. Bytes = distinct experts x 3 matrices x (packed FP4 + scales).
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench.h"
#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "cuda/moe/moe.cuh"
#include "cuda/moe/moe_catalogue.h"

namespace flashseek::test {

void bench_moe(double copy_bw, std::vector<BenchRow>& rows) {
    const int E = 256, K = 6;
    const int64_t D = 4096, I = 2048;
    const size_t mat_w = size_t(I * D / 2), mat_s = size_t(I * D / 32);
    const int sets = 3;  // 3 x 256 experts x 13.4 MB = 10 GB: every call reads from DRAM
    std::vector<void*> allocations;
    std::vector<cuda::ExpertTable> tables;
    for (int st = 0; st < sets; ++st) {
        std::vector<const void*> ptrs[6];
        for (int e = 0; e < E; ++e)
            for (int m = 0; m < 3; ++m) {
                void *w = nullptr, *s = nullptr;
                CUDA_CHECK(cudaMalloc(&w, mat_w));
                CUDA_CHECK(cudaMalloc(&s, mat_s));
                cuda::fill_random(w, mat_w, cuda::FillKind::BYTES, uint64_t(st * 10000 + e * 3 + m), 0, nullptr);
                cuda::fill_random(s, mat_s, cuda::FillKind::E8M0, uint64_t(st * 10000 + e * 3 + m + 5000),
                                  float(118 + 256 * 122), nullptr);
                allocations.push_back(w);
                allocations.push_back(s);
                ptrs[2 * m].push_back(w);
                ptrs[2 * m + 1].push_back(s);
            }
        cuda::ExpertTable t;
        t.kind = cuda::WeightKind::FP4_BLOCK32;
        t.scale_kind = cuda::ScaleKind::E8M0;
        t.hidden = D;
        t.inter = I;
        const void** dev[6];
        for (int i = 0; i < 6; ++i) {
            void* p = nullptr;
            CUDA_CHECK(cudaMalloc(&p, E * sizeof(void*)));
            CUDA_CHECK(cudaMemcpy(p, ptrs[i].data(), E * sizeof(void*), cudaMemcpyHostToDevice));
            allocations.push_back(p);
            dev[i] = static_cast<const void**>(p);
        }
        t.w1 = dev[0]; t.w1_scale = dev[1]; t.w3 = dev[2]; t.w3_scale = dev[3]; t.w2 = dev[4]; t.w2_scale = dev[5];
        t.scales_aligned16 = true;
        tables.push_back(t);
    }
    std::mt19937_64 rng(42);
    for (int64_t M : {1, 8, 16, 64}) {
        // Uniform random top-6 per token.
        std::vector<int32_t> idx(size_t(M * K));
        std::vector<float> wts(size_t(M * K), 1.f / K);
        std::set<int> distinct;
        for (int64_t m = 0; m < M; ++m) {
            std::vector<int> perm(E);
            for (int e = 0; e < E; ++e) perm[size_t(e)] = e;
            std::shuffle(perm.begin(), perm.end(), rng);
            for (int j = 0; j < K; ++j) {
                idx[size_t(m * K + j)] = perm[size_t(j)];
                distinct.insert(perm[size_t(j)]);
            }
        }
        void *didx = nullptr, *dw = nullptr, *gmem = nullptr, *tmem = nullptr, *x = nullptr, *y = nullptr;
        CUDA_CHECK(cudaMalloc(&didx, idx.size() * 4));
        CUDA_CHECK(cudaMalloc(&dw, wts.size() * 4));
        CUDA_CHECK(cudaMemcpy(didx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dw, wts.data(), wts.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMalloc(&gmem, cuda::moe_grouping_bytes(E, M * K)));
        cuda::MoeGrouping g = cuda::moe_grouping_view(gmem, E, M * K);
        CUDA_CHECK(cudaMalloc(&tmem, cuda::moe_act_tile_bytes(E, M * K, D)));
        cuda::moe_attach_act_tiles(g, tmem, D);
        cuda::moe_group(static_cast<int32_t*>(didx), static_cast<float*>(dw), M, K, g, nullptr);
        CUDA_CHECK(cudaMalloc(&x, size_t(M * D) * 2));
        cuda::fill_random(x, size_t(M * D), cuda::FillKind::BF16, 9, 1.f, nullptr);
        uint16_t *pv = nullptr, *hv = nullptr;
        float *ps = nullptr, *hs = nullptr;
        CUDA_CHECK(cudaMalloc(&pv, cuda::prepared_values_bytes(M, D)));
        CUDA_CHECK(cudaMalloc(&ps, cuda::prepared_scales_bytes(M, D)));
        CUDA_CHECK(cudaMalloc(&hv, cuda::prepared_values_bytes(M * K, I)));
        CUDA_CHECK(cudaMalloc(&hs, cuda::prepared_scales_bytes(M * K, I)));
        CUDA_CHECK(cudaMalloc(&y, size_t(M * K * D) * 4));
        cuda::PreparedActivation p;
        p.values = pv;
        p.scales = ps;
        cuda::prepare_activation(x, false, M, D, D, cuda::WeightKind::FP4_BLOCK32, cuda::ActNumerics::FP8_BLOCK128, p,
                                 nullptr);
        cuda::PreparedActivation h;
        h.values = hv;
        h.scales = hs;
        // Every expert variant that supports the up-projection on the prepared input, forced (the default marked).
        const cuda::ExpertCall call{true, p, tables[0], &g, M, K, cuda::ActNumerics::FP8_BLOCK128};
        const std::string_view chosen = cuda::choose_experts(call, cuda::KernelPolicy{}).name;
        for (const cuda::ExpertVariant& v : cuda::expert_variants()) {
            if (!v.supports(call)) continue;
            const cuda::KernelPolicy only = cuda::KernelPolicy::only(v.name);
            const double us = time_graph_per_call(
                [&](cudaStream_t s, int i) {
                    const auto& t = tables[size_t(i % sets)];
                    cuda::moe_expert_up(p, t, &g, M, K, 10.f, cuda::ActNumerics::FP8_BLOCK128, h, s, only);
                    cuda::moe_expert_down(h, t, &g, M, K, static_cast<float*>(y), s, only);
                },
                12);
            BenchRow r;
            r.name = "moe routed FP4 (" + std::to_string(distinct.size()) + " experts)";
            r.m = M;
            r.bytes = double(distinct.size()) * 3.0 * double(mat_w + mat_s);
            r.us = us;
            r.gbps = r.bytes / (us * 1e-6) / 1e9;
            r.fraction = r.gbps * 1e9 / copy_bw;
            r.note = std::string(v.name) + (v.name == chosen ? " (default)" : "") + " up+down";
            rows.push_back(r);
            print_row(r);
        }
        for (void* q : {didx, dw, gmem, tmem, x, y}) CUDA_CHECK(cudaFree(q));
        for (void* q : {static_cast<void*>(pv), static_cast<void*>(ps), static_cast<void*>(hv), static_cast<void*>(hs)})
            CUDA_CHECK(cudaFree(q));
    }
    for (void* q : allocations) CUDA_CHECK(cudaFree(q));
}

}  // namespace flashseek::test
