// Host entries of the compute-bound dense GEMMs (see dense_gemm.cuh): argument checks with messages that name the
// argument, the path and tile choice, and the hand-off to a kernel backend (gemm_sm90.cu or gemm_mma.cu).
// Tile choice (wgmma path): the tile height whose waves (ceil(tiles / SMs), persistent CTAs) cost least, with the
// relative cost of one tile measured on the H200 at K = 4096 (gemm_perf.log of the first GPU run: a wave of 64-row
// tiles 19-20 us, of 128-row tiles 27.6-28.9 us, of 256-row tiles 47.5 us): 0.69, 1 and 1.7; ties take the taller
// tile (less L2 traffic per FLOP). The first rule (the tallest tile whose count alone fills the SMs) fell off a
// cliff just below a full wave: wkv (N = 512) at M = 4096 had 128 tiles of 128 rows for 132 SMs and took 256
// tiles of 64 rows instead (38.0 us, 34% of the FP8 ceiling). K is never split (batch invariance, dense_gemm.cuh).
// What that gives on the V4-Flash shapes of one layer (132 SMs; tile rows, first rule -> this one):
//   shape (k -> n)             M = 256     M = 1024     M = 4096     M = 8192
//   wq_a 4096 -> 1024          64          64           128 -> 256   256
//   wkv 4096 -> 512            64          64           64 -> 128    128 -> 256
//   wq_b 1024 -> 32768         256         256          256          256
//   wo_a 8 x (4096 -> 1024)    64 -> 128   256          256          256          (groups = 8, one launch)
//   wo_b 8192 -> 4096          64          128 -> 256   256          256
//   shared w1|w3, w2 -> 4096   as wo_b
//   indexer wq_b 1024 -> 8192  64 -> 128   256          256          256
//   head 4096 -> 129280 (bf16) 256         256          256          256
//   router 4096 -> 256 (bf16)  64          64           64           64 -> 128
// Below ~132 tiles (M = 256 on the small projections) the GPU is not full; only split-K would fill it, and it is
// left out of these plans on purpose (batch invariance: prefill passes take this GEMM at any row count). Decode
// calls ask for it explicitly (Fp8GemmArgs::k_splits, fp8_gemm_k_splits: tiles x splits within one wave), as the
// linear catalogue's fp8_gemm_splitk variant does at 2-16 rows.
// Measured and not addressed here (gemm_perf.log, M = 4096 / 8192): wq_b and the indexer's wq_b (K = 1024: 8
// k-blocks per tile) run at 40-45% of the ceiling, wo_b at 77-78%: with short K the epilogue (registers straight to
// global memory, not overlapped with the next tile's main loop) weighs a quarter of a tile; a shared-memory staged
// TMA-store epilogue overlapped with the next tile is the next step there.
#include "cuda/gemm/dense_gemm.cuh"

#include <algorithm>
#include <string>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/gemm/dense_gemm_problem.cuh"

namespace flashseek::cuda {
namespace {

GemmPath resolve(GemmPath path, bool fp8) {
    if (path != GemmPath::AUTO) return path;
    if (wgmma_usable()) return GemmPath::WGMMA;
    if (fp8 && !has_fp8_mma(current_arch().cc)) return GemmPath::MMA_F16;
    return GemmPath::MMA_NATIVE;
}

// Shared checks of the output and the sizes; empty when fine.
std::string check_common(int64_t m, int64_t n, int64_t k, const void* w, const void* d, int64_t ldd) {
    if (m < 0 || m >= (int64_t(1) << 31)) return fs_cat("m = ", m, " out of range [0, 2^31)");
    if (n <= 0 || n % 16 != 0 || n >= (int64_t(1) << 31)) return fs_cat("n = ", n, " must be a positive multiple of 16");
    if (k <= 0 || k % 16 != 0 || k >= (int64_t(1) << 31)) return fs_cat("k = ", k, " must be a positive multiple of 16");
    if (w == nullptr || !aligned16(w)) return "the weight pointer must be non-null and 16-byte aligned";
    if (d == nullptr) return "the output pointer is null";
    if (ldd < n) return fs_cat("ldd = ", ldd, " < n = ", n);
    if ((m + 63) / 64 * ((n + 127) / 128) >= (int64_t(1) << 31))
        return fs_cat(m, " x ", n, " has more output tiles than one launch covers");
    return {};
}

std::string check_path(GemmPath path, bool fp8) {
    if (!gemm_path_supported(path, fp8))
        return fs_cat("GEMM path ", int(path), " is not supported on this device (compute capability ",
                      current_arch().cc, ") or build");
    return {};
}

// groups independent products over column slices: every slice whole units of k (FP8: a scale block of 128; BF16: a
// stage of 64) and of n (128: scale blocks, tiles). Empty when fine.
std::string check_groups(int groups, int64_t k, int64_t n, int64_t k_unit, const char* why) {
    if (groups < 1) return fs_cat("groups = ", groups, " must be >= 1");
    if (groups > 1 && (k % (k_unit * groups) != 0 || n % (128 * groups) != 0))
        return fs_cat("with groups = ", groups, ", k = ", k, " must be a multiple of ", k_unit, " x groups and n = ", n,
                      " of 128 x groups (", why, ")");
    return {};
}

// Whether K's kb blocks of 128 fall into `splits` ranges of ceil(kb / splits) blocks (the kernel's split_blocks)
// with none empty.
bool nonempty_splits(int64_t kb, int64_t splits) {
    if (splits < 1 || splits > kb) return false;
    const int64_t per = (kb + splits - 1) / splits;
    return (kb + per - 1) / per == splits;
}

std::string check_fp8(const Fp8GemmArgs& x, GemmPath path) {
    std::string e = check_common(x.a.m, x.n, x.a.k, x.w, x.d, x.ldd);
    if (!e.empty()) return e;
    if (x.a.codes == nullptr || !aligned16(x.a.codes)) return "activation codes must be non-null and 16-byte aligned";
    if (x.a.codes_ld % 16 != 0 || x.a.codes_ld < x.a.k)
        return fs_cat("activation codes_ld = ", x.a.codes_ld, " must be a multiple of 16 and >= k = ", x.a.k);
    if (x.a.scales == nullptr || !aligned16(x.a.scales)) return "activation scales must be non-null and 16-byte aligned";
    if (x.a.order != Fp8CodeOrder::NATURAL) return "activation codes must be in natural column order";
    if (x.a.scales_ld % 4 != 0 || x.a.scales_ld < x.a.m)
        return fs_cat("activation scales_ld = ", x.a.scales_ld, " must be a multiple of 4 and >= m = ", x.a.m);
    if (x.w_scales == nullptr) return "the weight scales are null";
    if (x.w_scale_kind != ScaleKind::E8M0 && x.w_scale_kind != ScaleKind::F32)
        return "the weight scale kind must be E8M0 or F32";
    e = check_groups(x.groups, x.a.k, x.n, 128, "whole scale blocks per group");
    if (!e.empty()) return e;
    if (x.k_splits != 1) {
        const int64_t kb = (x.a.k / x.groups + 127) / 128, tiles = (x.n / x.groups + 127) / 128 * x.groups;
        if (!nonempty_splits(kb, x.k_splits))
            return fs_cat("k_splits = ", x.k_splits, " must split the ", kb, " blocks of 128 along k into non-empty ranges");
        if (path != GemmPath::WGMMA) return "split-K (k_splits > 1) needs the wgmma path";
        if (x.a.m > 64) return fs_cat("split-K takes at most 64 rows (one tile), not m = ", x.a.m);
        if (!x.ws || !x.ws->partials || !x.ws->counters) return "split-K needs a workspace with partials and counters";
        if (x.ws->partial_bytes < size_t(x.k_splits) * size_t(x.a.m) * size_t(x.n) * 4 || x.ws->n_counters < tiles)
            return fs_cat("the workspace (", x.ws->partial_bytes, " bytes, ", x.ws->n_counters, " counters) is too small for ",
                          x.k_splits, " splits of ", x.a.m, " x ", x.n, " partials and ", tiles, " tiles");
    }
    return check_path(path, true);
}

std::string check_bf16(const Bf16GemmArgs& x, GemmPath path) {
    const bool rows = x.d_rows.codes != nullptr;
    std::string e = rows ? check_common(x.m, x.n, x.k, x.w, x.d_rows.codes, x.n) : check_common(x.m, x.n, x.k, x.w, x.d, x.ldd);
    if (!e.empty()) return e;
    if (rows) {
        if (x.d != nullptr) return "give d or d_rows, not both";
        if (path != GemmPath::WGMMA) return "act_quant rows as the output (d_rows) need the wgmma path";
        const Fp8Activation& r = x.d_rows;
        if (x.n % 128 != 0 || x.rows_col0 < 0 || x.rows_col0 % 128 != 0)
            return fs_cat("d_rows: n = ", x.n, " and rows_col0 = ", x.rows_col0, " must be multiples of 128");
        if (r.m < x.m || r.k < x.rows_col0 + x.n || r.order != Fp8CodeOrder::NATURAL || r.scales == nullptr ||
            !aligned16(r.codes) || r.codes_ld % 16 != 0 || r.codes_ld < r.k || r.scales_ld < x.m)
            return fs_cat("d_rows is not an act_quant activation of at least ", x.m, " x ", x.rows_col0 + x.n,
                          " in natural order with 16-byte aligned codes");
    }
    if (x.a == nullptr || !aligned16(x.a)) return "the activation pointer must be non-null and 16-byte aligned";
    if (x.lda % 8 != 0 || x.lda < x.k) return fs_cat("lda = ", x.lda, " must be a multiple of 8 and >= k = ", x.k);
    e = check_groups(x.groups, x.k, x.n, 64, "whole stages and tiles per group");
    if (!e.empty()) return e;
    if (x.groups > 1 && path != GemmPath::WGMMA)
        return fs_cat("groups = ", x.groups, " in one launch needs the wgmma path");
    return check_path(path, false);
}

bool vector_store(const void* d, int64_t ldd, OutKind kind) {
    const uintptr_t align = kind == OutKind::F32 ? 8 : 4;
    return ldd % 2 == 0 && reinterpret_cast<uintptr_t>(d) % align == 0;
}

// The wgmma tile height of least estimated time (see the header): waves of persistent CTAs times a tile's cost.
template <typename Tiles>
int cheapest_tile_height(const Tiles& tiles, int sms) {
    constexpr struct {
        int rows;
        double cost;
    } kHeights[] = {{256, 1.7}, {128, 1.0}, {64, 0.69}};
    int best = 256;
    double best_cost = 0;
    for (const auto& h : kHeights) {
        const double cost = double((tiles(h.rows) + sms - 1) / sms) * h.cost;
        if (h.rows == 256 || cost < best_cost - 1e-9) {
            best = h.rows;
            best_cost = cost;
        }
    }
    return best;
}

// rows_out: act_quant rows as the output (tiles of 128 or 256 rows only).
GemmPlan plan(GemmPath path, int64_t m, int64_t n, bool fp8, int block_m, bool rows_out = false, int k_splits = 1) {
    GemmPlan p;
    p.path = resolve(path, fp8);
    const int64_t n_tiles = (n + dense_gemm::kBlockN - 1) / dense_gemm::kBlockN;
    const int sms = current_arch().sm_count;
    auto tiles = [&](int bm) { return (m + bm - 1) / bm * n_tiles; };
    if (p.path == GemmPath::WGMMA) {
        FS_REQUIRE(block_m == 0 || block_m == 64 || block_m == 128 || block_m == 256, "dense GEMM: block_m ", block_m,
                   " must be 0 (automatic), 64, 128 or 256");
        FS_REQUIRE(!rows_out || block_m != 64, "dense GEMM: act_quant rows as the output need tiles of 128 or 256 rows");
        p.block_m = block_m != 0 ? block_m : cheapest_tile_height(tiles, sms);
        if (rows_out && p.block_m == 64) p.block_m = 128;
        if (k_splits > 1) p.block_m = 64;  // m <= 64 (checked): one tile of rows
        p.k_splits = k_splits;
        p.tiles = tiles(p.block_m) * k_splits;
        p.ctas = int(std::min<int64_t>(p.tiles, sms));  // persistent: one CTA per SM at most
    } else {
        FS_REQUIRE(block_m == 0 || block_m == 128, "dense GEMM: the mma.sync path takes 128-row tiles, not ", block_m);
        p.block_m = 128;
        p.tiles = tiles(128);
        p.ctas = int(p.tiles);
    }
    return p;
}

void set_output(dense_gemm::Problem& q, void* d, OutKind kind, int64_t ldd) {
    q.d = d;
    q.d_f32 = kind == OutKind::F32;
    q.ldd = ldd;
    q.d_vector = vector_store(d, ldd, kind);
}

void run(dense_gemm::Problem& q, const GemmPlan& p, cudaStream_t stream) {
    if (q.m == 0) return;
    q.block_m = p.block_m;
    if (p.path == GemmPath::WGMMA) {
        dense_gemm::launch_sm90(q, p.ctas, stream);
        return;
    }
    const auto mode = !q.fp8                          ? dense_gemm::MmaMode::BF16
                      : p.path == GemmPath::MMA_NATIVE ? dense_gemm::MmaMode::FP8_NATIVE
                                                       : dense_gemm::MmaMode::FP8_AS_F16;
    dense_gemm::launch_mma(q, mode, stream);
}

}  // namespace

bool gemm_path_supported(GemmPath path, bool fp8) {
    const int cc = current_arch().cc;
    switch (path) {
        case GemmPath::AUTO: return has_bf16_mma(cc);
        case GemmPath::WGMMA: return wgmma_usable();
        case GemmPath::MMA_NATIVE: return fp8 ? has_fp8_mma(cc) : has_bf16_mma(cc);
        case GemmPath::MMA_F16: return has_bf16_mma(cc);
    }
    return false;
}

bool fp8_gemm_eligible(const Fp8GemmArgs& args, GemmPath path) {
    return check_fp8(args, resolve(path, true)).empty();
}
bool bf16_gemm_eligible(const Bf16GemmArgs& args, GemmPath path) {
    return check_bf16(args, resolve(path, false)).empty();
}
GemmPlan plan_fp8_gemm(const Fp8GemmArgs& args, GemmPath path, int block_m) {
    return plan(path, args.a.m, args.n, true, block_m, false, args.k_splits);
}
int fp8_gemm_k_splits(int64_t n, int64_t k, int groups) {
    if (groups < 1 || n <= 0 || k <= 0) return 1;
    const int64_t tiles = (n / groups + 127) / 128 * groups, kb = (k / groups + 127) / 128;
    int64_t splits = std::min<int64_t>(current_arch().sm_count / tiles, kb);
    while (splits > 1 && !nonempty_splits(kb, splits)) --splits;
    return int(std::max<int64_t>(splits, 1));
}
GemmPlan plan_bf16_gemm(const Bf16GemmArgs& args, GemmPath path, int block_m) {
    return plan(path, args.m, args.n, false, block_m, args.d_rows.codes != nullptr);
}

void gemm_fp8(const Fp8GemmArgs& x, GemmPath path, cudaStream_t stream, int block_m) {
    const GemmPlan p = plan_fp8_gemm(x, path, block_m);
    const std::string e = check_fp8(x, p.path);
    FS_REQUIRE(e.empty(), "gemm_fp8: ", e);
    dense_gemm::Problem q;
    q.fp8 = true;
    q.a = x.a.codes;
    q.lda_bytes = x.a.codes_ld;
    q.a_scales = x.a.scales;
    q.a_scales_ld = x.a.scales_ld;
    q.w = x.w;
    q.w_scales = x.w_scales;
    q.w_scales_f32 = x.w_scale_kind == ScaleKind::F32;
    q.m = x.a.m;
    q.n = x.n / x.groups;
    q.k = x.a.k / x.groups;
    q.groups = x.groups;
    q.tma_store = x.tma_store;
    q.k_splits = x.k_splits;
    if (x.k_splits > 1) {
        q.partials = x.ws->partials;
        q.counters = x.ws->counters;
    }
    set_output(q, x.d, x.d_kind, x.ldd);
    run(q, p, stream);
}

void gemm_bf16(const Bf16GemmArgs& x, GemmPath path, cudaStream_t stream, int block_m) {
    const GemmPlan p = plan_bf16_gemm(x, path, block_m);
    const std::string e = check_bf16(x, p.path);
    FS_REQUIRE(e.empty(), "gemm_bf16: ", e);
    dense_gemm::Problem q;
    q.fp8 = false;
    q.a = x.a;
    q.lda_bytes = x.lda * 2;
    q.w = x.w;
    q.m = x.m;
    q.n = x.n / x.groups;
    q.k = x.k / x.groups;
    q.groups = x.groups;
    q.tma_store = x.tma_store;
    q.weights_in_stream = x.weights_in_stream;
    if (x.d_rows.codes) {
        q.q_codes = x.d_rows.codes + x.rows_col0;
        q.q_codes_ld = x.d_rows.codes_ld;
        q.q_scales = x.d_rows.scales + (x.rows_col0 / 128) * x.d_rows.scales_ld;
        q.q_scales_ld = x.d_rows.scales_ld;
    } else {
        set_output(q, x.d, x.d_kind, x.ldd);
    }
    run(q, p, stream);
}

}  // namespace flashseek::cuda
