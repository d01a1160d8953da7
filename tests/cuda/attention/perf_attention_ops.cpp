// Perf suite of the attention-side ops (`test_cuda_attention --perf`): per-op GPU time at full DeepSeek-V4-Flash
// decode shapes (concurrency 1 / 16 / 64, context 256 / 8192): mHC pre / post / head, the q head norm + RoPE, the
// indexer's q preparation, the window KV store, the compressors, the indexer's scores + top-k and sparse attention
// through each of its variants (the default choice marked). Each op is captured 20 times in a CUDA graph (median of
// replays), so launch overhead is excluded as it is under the backend's decode graphs. Bytes are what the op must
// read and write (activations, the KV entries or keys it visits, mHC's fp32 mixing weights); FLOPs are counted where
// they are not negligible (attention: 4 x heads x head_dim per candidate; indexer scores: 2 x heads x dim per
// entry), against the BF16 tensor-core rate.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "cuda/attention/kv_store.cuh"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/common/check.cuh"
#include "cuda/compressor/compressor.cuh"
#include "cuda/indexer/indexer.cuh"
#include "cuda/mhc/mhc.cuh"
#include "cuda/norm/rmsnorm.cuh"
#include "attention_variants.h"
#include "kv_test_util.h"
#include "perf_report.h"
#include "perf_suite.h"

namespace flashseek::cuda::test {
namespace {

// Median microseconds of one op call, 20 calls per graph.
double time_op(const std::function<void(cudaStream_t)>& op) {
    return flashseek::test::time_graph_per_call([&](cudaStream_t s, int) { op(s); }, 20);
}

std::vector<uint8_t> safe_random_bytes(size_t n, Rng& rng) {  // small finite values in every format
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = uint8_t(rng.uniform_int(0, 255) & 0x3f);
    return v;
}

void attention_perf(flashseek::test::PerfReport& report) {
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
            // One row: the op's time, the bytes it must move and the FLOPs it must compute.
            auto row = [&](const std::string& name, double us, double bytes, double flops = 0,
                           const std::string& variant = "-", bool is_default = true) {
                flashseek::test::PerfRow r;
                r.op = name;
                r.shape = shape;
                r.m = T;
                r.variant = variant;
                r.is_default = is_default;
                r.us = us;
                r.bytes = bytes;
                r.flops = flops;
                r.flop_ceiling = flashseek::test::FlopCeiling::BF16;
                report.add(std::move(r));
            };
            // mHC
            Dev<uint16_t> X(to_bf16_bits(rng.normals(size_t(T) * N * D))), yb(size_t(T) * D), nw(to_bf16_bits(rng.normals(D)));
            Dev<float> fn(rng.normals(size_t(24) * N * D, 0.01f)), base(rng.normals(24)), scl(rng.normals(3)),
                post(size_t(T) * N), comb(size_t(T) * N * N);
            Dev<uint8_t> mws(mhc_pre_workspace_bytes(T, N, D, false));
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
                        head_rmsnorm_rope(bf(q), int64_t(H) * hd, T, H, hd, nullptr, 1e-6f, bd.batch.token_pos, rope, s);
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
            for (auto [ratio, dim, idx] : {std::tuple{4, 512, false}, std::tuple{4, 128, true}, std::tuple{128, 512, false}}) {
                if (ctx != 256) break;
                const int co = ratio == 4 ? 2 : 1;
                Dev<float> a(rng.normals(size_t(T) * co * dim)), z(rng.normals(size_t(T) * co * dim)),
                    ape(rng.normals(size_t(ratio) * co * dim));
                Dev<uint16_t> cn(to_bf16_bits(rng.normals(dim)));
                const size_t sb = compressor_state_bytes(ratio, dim);
                Dev<uint8_t> st(std::vector<uint8_t>(sb * C, 0));
                CompressorParams cp;
                cp.batch = bd.batch;
                cp.ratio = ratio;
                cp.dim = dim;
                cp.rope_dim = R;
                cp.indexer = idx;
                cp.kv = a.ptr;
                cp.kv_stride = co * dim;
                cp.gate = z.ptr;
                cp.gate_stride = co * dim;
                cp.ape = ape.ptr;
                cp.norm_weight = bf(cn);
                cp.rope = rope;
                cp.state = st.ptr;
                cp.state_stride = int64_t(sb);
                cp.out = idx ? ipool.view(dipool.ptr, ditab.ptr, int32_t(IndexFormat::FP4))
                             : pool.view(dpool.ptr, dtab.ptr, int32_t(KvFormat::FP8));
                const char* name = idx ? "indexer compressor (r4, 128)" : ratio == 4 ? "attn compressor (r4, 512)" : "attn compressor (r128, 512)";
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
                Dev<uint16_t> iq(to_bf16_bits(rng.normals(size_t(T) * nI * dI, 0.3f))), iw(to_bf16_bits(rng.normals(size_t(T) * nI)));
                Dev<int32_t> sel2(size_t(T) * topk);
                IndexerSelectParams ip;
                ip.batch = bd.batch;
                ip.n_heads = nI;
                ip.head_dim = dI;
                ip.ratio = 4;
                ip.topk = topk;
                ip.q = bf(iq);
                ip.q_stride = int64_t(nI) * dI;
                ip.weights = bf(iw);
                ip.weights_stride = nI;
                ip.weights_scale = 1.f / 64.f;
                ip.keys = ipool.view(dipool.ptr, ditab.ptr, int32_t(IndexFormat::FP4));
                ip.max_entries = max_entries;
                ip.selected = sel2.ptr;
                Dev<uint8_t> iws(indexer_select_workspace_bytes(T, max_entries));
                row("indexer scores + top-k", time_op([&](cudaStream_t s) { indexer_select(ip, iws.ptr, iws.n, s); }),
                    double(T) * nI * dI * 2 + double(T) * max_entries * ikb + double(T) * topk * 4,
                    2.0 * T * nI * dI * max_entries);
            }
            // sparse attention: CSA (window + top-k or all visible) and HCA (window + all 128-pools)
            Dev<uint16_t> q(to_bf16_bits(rng.normals(size_t(T) * H * hd))), out(size_t(T) * H * hd);
            Dev<float> sink(rng.normals(H));
            for (int ratio : {4, 128}) {
                SparseAttentionParams p;
                p.batch = bd.batch;
                p.n_heads = H;
                p.head_dim = hd;
                p.rope_dim = R;
                p.softmax_scale = 1.f / std::sqrt(float(hd));
                p.q = bf(q);
                p.q_stride = int64_t(H) * hd;
                p.out = bf(out);
                p.out_stride = int64_t(H) * hd;
                p.sink = sink.ptr;
                p.rope = rope;
                p.window = W;
                p.ring = rv;
                p.ratio = ratio;
                p.comp = pool.view(dpool.ptr, dtab.ptr, int32_t(KvFormat::FP8));
                const bool use_topk = ratio == 4 && max_entries > topk;
                p.topk = use_topk ? sel.ptr : nullptr;
                p.topk_stride = topk;
                p.topk_width = topk;
                p.max_candidates = W + (use_topk ? topk : ctx / ratio);
                Dev<uint8_t> aws(std::max<size_t>(1, sparse_attention_workspace_bytes(T, H, hd, p.max_candidates)));
                // Each query visits the window and its compressed candidates (entries read once per query), reads
                // q and writes out; QK and PV cost 2 FLOPs per (head, dim, candidate) each.
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

FS_PERF_SUITE("attention", attention_perf);

}  // namespace
}  // namespace flashseek::cuda::test
