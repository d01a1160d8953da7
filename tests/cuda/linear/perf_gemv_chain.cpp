// Perf suite "gemv_chain" (`test_cuda_linear --perf gemv_chain`): V4-Flash's wo_a -> wo_b at one token as the
// persistent chain (cuda/gemm/gemv_chain.cuh) against what it replaces — grouped simt_gemv for wo_a, the
// preparation of its output, simt_gemv for wo_b — each timed as CUDA-graph replays rotating over weight copies
// larger than L2 (the backend's graphs launch the same way, with PDL), both at the default split-K workspace's
// splits. Bytes: both weights with their scales. Printed beside the table: the same with a small kernel after each
// call (the step's situation: the cost of the kernel boundaries) and the chain's phases from its globaltimer trace
// (medians over CTAs of one traced launch, microseconds after the earliest CTA start), where the stream or the
// handover waits.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "cuda/gemm/gemv_chain.cuh"
#include "cuda/gemm/linear_catalogue.h"
#include "device_buffer.h"
#include "perf_report.h"
#include "perf_suite.h"
#include "perf_weights.h"

namespace flashseek::test {
namespace {

constexpr int kGroups = 8;
constexpr int64_t kGroupRows = 1024, kGroupIn = 4096, kHidden = 4096;  // V4-Flash: o_groups, o_lora_rank, ...

std::string fixed2(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

void perf_gemv_chain(PerfReport& report) {
    using cuda::WeightKind;
    const int64_t mid_n = kGroups * kGroupRows, x_n = kGroups * kGroupIn;
    const size_t pair_bytes = weight_bytes(WeightKind::FP8_BLOCK128, mid_n, kGroupIn) +
                              weight_bytes(WeightKind::FP8_BLOCK128, kHidden, mid_n);
    const int copies = rotation_copies(pair_bytes);
    std::vector<PerfWeight> wa, wb;
    for (int i = 0; i < copies; ++i) {
        wa.emplace_back(WeightKind::FP8_BLOCK128, mid_n, kGroupIn, 11 + i);
        wb.emplace_back(WeightKind::FP8_BLOCK128, kHidden, mid_n, 101 + i);
    }
    DeviceBuffer x(size_t(x_n) * 2), xv(cuda::prepared_values_bytes(1, x_n)), xs(cuda::prepared_scales_bytes(1, x_n));
    DeviceBuffer mid(size_t(mid_n) * 2), mv(cuda::prepared_values_bytes(1, mid_n)),
        ms(cuda::prepared_scales_bytes(1, mid_n)), y(size_t(kHidden) * 2);
    cuda::fill_random(x.ptr, size_t(x_n), cuda::FillKind::BF16, 5, 1.f, nullptr);
    cuda::PreparedActivation ax;
    ax.values = static_cast<uint16_t*>(xv.ptr);
    ax.scales = static_cast<float*>(xs.ptr);
    cuda::prepare_activation(x.ptr, false, 1, x_n, x_n, WeightKind::FP8_BLOCK128, cuda::ActNumerics::EXACT, ax, nullptr);
    cuda::PreparedActivation az;
    az.values = static_cast<uint16_t*>(mv.ptr);
    az.scales = static_cast<float*>(ms.ptr);
    cuda::describe_prepared(az, WeightKind::FP8_BLOCK128, cuda::ActNumerics::FP8_BLOCK128, 1, mid_n);
    cuda::GemmWorkspace ws = cuda::create_gemm_workspace();
    const cuda::KernelPolicy simt = cuda::KernelPolicy::only("simt_gemv");
    const cuda::LinearPlan plan_a = cuda::plan_linear(ax, wa[0].device(), kGroups, &ws, simt);
    const cuda::LinearPlan plan_b = cuda::plan_linear(az, wb[0].device(), 1, &ws, simt);
    const auto* mid16 = static_cast<const uint16_t*>(mid.ptr);

    // The per-kernel path (the three launches) and the chain, on weight copy i % copies.
    const auto run_three = [&](cudaStream_t s, int i) {
        cuda::grouped_linear(ax, wa[size_t(i % copies)].device(), kGroups, mid.ptr, cuda::OutKind::BF16, mid_n,
                         &ws, s, simt);
        cuda::prepare_activation(mid16, false, 1, mid_n, mid_n, WeightKind::FP8_BLOCK128,
                         cuda::ActNumerics::FP8_BLOCK128, az, s);
        cuda::linear(az, wb[size_t(i % copies)].device(), y.ptr, cuda::OutKind::BF16, kHidden, &ws, s, simt);
    };
    const double two_us = time_graph_per_call(run_three, std::max(copies, 20));
    DeviceBuffer counters(64);
    CUDA_CHECK(cudaMemset(counters.ptr, 0, 64));
    cuda::GemvChain c;
    c.x = &ax;
    c.groups = kGroups;
    c.splits_a = plan_a.k_splits;
    c.splits_b = plan_b.k_splits;
    c.numerics_b = cuda::ActNumerics::FP8_BLOCK128;
    c.mid = static_cast<uint16_t*>(mid.ptr);
    c.mid_values = az.values;
    c.mid_scales = az.scales;
    c.y = y.ptr;
    c.counters = static_cast<uint32_t*>(counters.ptr);
    c.n_counters = 16;
    const auto run_chain = [&](cudaStream_t s, int i) {
        c.a = wa[size_t(i % copies)].device();
        c.b = wb[size_t(i % copies)].device();
        cuda::gemv_chain(c, s);
    };
    const double chain_us = time_graph_per_call(run_chain, std::max(copies, 20));

    // The chain between small kernels, as in the step: each call followed by one activation preparation (a
    // kernel with little shared memory), against the two timed apart. A cost of the boundaries themselves (an SM
    // reconfiguring its shared-memory carveout between a 176 KB kernel and its neighbours) shows as the difference.
    const auto prepare_x = [&](cudaStream_t s) {
        cuda::prepare_activation(x.ptr, false, 1, x_n, x_n, WeightKind::FP8_BLOCK128, cuda::ActNumerics::EXACT, ax, s);
    };
    const double prep_us = time_graph_per_call([&](cudaStream_t s, int) { prepare_x(s); }, std::max(copies, 20));
    const double chain_prep_us = time_graph_per_call(
        [&](cudaStream_t s, int i) {
            run_chain(s, i);
            prepare_x(s);
        },
        std::max(copies, 20));
    const double two_prep_us = time_graph_per_call(
        [&](cudaStream_t s, int i) {
            run_three(s, i);
            prepare_x(s);
        },
        std::max(copies, 20));
    std::printf("perf: gemv_chain between small kernels: chain + prepare %.2f us (chain %.2f + prepare %.2f apart); "
                "two launches + prepare + prepare %.2f us (%.2f + %.2f apart)\n",
                chain_prep_us, chain_us, prep_us, two_prep_us, two_us, prep_us);

    const std::string shape = "8x(4096->1024) + 8192->4096 FP8";
    const std::string splits = "splits " + std::to_string(plan_a.k_splits) + "/" + std::to_string(plan_b.k_splits);
    for (const bool chain : {false, true}) {
        PerfRow r;
        r.op = "wo_a -> wo_b (one token)";
        r.shape = shape;
        r.m = 1;
        r.variant = chain ? "gemv_chain" : "simt_gemv x2 + prepare";
        r.is_default = chain;
        r.us = chain ? chain_us : two_us;
        r.bytes = double(pair_bytes);
        r.note = splits + ", copies=" + std::to_string(copies) +
                 (chain ? ", " + fixed2(two_us / chain_us) + "x the two launches" : "");
        report.add(std::move(r));
    }

    // One traced launch (on a cold copy): the phases, medians over CTAs.
    c.a = wa[size_t(copies - 1)].device();
    c.b = wb[size_t(copies - 1)].device();
    const int grid = cuda::gemv_chain_grid(c);
    DeviceBuffer trace(size_t(grid) * cuda::kGemvChainTracePoints * 8);
    c.trace = static_cast<int64_t*>(trace.ptr);
    cuda::gemv_chain(c, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int64_t> t(size_t(grid) * cuda::kGemvChainTracePoints);
    CUDA_CHECK(cudaMemcpy(t.data(), trace.ptr, t.size() * 8, cudaMemcpyDeviceToHost));
    int64_t t0 = t[0];
    for (int b = 0; b < grid; ++b) t0 = std::min(t0, t[size_t(b) * cuda::kGemvChainTracePoints]);
    static const char* const kPhase[] = {"start",          "A input staged",  "A tiles done",
                                         "handover passed", "B input staged", "B tiles done",
                                         "loader's last copy issued", "warp 0's first A tile landed",
                                         "computed",       "its first B tile landed", "computed"};
    std::string phases;
    for (int p = 1; p < cuda::kGemvChainTracePoints; ++p) {
        std::vector<double> v;
        for (int b = 0; b < grid; ++b) v.push_back(double(t[size_t(b) * cuda::kGemvChainTracePoints + p] - t0) / 1e3);
        std::sort(v.begin(), v.end());
        phases += std::string(p > 1 ? "; " : "") + kPhase[p] + " " + fixed2(v[v.size() / 2]) + " (max " +
                  fixed2(v.back()) + ")";
    }
    std::printf("perf: gemv_chain trace, %d CTAs, us after the first start (median, max): %s\n", grid,
                phases.c_str());
    cuda::destroy_gemm_workspace(ws);
}

FS_PERF_SUITE("gemv_chain", perf_gemv_chain);

}  // namespace
}  // namespace flashseek::test
