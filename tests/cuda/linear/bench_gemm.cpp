// Prefill part of the micro-benchmark mode (`test_cuda_linear --bench --prefill`): the compute-bound GEMMs of
// dense_gemm.cuh on the V4-Flash shapes of one layer at M = 256, 1024, 4096, 8192 tokens, beside cuBLASLt on the same
// shapes as the reference rate (FP8 e4m3 with per-tensor scales, bf16 out; BF16 with fp32 out: the rate a library
// reaches without block scales), and the dense FP8 ceiling (cuBLASLt FP8 at 8192^3). Each shape is timed as CUDA-graph
// replays of 10 calls (weights do not rotate: these problems are compute-bound). Rows: microseconds per call,
// TFLOP/s, fraction of cuBLASLt on the shape and of the FP8 ceiling; the act_quant launch is timed on its own.
// The per-layer sum at each M gives the GEMM-only prefill rate of 20 layers. Then the routed experts through the
// grouped FP4 GEMMs (moe_gemm.cuh), against the same ceiling. Last, the catalogue's choice between 16 and 1024
// rows: every linear variant that supports a shape (forced through linear()) and the expert variants through
// moe_expert_up / down, with the preparation each needs timed on its own: where the GEMMs' preference floors
// (KernelPolicy::gemm_min_tokens, grouped_experts_min_tokens) belong.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "bench.h"
#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "cuda/gemm/dense_gemm.cuh"
#include "cuda/gemm/linear_catalogue.h"
#include "cuda/gemm/tensor_map.h"
#include "cuda/moe/moe_catalogue.h"
#include "cuda/moe/moe_gemm.cuh"

namespace flashseek::test {
namespace {

#define LT_CHECK(call)                                                                                     \
    do {                                                                                                   \
        const cublasStatus_t st_ = (call);                                                                 \
        if (st_ != CUBLAS_STATUS_SUCCESS) cuda::throw_error(cuda::fs_cat(#call, " failed: status ", int(st_))); \
    } while (0)

// cuBLASLt, opened at run time: the test binary must start on machines whose loader does not find the library
// (the device image's library path is not ours to rely on); without it the reference columns are skipped.
struct CublasLt {
    void* lib = nullptr;
    decltype(&cublasLtCreate) create = nullptr;
    decltype(&cublasLtDestroy) destroy = nullptr;
    decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
    cublasLtHandle_t handle = nullptr;

    bool open() {
        for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
        if (lib == nullptr) return false;
        bool ok = true;
        auto get = [&](auto& fn, const char* sym) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, sym));
            ok = ok && fn != nullptr;
        };
        get(create, "cublasLtCreate");
        get(destroy, "cublasLtDestroy");
        get(desc_create, "cublasLtMatmulDescCreate");
        get(desc_destroy, "cublasLtMatmulDescDestroy");
        get(desc_set, "cublasLtMatmulDescSetAttribute");
        get(layout_create, "cublasLtMatrixLayoutCreate");
        get(layout_destroy, "cublasLtMatrixLayoutDestroy");
        get(pref_create, "cublasLtMatmulPreferenceCreate");
        get(pref_destroy, "cublasLtMatmulPreferenceDestroy");
        get(pref_set, "cublasLtMatmulPreferenceSetAttribute");
        get(heuristic, "cublasLtMatmulAlgoGetHeuristic");
        get(matmul, "cublasLtMatmul");
        return ok && create(&handle) == CUBLAS_STATUS_SUCCESS;
    }
    ~CublasLt() {
        if (handle) destroy(handle);
        if (lib) dlclose(lib);
    }
};

void* device_alloc(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    return p;
}

// cuBLASLt D[m, n] = A[m, k] . W[n, k]^T in its "TN" form (column-major: D^T = W^T' . A'), fp8 (per-tensor scales
// of 1, bf16 out) or bf16 (fp32 out). Returns microseconds per call, or -1 when cuBLASLt is missing or has no
// algorithm for the shape.
double time_cublaslt(const CublasLt& lt, void* workspace, size_t ws_bytes, bool fp8, int64_t m, int64_t n, int64_t k,
                     const void* a, const void* w, void* d, const float* one) {
    if (lt.handle == nullptr) return -1;
    cublasLtMatmulDesc_t op;
    LT_CHECK(lt.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_CHECK(lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_CHECK(lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (fp8) {
        LT_CHECK(lt.desc_set(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof one));
        LT_CHECK(lt.desc_set(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof one));
    }
    const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF, out = fp8 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatrixLayout_t la, lb, lc;
    LT_CHECK(lt.layout_create(&la, in, uint64_t(k), uint64_t(n), k));
    LT_CHECK(lt.layout_create(&lb, in, uint64_t(k), uint64_t(m), k));
    LT_CHECK(lt.layout_create(&lc, out, uint64_t(n), uint64_t(m), n));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(lt.pref_create(&pref));
    LT_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t hs = lt.heuristic(lt.handle, op, la, lb, lc, lc, pref, 1, &res, &found);
    double us = -1;
    if (hs == CUBLAS_STATUS_SUCCESS && found > 0) {
        const float alpha = 1.f, beta = 0.f;
        us = time_graph_per_call(
            [&](cudaStream_t s, int) {
                LT_CHECK(lt.matmul(lt.handle, op, &alpha, w, la, a, lb, &beta, d, lc, d, lc, &res.algo, workspace,
                                   ws_bytes, s));
            },
            10);
    }
    lt.pref_destroy(pref);
    lt.layout_destroy(la);
    lt.layout_destroy(lb);
    lt.layout_destroy(lc);
    lt.desc_destroy(op);
    return us;
}

struct PrefillShape {
    const char* name;
    bool fp8;
    int64_t n, k;
    int groups;        // wo_a: 8 independent (n, k) products over column slices of one activation (one launch)
    int rows_per_token;  // routed experts as one dense product over M x 6 rows (reference for the grouped kernel)
};

void print_gemm_row(const char* name, int64_t m, const char* note, double us, double flops, double ref_us,
                    double ceiling_tflops) {
    const double tf = flops / (us * 1e-6) / 1e12;
    const double ref_tf = ref_us > 0 ? flops / (ref_us * 1e-6) / 1e12 : 0;
    std::printf("%-30s M=%-5lld %-14s %9.1f us %7.1f TFLOP/s | cuBLASLt %9.1f us %7.1f TFLOP/s | x%.2f of cuBLASLt, "
                "%5.1f%% of ceiling\n",
                name, (long long)m, note, us, tf, ref_us, ref_tf, ref_us > 0 ? ref_us / us : 0.0,
                100.0 * tf / ceiling_tflops);
    std::fflush(stdout);
}

// One catalogue row: variant, rows, its call and its preparation, and whether it is the default choice.
void print_variant_row(std::vector<BenchRow>& rows, const std::string& shape, int64_t M, std::string_view variant,
                       double us, double prep_us, bool chosen) {
    std::printf("  %-28s M=%-5lld %-16s %9.1f us + prepare %7.1f us%s\n", shape.c_str(), (long long)M,
                std::string(variant).c_str(), us, prep_us, chosen ? "   <- default choice" : "");
    std::fflush(stdout);
    BenchRow r;
    r.name = "catalogue " + shape + " " + std::string(variant);
    r.m = M;
    r.us = us;
    r.note = "prepare_us=" + std::to_string(prep_us) + (chosen ? " chosen" : "");
    rows.push_back(r);
}

// Uniform random top-k routing of M tokens over E experts (weights 0.5), grouped on the device.
struct RoutedTokens {
    void *idx = nullptr, *wts = nullptr, *mem = nullptr;
    cuda::MoeGrouping g;
    RoutedTokens(std::mt19937_64& rng, int64_t M, int E, int top_k) {
        const int64_t slots = M * top_k;
        std::vector<int32_t> h_idx(static_cast<size_t>(slots));
        const std::vector<float> h_wts(static_cast<size_t>(slots), 0.5f);
        for (int64_t tok = 0; tok < M; ++tok) {
            std::vector<int> pick;
            while (int(pick.size()) < top_k) {
                const int e = int(rng() % E);
                if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
            }
            for (int j = 0; j < top_k; ++j) h_idx[size_t(tok * top_k + j)] = pick[size_t(j)];
        }
        idx = device_alloc(h_idx.size() * 4);
        wts = device_alloc(h_wts.size() * 4);
        CUDA_CHECK(cudaMemcpy(idx, h_idx.data(), h_idx.size() * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(wts, h_wts.data(), h_wts.size() * 4, cudaMemcpyHostToDevice));
        mem = device_alloc(cuda::moe_grouping_bytes(E, slots));
        g = cuda::moe_grouping_view(mem, E, slots);
        cuda::moe_group(static_cast<const int32_t*>(idx), static_cast<const float*>(wts), M, top_k, g, nullptr);
    }
    ~RoutedTokens() {
        for (void* p : {idx, wts, mem}) cudaFree(p);
    }
    RoutedTokens(const RoutedTokens&) = delete;
    RoutedTokens& operator=(const RoutedTokens&) = delete;
};

// The routed experts of one V4-Flash MoE layer (256 FP4 experts, hidden 4096, inter 2048, top-6, uniform random
// routing) through the grouped GEMMs (moe_gemm.cuh: gathered act_quant, up with SwiGLU, act_quant of h, down).
void bench_grouped_experts(std::vector<BenchRow>& rows, double ceiling) {
    if (!cuda::moe_gemm_supported()) return;
    const int E = 256, top_k = 6;
    const int64_t H = 4096, I = 2048;
    std::vector<void*> allocs;
    std::vector<const void*> ptrs[6];
    for (int e = 0; e < E; ++e)
        for (int m = 0; m < 3; ++m) {
            const int64_t out = m == 2 ? H : I, in = m == 2 ? I : H;
            void* w = device_alloc(size_t(out * in / 2));
            void* s = device_alloc(size_t(out * in / 32));
            cuda::fill_random(w, size_t(out * in / 2), cuda::FillKind::BYTES, uint64_t(e * 3 + m), 0, nullptr);
            cuda::fill_random(s, size_t(out * in / 32), cuda::FillKind::E8M0, uint64_t(e * 3 + m + 7000),
                              float(118 + 256 * 122), nullptr);
            allocs.push_back(w);
            allocs.push_back(s);
            ptrs[2 * m].push_back(w);
            ptrs[2 * m + 1].push_back(s);
        }
    std::vector<void*> tables;
    for (auto& v : ptrs) {
        void* d = device_alloc(v.size() * sizeof(void*));
        CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(void*), cudaMemcpyHostToDevice));
        tables.push_back(d);
    }
    cuda::ExpertTable t;
    t.hidden = H;
    t.inter = I;
    t.w1 = static_cast<const void* const*>(tables[0]);
    t.w1_scale = static_cast<const void* const*>(tables[1]);
    t.w3 = static_cast<const void* const*>(tables[2]);
    t.w3_scale = static_cast<const void* const*>(tables[3]);
    t.w2 = static_cast<const void* const*>(tables[4]);
    t.w2_scale = static_cast<const void* const*>(tables[5]);
    std::mt19937_64 rng(11);
    for (int64_t M : {256, 1024, 4096, 8192}) {
        const int64_t slots = M * top_k;
        RoutedTokens routed(rng, M, E, top_k);
        const cuda::MoeGrouping& g = routed.g;
        void* x = device_alloc(size_t(M * H) * 2);
        cuda::fill_random(x, size_t(M * H), cuda::FillKind::BF16, 3, 1.f, nullptr);
        void* wsmem = device_alloc(cuda::moe_gemm_workspace_bytes(slots, H, I));
        const cuda::MoeGemmWorkspace ws = cuda::moe_gemm_workspace_view(wsmem, slots, H, I);
        void* y = device_alloc(size_t(slots * H) * 4);
        const double us = time_graph_per_call(
            [&](cudaStream_t s, int) {
                cuda::moe_gemm_up(static_cast<const uint16_t*>(x), H, M, top_k, t, g, 10.f, ws, s);
                cuda::moe_gemm_down(M, top_k, t, g, ws, static_cast<float*>(y), s);
            },
            5);
        const double flops = double(slots) * (2.0 * 2 * I * H + 2.0 * H * I);
        const double tf = flops / (us * 1e-6) / 1e12;
        std::printf("%-30s M=%-5lld %-14s %9.1f us %7.1f TFLOP/s | %5.1f%% of ceiling (incl. both act_quant launches)\n",
                    "experts grouped FP4 up+down", (long long)M, "wgmma", us, tf, 100.0 * tf / ceiling);
        BenchRow r;
        r.name = "prefill experts grouped FP4 up+down";
        r.m = M;
        r.us = us;
        r.gbps = tf;
        r.fraction = tf / ceiling;
        r.note = "wgmma";
        rows.push_back(r);
        for (void* p : {x, wsmem, y}) CUDA_CHECK(cudaFree(p));
    }
    // The expert catalogue's choice at 32..1024 tokens: grouped_experts (raw input) against tile_experts (prepared
    // input, its preparation timed beside), up + down through moe_expert_up / moe_expert_down, each forced.
    std::printf("== the expert catalogue between 32 and 1024 tokens (each variant forced)\n");
    for (int64_t M : {32, 64, 128, 256, 1024}) {
        const int64_t slots = M * top_k;
        RoutedTokens routed(rng, M, E, top_k);
        cuda::MoeGrouping& g = routed.g;
        void* wsmem = device_alloc(cuda::moe_gemm_workspace_bytes(slots, H, I));
        cuda::moe_attach_gemm_workspace(g, wsmem, H, I);
        void* x = device_alloc(size_t(M * H) * 2);
        cuda::fill_random(x, size_t(M * H), cuda::FillKind::BF16, 3, 1.f, nullptr);
        void* xv = device_alloc(cuda::prepared_values_bytes(M, H));
        void* xs = device_alloc(cuda::prepared_scales_bytes(M, H));
        void* hv = device_alloc(cuda::prepared_values_bytes(slots, I));
        void* hs = device_alloc(cuda::prepared_scales_bytes(slots, I));
        void* y = device_alloc(size_t(slots * H) * 4);
        const auto release = cuda::ActNumerics::FP8_BLOCK128;
        const cuda::PreparedActivation raw = cuda::raw_activation(x, M, H, H, cuda::WeightKind::FP4_BLOCK32, release);
        cuda::PreparedActivation prepared;
        prepared.values = static_cast<uint16_t*>(xv);
        prepared.scales = static_cast<float*>(xs);
        auto prepare = [&](cudaStream_t s) {
            cuda::prepare_activation(x, false, M, H, H, cuda::WeightKind::FP4_BLOCK32, release, prepared, s);
        };
        const double prep_us = time_graph_per_call([&](cudaStream_t s, int) { prepare(s); }, 10);
        prepare(nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (const char* name : {"grouped_experts", "tile_experts"}) {
            const bool grouped = std::string(name) == "grouped_experts";
            const cuda::KernelPolicy only = cuda::KernelPolicy::only(name);
            const double us = time_graph_per_call(
                [&](cudaStream_t s, int) {
                    cuda::PreparedActivation h;
                    h.values = static_cast<uint16_t*>(hv);
                    h.scales = static_cast<float*>(hs);
                    cuda::moe_expert_up(grouped ? raw : prepared, t, &g, M, top_k, 10.f, release, h, s, only);
                    cuda::moe_expert_down(h, t, &g, M, top_k, static_cast<float*>(y), s, only);
                },
                5);
            cuda::PreparedActivation h;
            h.values = static_cast<uint16_t*>(hv);
            h.scales = static_cast<float*>(hs);
            const cuda::PreparedActivation& in = grouped ? raw : prepared;
            const bool chosen = cuda::choose_experts(cuda::ExpertCall{true, in, t, &g, M, top_k, release},
                                                     cuda::KernelPolicy{}).name == name;
            print_variant_row(rows, "experts up+down", M, name, us, grouped ? 0.0 : prep_us, chosen);
        }
        for (void* p : {wsmem, x, xv, xs, hv, hs, y}) CUDA_CHECK(cudaFree(p));
    }
    for (void* p : allocs) CUDA_CHECK(cudaFree(p));
    for (void* p : tables) CUDA_CHECK(cudaFree(p));
}

// Every linear variant that supports the shape, through linear() with that variant forced, at 16..1024 rows.
void bench_linear_catalogue(std::vector<BenchRow>& rows) {
    struct Shape {
        const char* name;
        cuda::WeightKind kind;
        int64_t n, k;
    };
    const Shape shapes[] = {{"wq_a 4096->1024", cuda::WeightKind::FP8_BLOCK128, 1024, 4096},
                            {"wkv 4096->512", cuda::WeightKind::FP8_BLOCK128, 512, 4096},
                            {"wq_b 1024->32768", cuda::WeightKind::FP8_BLOCK128, 32768, 1024},
                            {"wo_b 8192->4096", cuda::WeightKind::FP8_BLOCK128, 4096, 8192},
                            {"compressor wkv bf16", cuda::WeightKind::BF16, 1024, 4096}};
    cuda::GemmWorkspace gws = cuda::create_gemm_workspace();
    std::printf("== the linear catalogue between 16 and 1024 rows (release numerics; each variant forced)\n");
    for (const Shape& sh : shapes) {
        const bool fp8 = sh.kind == cuda::WeightKind::FP8_BLOCK128;
        const int64_t M_max = 1024;
        void* x = device_alloc(size_t(M_max * sh.k) * 2);
        cuda::fill_random(x, size_t(M_max * sh.k), cuda::FillKind::BF16, 3, 1.f, nullptr);
        const size_t w_bytes = size_t(sh.n * sh.k) * (fp8 ? 1 : 2);
        void* w = device_alloc(w_bytes);
        cuda::fill_random(w, fp8 ? w_bytes : w_bytes / 2, fp8 ? cuda::FillKind::E4M3 : cuda::FillKind::BF16, 4, 0.05f,
                          nullptr);
        const size_t ws_count = size_t((sh.n + 127) / 128) * size_t((sh.k + 127) / 128);
        void* w_scales = fp8 ? device_alloc(ws_count) : nullptr;
        if (fp8) cuda::fill_random(w_scales, ws_count, cuda::FillKind::E8M0, 5, float(118 + 256 * 124), nullptr);
        cuda::DeviceLinear dw;
        dw.kind = sh.kind;
        dw.scale_kind = fp8 ? cuda::ScaleKind::E8M0 : cuda::ScaleKind::NONE;
        dw.out = sh.n;
        dw.in = sh.k;
        dw.weight = w;
        dw.scale = w_scales;
        void* values = device_alloc(cuda::prepared_values_bytes(M_max, sh.k));
        void* scales = device_alloc(cuda::prepared_scales_bytes(M_max, sh.k));
        void* y = device_alloc(size_t(M_max * sh.n) * 2);
        const auto numerics = fp8 ? cuda::ActNumerics::FP8_BLOCK128 : cuda::ActNumerics::EXACT;
        for (int64_t M : {16, 32, 64, 128, 256, 512, 1024}) {
            cuda::PreparedActivation act;
            act.values = static_cast<uint16_t*>(values);
            act.scales = static_cast<float*>(scales);
            const cuda::ActFormat want = cuda::linear_input_format(M, dw, 1, numerics);
            std::string chosen;
            for (const cuda::LinearVariant& v : cuda::linear_variants()) {
                if (!v.supports_shape(M, dw, 1, numerics, false)) continue;
                auto prepare = [&](cudaStream_t s) {
                    if (v.format == cuda::ActFormat::FP8_ROWS)
                        cuda::prepare_activation_rows(static_cast<const uint16_t*>(x), M, sh.k, sh.k, numerics, act, s);
                    else
                        cuda::prepare_activation(x, false, M, sh.k, sh.k, sh.kind, numerics, act, s);
                };
                const double prep_us = time_graph_per_call([&](cudaStream_t s, int) { prepare(s); }, 10);
                prepare(nullptr);
                CUDA_CHECK(cudaDeviceSynchronize());
                if (chosen.empty() && v.format == want)
                    chosen = std::string(cuda::plan_linear(act, dw, 1, &gws).variant);
                const cuda::KernelPolicy only = cuda::KernelPolicy::only(v.name);
                const double us = time_graph_per_call(
                    [&](cudaStream_t s, int) { cuda::linear(act, dw, y, cuda::OutKind::BF16, sh.n, &gws, s, only); },
                    10);
                print_variant_row(rows, sh.name, M, v.name, us, prep_us, chosen == v.name);
            }
        }
        for (void* p : {x, w, values, scales, y}) CUDA_CHECK(cudaFree(p));
        if (w_scales) CUDA_CHECK(cudaFree(w_scales));
    }
    cuda::destroy_gemm_workspace(gws);
}

}  // namespace

void bench_prefill(std::vector<BenchRow>& rows) {
    CublasLt lt;
    if (!lt.open()) std::printf("cuBLASLt not found: the reference columns and the ceiling are skipped\n");
    const size_t ws_bytes = size_t(64) << 20;
    void* workspace = device_alloc(ws_bytes);
    float* one = static_cast<float*>(device_alloc(4));
    const float h_one = 1.f;
    CUDA_CHECK(cudaMemcpy(one, &h_one, 4, cudaMemcpyHostToDevice));

    // Host cost of the tensor maps a wgmma GEMM call encodes (three per FP8 call): pure host work, per call.
    {
        void* buf = device_alloc(size_t(1) << 20);
        const int reps = 2000;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i)
            (void)cuda::tma::make_2d(buf, cuda::tma::Element::U8, 4096, 4096, 4096, 128, 128, cuda::tma::Swizzle::B128,
                                     "bench");
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        std::printf("tensor map encode (host): %.2f us each\n", us / reps);
        CUDA_CHECK(cudaFree(buf));
    }

    // The FP8 ceiling: cuBLASLt FP8 at 8192^3.
    double ceiling = 0;
    {
        const int64_t s = 8192;
        void* a = device_alloc(size_t(s * s));
        void* w = device_alloc(size_t(s * s));
        void* d = device_alloc(size_t(s * s) * 2);
        cuda::fill_random(a, size_t(s * s), cuda::FillKind::E4M3, 1, 0, nullptr);
        cuda::fill_random(w, size_t(s * s), cuda::FillKind::E4M3, 2, 0, nullptr);
        const double us = time_cublaslt(lt, workspace, ws_bytes, true, s, s, s, a, w, d, one);
        // Without cuBLASLt: the rate measured with torch._scaled_mm on the H200 (kernels.md section 4).
        ceiling = us > 0 ? 2.0 * double(s) * s * s / (us * 1e-6) / 1e12 : 1420.0;
        std::printf("FP8 ceiling (cuBLASLt e4m3, per-tensor scales, 8192^3): %.1f us, %.1f TFLOP/s\n", us, ceiling);
        CUDA_CHECK(cudaFree(a));
        CUDA_CHECK(cudaFree(w));
        CUDA_CHECK(cudaFree(d));
    }

    const std::vector<PrefillShape> shapes = {
        {"wq_a 4096->1024", true, 1024, 4096, 1, 1},
        {"wkv 4096->512", true, 512, 4096, 1, 1},
        {"wq_b 1024->32768", true, 32768, 1024, 1, 1},
        {"wo_a 8x(4096->1024)", true, 1024, 4096, 8, 1},
        {"wo_b 8192->4096", true, 4096, 8192, 1, 1},
        {"shared w1|w3 4096->2x2048", true, 4096, 4096, 1, 1},
        {"shared w2 2048->4096", true, 4096, 2048, 1, 1},
        {"indexer wq_b 1024->8192", true, 8192, 1024, 1, 1},
        {"experts w1|w3 as dense (x6 rows)", true, 4096, 4096, 1, 6},
        {"experts w2 as dense (x6 rows)", true, 4096, 2048, 1, 6},
        {"compressor wkv bf16 4096->1024", false, 1024, 4096, 1, 1},
        {"router bf16 4096->256", false, 256, 4096, 1, 1},
        {"head bf16 4096->129280", false, 129280, 4096, 1, 1},
    };
    for (int64_t M : {256, 1024, 4096, 8192}) {
        double layer_us = 0, layer_ref_us = 0, layer_flops = 0;
        for (const auto& sh : shapes) {
            const int64_t m = M * sh.rows_per_token, K = sh.k * sh.groups, n = sh.n, k = sh.k;
            const double flops = 2.0 * double(m) * double(n) * double(k) * sh.groups;
            // Operands: activation (bf16 input and its FP8 form), weight, output.
            void* x = device_alloc(size_t(m * K) * 2);
            cuda::fill_random(x, size_t(m * K), cuda::FillKind::BF16, 3, 1.f, nullptr);
            const size_t w_bytes = size_t(n * sh.groups * k) * (sh.fp8 ? 1 : 2);
            void* w = device_alloc(w_bytes);
            cuda::fill_random(w, sh.fp8 ? w_bytes : w_bytes / 2, sh.fp8 ? cuda::FillKind::E4M3 : cuda::FillKind::BF16, 4,
                              0.05f, nullptr);
            const size_t ws_count = size_t((n * sh.groups + 127) / 128) * size_t((k + 127) / 128);
            void* w_scales = device_alloc(ws_count);
            cuda::fill_random(w_scales, ws_count, cuda::FillKind::E8M0, 5, float(118 + 256 * 124), nullptr);
            const int64_t ldd = n * sh.groups;
            void* d = device_alloc(size_t(m * ldd) * 4);
            void* codes = device_alloc(cuda::fp8_activation_codes_bytes(m, K));
            void* scales = device_alloc(cuda::fp8_activation_scales_bytes(m, K));
            const cuda::Fp8Activation act = cuda::fp8_activation_view(codes, scales, m, K);
            cuda::quantize_fp8_activation(static_cast<const uint16_t*>(x), m, K, nullptr, act, nullptr);
            cuda::GemmPlan plan;
            auto call = [&](cudaStream_t s) {
                if (sh.fp8) {
                    cuda::Fp8GemmArgs a;
                    a.a = act;
                    a.w = static_cast<const uint8_t*>(w);
                    a.w_scales = w_scales;
                    a.n = n * sh.groups;
                    a.d = d;
                    a.d_kind = cuda::OutKind::BF16;
                    a.ldd = ldd;
                    a.groups = sh.groups;  // wo_a: all groups in one launch
                    plan = cuda::plan_fp8_gemm(a);
                    cuda::gemm_fp8(a, cuda::GemmPath::AUTO, s);
                } else {
                    cuda::Bf16GemmArgs a;
                    a.a = static_cast<const uint16_t*>(x);
                    a.lda = K;
                    a.m = m;
                    a.k = k;
                    a.w = static_cast<const uint16_t*>(w);
                    a.n = n;
                    a.d = d;
                    a.d_kind = cuda::OutKind::F32;
                    a.ldd = ldd;
                    plan = cuda::plan_bf16_gemm(a);
                    cuda::gemm_bf16(a, cuda::GemmPath::AUTO, s);
                }
            };
            const double us = time_graph_per_call([&](cudaStream_t s, int) { call(s); }, 10);
            double ref_us = 0;
            for (int g = 0; g < sh.groups; ++g) {  // cuBLASLt on each group's (n, k) product, same operand bytes
                const double r = time_cublaslt(lt, workspace, ws_bytes, sh.fp8, m, n, k, sh.fp8 ? codes : x, w, d, one);
                ref_us = r < 0 || ref_us < 0 ? -1 : ref_us + r;
            }
            const double q_us = sh.fp8 ? time_graph_per_call(
                                             [&](cudaStream_t s, int) {
                                                 cuda::quantize_fp8_activation(static_cast<const uint16_t*>(x), m, K,
                                                                               nullptr, act, s);
                                             },
                                             10)
                                       : 0;
            const std::string note = std::string(plan.path == cuda::GemmPath::WGMMA ? "wgmma" : "mma") +
                                     " bm=" + std::to_string(plan.block_m);
            print_gemm_row(sh.name, M, note.c_str(), us, flops, ref_us, ceiling);
            if (sh.fp8) std::printf("%-30s M=%-5lld act_quant %9.1f us\n", "", (long long)M, q_us);
            if (sh.rows_per_token == 1 && std::string(sh.name).find("head") == std::string::npos) {
                layer_us += us + q_us;
                layer_ref_us += ref_us > 0 ? ref_us : 0;
                layer_flops += flops;
            }
            BenchRow r;
            r.name = std::string("prefill ") + sh.name;
            r.m = M;
            r.us = us;
            r.gbps = flops / (us * 1e-6) / 1e12;  // TFLOP/s in this mode
            r.fraction = r.gbps / ceiling;
            r.note = note + " cublaslt_us=" + std::to_string(ref_us) + " act_quant_us=" + std::to_string(q_us);
            rows.push_back(r);
            for (void* p : {x, w, w_scales, d, codes, scales}) CUDA_CHECK(cudaFree(p));
        }
        std::printf("== M=%lld: one layer's dense GEMMs (experts and head excluded, act_quant included) %.1f us, "
                    "%.1f TFLOP/s (cuBLASLt %.1f us); 20 layers -> %.0f tok/s from these GEMMs\n",
                    (long long)M, layer_us, layer_flops / (layer_us * 1e-6) / 1e12, layer_ref_us,
                    double(M) / (20 * layer_us * 1e-6));
    }
    bench_grouped_experts(rows, ceiling);
    bench_linear_catalogue(rows);
    CUDA_CHECK(cudaFree(workspace));
    CUDA_CHECK(cudaFree(one));
}

}  // namespace flashseek::test
