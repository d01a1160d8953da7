// Random device weights for the perf suites (perf_weights.h).
#include "perf_weights.h"

#include <utility>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"

namespace flashseek::test {
namespace {

size_t value_bytes(cuda::WeightKind kind, int64_t out, int64_t in) {
    switch (kind) {
        case cuda::WeightKind::FP8_BLOCK128: return size_t(out * in);
        case cuda::WeightKind::FP4_BLOCK32: return size_t(out * in / 2);
        default: return size_t(out * in * 2);
    }
}
size_t scale_bytes(cuda::WeightKind kind, int64_t out, int64_t in) {
    switch (kind) {
        case cuda::WeightKind::FP8_BLOCK128: return size_t(((out + 127) / 128) * ((in + 127) / 128));
        case cuda::WeightKind::FP4_BLOCK32: return size_t(out * (in / 32));
        default: return 0;
    }
}

}  // namespace

size_t weight_bytes(cuda::WeightKind kind, int64_t out, int64_t in) {
    return value_bytes(kind, out, in) + scale_bytes(kind, out, in);
}

PerfWeight::PerfWeight(cuda::WeightKind k, int64_t o, int64_t i, uint64_t seed) : kind(k), out(o), in(i) {
    using cuda::FillKind;
    const size_t wb = value_bytes(kind, out, in), sb = scale_bytes(kind, out, in);
    CUDA_CHECK(cudaMalloc(&w, wb));
    if (kind == cuda::WeightKind::FP8_BLOCK128) cuda::fill_random(w, wb, FillKind::E4M3, seed, 0.f, nullptr);
    if (kind == cuda::WeightKind::FP4_BLOCK32) cuda::fill_random(w, wb, FillKind::BYTES, seed, 0.f, nullptr);
    if (kind == cuda::WeightKind::BF16) cuda::fill_random(w, wb / 2, FillKind::BF16, seed, 0.05f, nullptr);
    if (sb > 0) {
        CUDA_CHECK(cudaMalloc(&s, sb));
        // E8M0 exponents 118..124 (2^-9 .. 2^-3): products stay far from overflow at any K.
        cuda::fill_random(s, sb, FillKind::E8M0, seed + 1, float(118 + 256 * 124), nullptr);
    }
    bytes = wb + sb;
}

PerfWeight::~PerfWeight() {
    if (w) cudaFree(w);
    if (s) cudaFree(s);
}

PerfWeight::PerfWeight(PerfWeight&& o) noexcept
    : kind(o.kind), out(o.out), in(o.in), w(std::exchange(o.w, nullptr)), s(std::exchange(o.s, nullptr)),
      bytes(o.bytes) {}

cuda::DeviceLinear PerfWeight::device() const {
    return cuda::DeviceLinear{kind, kind == cuda::WeightKind::BF16 ? cuda::ScaleKind::NONE : cuda::ScaleKind::E8M0,
                              out, in, w, s};
}

}  // namespace flashseek::test
