// Shared helpers of the linear-algebra GPU tests (test_cuda_linear): fresh random seeds (printed on failure), device
// buffers that are poisoned before every run, random bf16 data and error metrics (random weights: weights.h; the
// modes, variant coverage and perf pieces shared with the attention harness: tests/cuda/op_harness).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/check.cuh"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::test {

// A fresh seed per test (std::random_device), overridable with FS_TEST_SEED for reproduction.
uint64_t fresh_seed();

template <typename T>
struct DeviceArray {
    T* ptr = nullptr;
    size_t n = 0;
    DeviceArray() = default;
    explicit DeviceArray(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T))); }
    explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
    ~DeviceArray() { if (ptr) cudaFree(ptr); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    DeviceArray(DeviceArray&& o) noexcept : ptr(o.ptr), n(o.n) { o.ptr = nullptr; o.n = 0; }
    void upload(const std::vector<T>& host) {
        CUDA_CHECK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
    void poison() { CUDA_CHECK(cudaMemset(ptr, 0xff, std::max<size_t>(1, n) * sizeof(T))); }  // NaN for floats
};

inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t n, float sigma) {
    std::normal_distribution<float> d(0.f, sigma);
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = f32_to_bf16(d(rng));
    return v;
}
inline std::vector<float> bf16_to_f32_vec(const std::vector<uint16_t>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(v[i]);
    return r;
}

// ||a - b|| / ||b|| over all elements; NaN/inf anywhere gives +inf.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);
// max_i |a_i - b_i| / (|b_i| + floor).
double max_rel(const std::vector<float>& a, const std::vector<float>& b, double floor);
// Same size and the same bytes (so +0/-0 differ and a NaN equals the same NaN): the rerun / variant checks.
inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
// The same for any element type (outputs read back as bf16 bits, bytes, scales).
template <typename T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
// The first n elements of an output read back as bytes, fp32 (f32) or bf16 elements, as floats.
inline std::vector<float> output_as_f32(const std::vector<uint8_t>& bytes, bool f32, size_t n) {
    std::vector<float> r(n);
    for (size_t i = 0; i < n; ++i) {
        if (f32) {
            std::memcpy(&r[i], &bytes[4 * i], 4);
        } else {
            uint16_t b;
            std::memcpy(&b, &bytes[2 * i], 2);
            r[i] = bf16_to_f32(b);
        }
    }
    return r;
}

}  // namespace flashseek::test
