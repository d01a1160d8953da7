// Micro-benchmark mode of the linear-algebra harness (`test_cuda_linear --bench [--json FILE] [--prefill]`): decode-shaped
// problems at the V4-Flash shapes, each timed as CUDA-graph replays of many calls that rotate over enough weight
// copies to defeat the 60 MB L2, against the device-to-device copy bandwidth measured here (bytes read + written).
// Reports microseconds per call, achieved GB/s and the fraction of copy bandwidth.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench.h"
#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "cuda/gemm/linear.cuh"
#include "cuda/gemm/linear_catalogue.h"

namespace flashseek::test {

double measure_copy_bandwidth() {
    const size_t bytes = size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    cuda::fill_random(a, bytes, cuda::FillKind::BYTES, 1, 0.f, nullptr);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    std::vector<float> ms;
    for (int r = 0; r < 10; ++r) {
        CUDA_CHECK(cudaEventRecord(e0));
        CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return 2.0 * double(bytes) / (double(ms[ms.size() / 2]) * 1e-3);
}

double time_graph_per_call(const std::function<void(cudaStream_t, int)>& call, int calls) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < calls; ++i) call(s, i);  // warm-up, outside the graph
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) call(s, i);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    std::vector<float> ms;
    for (int r = 0; r < 7; ++r) {
        CUDA_CHECK(cudaEventRecord(e0, s));
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaStreamDestroy(s));
    return double(ms[ms.size() / 2]) * 1e3 / calls;  // microseconds per call
}

namespace {

struct DenseShape {
    const char* name;
    cuda::WeightKind kind;
    int64_t out, in;
    int groups;
};

// One weight copy (weight + scale) on the device, filled with random values of its format.
struct WeightCopy {
    void* w = nullptr;
    void* s = nullptr;
    size_t bytes = 0;
};

WeightCopy alloc_weight(cuda::WeightKind kind, int64_t out, int64_t in, uint64_t seed) {
    WeightCopy c;
    size_t wb = 0, sb = 0;
    if (kind == cuda::WeightKind::FP8_BLOCK128) {
        wb = size_t(out * in);
        sb = size_t(((out + 127) / 128) * ((in + 127) / 128));
    } else if (kind == cuda::WeightKind::FP4_BLOCK32) {
        wb = size_t(out * in / 2);
        sb = size_t(out * (in / 32));
    } else {
        wb = size_t(out * in * 2);
    }
    CUDA_CHECK(cudaMalloc(&c.w, wb));
    if (kind == cuda::WeightKind::FP8_BLOCK128) cuda::fill_random(c.w, wb, cuda::FillKind::E4M3, seed, 0, nullptr);
    if (kind == cuda::WeightKind::FP4_BLOCK32) cuda::fill_random(c.w, wb, cuda::FillKind::BYTES, seed, 0, nullptr);
    if (kind == cuda::WeightKind::BF16) cuda::fill_random(c.w, wb / 2, cuda::FillKind::BF16, seed, 0.05f, nullptr);
    if (sb) {
        CUDA_CHECK(cudaMalloc(&c.s, sb));
        cuda::fill_random(c.s, sb, cuda::FillKind::E8M0, seed + 1, float(118 + 256 * 124), nullptr);
    }
    c.bytes = wb + sb;
    return c;
}
void free_weight(WeightCopy& c) {
    if (c.w) cudaFree(c.w);
    if (c.s) cudaFree(c.s);
    c = WeightCopy{};
}

}  // namespace

void bench_dense(double copy_bw, std::vector<BenchRow>& rows) {
    const std::vector<DenseShape> shapes = {
        {"wq_a 4096->1024", cuda::WeightKind::FP8_BLOCK128, 1024, 4096, 1},
        {"wkv 4096->512", cuda::WeightKind::FP8_BLOCK128, 512, 4096, 1},
        {"wq_b 1024->32768", cuda::WeightKind::FP8_BLOCK128, 32768, 1024, 1},
        {"wo_a 8x(4096->1024)", cuda::WeightKind::FP8_BLOCK128, 8192, 4096, 8},
        {"wo_b 8192->4096", cuda::WeightKind::FP8_BLOCK128, 4096, 8192, 1},
        {"shared w1|w3 4096->4096", cuda::WeightKind::FP8_BLOCK128, 4096, 4096, 1},
        {"shared w2 2048->4096", cuda::WeightKind::FP8_BLOCK128, 4096, 2048, 1},
        {"compressor wkv bf16 4096->1024", cuda::WeightKind::BF16, 1024, 4096, 1},
        {"head bf16 4096->129280", cuda::WeightKind::BF16, 129280, 4096, 1},
        {"fp4 expert-shaped 4096->2048", cuda::WeightKind::FP4_BLOCK32, 2048, 4096, 1},
    };
    cuda::GemmWorkspace ws = cuda::create_gemm_workspace();
    for (const auto& sh : shapes) {
        const int64_t K = sh.in * sh.groups;
        WeightCopy probe = alloc_weight(sh.kind, sh.out, sh.in, 7);
        const size_t one = probe.bytes;
        free_weight(probe);
        const int copies = int(std::max<size_t>(1, (size_t(400) << 20) / one + 1));
        std::vector<WeightCopy> ws_copies;
        for (int i = 0; i < copies; ++i) ws_copies.push_back(alloc_weight(sh.kind, sh.out, sh.in, 100 + i));
        for (int64_t M : {1, 3, 8, 16, 64}) {
            // Every catalogue variant that supports the problem, forced (the default choice marked).
            void* x = nullptr;
            CUDA_CHECK(cudaMalloc(&x, size_t(M * K) * 2));
            cuda::fill_random(x, size_t(M * K), cuda::FillKind::BF16, 3, 1.f, nullptr);
            uint16_t* pv = nullptr;
            float* ps = nullptr;
            CUDA_CHECK(cudaMalloc(&pv, cuda::prepared_values_bytes(M, K)));
            CUDA_CHECK(cudaMalloc(&ps, cuda::prepared_scales_bytes(M, K)));
            cuda::PreparedActivation p;
            p.values = pv;
            p.scales = ps;
            const auto numerics = sh.kind == cuda::WeightKind::BF16 ? cuda::ActNumerics::EXACT
                                                                    : cuda::ActNumerics::FP8_BLOCK128;
            cuda::prepare_activation(x, false, M, K, K, sh.kind, numerics, p, nullptr);
            const bool f32_out = sh.kind == cuda::WeightKind::BF16;
            const auto weight = [&](int i) {
                return cuda::DeviceLinear{sh.kind,
                                          sh.kind == cuda::WeightKind::BF16 ? cuda::ScaleKind::NONE
                                                                             : cuda::ScaleKind::E8M0,
                                          sh.out, sh.in, ws_copies[size_t(i % copies)].w,
                                          ws_copies[size_t(i % copies)].s};
            };
            const std::string_view chosen = cuda::plan_linear(p, weight(0), sh.groups, &ws).variant;
            void* y = nullptr;
            CUDA_CHECK(cudaMalloc(&y, size_t(M * sh.out) * 4));
            for (const cuda::LinearVariant& v : cuda::linear_variants()) {
                if (!v.supports(cuda::LinearCall{p, weight(0), sh.groups, &ws})) continue;
                const cuda::KernelPolicy only = cuda::KernelPolicy::only(v.name);
                const int calls = std::max(copies, 20);
                const double us = time_graph_per_call(
                    [&](cudaStream_t s, int i) {
                        cuda::grouped_linear(p, weight(i), sh.groups, y,
                                             f32_out ? cuda::OutKind::F32 : cuda::OutKind::BF16, sh.out, &ws, s, only);
                    },
                    calls);
                const auto plan = cuda::plan_linear(p, weight(0), sh.groups, &ws, only);
                BenchRow r;
                r.name = sh.name;
                r.m = M;
                r.bytes = double(one);
                r.us = us;
                r.gbps = double(one) / (us * 1e-6) / 1e9;
                r.fraction = r.gbps * 1e9 / copy_bw;
                r.note = std::string(v.name) + (v.name == chosen ? " (default)" : "") +
                         " splits=" + std::to_string(plan.k_splits) + " tok/pass=" +
                         std::to_string(plan.tokens_per_pass);
                rows.push_back(r);
                print_row(r);
            }
            CUDA_CHECK(cudaFree(x));
            CUDA_CHECK(cudaFree(pv));
            CUDA_CHECK(cudaFree(ps));
            CUDA_CHECK(cudaFree(y));
        }
        for (auto& c : ws_copies) free_weight(c);
    }
    cuda::destroy_gemm_workspace(ws);
}

void print_row(const BenchRow& r) {
    std::printf("%-34s M=%-3lld %10.1f us %9.2f MB %8.1f GB/s %6.1f%%  %s\n", r.name.c_str(), (long long)r.m, r.us,
                r.bytes / 1e6, r.gbps, 100.0 * r.fraction, r.note.c_str());
    std::fflush(stdout);
}

int run_benchmarks(int argc, char** argv) {
    std::string json_path;
    bool only_moe = false, only_dense = false, prefill = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
        if (std::strcmp(argv[i], "--moe-only") == 0) only_moe = true;
        if (std::strcmp(argv[i], "--dense-only") == 0) only_dense = true;
        if (std::strcmp(argv[i], "--prefill") == 0) prefill = true;  // only the compute-bound GEMMs (bench_gemm.cpp)
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const double bw = measure_copy_bandwidth();
    std::printf("device: %s (sm_%d%d, %d SMs); copy bandwidth %.0f GB/s (read + write)\n", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount, bw / 1e9);
    std::vector<BenchRow> rows;
    if (prefill) {
        bench_prefill(rows);
    } else {
        if (!only_moe) bench_dense(bw, rows);
        if (!only_dense) bench_moe(bw, rows);
    }
    if (!json_path.empty()) {
        FILE* f = std::fopen(json_path.c_str(), "w");
        if (f) {
            std::fprintf(f, "{\"device\": \"%s\", \"copy_gbps\": %.1f, \"rows\": [\n", prop.name, bw / 1e9);
            for (size_t i = 0; i < rows.size(); ++i)
                std::fprintf(f, "  {\"name\": \"%s\", \"m\": %lld, \"us\": %.2f, \"bytes\": %.0f, \"gbps\": %.1f, "
                                "\"fraction\": %.4f, \"note\": \"%s\"}%s\n",
                             rows[i].name.c_str(), (long long)rows[i].m, rows[i].us, rows[i].bytes, rows[i].gbps,
                             rows[i].fraction, rows[i].note.c_str(), i + 1 < rows.size() ? "," : "");
            std::fprintf(f, "]}\n");
            std::fclose(f);
        }
    }
    return 0;
}

}  // namespace flashseek::test
