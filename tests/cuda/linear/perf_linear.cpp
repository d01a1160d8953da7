// Perf suites of the linear family (`test_cuda_linear --perf`): every case of the perf list (linear_family.cpp: the
// V4-Flash linears at decode, around the compute-bound GEMMs' preference floor and at prefill token counts) through
// every catalogue variant that supports it, each from the activation format it takes (MMA_F16: prepare_activation;
// FP8_ROWS: prepare_activation_rows), the default choice marked (the variant the default policy runs from the format
// linear_input_format() names). Two tables: "linear" (fewer than kPerfPrefillRows rows) and "linear prefill"
// (prefill passes), which adds cuBLASLt on each shape (gemm_rate.h: FP8 e4m3 with per-tensor scales in release
// numerics, BF16 otherwise; grouped wo_a as its 8 products), the host cost of one TMA tensor-map encode (the wgmma
// GEMMs encode three per call) and per prefill size one CSA layer's linears summed (default variants and cuBLASLt).
// Each row times CUDA-graph replays of calls that rotate over weight copies larger than L2 (prefill passes rotate
// over fewer: their weights are read once per many FLOPs). Bytes: the weight and its scales, the activation read
// in its format and the output written. FLOPs: 2 per multiply-add, held against the FP8 GEMM rate in release
// numerics and the BF16 rate otherwise. The note gives the plan and the preparation's own time (not in `us`: one
// preparation serves every linear reading the same input).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "cuda/gemm/linear_catalogue.h"
#include "cuda/gemm/tensor_map.h"
#include "device_buffer.h"
#include "gemm_rate.h"
#include "linear_family.h"
#include "perf_report.h"
#include "perf_suite.h"
#include "perf_weights.h"

namespace flashseek::test {
namespace {

using cuda::ActFormat;
using cuda::KernelPolicy;

std::string shape_of(const LinearCase& c) {
    static const char* kinds[] = {"BF16", "FP8", "FP4"};
    std::string s = std::to_string(c.K) + "->" + std::to_string(c.N / c.groups);
    if (c.groups > 1) s = std::to_string(c.groups) + "x(" + s + ")";
    return s + " " + kinds[int(c.kind)];
}

std::string fixed(double v, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

// The case's activation in each format the variants may take, over its own storage.
struct CaseInputs {
    DeviceBuffer x, mma_values, mma_scales, rows_values, rows_scales;
    cuda::PreparedActivation mma, rows;
    bool has_rows = false;
    double prep_us[2] = {0, 0};  // per ActFormat: the preparation launch alone

    explicit CaseInputs(const LinearCase& c)
        : x(size_t(c.M * c.x_width()) * 2), mma_values(cuda::prepared_values_bytes(c.M, c.x_width())),
          mma_scales(cuda::prepared_scales_bytes(c.M, c.x_width())),
          rows_values(cuda::prepared_values_bytes(c.M, c.x_width())),
          rows_scales(cuda::prepared_scales_bytes(c.M, c.x_width())) {
        const int64_t Kx = c.x_width();
        cuda::fill_random(x.ptr, size_t(c.M * Kx), cuda::FillKind::BF16, 3, 1.f, nullptr);
        mma.values = static_cast<uint16_t*>(mma_values.ptr);
        mma.scales = static_cast<float*>(mma_scales.ptr);
        rows.values = static_cast<uint16_t*>(rows_values.ptr);
        rows.scales = static_cast<float*>(rows_scales.ptr);
        has_rows = c.kind == cuda::WeightKind::FP8_BLOCK128 && c.numerics == cuda::ActNumerics::FP8_BLOCK128;
        const auto* xb = static_cast<const uint16_t*>(x.ptr);
        prep_us[int(ActFormat::MMA_F16)] = time_graph_per_call(
            [&](cudaStream_t s, int) { cuda::prepare_activation(xb, false, c.M, Kx, Kx, c.kind, c.numerics, mma, s); },
            10);
        if (has_rows)
            prep_us[int(ActFormat::FP8_ROWS)] = time_graph_per_call(
                [&](cudaStream_t s, int) { cuda::prepare_activation_rows(xb, c.M, Kx, Kx, c.numerics, rows, s); }, 10);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    const cuda::PreparedActivation* input(ActFormat f) const {
        if (f == ActFormat::FP8_ROWS) return has_rows ? &rows : nullptr;
        return &mma;
    }
    // Bytes a linear reads of the activation in format f.
    static double bytes(const cuda::PreparedActivation& p) {
        if (p.format == ActFormat::FP8_ROWS)
            return double(p.m * p.fp8.codes_ld) + double((p.k_pad / 128) * p.fp8.scales_ld) * 4;
        return double(p.m * p.k_pad) * 2 + double(p.m * (p.k_pad / 128)) * 4;
    }
};

// What a case's timing gives the prefill table's layer sum.
struct CaseTimes {
    double default_us = 0;
    double cublaslt_us = -1;  // negative: not measured
};

CaseTimes time_case(const LinearCase& c, const std::vector<PerfWeight>& copies, const cuda::GemmWorkspace& ws,
                    bool with_cublaslt, PerfReport& report) {
    CaseInputs in(c);
    const size_t out_elem = c.out == cuda::OutKind::F32 ? 4 : 2;
    DeviceBuffer y(size_t(c.M * c.N) * out_elem);
    const cuda::DeviceLinear w0 = copies[0].device();
    const ActFormat default_format = cuda::linear_input_format(c.M, w0, c.groups, c.numerics);
    const cuda::PreparedActivation* default_in = in.input(default_format);
    const std::string default_variant =
        default_in ? std::string(cuda::plan_linear(*default_in, w0, c.groups, &ws, KernelPolicy{}).variant) : "";
    const int n_copies = int(copies.size());
    // Decode passes: many calls per graph; prefill passes: a few (each is long).
    const int calls = c.M >= kPerfPrefillRows ? std::clamp(n_copies, 2, 8) : std::max(n_copies, 20);
    const double flops = 2.0 * double(c.M) * double(c.N) * double(c.K);
    const FlopCeiling ceiling =
        c.numerics == cuda::ActNumerics::FP8_BLOCK128 ? FlopCeiling::FP8 : FlopCeiling::BF16;
    CaseTimes times;
    for (const cuda::LinearVariant& v : cuda::linear_variants()) {
        const cuda::PreparedActivation* x = in.input(v.format);
        if (x == nullptr || !v.supports(cuda::LinearCall{*x, w0, c.groups, &ws})) continue;
        const KernelPolicy only = KernelPolicy::only(v.name);
        const cuda::LinearPlan plan = cuda::plan_linear(*x, w0, c.groups, &ws, only);
        const double us = time_graph_per_call(
            [&](cudaStream_t s, int i) {
                const cuda::DeviceLinear w = copies[size_t(i % n_copies)].device();
                if (c.groups > 1)
                    cuda::grouped_linear(*x, w, c.groups, y.ptr, c.out, c.N, &ws, s, only);
                else
                    cuda::linear(*x, w, y.ptr, c.out, c.N, &ws, s, only);
            },
            calls);
        PerfRow r;
        r.op = c.what;
        r.shape = shape_of(c);
        r.m = c.M;
        r.variant = std::string(v.name);
        r.is_default = v.name == default_variant;
        r.us = us;
        r.bytes = double(copies[0].bytes) + CaseInputs::bytes(*x) + double(c.M * c.N) * double(out_elem);
        r.flops = flops;
        r.flop_ceiling = ceiling;
        r.note = "splits=" + std::to_string(plan.k_splits) + " tok/pass=" + std::to_string(plan.tokens_per_pass) +
                 " copies=" + std::to_string(n_copies) + " prep(" +
                 (v.format == ActFormat::FP8_ROWS ? "rows" : "mma") + ")=" + fixed(in.prep_us[int(v.format)], 1) +
                 "us";
        if (r.is_default) times.default_us = us;
        report.add(std::move(r));
    }
    if (with_cublaslt) {
        // cuBLASLt on the same product (per group for wo_a): the rate a library reaches without block scales.
        const GemmPrecision precision = ceiling == FlopCeiling::FP8 ? GemmPrecision::FP8_E4M3 : GemmPrecision::BF16;
        std::string why;
        double us = 0;
        for (int g = 0; g < c.groups && us >= 0; ++g) {
            const double one = cublaslt_gemm_us(precision, c.M, c.N / c.groups, c.K, &why);
            us = one < 0 ? -1 : us + one;
        }
        if (us > 0) {
            PerfRow r;
            r.op = c.what;
            r.shape = shape_of(c);
            r.m = c.M;
            r.variant = "cuBLASLt (ref)";
            r.us = us;
            const double in_bytes = precision == GemmPrecision::FP8_E4M3 ? 1 : 2;
            r.bytes = (double(c.M) * double(c.x_width()) + double(c.N) * double(c.K)) * in_bytes +
                      double(c.M * c.N) * 2;
            r.flops = flops;
            r.flop_ceiling = ceiling;
            r.note = std::string(precision == GemmPrecision::FP8_E4M3 ? "e4m3, per-tensor scales" : "bf16") +
                     ", bf16 out" + (c.groups > 1 ? ", " + std::to_string(c.groups) + " products" : "");
            times.cublaslt_us = us;
            report.add(std::move(r));
        } else {
            std::printf("perf: no cuBLASLt row for %s M=%lld: %s\n", c.what.c_str(), (long long)c.M, why.c_str());
        }
    }
    return times;
}

// The host cost of one TMA tensor-map encode (cuTensorMapEncodeTiled behind tma::make_2d, with its checks): the
// wgmma GEMMs encode three per call on the host, outside the GPU's time.
void time_tensor_map_encode(PerfReport& report) {
    DeviceBuffer buf(size_t(1) << 24);
    const int reps = 2000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
        (void)cuda::tma::make_2d(buf.ptr, cuda::tma::Element::U8, 4096, 4096, 4096, 128, 128, cuda::tma::Swizzle::B128,
                                 "perf");
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    PerfRow r;
    r.op = "tensor map encode (host)";
    r.shape = "4096x4096 U8, box 128x128";
    r.variant = "host";
    r.us = us;
    r.note = "per map; fp8_gemm encodes 3 per call";
    report.add(std::move(r));
}

// Times every case of the perf list in [min_rows, max_rows); cases of one op share their weight copies. Returns each
// case's times, in list order.
std::vector<std::pair<LinearCase, CaseTimes>> time_cases(PerfReport& report, int64_t min_rows, int64_t max_rows,
                                                        bool with_cublaslt) {
    cuda::GemmWorkspace ws = cuda::create_gemm_workspace();
    const auto cases = linear_cases();
    std::vector<std::pair<LinearCase, CaseTimes>> timed;
    auto in_table = [&](const LinearCase& c) { return c.M >= min_rows && c.M < max_rows; };
    for (size_t i = 0; i < cases.size();) {
        const LinearCase& first = cases[i];
        size_t end = i;
        bool any = false;
        for (; end < cases.size() && cases[end].what == first.what; ++end) any = any || in_table(cases[end]);
        if (any) {
            const int n = rotation_copies(weight_bytes(first.kind, first.N, first.K));
            std::vector<PerfWeight> copies;
            for (int k = 0; k < n; ++k) copies.emplace_back(first.kind, first.N, first.K, 100 + uint64_t(k));
            for (size_t j = i; j < end; ++j)
                if (in_table(cases[j]))
                    timed.emplace_back(cases[j], time_case(cases[j], copies, ws, with_cublaslt, report));
        }
        i = end;
    }
    cuda::destroy_gemm_workspace(ws);
    return timed;
}

void linear_perf(PerfReport& report) { time_cases(report, 0, kPerfPrefillRows, false); }

// One CSA layer's linears at each prefill size: the default variants' times summed with each op's layer_count, and
// cuBLASLt's (where it measured every op), with the tokens per second 43 such layers (V4-Flash's count) would allow
// from these GEMMs alone (attention, experts and the head excluded).
void add_layer_sums(const std::vector<std::pair<LinearCase, CaseTimes>>& timed, PerfReport& report) {
    struct Sum {
        double us = 0, ref_us = 0, flops = 0, bytes = 0;
        int ops = 0;
        bool ref_complete = true;
    };
    std::map<int64_t, Sum> sums;
    for (const auto& [c, t] : timed) {
        if (c.layer_count == 0) continue;
        Sum& s = sums[c.M];
        s.us += c.layer_count * t.default_us;
        s.flops += c.layer_count * 2.0 * double(c.M) * double(c.N) * double(c.K);
        s.bytes += c.layer_count * double(weight_bytes(c.kind, c.N, c.K));
        s.ops += c.layer_count;
        if (t.cublaslt_us > 0) s.ref_us += c.layer_count * t.cublaslt_us;
        else s.ref_complete = false;
    }
    for (const auto& [m, s] : sums) {
        for (const bool ref : {false, true}) {
            if (ref && !s.ref_complete) continue;
            PerfRow r;
            r.op = "one CSA layer's linears";
            r.shape = std::to_string(s.ops) + " products";
            r.m = m;
            r.variant = ref ? "cuBLASLt (ref)" : "defaults";
            r.us = ref ? s.ref_us : s.us;
            r.bytes = s.bytes;
            r.flops = s.flops;
            r.flop_ceiling = FlopCeiling::FP8;
            r.note = "43 layers: " + fixed(double(m) / (43.0 * r.us * 1e-6), 0) + " tok/s from these alone";
            report.add(std::move(r));
        }
    }
}

void linear_prefill_perf(PerfReport& report) {
    time_tensor_map_encode(report);
    add_layer_sums(time_cases(report, kPerfPrefillRows, std::numeric_limits<int64_t>::max(), true), report);
}

FS_PERF_SUITE("linear", linear_perf);
FS_PERF_SUITE("linear prefill", linear_prefill_perf);

}  // namespace
}  // namespace flashseek::test
