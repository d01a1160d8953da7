// cuBLASLt as the reference dense GEMM (gemm_rate.h): the library opened once at run time, one matmul descriptor
// per call in the "TN" form, timed with events (each call is long enough that launch overhead does not matter).
#include "gemm_rate.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "device_buffer.h"
#include "perf_report.h"

namespace flashseek::test {
namespace {

struct CublasLt {
    void* lib = nullptr;
    decltype(&cublasLtCreate) create = nullptr;
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
    std::string missing;  // why it is unusable (empty when usable)

    CublasLt() {
        for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
        if (lib == nullptr) {
            missing = "libcublasLt.so not found by the loader (LD_LIBRARY_PATH)";
            return;
        }
        bind(create, "cublasLtCreate");
        bind(desc_create, "cublasLtMatmulDescCreate");
        bind(desc_destroy, "cublasLtMatmulDescDestroy");
        bind(desc_set, "cublasLtMatmulDescSetAttribute");
        bind(layout_create, "cublasLtMatrixLayoutCreate");
        bind(layout_destroy, "cublasLtMatrixLayoutDestroy");
        bind(pref_create, "cublasLtMatmulPreferenceCreate");
        bind(pref_destroy, "cublasLtMatmulPreferenceDestroy");
        bind(pref_set, "cublasLtMatmulPreferenceSetAttribute");
        bind(heuristic, "cublasLtMatmulAlgoGetHeuristic");
        bind(matmul, "cublasLtMatmul");
        if (missing.empty() && create(&handle) != CUBLAS_STATUS_SUCCESS) missing = "cublasLtCreate failed";
    }
    // The handle and library stay open until the process exits: destroying them from a static destructor can run
    // after the CUDA runtime has shut down.

    template <typename Fn>
    void bind(Fn& fn, const char* symbol) {
        fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
        if (fn == nullptr && missing.empty()) missing = std::string("libcublasLt lacks ") + symbol;
    }
};

const CublasLt& cublaslt() {
    static const CublasLt lt;
    return lt;
}

// Owns the cuBLASLt descriptors of one problem.
struct MatmulSetup {
    const CublasLt& lt;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    explicit MatmulSetup(const CublasLt& l) : lt(l) {}
    ~MatmulSetup() {
        if (pref) lt.pref_destroy(pref);
        if (d) lt.layout_destroy(d);
        if (b) lt.layout_destroy(b);
        if (a) lt.layout_destroy(a);
        if (op) lt.desc_destroy(op);
    }
};

}  // namespace

double cublaslt_gemm_us(GemmPrecision precision, int64_t m, int64_t n, int64_t k, std::string* why) {
    const CublasLt& lt = cublaslt();
    auto fail = [&](const std::string& reason) {
        if (why) *why = reason;
        return -1.0;
    };
    if (!lt.missing.empty()) return fail(lt.missing);
    const bool fp8 = precision == GemmPrecision::FP8_E4M3;
    const size_t in_bytes = fp8 ? 1 : 2;
    DeviceBuffer a_buf(size_t(m * k) * in_bytes), b_buf(size_t(n * k) * in_bytes), d_buf(size_t(m * n) * 2);
    DeviceBuffer one_buf(sizeof(float));
    const size_t ws_bytes = size_t(32) << 20;
    DeviceBuffer ws(ws_bytes);
    const float one = 1.f;
    CUDA_CHECK(cudaMemcpy(one_buf.ptr, &one, sizeof one, cudaMemcpyHostToDevice));
    using cuda::FillKind;
    cuda::fill_random(a_buf.ptr, size_t(m * k), fp8 ? FillKind::E4M3 : FillKind::BF16, 11, 1.f, nullptr);
    cuda::fill_random(b_buf.ptr, size_t(n * k), fp8 ? FillKind::E4M3 : FillKind::BF16, 12, 1.f, nullptr);

    // Row-major D[m, n] = A[m, k] B[n, k]^T is column-major D^T[n, m] = B^T . A: cuBLASLt's first operand is our B
    // (stored [k, n] column-major, transposed), its second our A (stored [k, m], not transposed).
    MatmulSetup s(lt);
    if (lt.desc_create(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return fail("cublasLtMatmulDescCreate failed");
    const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
    lt.desc_set(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans);
    lt.desc_set(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof no_trans);
    if (fp8) {
        const void* scale = one_buf.ptr;
        lt.desc_set(s.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale);
        lt.desc_set(s.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof scale);
    }
    const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    if (lt.layout_create(&s.a, in_type, uint64_t(k), uint64_t(n), k) != CUBLAS_STATUS_SUCCESS ||
        lt.layout_create(&s.b, in_type, uint64_t(k), uint64_t(m), k) != CUBLAS_STATUS_SUCCESS ||
        lt.layout_create(&s.d, CUDA_R_16BF, uint64_t(n), uint64_t(m), n) != CUBLAS_STATUS_SUCCESS)
        return fail("cublasLtMatrixLayoutCreate failed");
    if (lt.pref_create(&s.pref) != CUBLAS_STATUS_SUCCESS) return fail("cublasLtMatmulPreferenceCreate failed");
    lt.pref_set(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    if (lt.heuristic(lt.handle, s.op, s.a, s.b, s.d, s.d, s.pref, 1, &best, &found) != CUBLAS_STATUS_SUCCESS ||
        found == 0)
        return fail("cuBLASLt has no algorithm for this problem");

    const float alpha = 1.f, beta = 0.f;
    auto call = [&](cudaStream_t stream) {
        const cublasStatus_t st = lt.matmul(lt.handle, s.op, &alpha, b_buf.ptr, s.a, a_buf.ptr, s.b, &beta, d_buf.ptr,
                                            s.d, d_buf.ptr, s.d, &best.algo, ws.ptr, ws_bytes, stream);
        if (st != CUBLAS_STATUS_SUCCESS) cuda::throw_error(cuda::fs_cat("cublasLtMatmul failed: status ", int(st)));
    };
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double ms = median_call_ms(call, 3, 10, stream);
    CUDA_CHECK(cudaStreamDestroy(stream));
    return ms * 1e3;
}

}  // namespace flashseek::test
