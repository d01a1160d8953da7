// Release-mode quantization simulations of the official reference (docs/model.md §2.0): FP8 e4m3 with power-of-two
// (ue8m0) scales per 128-block of activations and per 64-block of KV no-rope dims, FP4 e2m1 per 32-block after a
// Hadamard rotation for the indexer, and bf16 rounding. Scales are computed from the exponent bits exactly (no
// log2 rounding), as the reference's fast_log2_ceil does.
#include <algorithm>
#include <cmath>

#include "cpu/ops.h"
#include "util/numeric.h"

namespace flashseek::cpu {

namespace {

// 2^ceil(log2(v)) for v > 0, exact.
float pow2_ceil(float v) {
    int e;
    const float m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
    return m == 0.5f ? std::ldexp(1.f, e - 1) : std::ldexp(1.f, e);
}

void fp8_blocks(const float* x, int64_t n, int64_t block, float* out, float* scales) {
    for (int64_t b = 0, bi = 0; b < n; b += block, ++bi) {
        const int64_t e = std::min(n, b + block);
        float amax = 1e-4f;
        for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = pow2_ceil(amax / 448.f);
        for (int64_t i = b; i < e; ++i) out[i] = round_e4m3(std::clamp(x[i] / s, -448.f, 448.f)) * s;
        if (scales) scales[bi] = s;
    }
}

}  // namespace

void act_quant_fp8_block128(const float* x, int64_t n, float* out, float* scales) {
    fp8_blocks(x, n, 128, out, scales);
}

void kv_fp8_sim_block64(float* v, int64_t n) { fp8_blocks(v, n, 64, v, nullptr); }

void hadamard_transform(float* v, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; ++j) {
                const float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
    const float s = 1.f / std::sqrt(float(n));
    for (int i = 0; i < n; ++i) v[i] *= s;
}

void fp4_sim_block32(float* v, int64_t n) {
    const float floor_amax = 6.f * std::ldexp(1.f, -126);
    for (int64_t b = 0; b < n; b += 32) {
        const int64_t e = std::min(n, b + 32);
        float amax = floor_amax;
        for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float s = pow2_ceil(amax / 6.f);
        for (int64_t i = b; i < e; ++i) v[i] = round_e2m1(v[i] / s) * s;
    }
}

void round_bf16_inplace(float* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) v[i] = round_bf16(v[i]);
}

}  // namespace flashseek::cpu
