// Case lists and thresholds of the linear op family (linear_family.h).
#include "linear_family.h"

#include <algorithm>
#include <array>
#include <map>
#include <sstream>
#include <tuple>

#include "harness_mode.h"

namespace flashseek::test {
namespace {

using cuda::ActNumerics;
using cuda::OutKind;
using cuda::ScaleKind;
using cuda::WeightKind;

constexpr auto FP8 = WeightKind::FP8_BLOCK128;
constexpr auto FP4 = WeightKind::FP4_BLOCK32;
constexpr auto BF16W = WeightKind::BF16;
constexpr auto E8M0 = ScaleKind::E8M0;
constexpr auto F32S = ScaleKind::F32;
constexpr auto NOSCALE = ScaleKind::NONE;
constexpr auto EXACT = ActNumerics::EXACT;
constexpr auto RELEASE = ActNumerics::FP8_BLOCK128;

struct Shape {
    int64_t M, N, K;
    bool quick = false;
};

// The test list. Shapes come from the per-kernel suites this harness replaces, so every kernel keeps the edges it
// was written against; the runner now takes each case through every variant that supports it.
std::vector<LinearCase> test_cases() {
    std::vector<LinearCase> v;
    auto add = [&](std::string what, WeightKind kind, ScaleKind scale, ActNumerics num, Shape s, OutKind out = OutKind::F32,
                   bool f32_input = false, int groups = 1) {
        v.push_back({std::move(what), kind, scale, num, s.M, s.N, s.K, groups, out, f32_input, s.quick});
    };
    // General shapes, every weight format and numerics: decode rows, odd row / token counts, K off the 128 grid
    // (the tile GEMM's guarded path), several token passes, prefill-like.
    const std::vector<Shape> general = {
        {1, 1024, 4096, true},  // wq_a-like decode row, split-K
        {1, 77, 256},           // odd row count
        {3, 200, 384},          // odd tokens, rows not a multiple of 16
        {16, 512, 1024},        // two token tiles per pass
        {5, 130, 416, true},    // K not a multiple of 128: guarded path
        {33, 96, 640, true},    // three token passes
        {64, 256, 512},         // prefill-like
        {9, 19, 160},           // tiny, K % 128 != 0
    };
    for (const Shape& s : general) {
        for (ActNumerics num : {EXACT, RELEASE}) {
            add("general FP8", FP8, E8M0, num, s);
            if (s.K % 32 == 0) add("general FP4", FP4, E8M0, num, {s.M, s.N, s.K, false});
        }
        add("general FP8, F32 scales, bf16 out", FP8, F32S, RELEASE, {s.M, s.N, s.K, false}, OutKind::BF16);
        add("general BF16", BF16W, NOSCALE, EXACT, {s.M, s.N, s.K, false});
        add("general BF16, bf16 out", BF16W, NOSCALE, EXACT, {s.M, s.N, s.K, s.quick && s.M == 1}, OutKind::BF16);
    }
    add("FP4 with F32 scales", FP4, F32S, EXACT, {4, 256, 512});
    // Small-M GEMV shapes: M = 1..16, odd row counts, K step counts that do not divide among a CTA's warps, long rows
    // (several staged chunks per CTA), split-K.
    const std::vector<Shape> small_m = {
        {1, 1024, 4096},         // wq_a-like: split-K
        {1, 77, 384},            // 3 steps, 77 rows
        {3, 203, 1152, true},    // 9 steps, odd tokens and rows
        {8, 130, 640},           // 8 tokens, 5 steps
        {2, 33, 128},            // one step
        {5, 500, 2304},          // 5 tokens (8-token tile), 18 steps
        {4, 1000, 8192},         // long rows: several staged chunks per CTA
        {11, 96, 1024},          // 11 tokens: two FP8 token tiles, FP4 in passes of 4
        {16, 272, 4096},         // 16 tokens, split-K
    };
    for (const Shape& s : small_m) {
        for (ActNumerics num : {EXACT, RELEASE}) {
            add("small-M FP8", FP8, E8M0, num, {s.M, s.N, s.K, s.quick && num == RELEASE});
            add("small-M FP4", FP4, E8M0, num, {s.M, s.N, s.K, s.quick && num == EXACT});
        }
        add("small-M FP8, F32 scales, bf16 out", FP8, F32S, RELEASE, {s.M, s.N, s.K, false}, OutKind::BF16);
        add("small-M FP4, F32 scales", FP4, F32S, EXACT, {s.M, s.N, s.K, false});
    }
    // FP8 projections of many rows over a short K at decode token counts, which fp8_gemm takes below its floor where
    // wgmma exists (wq_b-like): one and several tokens, K of one and several 128-blocks.
    for (const Shape& s : std::vector<Shape>{{1, 8192, 1024, true}, {5, 8192, 512}, {16, 16384, 1024}, {7, 4096, 2048}})
        add("wide short-K FP8", FP8, E8M0, RELEASE, s);
    add("wide short-K FP8, F32 scales, bf16 out", FP8, F32S, RELEASE, {3, 8192, 256}, OutKind::BF16);
    // BF16 weights at decode token counts on bf16_gemv's shapes (rows % 64, K % 32): K off the 128 grid with a short
    // last group of chunks, one and two 8-token groups, split-K, the indexer weights_proj and router shapes.
    const std::vector<Shape> small_m_bf16 = {
        {3, 192, 416}, {11, 256, 4096, true}, {1, 64, 4096}, {16, 128, 2080}, {9, 1024, 4096},
    };
    for (const Shape& s : small_m_bf16) add("small-M BF16", BF16W, NOSCALE, EXACT, s);
    add("small-M BF16, bf16 out", BF16W, NOSCALE, EXACT, {5, 320, 1024}, OutKind::BF16);
    add("fp32 input, small-M BF16", BF16W, NOSCALE, EXACT, {2, 192, 256}, OutKind::F32, true);
    // Raw-activation shapes not above (the raw path must be bit-identical to the prepared one).
    for (ActNumerics num : {EXACT, RELEASE}) {
        add("raw: FP8 F32 scales, fp32 out", FP8, F32S, num, {3, 203, 1152});
        add("raw: FP4", FP4, E8M0, num, {2, 130, 640});
        add("raw: FP4 odd rows", FP4, E8M0, num, {7, 77, 2048});
        add("raw: FP8 16 tokens", FP8, E8M0, num, {16, 512, 2048});
    }
    // fp32 inputs (rounded to f16 / bf16 when prepared).
    add("fp32 input", FP8, E8M0, EXACT, {7, 300, 1024}, OutKind::F32, true);
    add("fp32 input, BF16 weights", BF16W, NOSCALE, EXACT, {2, 160, 256}, OutKind::F32, true);
    add("fp32 input, small M", FP8, E8M0, EXACT, {3, 96, 512, true}, OutKind::F32, true);
    add("fp32 input, one token", FP8, E8M0, EXACT, {1, 512, 4096}, OutKind::F32, true);
    // Split-K at decode sizes (every GEMV and the tile GEMM must split these and stay deterministic).
    add("split-K", FP8, E8M0, EXACT, {2, 512, 4096});
    for (int64_t M : {1, 3, 8, 16}) add("split-K", FP8, E8M0, RELEASE, {M, 512, 4096});
    // The streaming FP8 GEMVs' shapes (bulk: rows % 16, K % 256; wgmma: rows % 64, K % 256): single stage, many
    // splits, two token tiles / 8-token column blocks, F32 and E8M0 scales, bf16 and fp32 out.
    const std::vector<Shape> streaming = {
        {1, 1024, 4096}, {1, 4096, 8192, true}, {2, 32, 256}, {2, 64, 256},        {5, 512, 768},
        {9, 272, 2048},  {9, 320, 2048},  {16, 2048, 1024, true},
    };
    for (const Shape& s : streaming) {
        add("streaming GEMV", FP8, E8M0, RELEASE, s);
        add("streaming GEMV, F32 scales, bf16 out", FP8, F32S, RELEASE, {s.M, s.N, s.K, s.quick || s.M == 9},
            OutKind::BF16);
    }
    // The compute-bound GEMMs (fp8_gemm, fp8_gemm_mma: FP8 weights in release numerics from an FP8_ROWS activation;
    // bf16_gemm: BF16 weights) at and above their preference floor (KernelPolicy::gemm_min_tokens, 64 rows), where
    // the default choice takes them: odd row counts (partial 64 / 128 / 256-row tiles), N and K one or a few 16-column
    // steps past a 128-block (the GEMMs take multiples of 16: partial weight-scale and act_quant blocks), many row
    // tiles. tile_gemm runs the same cases, and every variant must agree with the others. Exact numerics on FP8
    // weights stay with tile_gemm (the GEMMs quantize activations as act_quant does).
    const std::vector<Shape> gemm = {
        {65, 272, 400, true},  // one row past the floor; N = 2 x 128 + 16, K = 3 x 128 + 16
        {64, 144, 1040},       // exactly the floor; K = 8 x 128 + 16
        {129, 1040, 528},      // one row past a 128-row tile
        {200, 528, 2064},      // K % 128 = 16 over 17 blocks
        {1000, 1280, 256},     // eight 128-row tiles and a partial one
    };
    for (const Shape& s : gemm) {
        add("GEMM FP8", FP8, E8M0, RELEASE, s);
        add("GEMM BF16", BF16W, NOSCALE, EXACT, s);
        if (s.M <= 200) {
            add("GEMM FP8, F32 scales, bf16 out", FP8, F32S, RELEASE, {s.M, s.N, s.K, false}, OutKind::BF16);
            add("GEMM BF16, bf16 out", BF16W, NOSCALE, EXACT, {s.M, s.N, s.K, false}, OutKind::BF16);
        }
    }
    add("GEMM shape, exact numerics (tile_gemm)", FP8, E8M0, EXACT, {129, 1040, 528});
    add("GEMM shape, fp32 input, BF16 weights", BF16W, NOSCALE, EXACT, {129, 272, 400}, OutKind::F32, true);
    // Grouped (attention wo_a: G groups of [R, Kg]); N = G * R, K = Kg.
    struct G {
        int64_t M;
        int groups;
        int64_t R, Kg;
        ActNumerics num;
        bool quick;
    };
    for (const G& g : {G{1, 8, 64, 256, EXACT, false}, G{3, 4, 64, 384, RELEASE, true}, G{17, 8, 1024, 128, EXACT, false},
                       G{1, 4, 64, 640, RELEASE, false},  // small-M GEMV, 5 steps per group
                       G{7, 4, 64, 1024, RELEASE, false}, G{11, 4, 64, 1024, RELEASE, false},  // streaming GEMVs, split-K
                       G{5, 4, 64, 512, EXACT, false}, G{5, 4, 64, 512, RELEASE, false},  // raw grouped
                       // tiny-config shapes: only the element-wise fallback (R % 64 != 0 or Kg % 128 != 0)
                       G{2, 4, 24, 192, EXACT, true}, G{3, 2, 32, 256, EXACT, false},
                       // wo_a-like at prefill sizes: the FP8 GEMMs run all 8 groups in one launch (R and Kg
                       // multiples of 128); R = 64 only tile_gemm; exact numerics only tile_gemm
                       G{65, 8, 128, 256, RELEASE, true}, G{200, 8, 256, 128, RELEASE, false},
                       G{1000, 8, 128, 128, RELEASE, false}, G{96, 4, 64, 256, RELEASE, false},
                       G{129, 8, 128, 512, EXACT, false},
                       // wgmma_f16_gemv (exact numerics, 2-256 tokens): token tiles of 16 / 32 / 64 with zero-filled
                       // tails, several tiles of 64, splits over 2-4 stages of 256 columns
                       G{2, 8, 64, 512, EXACT, true}, G{16, 4, 64, 1024, EXACT, false}, G{33, 8, 128, 512, EXACT, false},
                       G{130, 4, 64, 1024, EXACT, true}, G{256, 8, 64, 256, EXACT, false}})
        add("grouped", FP8, E8M0, g.num, {g.M, g.groups * g.R, g.Kg, g.quick}, OutKind::F32, false, g.groups);
    // The same problem listed twice (shape lists overlap) runs once, quick if either listing is.
    std::map<std::tuple<int, int, int, int64_t, int64_t, int64_t, int, int, bool>, size_t> index;
    std::vector<LinearCase> unique;
    for (const LinearCase& c : v) {
        const auto key = std::make_tuple(int(c.kind), int(c.scale), int(c.numerics), c.M, c.N, c.K, c.groups,
                                         int(c.out), c.f32_input);
        const auto [it, fresh] = index.emplace(key, unique.size());
        if (fresh) unique.push_back(c);
        else unique[it->second].quick = unique[it->second].quick || c.quick;
    }
    return unique;
}

// The V4-Flash linears (docs/model.md §3) at decode token counts (1, 2-16: the GEMVs), between the GEMVs and the
// compute-bound GEMMs (32-256 rows: where tile_gemm and the GEMMs meet, KernelPolicy::gemm_min_tokens) and at
// prefill passes (kPerfPrefillRows and more: the "linear prefill" table, with cuBLASLt on the same shapes).
// Production numerics: release (FP8 activations) on FP8 / FP4 weights, exact on BF16 weights and on wo_a (the
// backend keeps its activation bf16, as the reference's bf16 einsum); wo_a is also listed in release numerics at
// prefill, the grouped FP8 GEMM's shape. layer_count: how often one CSA layer (compress ratio 4: the compressor's
// wkv and wgate, the indexer's compressor and weights_proj) runs the linear, for the prefill table's one-layer sum;
// the shared expert's w1 and w3 are listed as one 4096-row product.
std::vector<LinearCase> perf_cases() {
    struct Op {
        const char* name;
        WeightKind kind;
        int64_t out, in;
        int groups;
        bool prefill;  // also at 32-256 rows and at prefill passes
        ActNumerics numerics;
        int layer_count;
        bool decode = true;  // at 1-16 rows
    };
    const Op ops[] = {
        {"wq_a", FP8, 1024, 4096, 1, true, RELEASE, 1},
        {"wkv", FP8, 512, 4096, 1, true, RELEASE, 1},
        {"wq_b", FP8, 32768, 1024, 1, true, RELEASE, 1},
        {"wo_a (grouped 8)", FP8, 8192, 4096, 8, true, EXACT, 1},
        {"wo_a (grouped 8, FP8 act)", FP8, 8192, 4096, 8, true, RELEASE, 0, false},
        {"wo_b", FP8, 4096, 8192, 1, true, RELEASE, 1},
        {"indexer wq_b", FP8, 8192, 1024, 1, true, RELEASE, 1},
        {"shared w1|w3", FP8, 4096, 4096, 1, true, RELEASE, 1},
        {"shared w2", FP8, 4096, 2048, 1, true, RELEASE, 1},
        {"compressor wkv (bf16)", BF16W, 1024, 4096, 1, true, EXACT, 2},
        {"compressor r128 wkv (bf16)", BF16W, 512, 4096, 1, true, EXACT, 0},
        {"indexer compressor wkv (bf16)", BF16W, 256, 4096, 1, true, EXACT, 2},
        {"indexer weights_proj (bf16)", BF16W, 64, 4096, 1, true, EXACT, 1},
        {"router (bf16)", BF16W, 256, 4096, 1, true, EXACT, 1},
        {"head (bf16)", BF16W, 129280, 4096, 1, true, EXACT, 0},
        {"expert-shaped FP4", FP4, 2048, 4096, 1, false, RELEASE, 0},
    };
    std::vector<LinearCase> v;
    for (const Op& op : ops) {
        std::vector<int64_t> ms;
        if (op.decode) ms = {1, 2, 8, 16};
        if (op.prefill) ms.insert(ms.end(), {32, 64, 128, 256, kPerfPrefillRows, 4096, 8192});
        for (int64_t M : ms) {
            LinearCase c{op.name, op.kind, op.kind == BF16W ? NOSCALE : E8M0, op.numerics, M, op.out, op.in,
                         op.groups, op.kind == BF16W ? OutKind::F32 : OutKind::BF16, false, false};
            c.layer_count = op.layer_count;
            v.push_back(c);
        }
    }
    return v;
}

}  // namespace

std::vector<LinearCase> linear_cases() { return cases_for_mode(test_cases, perf_cases); }

std::string describe(const LinearCase& c) {
    static const char* kinds[] = {"BF16", "FP8", "FP4"};
    static const char* scales[] = {"none", "E8M0", "F32"};
    std::ostringstream os;
    os << c.what << ": " << kinds[int(c.kind)] << " scales " << scales[int(c.scale)] << ", "
       << (c.numerics == ActNumerics::EXACT ? "exact" : "release") << ", M=" << c.M << " N=" << c.N << " K=" << c.K;
    if (c.groups > 1) os << " groups=" << c.groups;
    os << ", " << (c.out == OutKind::F32 ? "fp32" : "bf16") << " out" << (c.f32_input ? ", fp32 input" : "");
    return os.str();
}

double linear_threshold(const LinearCase& c, std::string_view variant) {
    // fp32 outputs of exact products differ from the CPU only by accumulation order.
    double t = 2e-5;
    // fp32 inputs are rounded when prepared: to f16 (11 bits) for FP8 / FP4 weights, to bf16 for BF16 weights.
    if (c.f32_input) t = c.kind == WeightKind::BF16 ? 4e-3 : 1e-3;
    // FP4 with F32 scales on the tile GEMM: per-group scale ratios are rounded to f16 (the GEMVs apply the scales in
    // fp32 and stay at summation order).
    if (variant == "tile_gemm" && c.kind == WeightKind::FP4_BLOCK32 && c.scale == ScaleKind::F32) t = std::max(t, 1e-3);
    // wgmma_gemv: the tensor core's FP8 sums of 128 products are not exact fp32 additions (1.0-1.3e-4 relative
    // measured on the H200 for every shape of its former suite).
    if (variant == "wgmma_gemv") t = std::max(t, 3e-4);
    // wgmma_f16_gemv: f16 products summed by the tensor core per 128 columns (like the e4m3 kernel's, not exact
    // fp32 additions), then in fp32.
    if (variant == "wgmma_f16_gemv") t = std::max(t, 1e-4);
    // fp8_gemm (and its split-K form): the same for the wgmma FP8 GEMM, whose 128-K block sums are the tensor core's
    // (1.03-1.42e-4 measured on the H200 over test_dense_gemm's FP8 cases, 3.25e-4 on one seed of the 2 x 32 x 256
    // streaming case, whose 64 outputs average little: run 200 of docs/perf-log/2026-12-04_split-k-fp8-gemm.md).
    if (variant == "fp8_gemm" || variant == "fp8_gemm_splitk") t = std::max(t, 5e-4);
    // fp8_gemm_mma: native e4m3 mma.sync (sm_89, sm_120) also sums its products in the tensor core (test_dense_gemm's
    // bound for that path: 1e-4); sm_90 lowers it to f16 and sm_80 widens to f16, exact products there (1e-8 measured).
    if (variant == "fp8_gemm_mma") t = std::max(t, 1e-4);
    // bf16_gemm: fp32 sums of exact bf16 products on every path: the default 2e-5 (4e-3 with fp32 inputs, above).
    // bf16 outputs add one bf16 rounding.
    if (c.out == OutKind::BF16) t = std::max(t, 4e-3);
    return t;
}

}  // namespace flashseek::test
