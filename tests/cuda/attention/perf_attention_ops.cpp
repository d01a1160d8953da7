// Perf suite of the attention-side ops (`test_cuda_attention --perf`), at full DeepSeek-V4-Flash shapes: decode
// (concurrency 1 / 16 / 64, context 256 / 8192: mHC pre / post / head, the q head norm + RoPE, the indexer's q
// preparation, the window KV store, the compressors, the indexer's scores + top-k, sparse attention through each of
// its variants with the default choice marked) and prefill (one prompt of 4k / 8k / 32k tokens: the prefill
// attention and indexer kernels and their launch shapes, the decode kernels on the same prompt for reference, the
// compressors over the whole prompt). Suite "mhc": mhc_pre through both partial kernels from 16 to 8,192 tokens.
// Each op is captured in a CUDA graph (20 calls for decode, 3 for prefill, 5 for the mhc suite),
// median of replays, so launch overhead is excluded as under the backend's graphs. Bytes are what an op must read
// and write (activations, the KV entries or keys it visits, mHC's fp32 mixing weights); FLOPs are counted where they
// are not negligible (attention: 4 x heads x head_dim per valid candidate; indexer scores: 2 x heads x dim per scored
// key; mHC: its mixing projection), against the BF16 tensor-core rate. The prefill rows also give their fraction of
// the mma.sync m16n8k16 bf16 rate measured here (mma_rate_probe), the instruction those kernels are built from.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "cuda/attention/kv_store.cuh"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/attention/sparse_attention_prefill.cuh"
#include "cuda/common/random_fill.cuh"
#include "cuda/compressor/compressor.cuh"
#include "cuda/indexer/indexer.cuh"
#include "cuda/indexer/indexer_prefill.cuh"
#include "cuda/mhc/mhc.cuh"
#include "cuda/norm/rmsnorm.cuh"
#include "attn_reference.h"
#include "attention_variants.h"
#include "cuda/common/check.cuh"
#include "kv_test_util.h"
#include "mma_rate_probe.cuh"
#include "perf_report.h"
#include "perf_suite.h"

namespace flashseek::cuda::test {
namespace {

// Median microseconds of one op call (`reps` calls per graph).
double time_op(const std::function<void(cudaStream_t)>& op, int reps = 20) {
    return flashseek::test::time_graph_per_call([&](cudaStream_t s, int) { op(s); }, reps);
}

// One perf row of this suite: FLOPs against the BF16 rate.
flashseek::test::PerfRow attention_row(const std::string& op, const std::string& shape, int64_t m,
                                       const std::string& variant, bool is_default, double us, double bytes,
                                       double flops, const std::string& note = "") {
    flashseek::test::PerfRow r;
    r.op = op;
    r.shape = shape;
    r.m = m;
    r.variant = variant;
    r.is_default = is_default;
    r.us = us;
    r.bytes = bytes;
    r.flops = flops;
    r.flop_ceiling = flashseek::test::FlopCeiling::BF16;
    r.note = note;
    return r;
}

std::vector<uint8_t> safe_random_bytes(size_t n, Rng& rng) {  // small finite values in every format
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = uint8_t(rng.uniform_int(0, 255) & 0x3f);
    return v;
}

// mhc_pre over streams X [T, N, D] with weights fn / base / scale, the norm weight nw, into yb / post / comb.
MhcPreParams mhc_params(int T, int N, int D, Dev<uint16_t>& X, Dev<float>& fn, Dev<float>& base, Dev<float>& scl,
                        Dev<uint16_t>& nw, Dev<uint16_t>& yb, Dev<float>& post, Dev<float>& comb) {
    MhcPreParams mp;
    mp.n_tokens = T;
    mp.n_streams = N;
    mp.dim = D;
    mp.x = bf(X);
    mp.fn = fn.ptr;
    mp.base = base.ptr;
    mp.scale = scl.ptr;
    mp.norm_weight = bf(nw);
    mp.y = bf(yb);
    mp.post = post.ptr;
    mp.comb = comb.ptr;
    return mp;
}

void decode_perf(flashseek::test::PerfReport& report) {
    Rng rng(1234);
    const int D = 4096, N = 4, H = 64, hd = 512, R = 64, W = 128, ring_entries = 256;
    const int nI = 64, dI = 128, topk = 512;
    RopeScaling y;
    y.type = "yarn";
    y.factor = 16;
    y.original_max_position_embeddings = 65536;
    const RopeTable rope = make_rope_table(R, 160000.0, &y);
    for (int ctx : {256, 8192}) {
        for (int C : {1, 16, 64}) {
            BatchHost bh;
            for (int s = 0; s < C; ++s) bh.add(s, ctx - 1 - (s % 4), 1);  // decode rows near ctx
            BatchDev bd(bh);
            const int T = C;
            const std::string shape = "C=" + std::to_string(C) + " ctx=" + std::to_string(ctx);
            auto row = [&](const std::string& name, double us, double bytes, double flops = 0,
                           const std::string& variant = "-", bool is_default = true) {
                report.add(attention_row(name, shape, T, variant, is_default, us, bytes, flops));
            };
            // mHC
            Dev<uint16_t> X(to_bf16_bits(rng.normals(size_t(T) * N * D))), yb(size_t(T) * D),
                nw(to_bf16_bits(rng.normals(D)));
            Dev<float> fn(rng.normals(size_t(24) * N * D, 0.01f)), base(rng.normals(24)), scl(rng.normals(3)),
                post(size_t(T) * N), comb(size_t(T) * N * N);
            Dev<uint8_t> mws(mhc_pre_workspace_bytes(T, N, D, false));
            MhcPreParams mp = mhc_params(T, N, D, X, fn, base, scl, nw, yb, post, comb);
            if (ctx == 256) {
                const double streams = double(T) * N * D * 2;  // the N residual streams, bf16
                const double mix = 24.0 * N * D * 4;            // fn: (2 + N) * N rows of N * D fp32
                row("mhc_pre + norm", time_op([&](cudaStream_t s) { mhc_pre(mp, mws.ptr, mws.n, s); }),
                    streams + mix + double(T) * D * 2, 2.0 * T * 24 * N * D);
                row("mhc_post", time_op([&](cudaStream_t s) {
                        mhc_post(T, N, D, bf(X), bf(yb), post.ptr, comb.ptr, bf(X), s);
                    }),
                    2 * streams + double(T) * D * 2);
                MhcPreParams hp = mp;  // hc_head + final norm: fn [N, N*D], pre only
                hp.head_mode = true;
                hp.post = nullptr;
                hp.comb = nullptr;
                row("hc_head + norm", time_op([&](cudaStream_t s) { mhc_pre(hp, mws.ptr, mws.n, s); }),
                    streams + double(N) * N * D * 4 + double(T) * D * 2, 2.0 * T * N * N * D);
                Dev<uint16_t> q(to_bf16_bits(rng.normals(size_t(T) * H * hd)));
                row("q head norm + rope", time_op([&](cudaStream_t s) {
                        head_rmsnorm_rope(bf(q), int64_t(H) * hd, T, H, hd, nullptr, 1e-6f, bd.batch.token_pos, rope,
                                          s);
                    }),
                    2.0 * T * H * hd * 2);
                Dev<uint16_t> iq(to_bf16_bits(rng.normals(size_t(T) * nI * dI)));
                row("indexer q prepare", time_op([&](cudaStream_t s) {
                        indexer_prepare_q(bf(iq), int64_t(nI) * dI, T, nI, dI, bd.batch.token_pos, rope, s);
                    }),
                    2.0 * T * nI * dI * 2);
            }
            // window KV store into an FP8 ring
            const int eb = int(kv_entry_bytes(KvFormat::FP8, hd, R));
            Dev<uint8_t> ring(safe_random_bytes(size_t(C) * ring_entries * eb, rng));
            RingView rv{ring.ptr, int64_t(ring_entries) * eb, ring_entries, eb, KvFormat::FP8};
            Dev<uint16_t> kv(to_bf16_bits(rng.normals(size_t(T) * hd))), kvw(to_bf16_bits(rng.normals(hd)));
            if (ctx == 256)
                row("kv norm + rope + store (fp8)", time_op([&](cudaStream_t s) {
                        kv_store_window(bf(kv), hd, hd, R, bf(kvw), 1e-6f, rope, bd.batch, rv, nullptr, s);
                    }),
                    double(T) * hd * 2 + hd * 2.0 + double(T) * eb);
            // paged compressed entries + indexer keys for ctx tokens
            const int n_comp = ctx / 4 + 1;
            PagedPool pool(C, n_comp, 64, eb, rng);
            pool.bytes = safe_random_bytes(pool.bytes.size(), rng);
            const int ikb = int(index_entry_bytes(IndexFormat::FP4, dI));
            PagedPool ipool(C, n_comp, 64, ikb, rng);
            ipool.bytes = safe_random_bytes(ipool.bytes.size(), rng);
            Dev<uint8_t> dpool(pool.bytes), dipool(ipool.bytes);
            Dev<int32_t> dtab(pool.tables), ditab(ipool.tables);
            // compressors (decode step; rows at pos % 4 == 3 emit)
            for (auto [ratio, dim, idx] :
                 {std::tuple{4, 512, false}, std::tuple{4, 128, true}, std::tuple{128, 512, false}}) {
                if (ctx != 256) break;
                const int co = ratio == 4 ? 2 : 1;
                Dev<float> a(rng.normals(size_t(T) * co * dim)), z(rng.normals(size_t(T) * co * dim)),
                    ape(rng.normals(size_t(ratio) * co * dim));
                Dev<uint16_t> cn(to_bf16_bits(rng.normals(dim)));
                const size_t sb = compressor_state_bytes(ratio, dim);
                Dev<uint8_t> st(std::vector<uint8_t>(sb * C, 0));
                const CompressorParams cp = compressor_params(
                    bd.batch, ratio, dim, R, idx, a.ptr, z.ptr, ape.ptr, cn.ptr, rope, st.ptr,
                    idx ? ipool.view(dipool.ptr, ditab.ptr, int32_t(IndexFormat::FP4))
                        : pool.view(dpool.ptr, dtab.ptr, int32_t(KvFormat::FP8)));
                const char* name = idx          ? "indexer compressor (r4, 128)"
                                   : ratio == 4 ? "attn compressor (r4, 512)"
                                                : "attn compressor (r128, 512)";
                // kv and gate rows (fp32), the position embedding, each sequence's state read and written
                row(name, time_op([&](cudaStream_t s) { compressor_forward(cp, s); }),
                    2.0 * T * co * dim * 4 + double(ratio) * co * dim * 4 + 2.0 * double(sb) * C);
            }
            // indexer select (scores + top-k) when entries > topk
            std::vector<int32_t> sel_h(size_t(T) * topk);
            for (int t = 0; t < T; ++t)
                for (int i = 0; i < topk; ++i) sel_h[size_t(t) * topk + i] = (i * 7 + t) % std::max(1, ctx / 4);
            Dev<int32_t> sel(sel_h);
            const int max_entries = ctx / 4;
            if (max_entries > topk) {
                Dev<uint16_t> iq(to_bf16_bits(rng.normals(size_t(T) * nI * dI, 0.3f))),
                    iw(to_bf16_bits(rng.normals(size_t(T) * nI)));
                Dev<int32_t> sel2(size_t(T) * topk);
                const IndexerSelectParams ip =
                    indexer_params(bd.batch, nI, dI, 4, topk, iq.ptr, iw.ptr,
                                   ipool.view(dipool.ptr, ditab.ptr, int32_t(IndexFormat::FP4)), max_entries, sel2.ptr);
                Dev<uint8_t> iws(indexer_select_workspace_bytes(T, max_entries));
                row("indexer scores + top-k", time_op([&](cudaStream_t s) { indexer_select(ip, iws.ptr, iws.n, s); }),
                    double(T) * nI * dI * 2 + double(T) * max_entries * ikb + double(T) * topk * 4,
                    2.0 * T * nI * dI * max_entries);
            }
            // sparse attention: CSA (window + top-k or all visible) and HCA (window + all 128-pools)
            Dev<uint16_t> q(to_bf16_bits(rng.normals(size_t(T) * H * hd))), out(size_t(T) * H * hd);
            Dev<float> sink(rng.normals(H));
            for (int ratio : {4, 128}) {
                const bool use_topk = ratio == 4 && max_entries > topk;
                SparseAttentionParams p = attention_params(
                    bd.batch, H, hd, R, q.ptr, out.ptr, sink.ptr, rope, W, rv, ratio,
                    pool.view(dpool.ptr, dtab.ptr, int32_t(KvFormat::FP8)), use_topk ? sel.ptr : nullptr, topk);
                p.max_candidates = W + (use_topk ? topk : ctx / ratio);
                Dev<uint8_t> aws(std::max<size_t>(1, sparse_attention_workspace_bytes(T, H, hd, p.max_candidates)));
                // Each query visits its window and compressed candidates (max_candidates, entries read once per
                // query), reads q and writes out; QK and PV cost 2 FLOPs per (head, dim, candidate) each.
                const double candidates = double(p.max_candidates);
                const double bytes = 2.0 * T * H * hd * 2 + double(T) * candidates * eb;
                const double flops = 4.0 * T * H * hd * candidates;
                const std::string name = ratio == 4 ? "sparse attn CSA (fp8)" : "sparse attn HCA (fp8)";
                const std::string def(sparse_attention(p, aws.ptr, aws.n, nullptr, KernelPolicy{}));
                for (const AttentionVariant& v : kAttentionVariants) {
                    const KernelPolicy only = KernelPolicy::only(v.name);
                    if (sparse_attention(p, aws.ptr, aws.n, nullptr, only) != v.name) continue;  // does not fit
                    row(name, time_op([&](cudaStream_t s) { sparse_attention(p, aws.ptr, aws.n, s, only); }), bytes,
                        flops, std::string(v.name), v.name == def);
                }
            }
            CUDA_CHECK(cudaDeviceSynchronize());
        }
    }
}

// The prefill kernels (sparse_attention_prefill, indexer_select_prefill) are not a variant of sparse_attention() /
// indexer_select(): their rows name the kernel ("prefill"); the decode kernels' rows on the same prompt name the
// attention variant, the one sparse_attention() picks for a prefill pass marked default.
void prefill_perf(flashseek::test::PerfReport& report) {
    Rng rng(4321);
    const int H = 64, hd = 512, R = 64, W = 128, nI = 64, dI = 128, topk = 512;
    RopeScaling y;
    y.type = "yarn";
    y.factor = 16;
    y.original_max_position_embeddings = 65536;
    const RopeTable rope = make_rope_table(R, 160000.0, &y);
    const double mma_tflops = measure_mma_bf16_tflops();
    std::printf("perf: mma.sync m16n8k16 bf16 rate on this GPU: %.1f TFLOP/s\n", mma_tflops);
    for (int N : {4096, 8192, 32768}) {
        const std::string shape = "prompt " + std::to_string(N);
        auto row = [&](const std::string& name, double us, double bytes, double flops, const std::string& variant,
                       bool is_default) {
            char note[64] = "";
            if (flops > 0) std::snprintf(note, sizeof note, "%.1f%% of mma.sync", 100.0 * flops / us * 1e-6 / mma_tflops);
            report.add(attention_row(name, shape, N, variant, is_default, us, bytes, flops, note));
        };
        BatchHost bh;
        bh.add(0, 0, N);
        BatchDev bd(bh);
        const int eb = int(kv_entry_bytes(KvFormat::FP8, hd, R));
        const int ring_entries = W - 1 + N + 1;
        Dev<uint8_t> ring(safe_random_bytes(size_t(ring_entries) * eb, rng));
        const RingView rv{ring.ptr, int64_t(ring_entries) * eb, ring_entries, eb, KvFormat::FP8};
        const int max_entries = N / 4;
        PagedPool pool(1, max_entries + 1, 64, eb, rng);
        pool.bytes = safe_random_bytes(pool.bytes.size(), rng);
        Dev<uint8_t> dpool(pool.bytes);
        Dev<int32_t> dtab(pool.tables);
        Dev<uint16_t> q(size_t(N) * H * hd), out(size_t(N) * H * hd);
        fill_random(q.ptr, q.n, FillKind::BF16, 11, 1.f, nullptr);
        Dev<float> sink(rng.normals(H));
        // top-k rows as the indexer writes them: all visible entries while there are at most topk, else topk
        // distinct ids spread over the visible ones (ascending); -1 padding
        std::vector<int32_t> sel_h(size_t(N) * topk, -1);
        for (int t = 0; t < N; ++t) {
            const int n_vis = (t + 1) / 4;
            for (int i = 0; i < std::min(n_vis, topk); ++i)
                sel_h[size_t(t) * topk + i] = n_vis <= topk ? i : int(int64_t(i) * n_vis / topk);
        }
        Dev<int32_t> sel(sel_h);
        for (int ratio : {4, 128}) {
            SparseAttentionParams p = attention_params(bd.batch, H, hd, R, q.ptr, out.ptr, sink.ptr, rope, W, rv, ratio,
                                                       pool.view(dpool.ptr, dtab.ptr, int32_t(KvFormat::FP8)),
                                                       ratio == 4 ? sel.ptr : nullptr, topk);
            double flops = 0;  // 2 * 2 * H * hd per (query, valid candidate): QK^T and PV
            for (int t = 0; t < N; ++t) {
                const int n_vis = (t + 1) / ratio;
                flops += 4.0 * H * hd * (std::min(t + 1, W) + (ratio == 4 ? std::min(n_vis, topk) : n_vis));
            }
            const int entries = N / ratio;
            const size_t ws_bytes = sparse_attention_prefill_workspace_bytes(N, 1, W, entries, hd);
            Dev<uint8_t> ws(ws_bytes);
            // q read, out written, every gathered KV row (window history + the prompt + compressed entries) once
            const double bytes = 2.0 * N * H * hd * 2 + double(W - 1 + N + entries) * eb;
            const std::string name = ratio == 4 ? "sparse attn CSA (fp8)" : "sparse attn HCA (fp8)";
            row(name, time_op([&](cudaStream_t s) { sparse_attention_prefill(p, entries, ws.ptr, ws.n, s); }, 3),
                bytes, flops, "prefill", false);
            // launch-shape A/B (same results): heads per CTA, cp.async pipeline depth
            for (auto [label, tn] : {std::pair{"32 heads per CTA", PrefillAttentionTuning{2, 0}},
                                     std::pair{"16 heads per CTA", PrefillAttentionTuning{1, 0}},
                                     std::pair{"3 stages", PrefillAttentionTuning{0, 3}},
                                     std::pair{"runtime-sized kernel", PrefillAttentionTuning{0, 0, false}}}) {
                row(name, time_op([&](cudaStream_t s) { sparse_attention_prefill(p, entries, ws.ptr, ws.n, s, tn); }, 3),
                    bytes, flops, std::string("prefill, ") + label, false);
            }
            if (N == 4096) {  // today's path for prefill: the decode kernels, one CTA per (query, head group)
                p.max_candidates = W + (ratio == 4 ? topk : entries);
                Dev<uint8_t> aws(std::max<size_t>(1, sparse_attention_workspace_bytes(N, H, hd, p.max_candidates)));
                const std::string def(sparse_attention(p, aws.ptr, aws.n, nullptr, KernelPolicy{}));
                for (const AttentionVariant& v : kAttentionVariants) {
                    const KernelPolicy only = KernelPolicy::only(v.name);
                    if (sparse_attention(p, aws.ptr, aws.n, nullptr, only) != v.name) continue;  // does not fit
                    row(name, time_op([&](cudaStream_t s) { sparse_attention(p, aws.ptr, aws.n, s, only); }, 3),
                        bytes, flops, std::string(v.name), v.name == def);
                }
            }
        }
        // indexer: scores of every row against its visible FP4 keys, then top-512
        {
            const int ikb = int(index_entry_bytes(IndexFormat::FP4, dI));
            PagedPool ipool(1, max_entries + 1, 64, ikb, rng);
            ipool.bytes = safe_random_bytes(ipool.bytes.size(), rng);
            Dev<uint8_t> dipool(ipool.bytes);
            Dev<int32_t> ditab(ipool.tables), isel(size_t(N) * topk);
            Dev<uint16_t> iq(size_t(N) * nI * dI), iw(size_t(N) * nI);
            fill_random(iq.ptr, iq.n, FillKind::BF16, 12, 0.3f, nullptr);
            fill_random(iw.ptr, iw.n, FillKind::BF16, 13, 1.f, nullptr);
            const IndexerSelectParams ip =
                indexer_params(bd.batch, nI, dI, 4, topk, iq.ptr, iw.ptr,
                               ipool.view(dipool.ptr, ditab.ptr, int32_t(IndexFormat::FP4)), max_entries, isel.ptr);
            double flops = 0;  // 2 * nI * dI per (row, scored key); rows with <= topk entries are not scored
            for (int t = 0; t < N; ++t) {
                const int n_vis = (t + 1) / 4;
                if (n_vis > topk) flops += 2.0 * nI * dI * n_vis;
            }
            Dev<uint8_t> iws(indexer_select_prefill_workspace_bytes(N, max_entries));
            // q and weights read, every key read once, the selected ids written
            const double bytes = double(N) * nI * (dI + 1) * 2 + double(max_entries) * ikb + double(N) * topk * 4;
            row("indexer scores + top-k (fp4)",
                time_op([&](cudaStream_t s) { indexer_select_prefill(ip, iws.ptr, iws.n, s); }, 3), bytes, flops,
                "prefill", false);
            if (N <= 8192) {  // today's path: SIMT scores, the whole [rows x entries] matrix
                Dev<uint8_t> ows(indexer_select_workspace_bytes(N, max_entries));
                row("indexer scores + top-k (fp4)",
                    time_op([&](cudaStream_t s) { indexer_select(ip, ows.ptr, ows.n, s); }, 3), bytes, flops,
                    "indexer_select (simt)", true);
            }
        }
        // compressors over the whole prompt in one step (their bf16 GEMMs are not included)
        for (auto [ratio, dim, idx] :
             {std::tuple{4, 512, false}, std::tuple{4, 128, true}, std::tuple{128, 512, false}}) {
            const int co = ratio == 4 ? 2 : 1;
            Dev<float> a(size_t(N) * co * dim), z(size_t(N) * co * dim), ape(rng.normals(size_t(ratio) * co * dim));
            fill_random(a.ptr, a.n, FillKind::F32, 14, 1.f, nullptr);
            fill_random(z.ptr, z.n, FillKind::F32, 15, 1.f, nullptr);
            Dev<uint16_t> cn(to_bf16_bits(rng.normals(dim)));
            const size_t sb = compressor_state_bytes(ratio, dim);
            Dev<uint8_t> st(std::vector<uint8_t>(sb, 0));
            const int ceb = int(idx ? index_entry_bytes(IndexFormat::FP4, dim) : kv_entry_bytes(KvFormat::FP8, dim, R));
            PagedPool cpool(1, N / ratio + 1, 64, ceb, rng);
            Dev<uint8_t> dcpool(cpool.bytes);
            Dev<int32_t> dctab(cpool.tables);
            const CompressorParams cp = compressor_params(
                bd.batch, ratio, dim, R, idx, a.ptr, z.ptr, ape.ptr, cn.ptr, rope, st.ptr,
                cpool.view(dcpool.ptr, dctab.ptr, idx ? int32_t(IndexFormat::FP4) : int32_t(KvFormat::FP8)));
            const char* name = idx ? "indexer compressor (r4, 128)" : ratio == 4 ? "attn compressor (r4, 512)"
                                                                                 : "attn compressor (r128, 512)";
            // kv and gate rows (fp32) and the emitted entries
            row(name, time_op([&](cudaStream_t s) { compressor_forward(cp, s); }, 3),
                2.0 * N * co * dim * 4 + double(N / ratio) * ceb, 0, "-", true);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
    }
}

// mhc_pre through each partial kernel (MhcPartialKernel) from decode batches to prefill passes, plain and with the
// previous mhc_post and the MoE combine fused in front (the prefill's form after the experts); the row AUTO takes
// is marked default. Bytes: the streams read (and rewritten when fused), fn, y, and the fused inputs (top-k fp32
// expert rows, the shared expert's row, o's post weights).
void mhc_perf(flashseek::test::PerfReport& report) {
    Rng rng(2468);
    const int D = 4096, N = 4, n_mix = (2 + N) * N, top_k = 6;
    for (int T : {16, 64, 128, 256, 512, 4096, 8192}) {
        Dev<uint16_t> X(to_bf16_bits(rng.normals(size_t(T) * N * D))), yb(size_t(T) * D),
            nw(to_bf16_bits(rng.normals(D)));
        Dev<float> fn(rng.normals(size_t(n_mix) * N * D, 0.01f)), base(rng.normals(n_mix)), scl(rng.normals(3)),
            post(rng.normals(size_t(T) * N, 0.5f)), comb(rng.normals(size_t(T) * N * N, 0.3f)),
            yr(rng.normals(size_t(T) * top_k * D)), ys(rng.normals(size_t(T) * D));
        std::vector<int32_t> slot_h(size_t(T) * top_k);
        for (size_t i = 0; i < slot_h.size(); ++i) slot_h[i] = int32_t((i * 7919) % slot_h.size());
        Dev<int32_t> slot(slot_h);
        Dev<uint8_t> ws(mhc_pre_workspace_bytes(T, N, D, false));
        for (bool fused : {false, true}) {
            for (MhcPartialKernel k : {MhcPartialKernel::SPLIT, MhcPartialKernel::TILED}) {
                MhcPreParams mp = mhc_params(T, N, D, X, fn, base, scl, nw, yb, post, comb);
                mp.partial_kernel = k;
                double bytes = double(T) * N * D * 2 + double(n_mix) * N * D * 4 + double(T) * D * 2;
                if (fused) {
                    mp.prev_y_routed = yr.ptr;
                    mp.prev_pair_slot = slot.ptr;
                    mp.prev_y_shared = ys.ptr;
                    mp.prev_top_k = top_k;
                    mp.prev_round_terms = true;
                    mp.prev_post = post.ptr;
                    mp.prev_comb = comb.ptr;
                    bytes += double(T) * N * D * 2 + double(T) * (top_k + 1) * D * 4;
                }
                const bool tiled = k == MhcPartialKernel::TILED;
                const bool is_default = tiled == (T >= mhc_tiled_min_tokens());
                report.add(attention_row(fused ? "moe combine + mhc_post + mhc_pre + norm" : "mhc_pre + norm",
                                         "T=" + std::to_string(T), T, tiled ? "tiled" : "split", is_default,
                                         time_op([&](cudaStream_t s) { mhc_pre(mp, ws.ptr, ws.n, s); }, 5), bytes,
                                         2.0 * T * n_mix * N * D));
            }
        }
        CUDA_CHECK(cudaDeviceSynchronize());
    }
}

FS_PERF_SUITE("attention", decode_perf);
FS_PERF_SUITE("prefill attention", prefill_perf);
FS_PERF_SUITE("mhc", mhc_perf);

}  // namespace
}  // namespace flashseek::cuda::test
