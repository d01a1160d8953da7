// act_quant for the compute-bound GEMMs (see act_quant.cuh): one warp per (row, 128-column block), 4 values per
// lane, the block's amax by warp reduction, the scale and e4m3 rounding of gemm/fp8_quant.cuh. The values come
// from bf16 rows (optionally gathered) or from a SwiGLU of two bf16 rows (gemm/swiglu_element.cuh).
#include "cuda/gemm/act_quant.cuh"

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/swiglu_element.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

struct QuantArgs {
    const uint16_t* x;  // the rows, or (SwiGLU) the gate rows
    const uint16_t* u;  // SwiGLU: the up rows (same row stride)
    float limit;
    int64_t x_rows, ld_x;
    const int32_t* row_map;
    Fp8Activation out;
    int blocks;       // ceil(k / 128)
    bool vector_x;    // x 8-byte aligned and ld_x % 4 == 0: one 8-byte load per lane
};

template <bool SWIGLU>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) quantize_kernel(const QuantArgs a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int64_t w = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (w >= a.out.m * a.blocks) return;
    const int64_t r = w / a.blocks;
    const int b = int(w % a.blocks);
    const int64_t src = a.row_map ? int64_t(a.row_map[r]) : r;
    const bool valid = src >= 0 && src < a.x_rows;
    const int64_t c0 = int64_t(b) * 128 + 4 * lane;  // this lane's first column
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (SWIGLU) {
        const uint16_t* gr = a.x + r * a.ld_x;
        const uint16_t* ur = a.u + r * a.ld_x;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (c0 + i < a.out.k)
                v[i] = bf16_bits_to_f32(swiglu_bf16(bf16_bits_to_f32(gr[c0 + i]), bf16_bits_to_f32(ur[c0 + i]), 1.f,
                                                    a.limit));
    } else if (valid) {
        const uint16_t* row = a.x + src * a.ld_x;
        if (a.vector_x && c0 + 4 <= a.out.k) {
            const uint2 p = *reinterpret_cast<const uint2*>(row + c0);
            v[0] = bf16_bits_to_f32(uint16_t(p.x & 0xffffu));
            v[1] = bf16_bits_to_f32(uint16_t(p.x >> 16));
            v[2] = bf16_bits_to_f32(uint16_t(p.y & 0xffffu));
            v[3] = bf16_bits_to_f32(uint16_t(p.y >> 16));
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (c0 + i < a.out.k) v[i] = bf16_bits_to_f32(row[c0 + i]);
        }
    }
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = warp_max(amax);
    const float sc = fp8_block_scale(amax), inv = 1.f / sc;
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) packed |= fp8_code(v[i], inv) << (8 * i);
    *reinterpret_cast<uint32_t*>(a.out.codes + r * a.out.codes_ld + c0) = packed;  // padding columns hold 0 codes
    if (lane == 0) a.out.scales[int64_t(b) * a.out.scales_ld + r] = sc;
}

// The output's shape and layout (both entries).
void check_output(const Fp8Activation& out, const char* what) {
    FS_REQUIRE(out.m >= 0 && out.k > 0, what, ": bad shape m=", out.m, " k=", out.k);
    if (out.m == 0) return;
    FS_REQUIRE(out.codes != nullptr && out.scales != nullptr, what, ": null codes or scales");
    FS_REQUIRE(out.codes_ld % 128 == 0 && out.codes_ld >= out.k, what, ": codes_ld ", out.codes_ld,
               " must be a multiple of 128 and >= k = ", out.k);
    FS_REQUIRE(out.scales_ld % 4 == 0 && out.scales_ld >= out.m, what, ": scales_ld ", out.scales_ld,
               " must be a multiple of 4 and >= m = ", out.m);
    FS_REQUIRE(reinterpret_cast<uintptr_t>(out.codes) % 16 == 0, what, ": codes must be 16-byte aligned");
    FS_REQUIRE(out.m * ((out.k + 127) / 128) < (int64_t(1) << 31) * kWarpsPerBlock, what, ": ", out.m, " x ", out.k,
               " is more than one launch covers");
}

}  // namespace

void quantize_fp8_activation(const uint16_t* x, int64_t x_rows, int64_t ld_x, const int32_t* row_map,
                             const Fp8Activation& out, cudaStream_t stream) {
    check_output(out, "quantize_fp8_activation");
    if (out.m == 0) return;
    FS_REQUIRE(x != nullptr, "quantize_fp8_activation: null input");
    FS_REQUIRE(ld_x >= out.k, "quantize_fp8_activation: ld_x ", ld_x, " < k ", out.k);
    FS_REQUIRE(row_map != nullptr || x_rows >= out.m, "quantize_fp8_activation: x has ", x_rows, " rows, ", out.m,
               " needed");
    QuantArgs a{};
    a.x = x;
    a.x_rows = x_rows;
    a.ld_x = ld_x;
    a.row_map = row_map;
    a.out = out;
    a.blocks = int((out.k + 127) / 128);
    a.vector_x = reinterpret_cast<uintptr_t>(x) % 8 == 0 && ld_x % 4 == 0;
    const int64_t warps = out.m * a.blocks;
    launch_pdl("quantize_fp8_activation", quantize_kernel<false>,
               dim3(unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock)), dim3(kWarpsPerBlock * 32), 0, stream, a);
}

void quantize_fp8_swiglu(const uint16_t* g, const uint16_t* u, int64_t ld, float limit, const Fp8Activation& out,
                         cudaStream_t stream) {
    check_output(out, "quantize_fp8_swiglu");
    if (out.m == 0) return;
    FS_REQUIRE(g != nullptr && u != nullptr && ld >= out.k, "quantize_fp8_swiglu: null g / u or ld ", ld, " < inter ",
               out.k);
    QuantArgs a{};
    a.x = g;
    a.u = u;
    a.limit = limit;
    a.x_rows = out.m;
    a.ld_x = ld;
    a.out = out;
    a.blocks = int((out.k + 127) / 128);
    const int64_t warps = out.m * a.blocks;
    launch_pdl("quantize_fp8_swiglu", quantize_kernel<true>,
               dim3(unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock)), dim3(kWarpsPerBlock * 32), 0, stream, a);
}

}  // namespace flashseek::cuda
