// CPU expectations shared by the attention-side GPU tests and benchmarks: one query row of sparse attention with the
// kernels' candidate rules (through cpu::sparse_attention_sink and the reference's output rounding / inverse RoPE),
// indexer keys in their GPU formats, the check of a selected top-k row against cpu::topk_indices, and the kernel
// parameter structs over contiguous test buffers.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "attn_test_util.h"
#include "cpu/ops.h"
#include "cuda/attention/kv_cache.cuh"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/compressor/compressor.cuh"
#include "cuda/indexer/indexer.cuh"
#include "cuda/rope/rope.cuh"
#include "kv_test_util.h"

namespace flashseek::cuda::test {

// The RoPE table of a compressed layer of V4 (theta 160000, YaRN factor 16 from 65536) for rope_dim dims.
inline RopeTable yarn_table(int rope_dim) {
    RopeScaling y;
    y.type = "yarn";
    y.factor = 16;
    y.original_max_position_embeddings = 65536;
    return make_rope_table(rope_dim, 160000.0, &y);
}
inline std::vector<float> inv_of(const RopeTable& r) { return std::vector<float>(r.inv_freq, r.inv_freq + r.n_pairs); }

// Sparse attention parameters over contiguous q / out rows [T, H, D] (bf16 bits), softmax scale D^-1/2.
inline SparseAttentionParams attention_params(const TokenBatch& batch, int H, int D, int R, const uint16_t* q,
                                              uint16_t* out, const float* sink, const RopeTable& rope, int window,
                                              const RingView& ring, int ratio, const PagedEntries& comp,
                                              const int32_t* topk, int topk_width) {
    SparseAttentionParams p;
    p.batch = batch;
    p.n_heads = H;
    p.head_dim = D;
    p.rope_dim = R;
    p.softmax_scale = 1.f / std::sqrt(float(D));
    p.q = reinterpret_cast<const __nv_bfloat16*>(q);
    p.q_stride = int64_t(H) * D;
    p.out = reinterpret_cast<__nv_bfloat16*>(out);
    p.out_stride = int64_t(H) * D;
    p.sink = sink;
    p.rope = rope;
    p.window = window;
    p.ring = ring;
    p.ratio = ratio;
    p.comp = comp;
    p.topk = topk;
    p.topk_stride = topk_width;
    p.topk_width = topk_width;
    return p;
}

// Indexer parameters over contiguous q rows [T, H, D] and weights [T, H] (bf16 bits), weights scale
// D^-1/2 H^-1/2 as the model's.
inline IndexerSelectParams indexer_params(const TokenBatch& batch, int H, int D, int ratio, int topk, const uint16_t* q,
                                          const uint16_t* weights, const PagedEntries& keys, int max_entries,
                                          int32_t* selected) {
    IndexerSelectParams p;
    p.batch = batch;
    p.n_heads = H;
    p.head_dim = D;
    p.ratio = ratio;
    p.topk = topk;
    p.q = reinterpret_cast<const __nv_bfloat16*>(q);
    p.q_stride = int64_t(H) * D;
    p.weights = reinterpret_cast<const __nv_bfloat16*>(weights);
    p.weights_stride = H;
    p.weights_scale = 1.f / std::sqrt(float(D)) / std::sqrt(float(H));
    p.keys = keys;
    p.max_entries = max_entries;
    p.selected = selected;
    return p;
}

// Compressor parameters over contiguous fp32 kv / gate rows [T, c*dim] (c = 2 for ratio 4, else 1).
inline CompressorParams compressor_params(const TokenBatch& batch, int ratio, int dim, int rope_dim, bool indexer,
                                          const float* kv, const float* gate, const float* ape,
                                          const uint16_t* norm_weight, const RopeTable& rope, uint8_t* state,
                                          const PagedEntries& out) {
    const int width = (ratio == 4 ? 2 : 1) * dim;
    CompressorParams p;
    p.batch = batch;
    p.ratio = ratio;
    p.dim = dim;
    p.rope_dim = rope_dim;
    p.indexer = indexer;
    p.kv = kv;
    p.kv_stride = width;
    p.gate = gate;
    p.gate_stride = width;
    p.ape = ape;
    p.norm_weight = reinterpret_cast<const __nv_bfloat16*>(norm_weight);
    p.rope = rope;
    p.state = state;
    p.state_stride = int64_t(compressor_state_bytes(ratio, dim));
    p.out = out;
    return p;
}

// The fixed facts of one attention layer for the reference.
struct AttnRowSpec {
    int H = 0, D = 0, R = 0;  // heads, head_dim, rope dims
    int window = 0, ratio = 0;
    float scale = 0.f;
    const float* sink = nullptr;      // [H]
    const float* inv_freq = nullptr;  // [R / 2]
};

// Expected output [H, D] of the query row at pos with q_row [H, D]: candidates = window positions
// max(0, pos-W+1) .. pos (window_entry(p) gives a position's dequantized entry), then the compressed slots: the
// ids topk[0..topk_width) (topk != nullptr) or every visible entry 0 .. (pos+1)/ratio - 1 (comp_entry(w)); ids < 0
// or not visible are empty slots. P rounded to bf16 per 32-candidate tile (release numerics); output rounded to
// bf16, last R dims de-rotated at pos, rounded again.
inline void reference_attention_row(const AttnRowSpec& s, const float* q_row, int64_t pos, const int32_t* topk,
                                    int topk_width,
                                    const std::function<const std::vector<float>&(int64_t)>& window_entry,
                                    const std::function<const std::vector<float>&(int)>& comp_entry, float* out) {
    std::vector<float> kv;
    std::vector<int32_t> idx;
    auto add = [&](const std::vector<float>& e) {
        idx.push_back(int32_t(kv.size() / size_t(s.D)));
        kv.insert(kv.end(), e.begin(), e.end());
    };
    for (int64_t p = std::max<int64_t>(0, pos - s.window + 1); p <= pos; ++p) add(window_entry(p));
    if (s.ratio > 0) {
        const int n_vis = int((pos + 1) / s.ratio);
        const int slots = topk ? topk_width : n_vis;
        for (int i = 0; i < slots; ++i) {
            const int w = topk ? topk[i] : i;
            if (w < 0 || w >= n_vis) {
                idx.push_back(-1);
                continue;
            }
            add(comp_entry(w));
        }
    }
    cpu::sparse_attention_sink(q_row, s.H, s.D, kv.data(), idx.data(), int(idx.size()), s.sink, s.scale, true, out);
    for (int h = 0; h < s.H; ++h) {
        cpu::round_bf16_inplace(out + h * s.D, s.D);
        cpu::rope_interleaved(out + h * s.D + s.D - s.R, s.R, s.inv_freq, pos, true);
        cpu::round_bf16_inplace(out + h * s.D, s.D);
    }
}

// Writes the FP4 simulation of v (in place, block 32) into dst in IndexFormat fmt (FP4: packed e2m1 + E8M0 scales;
// BF16: the simulated values), so the stored key decodes to exactly v.
inline void encode_index_key(std::vector<float>& v, IndexFormat fmt, uint8_t* dst) {
    const int D = int(v.size());
    cpu::fp4_sim_block32(v.data(), D);
    for (int b = 0; b < D / 32; ++b) {
        float amax = 6.f * std::ldexp(1.f, -126);
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b * 32 + i]));
        const float sc = pow2_ceil_host(amax / 6.f);
        int ex;
        std::frexp(sc, &ex);
        if (fmt == IndexFormat::FP4) dst[D / 2 + b] = uint8_t(ex - 1 + 127);
        for (int i = 0; i < 32; ++i) {
            const int d = b * 32 + i;
            if (fmt == IndexFormat::FP4) {
                const uint8_t code = f32_to_e2m1(v[d] / sc);
                dst[d / 2] = d % 2 ? uint8_t((dst[d / 2] & 0xf) | (code << 4)) : uint8_t((dst[d / 2] & 0xf0) | code);
            } else {
                const uint16_t bits = f32_to_bf16(v[d]);
                std::memcpy(dst + 2 * d, &bits, 2);
            }
        }
    }
}

// Checks one selected row (topk slots) against cpu::topk_indices over scores [n]: -1 after the min(topk, n)
// selected ids, ascending, no duplicates, all visible, and any id the CPU did not pick is a near-tie of the k-th
// score (fp32 sums in another order).
inline void expect_topk_row(const std::vector<int32_t>& row, const std::vector<float>& scores, int topk,
                            const std::string& what) {
    const int n = int(scores.size());
    std::vector<int32_t> want;
    cpu::topk_indices(scores.data(), n, topk, want);
    const size_t k = std::min<size_t>(size_t(topk), size_t(n));
    for (size_t i = k; i < size_t(topk); ++i) EXPECT_EQ(row[i], -1) << what << " slot " << i;
    std::vector<int32_t> got(row.begin(), row.begin() + k);
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << what << ": not in ascending order";
    const std::set<int32_t> gs(got.begin(), got.end()), ws(want.begin(), want.end());
    EXPECT_EQ(gs.size(), k) << what << ": duplicate indices";
    if (k == 0) return;
    std::vector<float> sorted(scores);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sorted[k - 1];
    for (int32_t i : gs) {
        ASSERT_TRUE(i >= 0 && i < n) << what << " index " << i;
        if (!ws.count(i)) {
            EXPECT_NEAR(scores[size_t(i)], kth, 1e-4f * (1 + std::fabs(kth))) << what;
        }
    }
}

}  // namespace flashseek::cuda::test
