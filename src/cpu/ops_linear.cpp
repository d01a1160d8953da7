// Weight dequantization (FP8 block-128, FP4 block-32, bf16, f16) and the CPU matrix products. The product
// kernel computes every dot product with the same 16-lane accumulation order whatever the number of rows, so a
// token's result does not depend on how it was batched (chunked prefill, decode and batches agree bit for bit).
// It is compiled twice (AVX2 and baseline) and picked at run time, because the CPU reference must stay usable on
// a tiny model of the real vocabulary (129280 x hidden head products per token).
#include <algorithm>
#include <cstring>

#include "cpu/ops.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::cpu {

namespace {

float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0) {
        v = std::ldexp(float(man), -24);
    } else if (exp == 31) {
        v = man ? NAN : INFINITY;
    } else {
        v = std::ldexp(float(man | 0x400), int(exp) - 25);
    }
    return sign ? -v : v;
}

float element_to_f32(const TensorView& t, int64_t i) {
    switch (t.dtype) {
        case DType::F32: {
            float f;
            std::memcpy(&f, t.data + 4 * i, 4);
            return f;
        }
        case DType::BF16: {
            uint16_t h;
            std::memcpy(&h, t.data + 2 * i, 2);
            return bf16_to_f32(h);
        }
        case DType::F16: {
            uint16_t h;
            std::memcpy(&h, t.data + 2 * i, 2);
            return f16_to_f32(h);
        }
        default:
            fail("tensor {}: dtype {} is not a float type (expected BF16, F16 or F32)", t.name, dtype_name(t.dtype));
    }
}

float scale_value(const TensorView& s, int64_t i) {
    if (s.dtype == DType::F8_E8M0) return e8m0_to_f32(s.data[i]);
    if (s.dtype == DType::F32) {
        float f;
        std::memcpy(&f, s.data + 4 * i, 4);
        return f;
    }
    fail("tensor {}: scale dtype {} is not F8_E8M0 or F32", s.name, dtype_name(s.dtype));
}

void check_present(const TensorView& t, const char* what) {
    FS_CHECK(!t.empty(), "{} tensor '{}' is not bound (empty view)", what, t.name);
}

inline float load_weight(const float* w, int64_t i) { return w[i]; }
inline float load_weight(const uint16_t* w, int64_t i) {
    const uint32_t u = uint32_t(w[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// 8-lane vectors (GCC/Clang vector extensions): one AVX register in the AVX2 clone, two SSE registers in the
// baseline one; lane-wise operations either way, so both clones round identically.
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));

inline __attribute__((always_inline)) v8f load8(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline __attribute__((always_inline)) v8f load8(const uint16_t* p) {
    v8h h;
    std::memcpy(&h, p, sizeof h);
    const v8u u = __builtin_convertvector(h, v8u) << 16;
    v8f v;
    std::memcpy(&v, &u, sizeof v);
    return v;
}

// NR rows of x against one weight row. Lane j of the 16 accumulator lanes sums elements i with i % 16 == j;
// the lanes are then summed in a fixed tree and the tail (in % 16) added last, identically for every NR.
template <int NR, typename WT>
inline __attribute__((always_inline)) void dot_rows(const float* const* xr, const WT* w, int64_t in, float* out) {
    v8f lo[NR], hi[NR];
    for (int r = 0; r < NR; ++r) lo[r] = hi[r] = v8f{0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
        const v8f w0 = load8(w + i), w1 = load8(w + i + 8);
        for (int r = 0; r < NR; ++r) {
            lo[r] += load8(xr[r] + i) * w0;
            hi[r] += load8(xr[r] + i + 8) * w1;
        }
    }
    for (int r = 0; r < NR; ++r) {
        const v8f s8 = lo[r] + hi[r];
        float s4[4];
        for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
        float s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
        float tail = 0.f;
        for (int64_t k = i; k < in; ++k) tail += xr[r][k] * load_weight(w, k);
        out[r] = s + tail;
    }
}

template <typename WT>
inline __attribute__((always_inline)) void gemm_tile_impl(const float* x, int64_t r0, int64_t r1, const WT* w,
                                                          int64_t o0, int64_t o1, int64_t in, float* y,
                                                          int64_t out) {
    for (int64_t o = o0; o < o1; ++o) {
        const WT* wr = w + o * in;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) {
            const float* xr[4] = {x + r * in, x + (r + 1) * in, x + (r + 2) * in, x + (r + 3) * in};
            float res[4];
            dot_rows<4>(xr, wr, in, res);
            for (int k = 0; k < 4; ++k) y[(r + k) * out + o] = res[k];
        }
        for (; r < r1; ++r) {
            const float* xr[1] = {x + r * in};
            float res[1];
            dot_rows<1>(xr, wr, in, res);
            y[r * out + o] = res[0];
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FS_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define FS_MULTIVERSION
#endif

FS_MULTIVERSION void gemm_tile_f32(const float* x, int64_t r0, int64_t r1, const float* w, int64_t o0, int64_t o1,
                                   int64_t in, float* y, int64_t out) {
    gemm_tile_impl(x, r0, r1, w, o0, o1, in, y, out);
}
FS_MULTIVERSION void gemm_tile_bf16(const float* x, int64_t r0, int64_t r1, const uint16_t* w, int64_t o0,
                                    int64_t o1, int64_t in, float* y, int64_t out) {
    gemm_tile_impl(x, r0, r1, w, o0, o1, in, y, out);
}

template <typename WT, typename Tile>
void linear_any(const float* x, int64_t rows, const WT* w, int64_t out, int64_t in, float* y, ThreadPool* pool,
                Tile tile) {
    if (rows <= 0 || out <= 0) return;
    if (in == 0) {
        std::fill(y, y + rows * out, 0.f);
        return;
    }
    // Row blocks of 64 keep the x tile in cache while a chunk of weight rows streams past it.
    constexpr int64_t kRowBlock = 64;
    const int64_t threads = pool ? pool->size() : 1;
    const bool split_out = out >= 16 * threads || rows < 4 * threads;
    if (split_out) {
        const int64_t min_chunk = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, in * rows));
        parallel_for(pool, out, [&](int64_t o0, int64_t o1) {
            for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) tile(x, r0, std::min(rows, r0 + kRowBlock), w, o0, o1, in, y, out);
        }, min_chunk);
    } else {
        parallel_for(pool, rows, [&](int64_t r0, int64_t r1) { tile(x, r0, r1, w, 0, out, in, y, out); });
    }
}

}  // namespace

std::vector<float> tensor_to_f32(const TensorView& t) {
    check_present(t, "float");
    const int64_t n = t.numel();
    std::vector<float> v(size_t(std::max<int64_t>(n, 0)));
    if (t.dtype == DType::F32) {
        std::memcpy(v.data(), t.data, size_t(n) * 4);
        return v;
    }
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = element_to_f32(t, i);
    return v;
}

void tensor_row_to_f32(const TensorView& t, int64_t row, float* out) {
    check_present(t, "float");
    FS_CHECK(t.shape.size() == 2, "tensor {}: expected 2 dimensions, got {}", t.name, t.shape_str());
    FS_CHECK(row >= 0 && row < t.dim(0), "tensor {}: row {} out of range {}", t.name, row, t.shape_str());
    const int64_t cols = t.dim(1);
    for (int64_t c = 0; c < cols; ++c) out[c] = element_to_f32(t, row * cols + c);
}

std::vector<float> dequantize_linear(const Linear& lin) {
    check_present(lin.weight, "weight");
    const int64_t out = lin.out, in = lin.in;
    std::vector<float> w(static_cast<size_t>(out * in));
    switch (lin.format) {
        case WeightFormat::BF16:
        case WeightFormat::F32: {
            FS_CHECK(lin.weight.numel() == out * in, "tensor {}: {} elements, expected [{}, {}]", lin.weight.name,
                     lin.weight.numel(), out, in);
            w = tensor_to_f32(lin.weight);
            return w;
        }
        case WeightFormat::FP8_BLOCK128: {
            check_present(lin.scale, "scale");
            FS_CHECK(lin.weight.dtype == DType::F8_E4M3 && lin.weight.numel() == out * in,
                     "tensor {}: expected F8_E4M3 [{}, {}], got {} {}", lin.weight.name, out, in,
                     dtype_name(lin.weight.dtype), lin.weight.shape_str());
            const int64_t so = (out + 127) / 128, si = (in + 127) / 128;
            FS_CHECK(lin.scale.numel() == so * si, "tensor {}: expected scale shape [{}, {}], got {}", lin.scale.name,
                     so, si, lin.scale.shape_str());
            for (int64_t o = 0; o < out; ++o)
                for (int64_t i = 0; i < in; ++i)
                    w[size_t(o * in + i)] =
                        e4m3_to_f32(lin.weight.data[o * in + i]) * scale_value(lin.scale, (o / 128) * si + i / 128);
            return w;
        }
        case WeightFormat::FP4_BLOCK32: {
            check_present(lin.scale, "scale");
            FS_CHECK(in % 32 == 0, "tensor {}: FP4 input dim {} is not a multiple of 32", lin.weight.name, in);
            FS_CHECK((lin.weight.dtype == DType::I8 || lin.weight.dtype == DType::U8) &&
                         lin.weight.numel() == out * in / 2,
                     "tensor {}: expected I8 [{}, {}] (packed FP4), got {} {}", lin.weight.name, out, in / 2,
                     dtype_name(lin.weight.dtype), lin.weight.shape_str());
            FS_CHECK(lin.scale.numel() == out * (in / 32), "tensor {}: expected scale shape [{}, {}], got {}",
                     lin.scale.name, out, in / 32, lin.scale.shape_str());
            for (int64_t o = 0; o < out; ++o)
                for (int64_t i = 0; i < in; ++i) {
                    const uint8_t byte = lin.weight.data[(o * in + i) / 2];
                    const uint8_t code = (i % 2 == 0) ? (byte & 0xf) : (byte >> 4);
                    w[size_t(o * in + i)] = e2m1_to_f32(code) * scale_value(lin.scale, o * (in / 32) + i / 32);
                }
            return w;
        }
    }
    fail("tensor {}: unknown weight format", lin.weight.name);
}

void linear_f32(const float* x, int64_t rows, const float* w, int64_t out, int64_t in, float* y, ThreadPool* pool) {
    linear_any(x, rows, w, out, in, y, pool, gemm_tile_f32);
}

void linear_bf16w(const float* x, int64_t rows, const uint16_t* w, int64_t out, int64_t in, float* y,
                  ThreadPool* pool) {
    linear_any(x, rows, w, out, in, y, pool, gemm_tile_bf16);
}

void linear_release(const float* x, int64_t rows, const float* w, WeightFormat format, int64_t out, int64_t in,
                    float* y, ThreadPool* pool) {
    if (format == WeightFormat::F32) {
        linear_f32(x, rows, w, out, in, y, pool);
        return;
    }
    if (format == WeightFormat::FP8_BLOCK128 || format == WeightFormat::FP4_BLOCK32) {
        std::vector<float> xq(static_cast<size_t>(rows * in));
        for (int64_t r = 0; r < rows; ++r) act_quant_fp8_block128(x + r * in, in, xq.data() + r * in);
        linear_f32(xq.data(), rows, w, out, in, y, pool);
    } else {
        linear_f32(x, rows, w, out, in, y, pool);
    }
    round_bf16_inplace(y, rows * out);  // GEMM outputs are bf16 in the reference
}

}  // namespace flashseek::cpu
