// Helpers for the attention-side GPU tests: device buffers that are poisoned (all bits set: NaN in bf16 and fp32)
// before each kernel run, random data with a printed seed, bf16 conversion and error metrics.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "util/numeric.h"

namespace flashseek::cuda::test {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

inline bool have_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define REQUIRE_GPU() \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

// A fresh seed per test, printed so a failure can be replayed (FS_TEST_SEED overrides).
inline uint64_t test_seed() {
    if (const char* s = std::getenv("FS_TEST_SEED")) return std::stoull(s);
    return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
}

struct Rng {
    std::mt19937_64 gen;
    explicit Rng(uint64_t seed) : gen(seed) {}
    float normal(float sd = 1.f) { return std::normal_distribution<float>(0.f, sd)(gen); }
    float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(gen); }
    int uniform_int(int a, int b) { return std::uniform_int_distribution<int>(a, b)(gen); }
    std::vector<float> normals(size_t n, float sd = 1.f) {
        std::vector<float> v(n);
        for (auto& x : v) x = normal(sd);
        return v;
    }
};

inline std::vector<float> bf16_round(std::vector<float> v) {
    for (auto& x : v) x = round_bf16(x);
    return v;
}
inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
    return o;
}
inline std::vector<float> from_bf16_bits(const std::vector<uint16_t>& v) {
    std::vector<float> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i]);
    return o;
}

// Owning device buffer of n elements of T.
template <typename T>
struct Dev {
    T* ptr = nullptr;
    size_t n = 0;
    Dev() = default;
    explicit Dev(size_t count) : n(count) {
        if (cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
    }
    explicit Dev(const std::vector<T>& h) : Dev(h.size()) { upload(h); }
    ~Dev() { cudaFree(ptr); }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    Dev(Dev&& o) noexcept : ptr(o.ptr), n(o.n) { o.ptr = nullptr, o.n = 0; }
    Dev& operator=(Dev&& o) noexcept {
        std::swap(ptr, o.ptr);
        std::swap(n, o.n);
        return *this;
    }
    void upload(const std::vector<T>& h) { cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice); }
    std::vector<T> download() const {
        std::vector<T> h(n);
        cudaDeviceSynchronize();
        cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
        return h;
    }
    void poison() { cudaMemset(ptr, 0xff, std::max<size_t>(1, n) * sizeof(T)); }
};

// bf16 device copy of fp32 host values (rounded).
inline Dev<uint16_t>* dev_bf16(const std::vector<float>& v) { return new Dev<uint16_t>(to_bf16_bits(v)); }
template <typename T>
inline T* as(Dev<uint16_t>& d) { return reinterpret_cast<T*>(d.ptr); }
inline __nv_bfloat16* bf(Dev<uint16_t>& d) { return reinterpret_cast<__nv_bfloat16*>(d.ptr); }

struct ErrorStats {
    double rel_l2 = 0;   // ||got - want|| / ||want||
    double max_abs = 0;  // max |got - want|
    double want_max = 0;
    bool finite = true;
};
inline ErrorStats compare(const std::vector<float>& got, const std::vector<float>& want) {
    ErrorStats e;
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(got[i])) e.finite = false;
        const double d = double(got[i]) - double(want[i]);
        num += d * d;
        den += double(want[i]) * want[i];
        e.max_abs = std::max(e.max_abs, std::fabs(d));
        e.want_max = std::max(e.want_max, std::fabs(double(want[i])));
    }
    e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    return e;
}
// Checks rel_l2 <= rel_tol and prints the measured error (the harness log doubles as the error table).
#define EXPECT_CLOSE(got, want, rel_tol, what)                                                             \
    do {                                                                                                   \
        const auto e_ = ::flashseek::cuda::test::compare(got, want);                                       \
        std::cout << "[ error    ] " << what << ": rel_l2 " << e_.rel_l2 << " max_abs " << e_.max_abs        \
                  << " (threshold " << (rel_tol) << ")\n";                                                   \
        EXPECT_TRUE(e_.finite) << what << ": non-finite output (unwritten element?)";                     \
        EXPECT_LE(e_.rel_l2, rel_tol) << what << ": rel_l2 " << e_.rel_l2 << " max_abs " << e_.max_abs    \
                                      << " (max |want| " << e_.want_max << ")";                            \
    } while (0)

}  // namespace flashseek::cuda::test
