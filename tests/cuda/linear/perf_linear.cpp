// Perf suite of the linear family (`test_cuda_linear --perf`): every case of the perf list (linear_family.cpp: the
// V4-Flash linears at decode and prefill token counts) through every catalogue variant that supports it, the
// default choice marked. Each row times CUDA-graph replays of calls that rotate over weight copies larger than L2
// (compute-bound prefill passes rotate over fewer: their weights are read once per many FLOPs). Bytes: the weight
// and its scales, the prepared activation read (f16 values and block scales) and the output written. FLOPs: 2 per
// multiply-add, held against the FP8 GEMM rate in release numerics and the BF16 rate otherwise.
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "device_buffer.h"
#include "cuda/gemm/linear_catalogue.h"
#include "linear_family.h"
#include "perf_report.h"
#include "perf_suite.h"
#include "perf_weights.h"

namespace flashseek::test {
namespace {

using cuda::KernelPolicy;

std::string shape_of(const LinearCase& c) {
    static const char* kinds[] = {"BF16", "FP8", "FP4"};
    std::string s = std::to_string(c.K) + "->" + std::to_string(c.N / c.groups);
    if (c.groups > 1) s = std::to_string(c.groups) + "x(" + s + ")";
    return s + " " + kinds[int(c.kind)];
}

void time_case(const LinearCase& c, const std::vector<PerfWeight>& copies, const cuda::GemmWorkspace& ws,
               PerfReport& report) {
    const int64_t Kx = c.x_width();
    DeviceBuffer x(size_t(c.M * Kx) * 2), pv(cuda::prepared_values_bytes(c.M, Kx)),
        ps(cuda::prepared_scales_bytes(c.M, Kx));
    const size_t out_elem = c.out == cuda::OutKind::F32 ? 4 : 2;
    DeviceBuffer y(size_t(c.M * c.N) * out_elem);
    cuda::fill_random(x.ptr, size_t(c.M * Kx), cuda::FillKind::BF16, 3, 1.f, nullptr);
    cuda::PreparedActivation p;
    p.values = static_cast<uint16_t*>(pv.ptr);
    p.scales = static_cast<float*>(ps.ptr);
    cuda::prepare_activation(x.ptr, false, c.M, Kx, Kx, c.kind, c.numerics, p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const cuda::DeviceLinear w0 = copies[0].device();
    const std::string_view default_variant = cuda::plan_linear(p, w0, c.groups, &ws, KernelPolicy{}).variant;
    const int n_copies = int(copies.size());
    // Decode passes: many calls per graph; prefill passes: a few (each is long).
    const int calls = c.M >= 512 ? std::clamp(n_copies, 2, 8) : std::max(n_copies, 20);
    const double act_bytes = double(p.m * p.k_pad) * 2 + double(p.m * (p.k_pad / 128)) * 4;
    for (const cuda::LinearVariant& v : cuda::linear_variants()) {
        if (!v.supports(cuda::LinearCall{p, w0, c.groups, &ws})) continue;
        const KernelPolicy only = KernelPolicy::only(v.name);
        const cuda::LinearPlan plan = cuda::plan_linear(p, w0, c.groups, &ws, only);
        const double us = time_graph_per_call(
            [&](cudaStream_t s, int i) {
                const cuda::DeviceLinear w = copies[size_t(i % n_copies)].device();
                if (c.groups > 1)
                    cuda::grouped_linear(p, w, c.groups, y.ptr, c.out, c.N, &ws, s, only);
                else
                    cuda::linear(p, w, y.ptr, c.out, c.N, &ws, s, only);
            },
            calls);
        PerfRow r;
        r.op = c.what;
        r.shape = shape_of(c);
        r.m = c.M;
        r.variant = std::string(v.name);
        r.is_default = v.name == default_variant;
        r.us = us;
        r.bytes = double(copies[0].bytes) + act_bytes + double(c.M * c.N) * double(out_elem);
        r.flops = 2.0 * double(c.M) * double(c.N) * double(c.K);
        r.flop_ceiling = c.numerics == cuda::ActNumerics::FP8_BLOCK128 ? FlopCeiling::FP8 : FlopCeiling::BF16;
        r.note = "splits=" + std::to_string(plan.k_splits) + " tok/pass=" + std::to_string(plan.tokens_per_pass) +
                 " copies=" + std::to_string(n_copies);
        report.add(std::move(r));
    }
}

void linear_perf(PerfReport& report) {
    cuda::GemmWorkspace ws = cuda::create_gemm_workspace();
    const auto cases = linear_cases();
    // Cases of one op share their weight copies.
    for (size_t i = 0; i < cases.size();) {
        const LinearCase& first = cases[i];
        const size_t one = weight_bytes(first.kind, first.N, first.K);
        const int n = rotation_copies(one);
        std::vector<PerfWeight> copies;
        for (int k = 0; k < n; ++k) copies.emplace_back(first.kind, first.N, first.K, 100 + uint64_t(k));
        for (; i < cases.size() && cases[i].what == first.what; ++i) time_case(cases[i], copies, ws, report);
    }
    cuda::destroy_gemm_workspace(ws);
}

FS_PERF_SUITE("linear", linear_perf);

}  // namespace
}  // namespace flashseek::test
