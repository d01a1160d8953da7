// Linear layers on the GPU with weights kept in their checkpoint formats (FP8 e4m3 + 128x128 block scales,
// packed FP4 e2m1 + per-32 scales, or BF16): y[m, o] = sum_k x[m, k] * W[o, k], for M (tokens) from 1 to
// thousands. Two steps:
//   1. prepare_activation: x (bf16 or fp32, [M, K] row-major) -> a PreparedActivation: f16 values with one fp32
//      power-of-two scale per (token, 128-column block), laid out for the tensor-core fragments of the weight
//      format that will consume it. With ActNumerics::FP8_BLOCK128 the values are exactly the official
//      act_quant (e4m3 codes, ue8m0 scale 2^ceil(log2(max(amax,1e-4)/448))); with ActNumerics::EXACT they are
//      x itself (bf16 inputs are represented exactly, fp32 inputs to 11 bits). BF16 weights take plain bf16 x.
//      One prepared activation serves every linear that reads the same input with the same weight format.
//   2. linear: y = x W^T by the variant the linear catalogue chooses for the shape (decode GEMVs, the tile GEMM);
//      every variant applies the scales in fp32 per 128-K step and reduces split-K partials deterministically.
// Works on sm_80 and later; faster variants on sm_90 / sm_90a (the linear catalogue, linear_catalogue.h). All host
// entry points take raw device pointers and a stream, allocate nothing, and are safe to capture in a CUDA graph.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cuda/common/kernel_policy.h"
#include "cuda/gemm/act_quant.cuh"

namespace flashseek::cuda {

enum class WeightKind : uint8_t {
    BF16,          // uint16 bf16 [out, in]
    FP8_BLOCK128,  // uint8 e4m3fn [out, in]; scale [ceil(out/128), ceil(in/128)]
    FP4_BLOCK32,   // uint8 [out, in/2], element 2i in the low nibble; scale [out, in/32]; in % 32 == 0
};
enum class ScaleKind : uint8_t { NONE, E8M0, F32 };  // E8M0 bytes (2^(b-127)) or fp32, row-major as stored

// One weight matrix on the device, exactly as the checkpoint stores it (row-major, `in` contiguous).
struct DeviceLinear {
    WeightKind kind = WeightKind::BF16;
    ScaleKind scale_kind = ScaleKind::NONE;
    int64_t out = 0, in = 0;
    const void* weight = nullptr;
    const void* scale = nullptr;  // nullptr for BF16
    // Not a checkpoint tensor but a copy an earlier kernel of the pass wrote (wo_a widened to bf16): no kernel may
    // read it before its PDL wait (common/pdl.cuh). The variants that take BF16 weights honour that: bf16_gemm
    // (through Bf16GemmArgs::weights_in_stream), tile_gemm (its BF16 weights always wait), generic_linear (no PDL);
    // bf16_gemv, which reads weights early, takes no grouped call, and only wo_a's grouped copy carries the mark.
    bool written_in_stream = false;
};

enum class ActNumerics : uint8_t {
    EXACT,         // reference numerics: the activation is used as is (bf16 activations, fp32 accumulation)
    FP8_BLOCK128,  // release numerics: act_quant to e4m3 per 1x128 block with ue8m0 scales (official kernel.py)
};
enum class OutKind : uint8_t { BF16, F32 };

// The memory layout of a prepared activation, i.e. the input a linear variant takes (LinearVariant::format):
//   MMA_F16   prepare_activation's layout: f16 values permuted for the mma fragments of the weight format (FP8/FP4
//             layouts) or natural bf16 rows (BF16 layout, unit scales), per-(token, 128-block) scales; or raw bf16
//             rows (raw_activation). Every GEMV and tile_gemm.
//   FP8_ROWS  act_quant (release numerics only): e4m3 codes in rows and transposed per-(row, 128-block) scales
//             (act_quant.cuh), in `fp8`; the compute-bound FP8 GEMMs (fp8_gemm, fp8_gemm_mma).
enum class ActFormat : uint8_t { MMA_F16, FP8_ROWS };

// The prepared activation. Memory is owned by the caller: `values` holds m_pad * k_pad uint16 and `scales`
// m_pad * (k_pad / 128) floats, with m_pad = round_up(M, 8) and k_pad = round_up(K, 128). Padding is written as 0.
// The same storage holds either format (both 16-byte aligned): FP8_ROWS needs M * k_pad code bytes (<= the
// 2 * m_pad * k_pad bytes of `values`) and (k_pad / 128) * round_up(M, 4) scale floats (<= m_pad * k_pad / 128).
struct PreparedActivation {
    WeightKind layout = WeightKind::BF16;  // the weight format it was prepared for
    int64_t m = 0, k = 0, m_pad = 0, k_pad = 0;
    uint16_t* values = nullptr;  // f16 (FP8/FP4 layouts, permuted inside each group of 4 / 8) or bf16 (natural)
    float* scales = nullptr;     // per (token, 128-block) power-of-two scale; 1 for the BF16 layout
    // Deferred preparation (FP8/FP4 layouts, small-M GEMV kernels only; see raw_activation): `values` holds the
    // caller's raw bf16 rows [m, k] with row stride raw_ld elements, nothing was prepared, and the GEMV kernels
    // apply prepare_activation's math (for `layout`, with `numerics`) while staging. `scales` is unused.
    bool raw = false;
    ActNumerics numerics = ActNumerics::EXACT;  // prepared: the numerics it was prepared with; raw: to apply
    int64_t raw_ld = 0;
    ActFormat format = ActFormat::MMA_F16;
    Fp8Activation fp8;  // FP8_ROWS: the codes and scales (over `values` and `scales`); unused otherwise
    // Set by the producer that also wrote this activation as packed 16-token tiles (wgmma_experts' up-projection
    // writes h both ways, moe_wgmma.cu; moe_expert_up_pack_ahead packs one token's x for the up-projection): the tile
    // memory (MoeGrouping::act_tiles) that holds it, so its consumer (wgmma_experts' down- or up-projection) skips its
    // own packing. Valid while the values and those tiles are unchanged; describe_prepared clears it, and so must any
    // code that rewrites the values.
    const void* packed_tiles = nullptr;
};
// Fills x's description (not its storage) for a prepared [m, k] activation: layout, numerics and the padded sizes.
inline void describe_prepared(PreparedActivation& x, WeightKind layout, ActNumerics numerics, int64_t m, int64_t k) {
    x.layout = layout;
    x.raw = false;
    x.format = ActFormat::MMA_F16;
    x.numerics = numerics;
    x.m = m;
    x.k = k;
    x.m_pad = (m + 7) / 8 * 8;
    x.k_pad = (k + 127) / 128 * 128;
    x.packed_tiles = nullptr;
}
// Fills x's description as the FP8_ROWS act_quant of an [m, k] activation (FP8 layout, release numerics) over its
// own values / scales storage: what prepare_activation_rows writes, and a producer kernel that writes the same.
inline void describe_fp8_rows(PreparedActivation& x, int64_t m, int64_t k) {
    describe_prepared(x, WeightKind::FP8_BLOCK128, ActNumerics::FP8_BLOCK128, m, k);
    x.format = ActFormat::FP8_ROWS;
    x.fp8 = fp8_activation_view(x.values, x.scales, m, k);
}
size_t prepared_values_bytes(int64_t m, int64_t k);
size_t prepared_scales_bytes(int64_t m, int64_t k);

// x: [M, K] with row stride ld_x elements, bf16 (x_is_f32 = false) or fp32. `out` must have values/scales set
// and room for (M, K); its m/k/layout fields are filled in. For layout BF16 numerics must be EXACT.
// launch_next_early: the next kernel of the stream is launched at the preparation's entry instead of after its wait
// (common/pdl.cuh pdl_wait_and_trigger; the same result).
void prepare_activation(const void* x, bool x_is_f32, int64_t M, int64_t K, int64_t ld_x, WeightKind layout,
                        ActNumerics numerics, PreparedActivation& out, cudaStream_t stream,
                        bool launch_next_early = false);

// x: bf16 [M, K] with row stride ld_x elements (16-byte aligned rows take vector loads) -> the FP8_ROWS format for
// FP8 weights: act_quant per (row, 128-column block), the codes and scales of the official act_quant (bit for bit
// the values and scales prepare_activation makes in release numerics, in the other layout). Release numerics only
// (FP8_BLOCK128; exact numerics keep MMA_F16: prepare_activation). `out` must have values/scales set (16-byte
// aligned, sized as above for (M, K)); its other fields are filled in (layout FP8_BLOCK128).
void prepare_activation_rows(const uint16_t* x, int64_t M, int64_t K, int64_t ld_x, ActNumerics numerics,
                             PreparedActivation& out, cudaStream_t stream);

// Scratch for split-K partial sums: `partials` (bytes) and `counters` (n_counters uint32, zeroed once by
// create; kernels leave them zero). One workspace per stream: two linears in flight may not share one.
struct GemmWorkspace {
    float* partials = nullptr;
    size_t partial_bytes = 0;
    uint32_t* counters = nullptr;
    int n_counters = 0;
};
inline constexpr size_t kDefaultGemmPartialBytes = size_t(32) << 20;
inline constexpr int kDefaultGemmCounters = 1 << 16;
GemmWorkspace create_gemm_workspace(size_t partial_bytes = kDefaultGemmPartialBytes,
                                    int n_counters = kDefaultGemmCounters);  // cudaMalloc + memset
void destroy_gemm_workspace(GemmWorkspace& ws);

// y = x W^T. x prepared for w.kind (x.k == w.in). y: [M, w.out] with row stride ld_y elements, bf16 or fp32.
// ws may be null (then no split-K). Throws Error on mismatched shapes or formats.
// Grouped linear (attention wo_a): W is [G * R, Kg] (group g = rows g*R .. g*R+R-1) and x is [M, G * Kg];
// y[m, g*R + i] = sum_c W[g*R + i, c] * x[m, g*Kg + c]. x prepared over its full width G*Kg.
// Kg % 128 == 0 and R % 64 == 0 (every DeepSeek-V4 shape) take the tensor-core variants; other shapes (tiny test
// configs) generic_linear, an element-wise fallback.
//
// Kernel choice: the linear catalogue (linear_catalogue.h) lists every variant with the architectures it exists
// on, the activation format it takes, what it supports and where it was measured fastest; linear() takes the first
// preferred variant in priority order (or one the policy forces) among those taking x's format, plans it and runs
// that plan. Returns the variant's name (for the per-op table). linear_input_format() tells the caller which
// format to prepare before the call.
std::string_view linear(const PreparedActivation& x, const DeviceLinear& w, void* y, OutKind y_kind, int64_t ld_y,
                        const GemmWorkspace* ws, cudaStream_t stream, const KernelPolicy& policy = KernelPolicy{});
std::string_view grouped_linear(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y,
                                OutKind y_kind, int64_t ld_y, const GemmWorkspace* ws, cudaStream_t stream,
                                const KernelPolicy& policy = KernelPolicy{});

// grouped_linear whose output only feeds an FP8 GEMM: writes y's act_quant rows (FP8_ROWS, natural order; y.m >=
// x.m, y.k = w.out), the bits prepare_activation_rows gives of the bf16 output, instead of the output, where the
// chosen variant can (bf16_gemm on the wgmma path). Returns the variant's name, or an empty name having run nothing
// (the caller then runs grouped_linear and prepares its output).
std::string_view grouped_linear_to_fp8_rows(const PreparedActivation& x, const DeviceLinear& w, int groups,
                                            const Fp8Activation& y, const GemmWorkspace* ws, cudaStream_t stream,
                                            const KernelPolicy& policy = KernelPolicy{});

// Convenience for tests and one-off calls: prepares into caller scratch (values/scales sized as above) and runs
// linear(). Returns the prepared activation it used.
PreparedActivation prepare_and_linear(const void* x, bool x_is_f32, int64_t M, int64_t ld_x, const DeviceLinear& w,
                                      ActNumerics numerics, uint16_t* scratch_values, float* scratch_scales,
                                      void* y, OutKind y_kind, int64_t ld_y, const GemmWorkspace* ws,
                                      cudaStream_t stream, const KernelPolicy& policy = KernelPolicy{});

// The activation format linear() / grouped_linear() would run from for M tokens of this weight with these numerics
// (raw: a raw_activation is on offer): the format of the first forced variant that supports the shape, else of the
// first enabled and preferred one. Decided from shapes alone (no pointers); throws Error when no variant serves.
ActFormat linear_input_format(int64_t M, const DeviceLinear& w, int groups, ActNumerics numerics,
                              const KernelPolicy& policy = KernelPolicy{}, bool raw = false);
// ... and the name of that variant (raw: the one a raw_activation of that shape runs).
std::string_view linear_choice(int64_t M, const DeviceLinear& w, int groups, ActNumerics numerics,
                               const KernelPolicy& policy = KernelPolicy{}, bool raw = false);

// What linear() does for a problem (tests, benchmarks): the variant, tokens per pass and K splits.
struct LinearPlan {
    std::string_view variant;  // a name of the linear catalogue
    int tokens_per_pass = 8;
    int k_splits = 1;
    bool aligned = true;       // tile_gemm: vectorized loads (in % 128 == 0 and aligned pointers), else guarded scalar
};
LinearPlan plan_linear(const PreparedActivation& x, const DeviceLinear& w, int groups, const GemmWorkspace* ws,
                       const KernelPolicy& policy = KernelPolicy{});

// The small-M GEMV variants serve at most this many tokens (KernelPolicy::gemv_max_tokens may lower it).
inline constexpr int64_t kGemvMaxTokens = 16;

// Deferred activation preparation: where the mma_gemv or simt_gemv variant supports the problem (and gemv_experts for
// the expert projections), linear()/grouped_linear() accept raw_activation(x, ...) in place of a prepared activation
// and apply prepare_activation's math (same act_quant scales and e4m3 rounding, or the exact f16 form) while staging:
// bit-identical results, no preparation launch. Through mma_gemv it measured slower end to end on the H200 (every
// 16-row CTA re-quantizes its whole K range: docs/perf.md); the backend takes it where one token's input would be
// prepared for simt_gemv (KernelPolicy "prepare_in_gemv": wo_a and wo_b), whose CTAs stage one row's split.
// x: bf16 [M, K], row stride ld (a multiple of 8), 16-byte aligned.
PreparedActivation raw_activation(const void* x_bf16, int64_t M, int64_t K, int64_t ld, WeightKind layout,
                                  ActNumerics numerics);

}  // namespace flashseek::cuda
