// The tensor-core ceiling `flashseek bench` compares prefill with: the dense FP8 GEMM rate of this GPU, measured
// through cuBLASLt (e4m3 x e4m3 -> bf16, per-tensor scales, fp32 accumulation) on random operands of a square
// problem large enough to fill the device, median of timed replays after a warm-up. cuBLASLt is opened at run time
// so that a machine without it still runs everything else (the ceiling is then reported as unknown).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/cuda_util.h"
#include "cuda/backend/dummy_fill.cuh"
#include "util/error.h"

namespace flashseek::cuda {

namespace {

struct Lt {
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

    bool open() {
        for (const char* name : {"libcublasLt.so.13", "libcublasLt.so"})
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
        if (!lib) return false;
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
        return ok;
    }
    ~Lt() {
        if (lib) dlclose(lib);
    }
};

}  // namespace

double measure_fp8_gemm_rate(int64_t size, int reps) {
    Lt lt;
    if (!lt.open()) return 0;
    cublasLtHandle_t handle = nullptr;
    if (lt.create(&handle) != CUBLAS_STATUS_SUCCESS) return 0;
    const int64_t n = size;
    DeviceBuffer a(size_t(n * n), "gemm ceiling A"), b(size_t(n * n), "gemm ceiling B"),
        d(size_t(n * n) * 2, "gemm ceiling D"), one(4, "gemm ceiling scale");
    const size_t ws_bytes = size_t(64) << 20;
    DeviceBuffer ws(ws_bytes, "gemm ceiling workspace");
    FillParams p;
    p.kind = FillKind::E4m3Uniform;
    p.a = 1.f;
    launch_dummy_fill(a.get(), n * n, p, 1, nullptr);
    launch_dummy_fill(b.get(), n * n, p, 2, nullptr);
    const float h_one = 1.f;
    FS_CUDA_TRY(cudaMemcpy(one.get(), &h_one, 4, cudaMemcpyHostToDevice));
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    double flops_per_s = 0;
    bool ok = lt.desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;  // FP8 needs the "TN" layout
    const float* scale = one.as<float>();
    ok = ok && lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
         lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
         lt.desc_set(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale) == CUBLAS_STATUS_SUCCESS &&
         lt.desc_set(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof scale) == CUBLAS_STATUS_SUCCESS &&
         lt.layout_create(&la, CUDA_R_8F_E4M3, uint64_t(n), uint64_t(n), n) == CUBLAS_STATUS_SUCCESS &&
         lt.layout_create(&lb, CUDA_R_8F_E4M3, uint64_t(n), uint64_t(n), n) == CUBLAS_STATUS_SUCCESS &&
         lt.layout_create(&lc, CUDA_R_16BF, uint64_t(n), uint64_t(n), n) == CUBLAS_STATUS_SUCCESS &&
         lt.pref_create(&pref) == CUBLAS_STATUS_SUCCESS &&
         lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes) ==
             CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    ok = ok && lt.heuristic(handle, op, la, lb, lc, lc, pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS && found > 0;
    if (ok) {
        cudaStream_t s = nullptr;
        cudaEvent_t e0 = nullptr, e1 = nullptr;
        FS_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        FS_CUDA_TRY(cudaEventCreate(&e0));
        FS_CUDA_TRY(cudaEventCreate(&e1));
        const float alpha = 1.f, beta = 0.f;
        std::vector<float> ms;
        for (int i = 0; i < reps + 3 && ok; ++i) {
            FS_CUDA_TRY(cudaEventRecord(e0, s));
            ok = lt.matmul(handle, op, &alpha, a.get(), la, b.get(), lb, &beta, d.get(), lc, d.get(), lc, &res.algo,
                           ws.get(), ws_bytes, s) == CUBLAS_STATUS_SUCCESS;
            FS_CUDA_TRY(cudaEventRecord(e1, s));
            FS_CUDA_TRY(cudaEventSynchronize(e1));
            float t = 0;
            FS_CUDA_TRY(cudaEventElapsedTime(&t, e0, e1));
            if (i >= 3) ms.push_back(t);
        }
        if (ok && !ms.empty()) {
            std::sort(ms.begin(), ms.end());
            flops_per_s = 2.0 * double(n) * double(n) * double(n) / (double(ms[ms.size() / 2]) * 1e-3);
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cudaStreamDestroy(s);
    }
    if (pref) lt.pref_destroy(pref);
    if (la) lt.layout_destroy(la);
    if (lb) lt.layout_destroy(lb);
    if (lc) lt.layout_destroy(lc);
    if (op) lt.desc_destroy(op);
    lt.destroy(handle);
    return flops_per_s;
}

}  // namespace flashseek::cuda
