// Random weights in checkpoint formats for the GPU harness (see weights.h).
#include "weights.h"

#include "cpu/ops.h"

namespace flashseek::test {

cuda::DeviceLinear TestWeight::device() const {
    cuda::DeviceLinear d;
    d.kind = kind;
    d.scale_kind = scale_kind;
    d.out = out;
    d.in = in;
    d.weight = w_dev ? w_dev->ptr : nullptr;
    d.scale = s_dev ? s_dev->ptr : nullptr;
    return d;
}

Linear TestWeight::host() const {
    Linear l;
    l.out = out;
    l.in = in;
    l.weight.name = "test.weight";
    l.weight.data = w_bytes.data();
    l.weight.nbytes = w_bytes.size();
    l.scale.name = "test.scale";
    l.scale.data = s_bytes.empty() ? nullptr : s_bytes.data();
    l.scale.nbytes = s_bytes.size();
    l.scale.dtype = scale_kind == cuda::ScaleKind::F32 ? DType::F32 : DType::F8_E8M0;
    switch (kind) {
        case cuda::WeightKind::BF16:
            l.format = WeightFormat::BF16;
            l.weight.dtype = DType::BF16;
            l.weight.shape = {out, in};
            break;
        case cuda::WeightKind::FP8_BLOCK128:
            l.format = WeightFormat::FP8_BLOCK128;
            l.weight.dtype = DType::F8_E4M3;
            l.weight.shape = {out, in};
            l.scale.shape = {(out + 127) / 128, (in + 127) / 128};
            break;
        case cuda::WeightKind::FP4_BLOCK32:
            l.format = WeightFormat::FP4_BLOCK32;
            l.weight.dtype = DType::I8;
            l.weight.shape = {out, in / 2};
            l.scale.shape = {out, in / 32};
            break;
    }
    return l;
}

std::vector<float> TestWeight::dequantized() const { return cpu::dequantize_linear(host()); }

TestWeight make_weight(std::mt19937_64& rng, cuda::WeightKind kind, cuda::ScaleKind scale_kind, int64_t out,
                       int64_t in, bool upload) {
    TestWeight t;
    t.kind = kind;
    t.scale_kind = scale_kind;
    t.out = out;
    t.in = in;
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uni(1e-3f, 1e-2f);
    int64_t n_scales = 0;
    int e_lo = 0, e_hi = 0;
    if (kind == cuda::WeightKind::BF16) {
        t.w_bytes.resize(size_t(out * in * 2));
        auto* p = reinterpret_cast<uint16_t*>(t.w_bytes.data());
        for (int64_t i = 0; i < out * in; ++i) p[i] = f32_to_bf16(normal(rng) * 0.05f);
    } else if (kind == cuda::WeightKind::FP8_BLOCK128) {
        t.w_bytes.resize(size_t(out * in));
        for (auto& b : t.w_bytes) b = f32_to_e4m3(normal(rng) * 64.f);
        n_scales = ((out + 127) / 128) * ((in + 127) / 128);
        e_lo = 127 - 10;
        e_hi = 127 - 6;
    } else {
        t.w_bytes.resize(size_t(out * in / 2));
        for (auto& b : t.w_bytes) b = uint8_t(rng() & 0xff);
        n_scales = out * (in / 32);
        e_lo = 127 - 8;
        e_hi = 127 - 5;
    }
    if (n_scales > 0) {
        std::uniform_int_distribution<int> e(e_lo, e_hi);
        if (scale_kind == cuda::ScaleKind::F32) {
            t.s_bytes.resize(size_t(n_scales) * 4);
            auto* p = reinterpret_cast<float*>(t.s_bytes.data());
            for (int64_t i = 0; i < n_scales; ++i) p[i] = uni(rng);
        } else {
            t.s_bytes.resize(size_t(n_scales));
            for (auto& b : t.s_bytes) b = uint8_t(e(rng));
        }
    }
    if (upload) {
        t.w_dev = std::make_unique<DeviceArray<uint8_t>>(t.w_bytes);
        if (!t.s_bytes.empty()) t.s_dev = std::make_unique<DeviceArray<uint8_t>>(t.s_bytes);
    }
    return t;
}

}  // namespace flashseek::test
