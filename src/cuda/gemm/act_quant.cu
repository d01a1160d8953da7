// act_quant for the compute-bound GEMMs (see act_quant.cuh): a half-warp per (row, 128-column block), 8 values per
// lane (one 16-byte load), the block's amax by a half-warp reduction, the scale and e4m3 rounding of
// gemm/fp8_quant.cuh. A warp quantizes 4 such blocks (2 adjacent ones per round, both rounds' loads issued first).
// The values come from bf16 rows (optionally gathered) or from a SwiGLU of two bf16 rows
// (gemm/swiglu_element.cuh), and are stored at their row (optionally mapped: a gather) or at several rows (scatter:
// quantize_fp8_scatter).
// Why: the first version (a warp per block, one 8-byte load per lane) ran at ~1.2-1.4 TB/s on the H200 whatever
// the width (M = 8192: wq_a's 4096 columns 80.7 us, wo_b's 8192 168 us, wo_a's 8 x 4096 549 us: the wo_a input
// is simply 4x wo_b's bytes), ~3x below the copy bandwidth: too few bytes in flight per SM. Four times as many
// now (two 16-byte loads per thread).
#include "cuda/gemm/act_quant.cuh"

#include "cuda/common/alignment.h"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/swiglu_element.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kRounds = 2;                    // units per half-warp, loads issued together
constexpr int kUnitsPerWarp = 2 * kRounds;    // (row, 128-column block) units

struct QuantArgs {
    const uint16_t* x;  // the rows, or (SwiGLU) the gate rows
    const uint16_t* u;  // SwiGLU: the up rows (same row stride)
    float limit;
    int64_t x_rows, ld_x;
    const int32_t* row_map;
    Fp8Activation out;
    int64_t unit_rows;          // rows quantized: out.m, or (scatter) x_rows
    const int32_t* row_slots;   // scatter: [x_rows, slots_per_row] output rows of each input row (< 0: none)
    int slots_per_row;
    int blocks;       // ceil(k / 128)
    bool vector_x;    // x (and u) 16-byte aligned and ld_x % 8 == 0: one 16-byte load per lane and row
    bool interleaved;  // Fp8CodeOrder::GROUP_INTERLEAVED
};

// Eight bf16 values from `row` at column c (those at or past k read as 0).
__device__ __forceinline__ void load8(const uint16_t* row, int64_t c, int64_t k, bool vector, float (&v)[8]) {
    if (vector && c + 8 <= k) {
        const uint4 p = *reinterpret_cast<const uint4*>(row + c);
        const uint32_t w[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = bf16_bits_to_f32(uint16_t(w[i] & 0xffffu));
            v[2 * i + 1] = bf16_bits_to_f32(uint16_t(w[i] >> 16));
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = c + i < k ? bf16_bits_to_f32(row[c + i]) : 0.f;
}

// This lane's 8 values of the unit (row r, 128-column block b); zeros for a unit past the end or a row_map entry
// outside the input.
template <bool SWIGLU>
__device__ __forceinline__ void load_unit(const QuantArgs& a, bool valid, int64_t r, int b, int hl, float (&v)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = 0.f;
    if (!valid) return;
    const int64_t c = int64_t(b) * 128 + 8 * hl;
    if (SWIGLU) {
        float g[8], u[8];
        load8(a.x + r * a.ld_x, c, a.out.k, a.vector_x, g);
        load8(a.u + r * a.ld_x, c, a.out.k, a.vector_x, u);
#pragma unroll
        for (int i = 0; i < 8; ++i)
            if (c + i < a.out.k) v[i] = bf16_bits_to_f32(swiglu_bf16(g[i], u[i], 1.f, a.limit));
        return;
    }
    const int64_t src = a.row_map ? int64_t(a.row_map[r]) : r;
    if (src >= 0 && src < a.x_rows) load8(a.x + src * a.ld_x, c, a.out.k, a.vector_x, v);
}

// Unit indices are 32-bit (host-checked) and a warp's units are consecutive: one division per warp locates them
// (the 64-bit division per unit, twice, was half of the kernel's instructions).
template <bool SWIGLU>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) quantize_kernel(const QuantArgs a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int lane = threadIdx.x & 31, half = lane >> 4, hl = lane & 15;
    const uint32_t first = (blockIdx.x * uint32_t(kWarpsPerBlock) + threadIdx.x / 32) * uint32_t(kUnitsPerWarp);
    const uint32_t units = uint32_t(a.unit_rows) * uint32_t(a.blocks), blocks = uint32_t(a.blocks);
    if (first >= units) return;  // whole warps only: the reductions below need every lane
    const uint32_t r0 = first / blocks, b0 = first - r0 * blocks;
    uint32_t row[kRounds], blk[kRounds];
#pragma unroll
    for (int i = 0; i < kRounds; ++i) {  // unit first + 2 i + half
        uint32_t r = r0, b = b0 + uint32_t(2 * i + half);
        while (b >= blocks) {
            b -= blocks;
            ++r;
        }
        row[i] = r;
        blk[i] = b;
    }
    float v[kRounds][8];
#pragma unroll
    for (int i = 0; i < kRounds; ++i)
        load_unit<SWIGLU>(a, first + uint32_t(2 * i + half) < units, row[i], int(blk[i]), hl, v[i]);
#pragma unroll
    for (int i = 0; i < kRounds; ++i) {
        float amax = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[i][j]));
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));  // the half-warp
        if (first + uint32_t(2 * i + half) >= units) continue;
        const int64_t r = row[i];
        const int b = int(blk[i]);
        const float sc = fp8_block_scale(amax), inv = 1.f / sc;
        const uint32_t lo = fp8_code4(v[i], inv), hi = fp8_code4(v[i] + 4, inv);
        auto store = [&](int64_t out_row) {
            // padding columns hold 0 codes
            uint8_t* block = a.out.codes + out_row * a.out.codes_ld + int64_t(b) * 128;
            if (a.interleaved) {  // columns 8 hl .. + 3 and + 4 .. + 7 are 4-byte runs at their own positions
                constexpr Fp8CodeOrder kOrder = Fp8CodeOrder::GROUP_INTERLEAVED;
                *reinterpret_cast<uint32_t*>(block + fp8_code_position(8 * hl, kOrder)) = lo;
                *reinterpret_cast<uint32_t*>(block + fp8_code_position(8 * hl + 4, kOrder)) = hi;
            } else {
                *reinterpret_cast<uint2*>(block + 8 * hl) = make_uint2(lo, hi);
            }
            if (hl == 0) a.out.scales[int64_t(b) * a.out.scales_ld + out_row] = sc;
        };
        if (!a.row_slots) {
            store(r);
            continue;
        }
        for (int j = 0; j < a.slots_per_row; ++j) {  // scatter: the row's codes once, stored at each of its slots
            const int32_t slot = a.row_slots[r * a.slots_per_row + j];
            if (slot >= 0 && slot < a.out.m) store(slot);
        }
    }
}

// The fields every entry sets; unit_rows: the rows quantized (out.m, or the input rows of a scatter).
QuantArgs quant_args(const uint16_t* x, int64_t x_rows, int64_t ld_x, const Fp8Activation& out, int64_t unit_rows) {
    QuantArgs a{};
    a.x = x;
    a.x_rows = x_rows;
    a.ld_x = ld_x;
    a.out = out;
    a.unit_rows = unit_rows;
    a.blocks = int((out.k + 127) / 128);
    a.vector_x = aligned16(x) && ld_x % 8 == 0;
    a.interleaved = out.order == Fp8CodeOrder::GROUP_INTERLEAVED;
    return a;
}

template <bool SWIGLU>
void launch_quantize(const char* name, const QuantArgs& a, cudaStream_t stream) {
    FS_REQUIRE(a.unit_rows * a.blocks < (int64_t(1) << 31) - kWarpsPerBlock * kUnitsPerWarp, name, ": ", a.unit_rows,
               " rows x ", a.out.k, " columns have more 128-column blocks than 32-bit unit indices cover");
    const int64_t warps = (a.unit_rows * a.blocks + kUnitsPerWarp - 1) / kUnitsPerWarp;
    launch_pdl(name, quantize_kernel<SWIGLU>, dim3(unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock)),
               dim3(kWarpsPerBlock * 32), 0, stream, a);
}

// The output's shape and layout (every entry).
void check_output(const Fp8Activation& out, const char* what) {
    FS_REQUIRE(out.m >= 0 && out.k > 0, what, ": bad shape m=", out.m, " k=", out.k);
    if (out.m == 0) return;
    FS_REQUIRE(out.codes != nullptr && out.scales != nullptr, what, ": null codes or scales");
    FS_REQUIRE(out.codes_ld % 128 == 0 && out.codes_ld >= out.k, what, ": codes_ld ", out.codes_ld,
               " must be a multiple of 128 and >= k = ", out.k);
    FS_REQUIRE(out.scales_ld % 4 == 0 && out.scales_ld >= out.m, what, ": scales_ld ", out.scales_ld,
               " must be a multiple of 4 and >= m = ", out.m);
    FS_REQUIRE(reinterpret_cast<uintptr_t>(out.codes) % 16 == 0, what, ": codes must be 16-byte aligned");
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
    QuantArgs a = quant_args(x, x_rows, ld_x, out, out.m);
    a.row_map = row_map;
    launch_quantize<false>("quantize_fp8_activation", a, stream);
}

void quantize_fp8_scatter(const uint16_t* x, int64_t x_rows, int64_t ld_x, const int32_t* row_slots, int slots_per_row,
                          const Fp8Activation& out, cudaStream_t stream) {
    check_output(out, "quantize_fp8_scatter");
    if (out.m == 0 || x_rows == 0) return;
    FS_REQUIRE(x != nullptr && row_slots != nullptr && x_rows > 0 && slots_per_row >= 1,
               "quantize_fp8_scatter: null input or slot map, or ", x_rows, " rows x ", slots_per_row, " slots");
    FS_REQUIRE(ld_x >= out.k, "quantize_fp8_scatter: ld_x ", ld_x, " < k ", out.k);
    QuantArgs a = quant_args(x, x_rows, ld_x, out, x_rows);
    a.row_slots = row_slots;
    a.slots_per_row = slots_per_row;
    launch_quantize<false>("quantize_fp8_scatter", a, stream);
}

void quantize_fp8_swiglu(const uint16_t* g, const uint16_t* u, int64_t ld, float limit, const Fp8Activation& out,
                         cudaStream_t stream) {
    check_output(out, "quantize_fp8_swiglu");
    if (out.m == 0) return;
    FS_REQUIRE(g != nullptr && u != nullptr && ld >= out.k, "quantize_fp8_swiglu: null g / u or ld ", ld, " < inter ",
               out.k);
    QuantArgs a = quant_args(g, out.m, ld, out, out.m);
    a.u = u;
    a.limit = limit;
    a.vector_x = a.vector_x && aligned16(u);
    launch_quantize<true>("quantize_fp8_swiglu", a, stream);
}

}  // namespace flashseek::cuda
