// cuBLASLt as the reference dense GEMM (cublaslt_gemm.h): the library opened once per process, a handle per call,
// one matmul descriptor in the "TN" form, timed with events (each call is long enough that launch overhead does not
// matter).
#include "cuda/common/cublaslt_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/device_scratch.h"
#include "cuda/common/event_timing.h"
#include "cuda/common/random_fill.cuh"

namespace flashseek::cuda {
namespace {

void* open_cublaslt() {
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
        if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
    return nullptr;
}

// The library found at run time and the entry points used here (never linked: `decltype` only). Opened once per
// process and never closed: the perf suites time cuBLASLt on many shapes, and loading the library is far slower
// than a matmul; nothing in it is tied to a device.
struct CublasLtLibrary {
    void* lib = open_cublaslt();  // first: the entry points below look themselves up in it, in declaration order
    std::string missing = lib ? "" : "libcublasLt.so not found by the loader (LD_LIBRARY_PATH)";  // empty: usable
    // A member `member` holding the library's entry point `symbol`.
#define FS_CUBLASLT_ENTRY(member, symbol) decltype(&symbol) member = bind<decltype(&symbol)>(#symbol)
    FS_CUBLASLT_ENTRY(create, cublasLtCreate);
    FS_CUBLASLT_ENTRY(destroy, cublasLtDestroy);
    FS_CUBLASLT_ENTRY(desc_create, cublasLtMatmulDescCreate);
    FS_CUBLASLT_ENTRY(desc_destroy, cublasLtMatmulDescDestroy);
    FS_CUBLASLT_ENTRY(desc_set, cublasLtMatmulDescSetAttribute);
    FS_CUBLASLT_ENTRY(layout_create, cublasLtMatrixLayoutCreate);
    FS_CUBLASLT_ENTRY(layout_destroy, cublasLtMatrixLayoutDestroy);
    FS_CUBLASLT_ENTRY(pref_create, cublasLtMatmulPreferenceCreate);
    FS_CUBLASLT_ENTRY(pref_destroy, cublasLtMatmulPreferenceDestroy);
    FS_CUBLASLT_ENTRY(pref_set, cublasLtMatmulPreferenceSetAttribute);
    FS_CUBLASLT_ENTRY(heuristic, cublasLtMatmulAlgoGetHeuristic);
    FS_CUBLASLT_ENTRY(matmul, cublasLtMatmul);
#undef FS_CUBLASLT_ENTRY

    // The symbol from the library, or nullptr with the reason kept in `missing` (the first one only).
    template <typename Fn>
    Fn bind(const char* symbol) {
        Fn fn = lib ? reinterpret_cast<Fn>(dlsym(lib, symbol)) : nullptr;
        if (fn == nullptr && missing.empty()) missing = std::string("libcublasLt lacks ") + symbol;
        return fn;
    }
};

const CublasLtLibrary& cublaslt_library() {
    static const CublasLtLibrary lib;
    return lib;
}

// One cuBLASLt handle for one measurement, destroyed with it (not from a static destructor, which can run after the
// CUDA runtime has shut down).
struct CublasLt {
    const CublasLtLibrary& lib = cublaslt_library();
    cublasLtHandle_t handle = nullptr;
    std::string missing = lib.missing;  // why it is unusable (empty when usable)
    CublasLt() {
        if (missing.empty() && lib.create(&handle) != CUBLAS_STATUS_SUCCESS) missing = "cublasLtCreate failed";
    }
    ~CublasLt() {
        if (handle) lib.destroy(handle);
    }
    CublasLt(const CublasLt&) = delete;
    CublasLt& operator=(const CublasLt&) = delete;
};

// Owns the cuBLASLt descriptors of one problem.
struct MatmulSetup {
    const CublasLtLibrary& lt;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    explicit MatmulSetup(const CublasLtLibrary& l) : lt(l) {}
    ~MatmulSetup() {
        if (pref) lt.pref_destroy(pref);
        if (d) lt.layout_destroy(d);
        if (b) lt.layout_destroy(b);
        if (a) lt.layout_destroy(a);
        if (op) lt.desc_destroy(op);
    }
};

}  // namespace

double cublaslt_gemm_us(GemmPrecision precision, int64_t m, int64_t n, int64_t k, std::string* why, int reps) {
    auto unavailable = [&](const std::string& reason) {
        if (why) *why = reason;
        return -1.0;
    };
    FS_REQUIRE(m > 0 && n > 0 && k > 0 && reps > 0, "cublaslt_gemm_us: m, n, k and reps must be positive, got ", m,
               ", ", n, ", ", k, ", ", reps);
    const CublasLt h;
    if (!h.missing.empty()) return unavailable(h.missing);
    const CublasLtLibrary& lt = h.lib;
    const bool fp8 = precision == GemmPrecision::FP8_E4M3;
    const size_t in_bytes = fp8 ? 1 : 2;
    const DeviceScratch a_buf(size_t(m * k) * in_bytes), b_buf(size_t(n * k) * in_bytes), d_buf(size_t(m * n) * 2);
    const DeviceScratch one_buf(sizeof(float));
    const size_t ws_bytes = size_t(64) << 20;
    const DeviceScratch ws(ws_bytes);
    const float one = 1.f;
    CUDA_CHECK(cudaMemcpy(one_buf.ptr, &one, sizeof one, cudaMemcpyHostToDevice));
    const MeasureStream stream;
    const FillKind kind = fp8 ? FillKind::E4M3_UNIFORM : FillKind::BF16;  // values in [-1, 1): zeros would run faster
    fill_random(a_buf.ptr, size_t(m * k), kind, 1, 1.f, stream.get());
    fill_random(b_buf.ptr, size_t(n * k), kind, 2, 1.f, stream.get());

    // Row-major D[m, n] = A[m, k] B[n, k]^T is column-major D^T[n, m] = B^T . A: cuBLASLt's first operand is our B
    // (stored [k, n] column-major, transposed), its second our A (stored [k, m], not transposed).
    MatmulSetup s(lt);
    if (lt.desc_create(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return unavailable("cublasLtMatmulDescCreate failed");
    const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
    bool ok = lt.desc_set(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans) == CUBLAS_STATUS_SUCCESS &&
              lt.desc_set(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof no_trans) == CUBLAS_STATUS_SUCCESS;
    if (fp8) {
        const void* scale = one_buf.ptr;
        for (const auto which : {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER})
            ok = ok && lt.desc_set(s.op, which, &scale, sizeof scale) == CUBLAS_STATUS_SUCCESS;
    }
    if (!ok) return unavailable("cublasLtMatmulDescSetAttribute failed");
    const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    if (lt.layout_create(&s.a, in_type, uint64_t(k), uint64_t(n), k) != CUBLAS_STATUS_SUCCESS ||
        lt.layout_create(&s.b, in_type, uint64_t(k), uint64_t(m), k) != CUBLAS_STATUS_SUCCESS ||
        lt.layout_create(&s.d, CUDA_R_16BF, uint64_t(n), uint64_t(m), n) != CUBLAS_STATUS_SUCCESS)
        return unavailable("cublasLtMatrixLayoutCreate failed");
    if (lt.pref_create(&s.pref) != CUBLAS_STATUS_SUCCESS ||
        lt.pref_set(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes) !=
            CUBLAS_STATUS_SUCCESS)
        return unavailable("cublasLtMatmulPreference failed");
    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    if (lt.heuristic(h.handle, s.op, s.a, s.b, s.d, s.d, s.pref, 1, &best, &found) != CUBLAS_STATUS_SUCCESS ||
        found == 0)
        return unavailable("cuBLASLt has no algorithm for this problem");

    const float alpha = 1.f, beta = 0.f;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // the first failure; later calls are skipped
    auto call = [&](cudaStream_t st) {
        if (status == CUBLAS_STATUS_SUCCESS)
            status = lt.matmul(h.handle, s.op, &alpha, b_buf.ptr, s.a, a_buf.ptr, s.b, &beta, d_buf.ptr, s.d,
                               d_buf.ptr, s.d, &best.algo, ws.ptr, ws_bytes, st);
    };
    // The first calls pay for cuBLASLt's one-time setup: 3 untimed.
    const double ms = median_event_ms(call, 3, reps, stream.get());
    if (status != CUBLAS_STATUS_SUCCESS) return unavailable(fs_cat("cublasLtMatmul failed: status ", int(status)));
    return ms * 1e3;
}

}  // namespace flashseek::cuda
