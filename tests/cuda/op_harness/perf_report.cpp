// Perf mode's rows, verdicts, table and JSON, and the CUDA-graph timer (perf_report.h).
#include "perf_report.h"

#include <algorithm>
#include <cstdio>

#include "cuda/common/check.cuh"
#include "perf_ceilings.h"

namespace flashseek::test {

Roofline roofline(const PerfRow& row) {
    const Ceilings& c = measured_ceilings();
    const double rate = row.flop_ceiling == FlopCeiling::FP8 ? c.fp8_flops_per_s : c.bf16_flops_per_s;
    const double t_bytes = c.copy_bytes_per_s > 0 ? row.bytes / c.copy_bytes_per_s : 0;
    const double t_flops = rate > 0 ? row.flops / rate : 0;
    Roofline r;
    if (row.us <= 0) return r;
    // Without a measured GEMM rate only the copy ceiling can judge the row: "copy?" says the FLOP bound is unknown.
    if (row.flops > 0 && rate <= 0) {
        r.bound = "copy?";
        r.fraction = t_bytes / (row.us * 1e-6);
        return r;
    }
    if (t_bytes >= t_flops) {
        r.bound = "copy";
        r.fraction = t_bytes / (row.us * 1e-6);
    } else {
        r.bound = row.flop_ceiling == FlopCeiling::FP8 ? "fp8" : "bf16";
        r.fraction = t_flops / (row.us * 1e-6);
    }
    return r;
}

void PerfReport::add(PerfRow row) {
    row.family = family_;
    rows_.push_back(std::move(row));
}

void PerfReport::print_table(const std::string& family) const {
    const Ceilings& c = measured_ceilings();
    std::printf("\n== %s (device %s; copy %.0f GB/s, FP8 GEMM %.0f TFLOP/s, BF16 GEMM %.0f TFLOP/s)\n", family.c_str(),
                c.device.c_str(), c.copy_bytes_per_s / 1e9, c.fp8_flops_per_s / 1e12, c.bf16_flops_per_s / 1e12);
    if (!c.gemm_note.empty()) std::printf("   %s\n", c.gemm_note.c_str());
    std::printf("%-30s %-26s %5s %-18s %10s %8s %8s %5s %7s  %s\n", "op", "shape", "M", "variant (*default)", "us",
                "GB/s", "TFLOP/s", "bound", "ceiling", "plan");
    for (const PerfRow& r : rows_) {
        if (r.family != family) continue;
        const Roofline v = roofline(r);
        const std::string variant = r.variant + (r.is_default ? " *" : "");
        const double secs = r.us * 1e-6;
        std::printf("%-30s %-26s %5lld %-18s %10.2f %8.1f %8.1f %5s %6.1f%%  %s\n", r.op.c_str(), r.shape.c_str(),
                    (long long)r.m, variant.c_str(), r.us, secs > 0 ? r.bytes / secs / 1e9 : 0.0,
                    secs > 0 ? r.flops / secs / 1e12 : 0.0, v.bound, 100.0 * v.fraction, r.note.c_str());
    }
    std::fflush(stdout);
}

namespace {
std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') out += '\\';
        if (static_cast<unsigned char>(ch) < 0x20) continue;  // names never carry control characters
        out += ch;
    }
    return out + "\"";
}
}  // namespace

void PerfReport::write_json(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "perf: cannot write %s\n", path.c_str());
        return;
    }
    const Ceilings& c = measured_ceilings();
    std::fprintf(f, "{\"device\": %s, \"copy_gbps\": %.1f, \"fp8_tflops\": %.1f, \"bf16_tflops\": %.1f, \"rows\": [\n",
                 json_string(c.device).c_str(), c.copy_bytes_per_s / 1e9, c.fp8_flops_per_s / 1e12,
                 c.bf16_flops_per_s / 1e12);
    for (size_t i = 0; i < rows_.size(); ++i) {
        const PerfRow& r = rows_[i];
        const Roofline v = roofline(r);
        std::fprintf(f,
                     "  {\"family\": %s, \"op\": %s, \"shape\": %s, \"m\": %lld, \"variant\": %s, \"default\": %s, "
                     "\"us\": %.3f, \"bytes\": %.0f, \"flops\": %.0f, \"bound\": \"%s\", \"fraction\": %.4f, "
                     "\"note\": %s}%s\n",
                     json_string(r.family).c_str(), json_string(r.op).c_str(), json_string(r.shape).c_str(),
                     (long long)r.m, json_string(r.variant).c_str(), r.is_default ? "true" : "false", r.us, r.bytes,
                     r.flops, v.bound, v.fraction, json_string(r.note).c_str(), i + 1 < rows_.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
}

double median_call_ms(const std::function<void(cudaStream_t)>& op, int warmups, int reps, cudaStream_t stream) {
    for (int i = 0; i < warmups; ++i) op(stream);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < std::max(1, reps); ++r) {
        CUDA_CHECK(cudaEventRecord(e0, stream));
        op(stream);
        CUDA_CHECK(cudaEventRecord(e1, stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return double(ms[ms.size() / 2]);
}

double time_graph_per_call(const std::function<void(cudaStream_t, int)>& call, int calls, int replays) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < calls; ++i) call(s, i);  // warm-up (and one-time attribute setup) outside the graph
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) call(s, i);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    // The first replay (untimed) uploads the graph.
    const double ms = median_call_ms([&](cudaStream_t st) { CUDA_CHECK(cudaGraphLaunch(exec, st)); }, 1, replays, s);
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(s));
    return ms * 1e3 / calls;
}

size_t rotation_bytes() {
    int dev = 0, l2 = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    return std::max<size_t>(size_t(400) << 20, size_t(4) * size_t(l2));
}

int rotation_copies(size_t bytes_per_copy) {
    return int(std::max<size_t>(1, (rotation_bytes() + bytes_per_copy - 1) / std::max<size_t>(1, bytes_per_copy)));
}

}  // namespace flashseek::test
