// Attention sub-block of the CPU forward (docs/model.md §2.4-2.8): low-rank Q with per-head RMS norm, one shared
// K=V vector per token, partial interleaved RoPE, the compressors (overlapping ratio-4 with its lightning indexer,
// or non-overlapping ratio-m), sparse attention with sink over window + compressed candidates, inverse RoPE and
// the grouped low-rank output projection.
//
// Incremental state: the compressor consumes each token in position order, so an entry is emitted exactly when
// its window completes, whatever the chunking. Queries then see window positions max(0, p-W+1)..p and entries
// w < (p+1)/m, which equals what a full forward or a one-token decode sees (§2.14).
#include <algorithm>
#include <cmath>

#include "cpu/forward_internal.h"
#include "cpu/ops.h"
#include "util/error.h"

namespace flashseek::cpu::detail {

namespace {

// Per-token compressor inputs for every row: a = wkv x, z = wgate x (+ ape at consume time).
struct CompressorRows {
    std::vector<float> a, z;
};

CompressorRows compressor_rows(const CompressorParams& c, const float* x, int64_t rows, ThreadPool* pool) {
    CompressorRows r;
    const int64_t width = int64_t(c.halves) * c.dim;
    r.a.resize(size_t(rows * width));
    r.z.resize(size_t(rows * width));
    // The reference runs the compressor projections in fp32 (bf16 weights upcast).
    apply_linear(c.wkv, x, rows, r.a.data(), false, pool);
    apply_linear(c.wgate, x, rows, r.z.data(), false, pool);
    return r;
}

// Emits the entry of the window that just completed (its last token at position pos).
void emit_entry(const ModelConfig& cfg, const CompressorParams& c, CompressorState& st, int64_t pos, bool release,
                bool is_indexer, const float* inv_freq) {
    const int m = c.ratio, dim = c.dim, width = c.halves * c.dim;
    const int n_slots = c.halves == 2 ? 2 * m : m;
    std::vector<float> kv(size_t(n_slots) * dim), sc(size_t(n_slots) * dim);
    if (c.halves == 2) {
        // Slots 0..m-1: the previous window's A halves (absent for window 0); slots m..2m-1: this window's B halves.
        for (int s = 0; s < m; ++s)
            for (int d = 0; d < dim; ++d) {
                kv[size_t(s * dim + d)] = st.has_prev ? st.prev_kv[size_t(s * dim + d)] : 0.f;
                sc[size_t(s * dim + d)] = st.has_prev ? st.prev_score[size_t(s * dim + d)] : -INFINITY;
                kv[size_t((m + s) * dim + d)] = st.kv[size_t(s * width + dim + d)];
                sc[size_t((m + s) * dim + d)] = st.score[size_t(s * width + dim + d)];
            }
    } else {
        kv = st.kv;
        sc = st.score;
    }
    std::vector<float> entry(static_cast<size_t>(dim));
    compressor_pool(kv.data(), sc.data(), n_slots, dim, entry.data());
    const int rd = cfg.qk_rope_head_dim;
    const int64_t entry_pos = (pos / m) * m;  // the window's first token
    if (release) round_bf16_inplace(entry.data(), dim);
    rmsnorm(entry.data(), c.norm.data(), dim, float(cfg.rms_norm_eps), entry.data());
    if (release) round_bf16_inplace(entry.data(), dim);
    rope_interleaved(entry.data() + dim - rd, rd, inv_freq, entry_pos);
    if (release) {
        round_bf16_inplace(entry.data(), dim);
        if (is_indexer) {
            hadamard_transform(entry.data(), dim);
            fp4_sim_block32(entry.data(), dim);
        } else {
            kv_fp8_sim_block64(entry.data(), dim - rd);
        }
    }
    st.entries.insert(st.entries.end(), entry.begin(), entry.end());
    st.n_entries += 1;
    if (c.halves == 2) {
        st.prev_kv.resize(size_t(m * dim));
        st.prev_score.resize(size_t(m * dim));
        for (int s = 0; s < m; ++s)
            for (int d = 0; d < dim; ++d) {
                st.prev_kv[size_t(s * dim + d)] = st.kv[size_t(s * width + d)];
                st.prev_score[size_t(s * dim + d)] = st.score[size_t(s * width + d)];
            }
        st.has_prev = true;
    }
}

// Feeds every row's token to its sequence's compressor, in position order, emitting entries as windows complete.
void run_compressor(const CpuModel& m, int l, const CompressorParams& c, bool is_indexer, const Batch& b,
                    const CompressorRows& cr, ThreadPool* pool) {
    const int64_t width = int64_t(c.halves) * c.dim;
    const float* inv_freq = m.layers[size_t(l)].inv_freq.data();
    parallel_for(pool, int64_t(b.states.size()), [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s) {
            LayerState& ls = b.states[size_t(s)]->layers[size_t(l)];
            CompressorState& st = is_indexer ? ls.index_compressor : ls.compressor;
            st.kv.resize(size_t(c.ratio * width));
            st.score.resize(size_t(c.ratio * width));
            for (int64_t r = b.seq_first[size_t(s)]; r < b.seq_first[size_t(s)] + b.seq_count[size_t(s)]; ++r) {
                const int64_t pos = b.row_pos[size_t(r)];
                const int64_t slot = pos % c.ratio;
                for (int64_t k = 0; k < width; ++k) {
                    st.kv[size_t(slot * width + k)] = cr.a[size_t(r * width + k)];
                    st.score[size_t(slot * width + k)] = cr.z[size_t(r * width + k)] + c.ape[size_t(slot * width + k)];
                }
                if (slot == c.ratio - 1) emit_entry(m.cfg, c, st, pos, m.release, is_indexer, inv_freq);
            }
        }
    });
}

}  // namespace

void attention_block(const CpuModel& m, int l, const Batch& b, const float* x, float* out, ThreadPool* pool) {
    const ModelConfig& cfg = m.cfg;
    const LayerParams& p = m.layers[size_t(l)];
    const bool rel = m.release;
    const int64_t R = b.rows, D = cfg.hidden_size, QL = cfg.q_lora_rank;
    const int H = cfg.num_attention_heads, d = cfg.head_dim, rd = cfg.qk_rope_head_dim, W = cfg.sliding_window;
    const float eps = float(cfg.rms_norm_eps);
    const float* inv_freq = p.inv_freq.data();

    // Query latent and queries.
    std::vector<float> qr(static_cast<size_t>(R * QL)), q(static_cast<size_t>(R * H * d)), kv(static_cast<size_t>(R * d));
    apply_linear(p.wq_a, x, R, qr.data(), rel, pool);
    parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            rmsnorm(qr.data() + r * QL, p.q_norm.data(), QL, eps, qr.data() + r * QL);
            if (rel) round_bf16_inplace(qr.data() + r * QL, QL);
        }
    });
    apply_linear(p.wq_b, qr.data(), R, q.data(), rel, pool);
    apply_linear(p.wkv, x, R, kv.data(), rel, pool);
    parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t pos = b.row_pos[size_t(r)];
            for (int h = 0; h < H; ++h) {
                float* qh = q.data() + (r * H + h) * d;
                rmsnorm(qh, nullptr, d, eps, qh);
                if (rel) round_bf16_inplace(qh, d);
                rope_interleaved(qh + d - rd, rd, inv_freq, pos);
                if (rel) round_bf16_inplace(qh + d - rd, rd);
            }
            float* k = kv.data() + r * d;
            rmsnorm(k, p.kv_norm.data(), d, eps, k);
            if (rel) round_bf16_inplace(k, d);
            rope_interleaved(k + d - rd, rd, inv_freq, pos);
            if (rel) {
                round_bf16_inplace(k + d - rd, rd);
                kv_fp8_sim_block64(k, d - rd);
            }
        }
    });

    // Compressors (the indexer's first: the reference runs it before the main one; they are independent).
    std::vector<float> iq, iw;
    const int nI = cfg.index_n_heads, dI = cfg.index_head_dim;
    if (p.has_indexer) {
        run_compressor(m, l, p.index_compressor, true, b, compressor_rows(p.index_compressor, x, R, pool), pool);
        iq.resize(size_t(R * nI * dI));
        iw.resize(size_t(R * nI));
        apply_linear(p.index_wq_b, qr.data(), R, iq.data(), rel, pool);
        apply_linear(p.index_weights_proj, x, R, iw.data(), rel, pool);
        const float wscale = float(1.0 / std::sqrt(double(dI)) / std::sqrt(double(nI)));
        parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                for (int h = 0; h < nI; ++h) {
                    float* qh = iq.data() + (r * nI + h) * dI;
                    rope_interleaved(qh + dI - rd, rd, inv_freq, b.row_pos[size_t(r)]);
                    if (rel) {
                        round_bf16_inplace(qh + dI - rd, rd);
                        hadamard_transform(qh, dI);
                        fp4_sim_block32(qh, dI);
                    }
                }
                for (int h = 0; h < nI; ++h) iw[size_t(r * nI + h)] *= wscale;
            }
        });
    }
    if (p.compressor.present)
        run_compressor(m, l, p.compressor, false, b, compressor_rows(p.compressor, x, R, pool), pool);

    // Per sequence KV buffer: window positions [start, len0 + n) followed by the compressed entries.
    const size_t n_seq = b.states.size();
    std::vector<std::vector<float>> buf(n_seq);
    std::vector<int64_t> buf_start(n_seq), buf_nwin(n_seq);
    for (size_t s = 0; s < n_seq; ++s) {
        const SequenceState& st = *b.states[s];
        const LayerState& ls = st.layers[size_t(l)];
        const int64_t len0 = st.length, n = b.seq_count[s];
        const int64_t start = std::max<int64_t>(0, len0 - (W - 1));
        const int64_t nwin = len0 + n - start;
        const int64_t ne = ls.compressor.n_entries;
        buf[s].resize(size_t((nwin + ne) * d));
        float* dst = buf[s].data();
        for (int64_t pos = start; pos < len0; ++pos)
            std::copy_n(ls.window.data() + (pos % W) * d, d, dst + (pos - start) * d);
        std::copy_n(kv.data() + b.seq_first[s] * d, n * d, dst + (len0 - start) * d);
        if (ne > 0) std::copy_n(ls.compressor.entries.data(), ne * d, dst + nwin * d);
        buf_start[s] = start;
        buf_nwin[s] = nwin;
    }

    // Sparse attention with sink per query row, then inverse RoPE at the query position.
    std::vector<float> o(static_cast<size_t>(R * H * d));
    const float scale = float(1.0 / std::sqrt(double(d)));
    parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
        std::vector<int32_t> idx, top;
        std::vector<float> scores;
        for (int64_t r = r0; r < r1; ++r) {
            const int s = b.row_seq[size_t(r)];
            const int64_t pos = b.row_pos[size_t(r)];
            idx.clear();
            for (int64_t w = std::max<int64_t>(0, pos - W + 1); w <= pos; ++w) idx.push_back(int32_t(w - buf_start[size_t(s)]));
            if (p.ratio > 0) {
                const int64_t n_vis = (pos + 1) / p.ratio;
                const int32_t off = int32_t(buf_nwin[size_t(s)]);
                if (p.has_indexer && n_vis > cfg.index_topk) {  // else every entry is selected: no scoring
                    const CompressorState& ic = b.states[size_t(s)]->layers[size_t(l)].index_compressor;
                    scores.resize(size_t(n_vis));
                    indexer_scores(iq.data() + r * nI * dI, nI, dI, iw.data() + r * nI, ic.entries.data(), n_vis,
                                   scores.data());
                    topk_indices(scores.data(), n_vis, cfg.index_topk, top);
                    for (int32_t j : top) idx.push_back(off + j);
                } else {
                    for (int64_t j = 0; j < n_vis; ++j) idx.push_back(off + int32_t(j));
                }
            }
            float* oh = o.data() + r * H * d;
            sparse_attention_sink(q.data() + r * H * d, H, d, buf[size_t(s)].data(), idx.data(), int(idx.size()),
                                  p.attn_sink.data(), scale, rel, oh);
            for (int h = 0; h < H; ++h) {
                if (rel) round_bf16_inplace(oh + h * d, d);
                rope_interleaved(oh + h * d + d - rd, rd, inv_freq, pos, /*inverse=*/true);
                if (rel) round_bf16_inplace(oh + h * d + d - rd, rd);
            }
        }
    });

    // The window ring keeps the last W positions.
    for (size_t s = 0; s < n_seq; ++s) {
        LayerState& ls = b.states[s]->layers[size_t(l)];
        ls.window.resize(size_t(W * d));
        const int64_t len0 = b.states[s]->length;
        for (int64_t t = std::max<int64_t>(0, b.seq_count[s] - W); t < b.seq_count[s]; ++t)
            std::copy_n(kv.data() + (b.seq_first[s] + t) * d, d, ls.window.data() + ((len0 + t) % W) * d);
    }

    // Grouped low-rank output projection.
    const int G = cfg.o_groups;
    const int64_t OL = cfg.o_lora_rank, group_in = int64_t(H) * d / G;
    std::vector<float> z(static_cast<size_t>(R * G * OL));
    grouped_out_proj(o.data(), R, G, OL, group_in, p.wo_a.w.data(), z.data(), pool);
    if (rel) round_bf16_inplace(z.data(), int64_t(z.size()));  // the reference's bf16 einsum
    apply_linear(p.wo_b, z.data(), R, out, rel, pool);
    (void)D;
}

}  // namespace flashseek::cpu::detail
