// FP8 activations for the compute-bound GEMMs (dense_gemm.cuh, moe/moe_gemm.cuh; ActFormat::FP8_ROWS of
// linear.cuh): bf16 rows -> e4m3 codes plus one fp32 power-of-two scale per (row, 128-column block), exactly the
// official act_quant (scale 2^ceil(log2(max(amax, 1e-4) / 448)), codes e4m3(clamp(x / scale, +-448)) rounded to
// nearest even): the same codes and scales as the release-numerics preparation of linear.cuh
// (gemm/prepare_block.cuh) and cpu::act_quant_fp8_block128, bit for bit.
// Layout, chosen for the GEMMs' loads: codes row-major with a 128-multiple row stride (a TMA box row of 128 bytes is
// one scale block; the columns past K are zero), scales transposed (block-major, rows contiguous, row count
// padded to 4 floats: one TMA box per (128 rows, block), as DeepGEMM's per-token scales).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashseek::cuda {

// Where a column's code sits inside its 128-column block. NATURAL: at the column. GROUP_INTERLEAVED (the sm_90a
// grouped expert GEMM's B operand, moe/moe_gemm_sm90.cu): the 32-byte k-step s of a block holds columns
// 32 t + 8 s + 4 h + j (group t, half h, j < 4) at 32 s + 16 h + 4 t + j, so that one 16-byte load of a packed FP4
// weight row (one 32-group) gives a thread its register fragment of all four k-steps.
enum class Fp8CodeOrder { NATURAL, GROUP_INTERLEAVED };
__host__ __device__ inline int64_t fp8_code_position(int64_t column, Fp8CodeOrder order) {
    if (order == Fp8CodeOrder::NATURAL) return column;
    const int64_t c = column & 127;
    return (column - c) + 32 * ((c >> 3) & 3) + 16 * ((c >> 2) & 1) + 4 * (c >> 5) + (c & 3);
}

struct Fp8Activation {
    uint8_t* codes = nullptr;  // [m, codes_ld] e4m3 codes
    int64_t codes_ld = 0;      // bytes per row: a multiple of 128, >= k
    float* scales = nullptr;   // [ceil(k / 128), scales_ld]: scale of (row r, block b) at scales[b * scales_ld + r]
    int64_t scales_ld = 0;     // a multiple of 4, >= m
    int64_t m = 0, k = 0;
    Fp8CodeOrder order = Fp8CodeOrder::NATURAL;  // of the codes inside each 128-column block
};

inline int64_t fp8_codes_ld(int64_t k) { return (k + 127) / 128 * 128; }
inline int64_t fp8_scales_ld(int64_t m) { return (m + 3) / 4 * 4; }
inline size_t fp8_activation_codes_bytes(int64_t m, int64_t k) { return size_t(m) * size_t(fp8_codes_ld(k)); }
inline size_t fp8_activation_scales_bytes(int64_t m, int64_t k) {
    return size_t((k + 127) / 128) * size_t(fp8_scales_ld(m)) * sizeof(float);
}
// An activation of m x k over caller memory of the sizes above (codes 16-byte aligned, scales 16-byte aligned).
inline Fp8Activation fp8_activation_view(void* codes, void* scales, int64_t m, int64_t k) {
    return Fp8Activation{static_cast<uint8_t*>(codes), fp8_codes_ld(k), static_cast<float*>(scales), fp8_scales_ld(m),
                         m, k, Fp8CodeOrder::NATURAL};
}

// Columns [col0, col0 + k) of an activation (col0 a multiple of 128: whole scale blocks), e.g. one group of the
// grouped output projection wo_a, whose input is act_quant over all groups' columns at once.
inline Fp8Activation fp8_activation_columns(const Fp8Activation& a, int64_t col0, int64_t k) {
    Fp8Activation c = a;
    c.codes = a.codes + col0;
    c.scales = a.scales + (col0 / 128) * a.scales_ld;
    c.k = k;
    return c;
}

// out row r = act_quant(x row (row_map ? row_map[r] : r)); x: bf16 [x_rows, out.k] with row stride ld_x elements.
// A row_map entry outside [0, x_rows) gives a zero row (codes 0, the scale of an all-zero block). Every code of
// rows 0..out.m-1 (padding columns included) and every scale of those rows is written, codes in out.order.
// Graph-capturable, PDL launch.
void quantize_fp8_activation(const uint16_t* x, int64_t x_rows, int64_t ld_x, const int32_t* row_map,
                             const Fp8Activation& out, cudaStream_t stream);

// act_quant of each row r of x (bf16 [x_rows, out.k], row stride ld_x) stored at every output row
// row_slots[r * slots_per_row + j] (entries < 0 or >= out.m skipped): the inverse of quantize_fp8_activation's row
// map, so that every output row written holds the bits quantize_fp8_activation(x, .., row_map, out) gives it where
// row_map[slot] = r; rows no entry names are not written. For the routed experts' slots (top_k per token): each token
// row quantized once instead of top_k times. Graph-capturable, PDL launch.
void quantize_fp8_scatter(const uint16_t* x, int64_t x_rows, int64_t ld_x, const int32_t* row_slots, int slots_per_row,
                          const Fp8Activation& out, cudaStream_t stream);

// The down-projection input of a dense (shared) expert whose w1 and w3 ran as two GEMMs with bf16 outputs g, u
// ([m, inter], row stride ld elements): out = act_quant(bf16(silu(min(g, limit)) * clamp(u, +-limit))), the
// elements of gemm/swiglu_element.cuh (as moe_swiglu_prepare of moe.cuh, in this layout). out.k = inter.
void quantize_fp8_swiglu(const uint16_t* g, const uint16_t* u, int64_t ld, float limit, const Fp8Activation& out,
                         cudaStream_t stream);

}  // namespace flashseek::cuda
