// Host entries of the grouped FP4 expert GEMMs (see moe_gemm.cuh): workspace layout, eligibility, the path choice,
// and the launch sequence (gathered act_quant, grouped up-projection writing h's act_quant; grouped
// down-projection).
#include "cuda/moe/moe_gemm.cuh"

#include <vector>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/gemm/tensor_map.h"
#include "cuda/moe/grouped_gemm_common.cuh"

namespace flashseek::cuda {
namespace {

size_t align16(size_t b) { return (b + 15) / 16 * 16; }

GemmPath resolve(GemmPath path) {
    if (path != GemmPath::AUTO) return path;
    if (wgmma_usable()) return GemmPath::WGMMA;
    return has_fp8_mma(current_arch().cc) ? GemmPath::MMA_NATIVE : GemmPath::MMA_F16;
}

void launch(const grouped_gemm::Problem& p, GemmPath path, cudaStream_t stream) {
    if (path == GemmPath::WGMMA) grouped_gemm::launch_sm90(p, stream);
    else
        grouped_gemm::launch_mma(p, path == GemmPath::MMA_NATIVE ? dense_gemm::MmaMode::FP8_NATIVE
                                                                 : dense_gemm::MmaMode::FP8_AS_F16,
                                 stream);
}

// The tile width of a pass: `slot_rows` as asked (0: moe_gemm_slot_rows), checked.
int resolve_slot_rows(int slot_rows, int64_t slots, int E, const char* what) {
    FS_REQUIRE(slot_rows == 0 || slot_rows == 32 || slot_rows == 64 || slot_rows == 128, what,
               ": slot_rows must be 0 (by the pass), 32, 64 or 128, got ", slot_rows);
    return slot_rows != 0 ? slot_rows : moe_gemm_slot_rows(slots, E);
}

grouped_gemm::Problem problem(const ExpertTable& t, const MoeGrouping& g, int64_t slots, int slot_rows,
                              const char* what) {
    grouped_gemm::Problem p;
    p.count = g.expert_count;
    p.offset = g.expert_offset;
    p.E = g.E;
    p.slot_weight = g.slot_weight;
    // Slots per expert on average over the model's experts: an expert-parallel shard's experts get slots / total
    // each, not slots / E (its grouping drops the pairs of other shards' experts).
    p.slot_rows = resolve_slot_rows(slot_rows, slots, g.experts_total > 0 ? g.experts_total : g.E, what);
    return p;
}

// One thread per weight row: the largest of its K / 32 E8M0 bytes (read 16 at a time where the row allows).
// blockIdx.y = expert; rows [0, inter) of w1, [inter, 2 inter) of w3, [2 inter, 2 inter + hidden) of w2.
__global__ void row_reference_kernel(const void* const* s1, const void* const* s3, const void* const* s2, int inter,
                                     int hidden, uint8_t* out) {
    const int e = int(blockIdx.y), per = 2 * inter + hidden;
    const int r = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
    if (r >= per) return;
    const bool up = r < 2 * inter;
    const int row = up ? r % inter : r - 2 * inter, groups = (up ? hidden : inter) / 32;
    const uint8_t* scales = static_cast<const uint8_t*>(up ? (r < inter ? s1[e] : s3[e]) : s2[e]) +
                            int64_t(row) * groups;
    uint32_t m = 0;
    if ((reinterpret_cast<uintptr_t>(scales) & 15) == 0 && groups % 16 == 0) {
        for (int g = 0; g < groups; g += 16) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(scales + g));
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) m = __vmaxu4(m, w[i]);
        }
        m = max(max(m & 0xffu, (m >> 8) & 0xffu), max((m >> 16) & 0xffu, m >> 24));
    } else {
        for (int g = 0; g < groups; ++g) m = max(m, uint32_t(__ldg(scales + g)));
    }
    out[int64_t(e) * per + r] = uint8_t(m);
}

}  // namespace

size_t moe_row_references_bytes(const ExpertTable& t, int E) { return size_t(E) * size_t(2 * t.inter + t.hidden); }

void moe_row_references(const ExpertTable& t, int E, uint8_t* out, cudaStream_t stream) {
    FS_REQUIRE(t.kind == WeightKind::FP4_BLOCK32 && t.scale_kind == ScaleKind::E8M0,
               "moe_row_references: the experts are not FP4 with E8M0 scales");
    FS_REQUIRE(E > 0 && E <= 65535 && t.hidden > 0 && t.inter > 0 && t.hidden % 32 == 0 && t.inter % 32 == 0 &&
                   2 * t.inter + t.hidden < (int64_t(1) << 30),
               "moe_row_references: ", E, " experts, hidden ", t.hidden, ", inter ", t.inter,
               " (multiples of 32, at most 65,535 experts)");
    FS_REQUIRE(out != nullptr && t.w1_scale != nullptr && t.w3_scale != nullptr && t.w2_scale != nullptr,
               "moe_row_references: null output or scale table");
    const int per = int(2 * t.inter + t.hidden), threads = 256;
    row_reference_kernel<<<dim3(unsigned((per + threads - 1) / threads), unsigned(E)), threads, 0, stream>>>(
        t.w1_scale, t.w3_scale, t.w2_scale, int(t.inter), int(t.hidden), out);
    CUDA_CHECK(cudaGetLastError());
}

size_t moe_weight_maps_bytes(int E) { return size_t(E) * 3 * sizeof(CUtensorMap); }

void moe_weight_maps(const ExpertTable& t, int E, void* out) {
    FS_REQUIRE(t.kind == WeightKind::FP4_BLOCK32 && t.scale_kind == ScaleKind::E8M0,
               "moe_weight_maps: the experts are not FP4 with E8M0 scales");
    FS_REQUIRE(E > 0 && t.hidden > 0 && t.inter > 0 && t.hidden % 128 == 0 && t.inter % 128 == 0,
               "moe_weight_maps: ", E, " experts, hidden ", t.hidden, ", inter ", t.inter, " (multiples of 128)");
    FS_REQUIRE(out != nullptr && reinterpret_cast<uintptr_t>(out) % 64 == 0 && t.w1 != nullptr && t.w3 != nullptr &&
                   t.w2 != nullptr,
               "moe_weight_maps: null or unaligned output, or a null weight table");
    std::vector<const void*> ptrs[3];
    const void* const* tables[3] = {t.w1, t.w3, t.w2};
    for (int m = 0; m < 3; ++m) {
        ptrs[m].resize(size_t(E));
        CUDA_CHECK(cudaMemcpy(ptrs[m].data(), tables[m], size_t(E) * sizeof(void*), cudaMemcpyDeviceToHost));
    }
    std::vector<CUtensorMap> maps(size_t(E) * 3);
    static const char* const names[3] = {"expert w1", "expert w3", "expert w2"};
    for (int e = 0; e < E; ++e)
        for (int m = 0; m < 3; ++m) {
            const int64_t rows = m == 2 ? t.hidden : t.inter, k = m == 2 ? t.inter : t.hidden;
            maps[size_t(e) * 3 + size_t(m)] =
                tma::make_2d(ptrs[m][size_t(e)], tma::Element::U8, uint64_t(rows), uint64_t(k / 2), uint64_t(k / 2),
                             64, 64, tma::Swizzle::B64, names[m]);
        }
    CUDA_CHECK(cudaMemcpy(out, maps.data(), maps.size() * sizeof(CUtensorMap), cudaMemcpyHostToDevice));
}

size_t moe_grouped_extras_bytes(const ExpertTable& t, int E) {
    return moe_weight_maps_bytes(E) + (moe_row_references_bytes(t, E) + 63) / 64 * 64;
}

void moe_attach_grouped_extras(ExpertTable& t, int E, void* storage) {
    FS_REQUIRE(storage != nullptr && reinterpret_cast<uintptr_t>(storage) % 64 == 0,
               "moe_attach_grouped_extras: storage null or not 64-byte aligned");
    unsigned char* p = static_cast<unsigned char*>(storage);
    moe_weight_maps(t, E, p);
    uint8_t* refs = p + moe_weight_maps_bytes(E);
    moe_row_references(t, E, refs, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    t.w_maps = p;
    t.row_ref = refs;
}

size_t moe_gemm_workspace_bytes(int64_t slots, int64_t hidden, int64_t inter) {
    return align16(fp8_activation_codes_bytes(slots, hidden)) + align16(fp8_activation_scales_bytes(slots, hidden)) +
           align16(fp8_activation_codes_bytes(slots, inter)) + align16(fp8_activation_scales_bytes(slots, inter));
}

MoeGemmWorkspace moe_gemm_workspace_view(void* memory, int64_t slots, int64_t hidden, int64_t inter) {
    unsigned char* p = static_cast<unsigned char*>(memory);
    MoeGemmWorkspace w;
    unsigned char* codes = p;
    p += align16(fp8_activation_codes_bytes(slots, hidden));
    w.x = fp8_activation_view(codes, p, slots, hidden);
    p += align16(fp8_activation_scales_bytes(slots, hidden));
    codes = p;
    p += align16(fp8_activation_codes_bytes(slots, inter));
    w.h_q = fp8_activation_view(codes, p, slots, inter);
    return w;
}

void moe_attach_gemm_workspace(MoeGrouping& g, void* memory, int64_t hidden, int64_t inter) {
    FS_REQUIRE(memory != nullptr && reinterpret_cast<uintptr_t>(memory) % 16 == 0,
               "moe_attach_gemm_workspace: memory null or not 16-byte aligned");
    FS_REQUIRE(g.max_pairs > 0 && hidden > 0 && inter > 0, "moe_attach_gemm_workspace: ", g.max_pairs,
               " slots, hidden ", hidden, ", inter ", inter, " must be positive");
    const MoeGemmWorkspace w = moe_gemm_workspace_view(memory, g.max_pairs, hidden, inter);
    g.gemm_x = w.x;
    g.gemm_h = w.h_q;
}

MoeGemmWorkspace moe_gemm_workspace_of(const MoeGrouping& g) { return MoeGemmWorkspace{g.gemm_x, g.gemm_h}; }

Fp8CodeOrder moe_gemm_code_order(GemmPath path) {
    return resolve(path) == GemmPath::WGMMA ? Fp8CodeOrder::GROUP_INTERLEAVED : Fp8CodeOrder::NATURAL;
}

bool moe_gemm_supported(GemmPath path) {
    switch (path) {
        case GemmPath::AUTO: return has_bf16_mma(current_arch().cc);
        case GemmPath::WGMMA: return wgmma_usable();
        case GemmPath::MMA_NATIVE: return has_fp8_mma(current_arch().cc);
        case GemmPath::MMA_F16: return has_bf16_mma(current_arch().cc);
    }
    return false;
}

int moe_gemm_slot_rows(int64_t slots, int E) {
    // Average slots per expert (the experts of a V4 layer share a pass's picks about evenly; skewed routings give
    // the hot experts more tiles). Up to 16 a 32-row tile holds nearly every expert's slots in one tile; up to 64
    // a 64-row tile holds most, and two 64-row tiles of an overflowing expert still cost less than one 128-row
    // tile's tensor work is predicted to (docs/perf.md, short prompts).
    const int64_t avg = E > 0 ? (slots + E - 1) / E : slots;
    if (avg <= 16) return 32;
    if (avg <= 64) return 64;
    return grouped_gemm::kBlockM;
}

bool moe_gemm_eligible(const ExpertTable& t, const MoeGrouping& g, int64_t M, int top_k, GemmPath path) {
    return moe_gemm_supported(resolve(path)) && t.kind == WeightKind::FP4_BLOCK32 && t.scale_kind == ScaleKind::E8M0 &&
           t.row_ref != nullptr && reinterpret_cast<uintptr_t>(t.row_ref) % 4 == 0 && t.w_maps != nullptr &&
           reinterpret_cast<uintptr_t>(t.w_maps) % 64 == 0 && t.hidden % 128 == 0 && t.inter % 128 == 0 && t.hidden > 0 && t.inter > 0 && g.E > 0 &&
           g.E <= grouped_gemm::kMaxExperts && M > 0 && top_k > 0 && M * top_k <= g.max_pairs &&
           M * top_k < (int64_t(1) << 31);
}

void moe_gemm_up(const uint16_t* x, int64_t ld_x, int64_t M, int top_k, const ExpertTable& t, const MoeGrouping& g,
                 float swiglu_limit, const MoeGemmWorkspace& ws, cudaStream_t stream, GemmPath path, int slot_rows) {
    path = resolve(path);
    FS_REQUIRE(moe_gemm_eligible(t, g, M, top_k, path), "moe_gemm_up: not eligible (path ", int(path),
               " on compute capability ", current_arch().cc, "; FP4 + E8M0 experts with row references and weight maps (",
               t.row_ref != nullptr && t.w_maps != nullptr ? "present" : "missing: moe_attach_grouped_extras",
               "), hidden ", t.hidden,
               " and inter ", t.inter, " multiples of 128, E = ", g.E, " <= ", grouped_gemm::kMaxExperts, ", ", M,
               " x ", top_k, " slots within the grouping's ", g.max_pairs, ")");
    const int64_t slots = M * top_k;
    FS_REQUIRE(ws.x.m >= slots && ws.x.k == t.hidden && ws.h_q.m >= slots && ws.h_q.k == t.inter,
               "moe_gemm_up: the workspace was not made for ", slots, " slots, hidden ", t.hidden, ", inter ", t.inter);
    FS_REQUIRE(x != nullptr && ld_x >= t.hidden, "moe_gemm_up: null input or ld_x ", ld_x, " < hidden ", t.hidden);
    Fp8Activation xa = ws.x;
    xa.m = slots;
    xa.order = moe_gemm_code_order(path);
    grouped_gemm::Problem p = problem(t, g, slots, slot_rows, "moe_gemm_up");  // checks slot_rows before any launch
    // The slots repeat the tokens top_k times: each token row is quantized once and stored at its slots
    // (pair_slot), the same bits as quantizing the gathered slot rows (act_quant is per row), which was
    // instruction-bound (144 us for the 24,576 slots of a 4,096-token pass). Slots no pair names (invalid expert
    // ids) lie past every expert's range and are not read.
    quantize_fp8_scatter(x, M, ld_x, g.pair_slot, top_k, xa, stream);
    p.up = true;
    p.a = xa;
    p.w_a = t.w1;
    p.s_a = t.w1_scale;
    p.w_b = t.w3;
    p.s_b = t.w3_scale;
    p.ref_a = t.row_ref;
    p.ref_b = t.row_ref + t.inter;
    p.maps_a = static_cast<const unsigned char*>(t.w_maps);  // w1 (+ 128: w3)
    p.maps_b = static_cast<const unsigned char*>(t.w_maps) + 128;
    p.ref_stride = 2 * t.inter + t.hidden;
    p.K = int(t.hidden);
    p.n_blocks = int(t.inter / 128);
    p.limit = swiglu_limit;
    p.h_q = ws.h_q;
    p.h_q.m = slots;
    p.h_q.order = moe_gemm_code_order(path);  // as the kernel writes it
    p.ldo = p.h_q.codes_ld;
    launch(p, path, stream);
}

namespace {
// y (fp32) or y_bf16: exactly one is given.
void down(int64_t M, int top_k, const ExpertTable& t, const MoeGrouping& g, const MoeGemmWorkspace& ws, float* y,
          uint16_t* y_bf16, cudaStream_t stream, GemmPath path, int slot_rows) {
    path = resolve(path);
    FS_REQUIRE(moe_gemm_eligible(t, g, M, top_k, path), "moe_gemm_down: not eligible (see moe_gemm_up)");
    const int64_t slots = M * top_k;
    const void* out = y ? static_cast<const void*>(y) : y_bf16;
    FS_REQUIRE(ws.h_q.m >= slots && ws.h_q.k == t.inter && out != nullptr &&
                   reinterpret_cast<uintptr_t>(out) % (y ? 8 : 16) == 0,
               "moe_gemm_down: workspace missing or output not aligned (fp32: 8 bytes, bf16: 16)");
    Fp8Activation hq = ws.h_q;
    hq.m = slots;
    hq.order = moe_gemm_code_order(path);  // as moe_gemm_up wrote it on this path
    grouped_gemm::Problem p = problem(t, g, slots, slot_rows, "moe_gemm_down");
    p.up = false;
    p.a = hq;
    p.w_a = t.w2;
    p.s_a = t.w2_scale;
    p.ref_a = t.row_ref + 2 * t.inter;
    p.maps_a = static_cast<const unsigned char*>(t.w_maps) + 256;  // w2
    p.maps_b = p.maps_a;
    p.ref_stride = 2 * t.inter + t.hidden;
    p.K = int(t.inter);
    p.n_blocks = int(t.hidden / grouped_gemm::kBlockN);
    p.y = y;
    p.y_bf16 = y_bf16;
    p.ldo = t.hidden;
    launch(p, path, stream);
}
}  // namespace

void moe_gemm_down(int64_t M, int top_k, const ExpertTable& t, const MoeGrouping& g, const MoeGemmWorkspace& ws,
                   float* y, cudaStream_t stream, GemmPath path, int slot_rows) {
    FS_REQUIRE(y != nullptr, "moe_gemm_down: output null");
    down(M, top_k, t, g, ws, y, nullptr, stream, path, slot_rows);
}

void moe_gemm_down_bf16(int64_t M, int top_k, const ExpertTable& t, const MoeGrouping& g, const MoeGemmWorkspace& ws,
                        uint16_t* y, cudaStream_t stream, GemmPath path, int slot_rows) {
    FS_REQUIRE(y != nullptr, "moe_gemm_down_bf16: output null");
    down(M, top_k, t, g, ws, nullptr, y, stream, path, slot_rows);
}

}  // namespace flashseek::cuda
