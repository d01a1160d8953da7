// GPU vs CPU reference: window KV store (bf16 and 584-byte FP8 rings), sparse attention with sink (decode with
// split-KV and prefill, window + compressed candidates, top-k lists with holes, inverse RoPE) through every attention
// variant that supports each case (the family's test ends by checking every variant ran), its default choice rules
// and named errors, the compressors (ratio 4 overlapping and ratio 128, main and indexer, chunked over several steps
// or whole prompts in one step), indexer q preparation and top-k selection. Every output buffer is poisoned before
// the kernel runs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "cpu/ops.h"
#include "cuda/attention/kv_store.cuh"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/common/check.cuh"
#include "cuda/compressor/compressor.cuh"
#include "cuda/gemm/linear.cuh"
#include "cuda/indexer/indexer.cuh"
#include "attention_variants.h"
#include "attn_reference.h"
#include "harness_mode.h"
#include "kv_test_util.h"
#include "named_error.h"
#include "variant_coverage.h"

namespace flashseek::cuda::test {
namespace {

TEST(CudaKvStore, WindowEntriesMatchCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    // batches: one decode token, 16 decode sequences, a mixed batch of 15 tokens; D 1280: pairs past the 4 a thread
    // holds in registers
    for (KvFormat fmt : {KvFormat::BF16, KvFormat::FP8}) {
        for (auto [D, R, batch] : {std::tuple{512, 64, 0}, std::tuple{512, 64, 1}, std::tuple{512, 64, 2},
                                   std::tuple{192, 64, 2}, std::tuple{1280, 64, 2}}) {
            SCOPED_TRACE("D " + std::to_string(D) + " batch " + std::to_string(batch));
            const int ring_entries = 40, n_slots = 16;
            BatchHost bh;
            if (batch == 0) {
                bh.add(3, rng.uniform_int(0, 5000), 1);
            } else if (batch == 1) {
                for (int q = 0; q < 16; ++q) bh.add((q * 7) % n_slots, rng.uniform_int(0, 5000), 1);
            } else {
                bh.add(2, 0, 5);
                bh.add(0, 37, 1);
                bh.add(3, 1000, 9);
            }
            BatchDev bd(bh);
            const int T = bd.batch.n_tokens;
            const int64_t stride = D + 4;
            auto kv = bf16_round(rng.normals(size_t(T) * stride, 2.f));
            auto w = bf16_round(rng.normals(D, 0.5f));
            const RopeTable rope = yarn_table(R);
            const int eb = int(kv_entry_bytes(fmt, D, R));
            Dev<uint16_t> dkv(to_bf16_bits(kv)), dw(to_bf16_bits(w)), dfinal(size_t(T) * D);
            Dev<uint8_t> ring(size_t(n_slots) * ring_entries * eb);
            ring.poison();
            dfinal.poison();
            RingView rv{ring.ptr, int64_t(ring_entries) * eb, ring_entries, eb, fmt};
            kv_store_window(bf(dkv), stride, D, R, bf(dw), 1e-6f, rope, bd.batch, rv, bf(dfinal), nullptr);
            auto ring_h = ring.download();
            auto final_h = from_bf16_bits(dfinal.download());
            std::vector<float> want, got_ring;
            const auto inv = inv_of(rope);
            for (int t = 0; t < T; ++t) {
                std::vector<float> v(D);
                cpu::rmsnorm(kv.data() + t * stride, w.data(), D, 1e-6f, v.data());
                cpu::round_bf16_inplace(v.data(), D);
                cpu::rope_interleaved(v.data() + D - R, R, inv.data(), bh.token_pos[t]);
                cpu::round_bf16_inplace(v.data(), D);
                cpu::kv_fp8_sim_block64(v.data(), D - R);
                want.insert(want.end(), v.begin(), v.end());
                const int slot = bh.slot[bh.token_seq[t]];
                const uint8_t* e = ring_h.data() + (int64_t(slot) * ring_entries + bh.token_pos[t] % ring_entries) * eb;
                auto dec = decode_kv_entry(e, D, R, fmt);
                got_ring.insert(got_ring.end(), dec.begin(), dec.end());
            }
            // FP8: a one-ulp bf16 flip before quantization may move an element by one e4m3 step (6%), rarely
            const double tol = fmt == KvFormat::FP8 ? 1e-2 : 2e-3;
            EXPECT_CLOSE(final_h, want, tol, "kv final D " << D << " fmt " << int(fmt));
            EXPECT_CLOSE(got_ring, want, tol, "kv ring D " << D << " fmt " << int(fmt));
        }
    }
}

struct AttnCase {
    int H, D, R, window, ratio;
    bool use_topk;
    KvFormat fmt;
    int tokens_per_seq;  // 1 = decode
    int topk_width = 24;
    bool compact_topk = false;  // valid ids first, -1 after (the indexer's layout): whole tiles of masked slots
};

// How far output element i (of outputs [T, H, D], bf16 values, last R dims de-rotated) may move between the default
// split count (a) and one split (b), largest = max |a|.
// Every split starts on a 32-candidate tile and P is rounded to bf16 relative to its tile's own max, so the split
// count does not touch P (rounding it per split would move every P by up to 2^-9 and flip a large fraction of the
// outputs). What differs is the fp32 order: the merge scales each split's partial sums by e^(m_s - M) and adds them,
// where one split rescales one accumulator. So the normalized fp32 output x moves by delta, a few 2^-24 of
// sum_i p_i |v_i|, far below one bf16 ulp except where that sum cancels. With u(y) = 2^-7 |y| (at least the gap
// between y and its bf16 neighbours: 8 significant bits):
//  - no-rope dims, y = bf16(x): |y_a - y_b| <= delta + u(max(|y_a|, |y_b|)), a one-ulp flip at most;
//  - rope dims: the kernel (as the reference, docs/model.md §2.4 step 7) rounds the pair (x0, x1) to bf16, rotates it
//    by -pos in fp32 and rounds again. A one-ulp flip of x0 or x1 (at most 2^-7 |x_k|) is rotated into both outputs of
//    the pair: |dy_k| <= |c dx0| + |s dx1| + u(y_k) <= 2^-7 ||x|| + u(y_k), and ||x|| <= ||y|| / ((1 - 2^-7)(1 - 2^-8))
//    < (1 + 2^-6) ||y|| (the component-wise larger of the two pairs, and the output rounding). Measured in ulps of
//    y_k this is unbounded: a component that the rotation makes small moves by one ulp of the pair's larger
//    component. Seed 8713070494012785614 (FS_TEST_SEED) hit it in the HCA decode case (ratio 128, 5 splits on a
//    132-SM H200): element 78295 = token 2 (pos 1097), head 24, dim 471; the pre-rotation pair (0.2421875, -0.34375)
//    de-rotates to (0.4199219, 0.02392578), and with x0 one ulp (2^-10) lower to (0.4199219, 0.02307129): 7 ulps of
//    0.024 (0.000854, the failure's difference exactly), 0.24 of the bound below;
//  - near zero, where the sum cancels, delta is far more than an ulp of the tiny result: an absolute term of 2^-20
//    of the largest output (it also covers the rotation's own fp32 rounding, 2^-24 of the pair's norm).
float split_merge_bound(const std::vector<float>& a, const std::vector<float>& b, size_t i, int D, int R,
                        float largest) {
    float bound = std::ldexp(std::max(std::fabs(a[i]), std::fabs(b[i])), -7) + std::ldexp(largest, -20);
    if (int(i % size_t(D)) >= D - R) {  // pairs (2j, 2j+1): D is even, so i ^ 1 is the other element of i's pair
        const size_t j = i ^ 1;
        const float norm = std::max(std::hypot(a[i], a[j]), std::hypot(b[i], b[j]));
        bound += std::ldexp(norm * (1.f + std::ldexp(1.f, -6)), -7);
    }
    return bound;
}

// "token t head h dim d (rope)" of element i of outputs [T, H, D] whose last R dims are de-rotated.
std::string describe_element(size_t i, int H, int D, int R) {
    const size_t d = i % size_t(D), h = i / size_t(D) % size_t(H), t = i / (size_t(D) * size_t(H));
    return "element " + std::to_string(i) + " (token " + std::to_string(t) + " head " + std::to_string(h) + " dim " +
           std::to_string(d) + (int(d) >= D - R ? ", rope" : ", no rope") + ")";
}

TEST(CudaSparseAttention, MatchesCpuReference) {
    REQUIRE_GPU();
    flashseek::test::VariantCoverage coverage("attention");
    coverage.declare_all(kAttentionVariants);
    coverage.require("attn_mma", "decode");
    coverage.require("attn_mma", "prefill");
    coverage.require("attn_simt", "decode");
    coverage.require("attn_simt", "prefill");
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const AttnCase cases[] = {
        {64, 512, 64, 128, 4, true, KvFormat::FP8, 1},    // CSA decode, split-KV
        {64, 512, 64, 128, 128, false, KvFormat::BF16, 1},  // HCA decode
        {64, 512, 64, 128, 4, true, KvFormat::BF16, 13},  // CSA prefill chunk
        {12, 128, 64, 16, 0, false, KvFormat::BF16, 7},   // window only, odd head count
        {5, 192, 64, 8, 4, false, KvFormat::FP8, 3},      // all visible compressed entries, FP8
        {3, 64, 32, 4, 128, false, KvFormat::BF16, 1},
        {12, 128, 64, 16, 4, true, KvFormat::FP8, 1, 160, true},  // decode, trailing top-k tiles all masked
    };
    for (const AttnCase& c : cases) {
        if (flashseek::test::quick_mode() && c.H > 12) continue;  // sanitizer runs: the small cases cover every path
        const int n_slots = 5, topk_width = c.topk_width;
        const int ring_entries = c.window + c.tokens_per_seq + 3;
        BatchHost bh;
        bh.add(3, rng.uniform_int(0, 3), c.tokens_per_seq);
        bh.add(1, rng.uniform_int(c.window, 700), c.tokens_per_seq);
        bh.add(4, rng.uniform_int(800, 1400), c.tokens_per_seq);
        BatchDev bd(bh);
        const int T = bd.batch.n_tokens, H = c.H, D = c.D, R = c.R;
        const int eb = int(kv_entry_bytes(c.fmt, D, R));
        // ring: every sequence's last ring_entries positions
        std::vector<uint8_t> ring_h(size_t(n_slots) * ring_entries * eb, 0x5A);
        std::map<std::pair<int, int>, std::vector<float>> ring_val;  // (slot, pos) -> decoded entry
        for (size_t s = 0; s < bh.slot.size(); ++s) {
            const int end = bh.start[s] + bh.n_tok[s];
            for (int pos = std::max(0, end - ring_entries); pos < end; ++pos) {
                auto v = bf16_round(rng.normals(D, 1.5f));
                std::vector<float> dec(D);
                encode_kv_entry(v.data(), D, R, c.fmt,
                                ring_h.data() + (int64_t(bh.slot[s]) * ring_entries + pos % ring_entries) * eb,
                                dec.data());
                ring_val[{bh.slot[s], pos}] = dec;
            }
        }
        // compressed entries
        const int max_entries = c.ratio ? 1500 / c.ratio + 2 : 1;
        PagedPool pool(n_slots, max_entries, 8, eb, rng);
        std::map<std::pair<int, int>, std::vector<float>> comp_val;
        if (c.ratio) {
            for (size_t s = 0; s < bh.slot.size(); ++s) {
                const int n_e = (bh.start[s] + bh.n_tok[s]) / c.ratio;
                for (int e = 0; e < n_e; ++e) {
                    auto v = bf16_round(rng.normals(D, 1.5f));
                    std::vector<float> dec(D);
                    encode_kv_entry(v.data(), D, R, c.fmt, pool.entry(bh.slot[s], e), dec.data());
                    comp_val[{bh.slot[s], e}] = dec;
                }
            }
        }
        std::vector<int32_t> topk(size_t(T) * topk_width, -1);
        if (c.use_topk) {
            for (int t = 0; t < T; ++t) {
                const int n_vis = (bh.token_pos[t] + 1) / c.ratio;
                // compact: the first min(n_vis, width / 3) slots valid, the rest -1; else a random fifth -1
                const int n_valid = std::min(n_vis, topk_width / 3);
                for (int i = 0; i < topk_width; ++i)
                    topk[size_t(t) * topk_width + i] =
                        c.compact_topk ? (i < n_valid ? rng.uniform_int(0, n_vis - 1) : -1)
                                       : (rng.uniform_int(0, 4) == 0 || n_vis == 0 ? -1 : rng.uniform_int(0, n_vis - 1));
            }
        }
        auto q = bf16_round(rng.normals(size_t(T) * H * D));
        auto sink = rng.normals(H, 1.f);
        const RopeTable rope = yarn_table(R);
        Dev<uint16_t> dq(to_bf16_bits(q)), dout(size_t(T) * H * D);
        Dev<float> dsink(sink);
        Dev<uint8_t> dring(ring_h), dpool(pool.bytes);
        Dev<int32_t> dtables(pool.tables), dtopk(topk);
        dout.poison();
        SparseAttentionParams p = attention_params(
            bd.batch, H, D, R, dq.ptr, dout.ptr, dsink.ptr, rope, c.window,
            RingView{dring.ptr, int64_t(ring_entries) * eb, ring_entries, eb, c.fmt}, c.ratio,
            pool.view(dpool.ptr, dtables.ptr, int32_t(c.fmt)), c.use_topk ? dtopk.ptr : nullptr, topk_width);
        p.max_candidates = c.window + (c.ratio ? (c.use_topk ? topk_width : 1500 / c.ratio + 1) : 0);
        const size_t ws_bytes = sparse_attention_workspace_bytes(T, H, D, p.max_candidates);
        Dev<uint8_t> ws(ws_bytes);
        std::vector<float> want(size_t(T) * H * D);
        const auto inv = inv_of(rope);
        const AttnRowSpec spec{H, D, R, c.window, c.ratio, p.softmax_scale, sink.data(), inv.data()};
        for (int t = 0; t < T; ++t) {
            const int slot = bh.slot[bh.token_seq[t]], pos = bh.token_pos[t];
            reference_attention_row(
                spec, q.data() + size_t(t) * H * D, pos, c.use_topk ? topk.data() + size_t(t) * topk_width : nullptr,
                topk_width,
                [&](int64_t j) -> const std::vector<float>& {
                    return ring_val[{slot, int(j)}];
                },
                [&](int w) -> const std::vector<float>& {
                    return comp_val[{slot, w}];
                },
                want.data() + size_t(t) * H * D);
        }
        // Every attention variant: attn_mma only where it fits (head_dim % 64 == 0 and <= 512, aligned q).
        const bool mma_fits = D % 64 == 0 && D <= 512;
        for (const AttentionVariant& v : kAttentionVariants) {
            const KernelPolicy only = KernelPolicy::only(v.name);
            dout.poison();
            const std::string ran(sparse_attention(p, ws.ptr, ws_bytes, nullptr, only));
            CUDA_OK(cudaDeviceSynchronize());
            const std::vector<uint16_t> bits = dout.download();
            if (ran != v.name) {  // the forced variant does not support the case: the dispatch fell back
                EXPECT_TRUE(v.name == "attn_mma" && !mma_fits) << v.name << " was not taken (ran " << ran << ")";
                continue;
            }
            coverage.ran(ran, c.tokens_per_seq == 1 ? "decode" : "prefill");
            const auto got = from_bf16_bits(bits);
            const std::string what = "attention " + std::string(v.name) + " H " + std::to_string(H) + " D " +
                                     std::to_string(D) + " ratio " + std::to_string(c.ratio) + " tokens " +
                                     std::to_string(c.tokens_per_seq) + " fmt " + std::to_string(int(c.fmt));
            // bf16 output; probabilities rounded to bf16 in both; online-softmax rescaling and summation order differ
            EXPECT_CLOSE(got, want, 5e-3, what);
            // Deterministic: a rerun gives the same bits (the split merge reduces in a fixed order).
            dout.poison();
            sparse_attention(p, ws.ptr, ws_bytes, nullptr, only);
            EXPECT_EQ(dout.download(), bits) << what << ": rerun differs";
            // The split count (chosen from the pass size and max_candidates) must not move P's rounding; one split
            // (max_candidates 1: the kernel takes each query's candidates from the query, max_candidates only bounds
            // the split count) differs by the fp32 order alone, within split_merge_bound (derivation there).
            SparseAttentionParams one = p;
            one.max_candidates = 1;
            dout.poison();
            sparse_attention(one, ws.ptr, ws_bytes, nullptr, only);
            CUDA_OK(cudaDeviceSynchronize());
            const auto single = from_bf16_bits(dout.download());
            float largest = 0.f;
            for (float g : got) largest = std::max(largest, std::fabs(g));
            size_t flips = 0, past_bound = 0, first_past = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                // written as "within" so that a NaN (an element the one-split run left unwritten) counts as past
                const bool within = std::fabs(got[i] - single[i]) <= split_merge_bound(got, single, i, D, R, largest);
                if (!within && past_bound++ == 0) first_past = i;
                flips += got[i] != single[i];
            }
            EXPECT_EQ(past_bound, 0u) << what << ": split vs one split, " << past_bound << " elements past the bound; "
                                      << "first " << describe_element(first_past, H, D, R) << ": " << got[first_past]
                                      << " vs " << single[first_past] << ", bound "
                                      << split_merge_bound(got, single, first_past, D, R, largest);
            EXPECT_LE(flips, got.size() / 200 + 2) << what << ": split vs one split, " << flips << " flips";
        }
        // The default policy runs one of them.
        dout.poison();
        const std::string chosen(sparse_attention(p, ws.ptr, ws_bytes, nullptr, KernelPolicy{}));
        EXPECT_TRUE(chosen == "attn_mma" || chosen == "attn_simt") << chosen;
    }
    coverage.expect_complete();
}

// Window-only sparse attention (no compressed entries) over a bf16 ring of ring_entries entries per slot: the setup
// of the choice and argument tests.
SparseAttentionParams window_params(const TokenBatch& batch, int H, int D, int R, int window, const Dev<uint16_t>& q,
                                    Dev<uint16_t>& out, const float* sink, uint8_t* ring, int ring_entries) {
    const int eb = int(kv_entry_bytes(KvFormat::BF16, D, R));
    SparseAttentionParams p =
        attention_params(batch, H, D, R, q.ptr, out.ptr, sink, yarn_table(R), window,
                         RingView{ring, int64_t(ring_entries) * eb, ring_entries, eb, KvFormat::BF16}, 0, PagedEntries{},
                         nullptr, 0);
    p.max_candidates = window;
    return p;
}

// The attention choice with the default policy (docs/perf.md, kernel choice): attn_mma for decode passes of at least
// attn_mma_min_seqs (1) sequences where it fits, attn_simt elsewhere (fewer sequences, prefill, head_dim off the
// tensor-core shapes); a disabled variant is skipped, a forced one taken where it fits. Window-only attention over a
// bf16 ring of random entries; only the choice is checked here (MatchesCpuReference checks the outputs).
TEST(CudaSparseAttention, DefaultChoiceRules) {
    REQUIRE_GPU();
    Rng rng(test_seed());
    auto chosen = [&](int n_seqs, int tokens_per_seq, int D, const KernelPolicy& policy) {
        const int H = 16, R = 64, window = 8, ring_entries = window + tokens_per_seq;
        BatchHost bh;
        for (int s = 0; s < n_seqs; ++s) bh.add(s, 20 + s, tokens_per_seq);
        BatchDev bd(bh);
        const int T = bd.batch.n_tokens;
        const int eb = int(kv_entry_bytes(KvFormat::BF16, D, R));
        Dev<uint16_t> ring(to_bf16_bits(rng.normals(size_t(n_seqs) * ring_entries * eb / 2)));
        Dev<uint16_t> dq(to_bf16_bits(rng.normals(size_t(T) * H * D))), dout(size_t(T) * H * D);
        Dev<float> dsink(rng.normals(H));
        const SparseAttentionParams p = window_params(bd.batch, H, D, R, window, dq, dout, dsink.ptr,
                                                      reinterpret_cast<uint8_t*>(ring.ptr), ring_entries);
        const size_t ws_bytes = sparse_attention_workspace_bytes(T, H, D, p.max_candidates);
        Dev<uint8_t> ws(ws_bytes);
        const std::string name(sparse_attention(p, ws.ptr, ws_bytes, nullptr, policy));
        CUDA_CHECK(cudaDeviceSynchronize());
        return name;
    };
    const KernelPolicy def;
    EXPECT_EQ(chosen(8, 1, 128, def), "attn_mma");   // a decode pass of 8 sequences
    EXPECT_EQ(chosen(1, 1, 128, def), "attn_mma");   // and of one
    KernelPolicy eight;
    eight.attn_mma_min_seqs = 8;
    EXPECT_EQ(chosen(7, 1, 128, eight), "attn_simt");  // below a raised floor
    EXPECT_EQ(chosen(8, 2, 128, def), "attn_simt");  // prefill
    EXPECT_EQ(chosen(8, 1, 144, def), "attn_simt");  // head_dim not a multiple of 64
    EXPECT_EQ(chosen(8, 1, 192, def), "attn_mma");   // 192 = 3 x 64 fits
    KernelPolicy no_mma;
    no_mma.disabled = {"attn_mma"};
    EXPECT_EQ(chosen(8, 1, 128, no_mma), "attn_simt");
    KernelPolicy no_simt;
    no_simt.disabled = {"attn_simt"};
    EXPECT_EQ(chosen(1, 3, 128, no_simt), "attn_mma");
    KernelPolicy two_seqs;
    two_seqs.attn_mma_min_seqs = 2;
    EXPECT_EQ(chosen(2, 1, 128, two_seqs), "attn_mma");
    EXPECT_EQ(chosen(1, 3, 128, KernelPolicy::only("attn_mma")), "attn_mma");
    EXPECT_EQ(chosen(1, 1, 144, KernelPolicy::only("attn_mma")), "attn_simt");  // forced but does not fit
    EXPECT_EQ(chosen(8, 1, 128, KernelPolicy::only("attn_simt")), "attn_simt");
    for (const AttentionVariant& v : kAttentionVariants) {
        const auto& known = known_variants();
        EXPECT_NE(std::find(known.begin(), known.end(), v.name), known.end()) << v.name << " is not a policy name";
        EXPECT_NO_THROW(flashseek::test::archs_available(v.archs)) << v.name;
    }
}

// The merge writing its output prepared for the next linear (SparseAttentionParams::prepared_values, the backend's
// forced-only prepare_in_merge) gives prepare_activation's bits on the output it wrote, padding rows included, for
// both weight layouts and both numerics, through both variants; the output itself is unchanged. Window-only
// attention over a bf16 ring of random entries, the window long enough for several splits; shapes: V4-Flash's 64
// heads of 512, the tiny models' 128 (one half warp per head), 3 and 9 rows (padding rows up to 8 and 16) and 384
// (three 128-blocks per head). A step without a merge (one split) refuses a prepared output by name.
TEST(CudaSparseAttention, MergePreparesItsOutputLikeTheLaunch) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const int R = 64, window = 96, ring_entries = window + 1;
    for (auto [H, D, n_seqs] : {std::tuple{64, 512, 1}, std::tuple{8, 128, 1}, std::tuple{16, 256, 3},
                                std::tuple{12, 384, 9}}) {
        if (flashseek::test::quick_mode() && H > 16) continue;  // sanitizer runs: the small cases cover every path
        BatchHost bh;
        for (int s = 0; s < n_seqs; ++s) bh.add(s, rng.uniform_int(window, 900), 1);
        BatchDev bd(bh);
        const int T = bd.batch.n_tokens;
        const int64_t K = int64_t(H) * D;
        const int eb = int(kv_entry_bytes(KvFormat::BF16, D, R));
        Dev<uint16_t> ring(to_bf16_bits(rng.normals(size_t(n_seqs) * ring_entries * eb / 2)));
        Dev<uint16_t> dq(to_bf16_bits(rng.normals(size_t(T) * K, 1.5f))), dout(size_t(T) * K);
        Dev<float> dsink(rng.normals(H));
        const SparseAttentionParams plain = window_params(bd.batch, H, D, R, window, dq, dout, dsink.ptr,
                                                          reinterpret_cast<uint8_t*>(ring.ptr), ring_entries);
        const size_t ws_bytes = sparse_attention_workspace_bytes(T, H, D, plain.max_candidates);
        Dev<uint8_t> ws(ws_bytes);
        Dev<uint16_t> merged_values(prepared_values_bytes(T, K) / 2), launch_values(prepared_values_bytes(T, K) / 2);
        Dev<float> merged_scales(prepared_scales_bytes(T, K) / 4), launch_scales(prepared_scales_bytes(T, K) / 4);
        for (const AttentionVariant& v : kAttentionVariants) {
            const KernelPolicy only = KernelPolicy::only(v.name);
            ASSERT_TRUE(sparse_attention_merges(plain, only)) << v.name << " H " << H << " D " << D;
            dout.poison();
            sparse_attention(plain, ws.ptr, ws_bytes, nullptr, only);
            const std::vector<uint16_t> out_plain = dout.download();
            for (WeightKind layout : {WeightKind::FP8_BLOCK128, WeightKind::FP4_BLOCK32}) {
                for (ActNumerics num : {ActNumerics::EXACT, ActNumerics::FP8_BLOCK128}) {
                    const std::string what = std::string(v.name) + " H " + std::to_string(H) + " D " +
                                             std::to_string(D) + " rows " + std::to_string(T) + " layout " +
                                             std::to_string(int(layout)) + " numerics " + std::to_string(int(num));
                    SparseAttentionParams p = plain;
                    p.prepared_values = merged_values.ptr;
                    p.prepared_scales = merged_scales.ptr;
                    p.prepared_layout = int(layout);
                    p.prepared_numerics = int(num);
                    dout.poison();
                    merged_values.poison();
                    merged_scales.poison();
                    const std::string ran(sparse_attention(p, ws.ptr, ws_bytes, nullptr, only));
                    CUDA_OK(cudaDeviceSynchronize());
                    EXPECT_EQ(ran, v.name) << what;
                    EXPECT_EQ(dout.download(), out_plain) << what << ": the output changed";
                    PreparedActivation want;
                    want.values = launch_values.ptr;
                    want.scales = launch_scales.ptr;
                    launch_values.poison();
                    launch_scales.poison();
                    prepare_activation(dout.ptr, false, T, K, K, layout, num, want, nullptr);
                    CUDA_OK(cudaDeviceSynchronize());
                    EXPECT_EQ(merged_values.download(), launch_values.download()) << what << ": prepared values";
                    EXPECT_EQ(merged_scales.download(), launch_scales.download()) << what << ": prepared scales";
                }
            }
        }
        SparseAttentionParams one = plain;
        one.max_candidates = 1;  // one split: no merge
        EXPECT_FALSE(sparse_attention_merges(one, KernelPolicy{}));
        one.prepared_values = merged_values.ptr;
        one.prepared_scales = merged_scales.ptr;
        one.prepared_layout = int(WeightKind::FP8_BLOCK128);
        flashseek::test::expect_named_error([&] { sparse_attention(one, ws.ptr, ws_bytes, nullptr); }, "one split");
    }
}

// Bad sparse-attention parameters are refused with an error naming the field, before any launch.
TEST(CudaSparseAttention, BadArgumentsThrowNamedErrors) {
    REQUIRE_GPU();
    const int H = 4, D = 128, R = 64, window = 8;
    BatchHost bh;
    bh.add(0, 20, 1);
    BatchDev bd(bh);
    const int eb = int(kv_entry_bytes(KvFormat::BF16, D, R));
    Dev<uint8_t> ring(size_t(window) * eb), ws(1 << 20);
    Dev<uint16_t> dq(size_t(H) * D), dout(size_t(H) * D);
    Dev<float> dsink(H);
    const SparseAttentionParams good = window_params(bd.batch, H, D, R, window, dq, dout, dsink.ptr, ring.ptr, window);
    auto expect_error = [&](const std::function<void(SparseAttentionParams&)>& spoil, const char* fragment) {
        SparseAttentionParams p = good;
        spoil(p);
        flashseek::test::expect_named_error([&] { sparse_attention(p, ws.ptr, ws.n, nullptr); }, fragment);
    };
    expect_error([](SparseAttentionParams& p) { p.head_dim = 120; }, "head_dim");
    expect_error([](SparseAttentionParams& p) { p.sink = nullptr; }, "attn_sink");
    expect_error([](SparseAttentionParams& p) { p.window = 16; }, "window");
    expect_error([](SparseAttentionParams& p) { p.ratio = 4; }, "compressed entries");
    expect_error([](SparseAttentionParams& p) { p.max_candidates = 0; }, "max_candidates");
    expect_error([](SparseAttentionParams& p) { p.rope_dim = 128; }, "rope_dim");
}

struct CompCase {
    int ratio, dim, rope;
    bool indexer;
    int32_t format;
};

// Runs the compressor over two sequences in several chunks and checks every emitted entry.
TEST(CudaCompressor, ChunkedEntriesMatchCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const CompCase cases[] = {
        {4, 512, 64, false, int32_t(KvFormat::FP8)}, {4, 512, 64, false, int32_t(KvFormat::BF16)},
        {4, 128, 64, true, int32_t(IndexFormat::FP4)}, {4, 128, 64, true, int32_t(IndexFormat::BF16)},
        {128, 512, 64, false, int32_t(KvFormat::FP8)}, {128, 64, 32, true, int32_t(IndexFormat::FP4)},
    };
    // Chunkings: small random steps (decode and chunked prefill), then whole prompts in one step (2001 / 1001 tokens,
    // hundreds of entries emitted by one launch).
    for (const bool whole : {false, true}) {
        for (const CompCase& c : cases) {
            SCOPED_TRACE(whole ? "whole prompt in one step" : "random chunks");
            const int m = c.ratio, co = m == 4 ? 2 : 1, width = co * c.dim, n_slots = 3;
            const int total_len = whole ? (m == 4 ? 2001 : 1001) : (m == 4 ? 45 : 300);
            // token data for both sequences: kv, gate (without ape)
            std::vector<std::vector<float>> kv(2), gate(2);
            for (int s = 0; s < 2; ++s) {
                kv[s] = rng.normals(size_t(total_len) * width, 1.f);
                gate[s] = rng.normals(size_t(total_len) * width, 1.f);
            }
            auto ape = rng.normals(size_t(m) * width, 0.5f);
            auto nw = bf16_round(rng.normals(c.dim, 0.4f));
            const RopeTable rope = yarn_table(c.rope);
            const int eb = int(c.indexer ? index_entry_bytes(IndexFormat(c.format), c.dim)
                                         : kv_entry_bytes(KvFormat(c.format), c.dim, c.rope));
            PagedPool pool(n_slots, total_len / m + 1, 4, eb, rng);
            Dev<uint8_t> dpool(pool.bytes);
            Dev<int32_t> dtables(pool.tables);
            Dev<float> dape(ape);
            Dev<uint16_t> dnw(to_bf16_bits(nw));
            const size_t state_bytes = compressor_state_bytes(m, c.dim);
            Dev<uint8_t> state(state_bytes * n_slots);
            state.poison();  // never-written slots must never be read
            const int slots[2] = {2, 0};
            int pos[2] = {0, 0};
            while (pos[0] < total_len || pos[1] < total_len) {
                BatchHost bh;
                std::vector<float> hkv, hgate;
                for (int s = 0; s < 2; ++s) {
                    int n = whole ? total_len - pos[s]
                                  : std::min(total_len - pos[s],
                                             rng.uniform_int(0, 3) == 0 ? rng.uniform_int(1, 2 * m + 3) : 1);
                    if (n <= 0) continue;
                    bh.add(slots[s], pos[s], n);
                    hkv.insert(hkv.end(), kv[s].begin() + size_t(pos[s]) * width,
                               kv[s].begin() + size_t(pos[s] + n) * width);
                    hgate.insert(hgate.end(), gate[s].begin() + size_t(pos[s]) * width,
                                 gate[s].begin() + size_t(pos[s] + n) * width);
                    pos[s] += n;
                }
                BatchDev bd(bh);
                Dev<float> dkv(hkv), dgate(hgate);
                const CompressorParams p =
                    compressor_params(bd.batch, m, c.dim, c.rope, c.indexer, dkv.ptr, dgate.ptr, dape.ptr, dnw.ptr,
                                      rope, state.ptr, pool.view(dpool.ptr, dtables.ptr, c.format));
                compressor_forward(p, nullptr);
                CUDA_OK(cudaDeviceSynchronize());
            }
            pool.bytes = dpool.download();
            const auto inv = inv_of(rope);
            std::vector<float> got, want;
            for (int s = 0; s < 2; ++s) {
                for (int w = 0; w < total_len / m; ++w) {
                    std::vector<float> skv, ssc;
                    auto add_slot = [&](int t, int col0) {
                        for (int ch = 0; ch < c.dim; ++ch) {
                            skv.push_back(kv[s][size_t(t) * width + col0 + ch]);
                            ssc.push_back(gate[s][size_t(t) * width + col0 + ch] +
                                          ape[size_t(t % m) * width + col0 + ch]);
                        }
                    };
                    if (m == 4)
                        for (int t = (w - 1) * m; t < w * m; ++t)
                            if (t >= 0) add_slot(t, 0);
                    for (int t = w * m; t < (w + 1) * m; ++t) add_slot(t, m == 4 ? c.dim : 0);
                    std::vector<float> e(c.dim);
                    cpu::compressor_pool(skv.data(), ssc.data(), int(skv.size() / c.dim), c.dim, e.data());
                    cpu::round_bf16_inplace(e.data(), c.dim);
                    cpu::rmsnorm(e.data(), nw.data(), c.dim, 1e-6f, e.data());
                    cpu::round_bf16_inplace(e.data(), c.dim);
                    cpu::rope_interleaved(e.data() + c.dim - c.rope, c.rope, inv.data(), int64_t(w) * m);
                    cpu::round_bf16_inplace(e.data(), c.dim);
                    const uint8_t* src = pool.entry(slots[s], w);
                    std::vector<float> dec(c.dim);
                    if (c.indexer) {
                        cpu::hadamard_transform(e.data(), c.dim);
                        cpu::round_bf16_inplace(e.data(), c.dim);
                        cpu::fp4_sim_block32(e.data(), c.dim);
                        for (int d = 0; d < c.dim; ++d) {
                            if (IndexFormat(c.format) == IndexFormat::BF16) {
                                uint16_t b;
                                std::memcpy(&b, src + 2 * d, 2);
                                dec[d] = bf16_to_f32(b);
                            } else {
                                const uint8_t byte = src[d / 2];
                                dec[d] =
                                    e2m1_to_f32(d % 2 ? byte >> 4 : byte & 0xf) * e8m0_to_f32(src[c.dim / 2 + d / 32]);
                            }
                        }
                    } else {
                        cpu::kv_fp8_sim_block64(e.data(), c.dim - c.rope);
                        dec = decode_kv_entry(src, c.dim, c.rope, KvFormat(c.format));
                    }
                    want.insert(want.end(), e.begin(), e.end());
                    got.insert(got.end(), dec.begin(), dec.end());
                }
            }
            // quantized outputs: a rare one-ulp bf16 flip before FP8 (FP4) quantization moves one element by a step
            const double tol = c.indexer && IndexFormat(c.format) == IndexFormat::FP4 ? 3e-2 : 1e-2;
            EXPECT_CLOSE(got, want, tol, "compressor ratio " << m << " dim " << c.dim << " indexer " << c.indexer
                                                             << " format " << c.format);
        }
    }
}

TEST(CudaIndexer, PrepareQMatchesCpu) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    for (auto [D, R, H_fixed, T_fixed] :
         {std::tuple{128, 64, 0, 0}, std::tuple{64, 32, 0, 0}, std::tuple{256, 64, 0, 0}, std::tuple{32, 16, 0, 0},
          std::tuple{128, 64, 64, 0}, std::tuple{32, 16, 16, 0}, std::tuple{128, 64, 32, 0},
          std::tuple{128, 64, 64, 300}, std::tuple{32, 16, 16, 1200}, std::tuple{128, 64, 32, 600}}) {
        // H_fixed: heads filling whole CTAs (the rope angles once per CTA), else random. 1-6 tokens take a row per
        // warp (the grid would not cover the SMs with more); T_fixed tokens fill the SMs of any current GPU with 8,
        // 2 and 4 rows per warp.
        const int T = T_fixed ? T_fixed : rng.uniform_int(1, 6), H = H_fixed ? H_fixed : rng.uniform_int(1, 17);
        const int64_t stride = int64_t(H) * D + 32;
        auto q = bf16_round(rng.normals(size_t(T) * stride, 1.f));
        std::vector<int32_t> pos(T);
        for (auto& p : pos) p = rng.uniform_int(0, 200000);
        const RopeTable rope = yarn_table(R);
        Dev<uint16_t> dq(to_bf16_bits(q));
        Dev<int32_t> dpos(pos);
        indexer_prepare_q(bf(dq), stride, T, H, D, dpos.ptr, rope, nullptr);
        const std::vector<uint16_t> got_bits = dq.download();
        auto got_all = from_bf16_bits(got_bits);
        {
            // Each token's heads again, one call per head as a one-head "token" (positions repeated): the rope
            // angles per row instead of per CTA give the same bits.
            std::vector<int32_t> pos_rows(size_t(T) * H);
            for (int t = 0; t < T; ++t)
                for (int h = 0; h < H; ++h) pos_rows[size_t(t) * H + h] = pos[size_t(t)];
            std::vector<float> rows_only;  // the heads of every token, contiguous (row stride D)
            for (int t = 0; t < T; ++t) rows_only.insert(rows_only.end(), q.begin() + t * stride, q.begin() + t * stride + H * D);
            Dev<uint16_t> dr(to_bf16_bits(rows_only));
            Dev<int32_t> dpos_rows(pos_rows);
            indexer_prepare_q(bf(dr), D, T * H, 1, D, dpos_rows.ptr, rope, nullptr);
            const std::vector<uint16_t> per_row = dr.download();
            size_t differ = 0;
            for (int t = 0; t < T; ++t)
                for (int i = 0; i < H * D; ++i) differ += per_row[size_t(t) * H * D + i] != got_bits[size_t(t) * stride + i];
            EXPECT_EQ(differ, 0u) << "indexer q D " << D << " H " << H << ": per-row rope angles differ";
        }
        const auto inv = inv_of(rope);
        std::vector<float> got, want;
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < H; ++h) {
                std::vector<float> v(q.begin() + t * stride + h * D, q.begin() + t * stride + (h + 1) * D);
                cpu::rope_interleaved(v.data() + D - R, R, inv.data(), pos[t]);
                cpu::round_bf16_inplace(v.data(), D);
                cpu::hadamard_transform(v.data(), D);
                cpu::round_bf16_inplace(v.data(), D);
                cpu::fp4_sim_block32(v.data(), D);
                want.insert(want.end(), v.begin(), v.end());
                got.insert(got.end(), got_all.begin() + t * stride + h * D, got_all.begin() + t * stride + (h + 1) * D);
            }
        EXPECT_CLOSE(got, want, 3e-2, "indexer q D " << D);  // FP4 output: rare one-step flips
    }
}

TEST(CudaIndexer, SelectMatchesCpuTopk) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    for (IndexFormat fmt : {IndexFormat::FP4, IndexFormat::BF16}) {
        const int H = 16, D = 128, topk = 37, ratio = 4, n_slots = 3;
        BatchHost bh;
        bh.add(1, 700, 1);   // 175 entries > topk: scored
        bh.add(2, 60, 1);    // 15 entries <= topk: all selected
        bh.add(0, 400, 6);   // prefill chunk, causal limits per row
        BatchDev bd(bh);
        const int T = bd.batch.n_tokens;
        const int max_entries = (706 + 1) / ratio;
        const int eb = int(index_entry_bytes(fmt, D));
        PagedPool pool(n_slots, max_entries + 4, 16, eb, rng);
        std::map<std::pair<int, int>, std::vector<float>> keys;
        for (size_t s = 0; s < bh.slot.size(); ++s) {
            const int n_e = (bh.start[s] + bh.n_tok[s]) / ratio;
            for (int e = 0; e < n_e; ++e) {
                auto v = bf16_round(rng.normals(D));
                encode_index_key(v, fmt, pool.entry(bh.slot[s], e));  // keys are FP4-representable
                keys[{bh.slot[s], e}] = v;
            }
        }
        auto q = bf16_round(rng.normals(size_t(T) * H * D));
        auto wraw = bf16_round(rng.normals(size_t(T) * H));
        Dev<uint16_t> dq(to_bf16_bits(q)), dw(to_bf16_bits(wraw));
        Dev<uint8_t> dpool(pool.bytes);
        Dev<int32_t> dtables(pool.tables), dsel(size_t(T) * topk);
        dsel.poison();
        const IndexerSelectParams p =
            indexer_params(bd.batch, H, D, ratio, topk, dq.ptr, dw.ptr, pool.view(dpool.ptr, dtables.ptr, int32_t(fmt)),
                           max_entries, dsel.ptr);
        const size_t ws_bytes = indexer_select_workspace_bytes(T, max_entries);
        Dev<uint8_t> ws(ws_bytes);
        indexer_select(p, ws.ptr, ws_bytes, nullptr);
        CUDA_OK(cudaDeviceSynchronize());
        auto sel = dsel.download();
        for (int t = 0; t < T; ++t) {
            const int slot = bh.slot[bh.token_seq[t]];
            const int n = (bh.token_pos[t] + 1) / ratio;
            std::vector<float> kk, w(H), scores(n);
            for (int e = 0; e < n; ++e) kk.insert(kk.end(), keys[{slot, e}].begin(), keys[{slot, e}].end());
            for (int h = 0; h < H; ++h) w[h] = wraw[size_t(t) * H + h] * p.weights_scale;
            cpu::indexer_scores(q.data() + size_t(t) * H * D, H, D, w.data(), kk.data(), n, scores.data());
            expect_topk_row(std::vector<int32_t>(sel.begin() + size_t(t) * topk, sel.begin() + size_t(t + 1) * topk),
                            scores, topk, "row " + std::to_string(t));
        }
    }
}

// The two forms of the decode scorer and the top-k (IndexerSelectParams::form, indexer.cu) give the same scores and
// selections bit for bit: V4-Flash's shape (64 heads x 128 dims, top 512) and odd ones (20 heads padded to 32, 64
// dims), rows with more entries than form 1 caches for its radix passes, pools whose entries are not 4-byte aligned
// (form 1's byte path; form 0 refuses such bf16 pools and scores an aligned copy), a prefill chunk, keys repeated
// every 97 entries (exact score ties at each row's threshold, broken by index; form 1's top-k stops once its
// threshold bin is taken whole). Each selection is also exactly cpu::topk_indices of the scores the GPU
// computed (the test above allows near-ties, as it scores on the CPU).
TEST(CudaIndexer, SelectFormsAgree) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    struct Case {
        int H, D, topk;
        IndexFormat fmt;
        int64_t offset;     // of the layer's entries in a pool block (PagedPool: 64)
        int distinct_keys;  // > 0: entry e holds key e % distinct_keys (exact score ties at every threshold)
    };
    for (const Case c : {Case{64, 128, 512, IndexFormat::FP4, 64, 0}, Case{64, 128, 512, IndexFormat::BF16, 64, 0},
                         Case{20, 64, 100, IndexFormat::FP4, 65, 0}, Case{16, 128, 37, IndexFormat::BF16, 66, 0},
                         Case{64, 128, 512, IndexFormat::FP4, 64, 97}}) {
        SCOPED_TRACE("H " + std::to_string(c.H) + " D " + std::to_string(c.D) + " topk " + std::to_string(c.topk) +
                     " offset " + std::to_string(c.offset) + " distinct keys " + std::to_string(c.distinct_keys));
        const int ratio = 4, n_slots = 4;
        BatchHost bh;
        bh.add(0, 8300 + int(rng.uniform_int(0, 40)), 1);  // ~2,080 entries: V4 decode at an 8k context
        bh.add(1, 36900, 1);                               // 9,225 entries: more than form 1 caches
        bh.add(2, 300, 1);                                 // 75 entries
        bh.add(3, 2500, 5);                                // a prefill chunk, causal limits per row
        BatchDev bd(bh);
        const int T = bd.batch.n_tokens;
        const int max_entries = (36900 + 1) / ratio;
        const int eb = int(index_entry_bytes(c.fmt, c.D));
        PagedPool pool(n_slots, max_entries + 4, 16, eb, rng);
        pool.offset = c.offset;  // the block has 64 bytes of slack past the entries
        for (size_t s = 0; s < bh.slot.size(); ++s) {
            const int n_e = (bh.start[s] + bh.n_tok[s]) / ratio;
            std::vector<std::vector<float>> distinct;
            for (int e = 0; e < n_e; ++e) {
                if (c.distinct_keys > 0 && e >= c.distinct_keys) {
                    encode_index_key(distinct[size_t(e % c.distinct_keys)], c.fmt, pool.entry(bh.slot[s], e));
                    continue;
                }
                auto v = bf16_round(rng.normals(c.D));
                if (c.distinct_keys > 0) distinct.push_back(v);
                encode_index_key(v, c.fmt, pool.entry(bh.slot[s], e));
            }
        }
        const auto q = bf16_round(rng.normals(size_t(T) * c.H * c.D));
        const auto w = bf16_round(rng.normals(size_t(T) * c.H));
        Dev<uint16_t> dq(to_bf16_bits(q)), dw(to_bf16_bits(w));
        Dev<uint8_t> dpool(pool.bytes);
        Dev<int32_t> dtables(pool.tables), dsel(size_t(T) * c.topk);
        IndexerSelectParams p = indexer_params(bd.batch, c.H, c.D, ratio, c.topk, dq.ptr, dw.ptr,
                                               pool.view(dpool.ptr, dtables.ptr, int32_t(c.fmt)), max_entries,
                                               dsel.ptr);
        // Form 0 reads bf16 keys two at a time (4-byte loads): pools whose entries are not 4-byte aligned, which
        // only form 1 reads (the state pool aligns every layer's entries to 256 bytes), go to form 0 as a copy with
        // the same entries at offset 64.
        PagedPool aligned = pool;
        const bool form0_needs_copy = c.fmt == IndexFormat::BF16 && (c.offset % 4 != 0 || eb % 4 != 0);
        if (form0_needs_copy) {
            aligned.offset = 64;
            const int64_t entry_region = int64_t(pool.entries_per_block) * eb;
            for (int64_t b = 0; b < int64_t(pool.tables.size()); ++b)
                std::memmove(aligned.bytes.data() + b * pool.block_bytes + aligned.offset,
                             pool.bytes.data() + b * pool.block_bytes + pool.offset, size_t(entry_region));
        }
        Dev<uint8_t> dpool0(aligned.bytes);
        const PagedEntries view1 = p.keys, view0 = aligned.view(dpool0.ptr, dtables.ptr, int32_t(c.fmt));
        const size_t ws_bytes = indexer_select_workspace_bytes(T, max_entries);
        Dev<float> ws(ws_bytes / sizeof(float));
        auto run = [&](int form, int tile, std::vector<float>& scores, std::vector<int32_t>& sel) {
            p.form = form;
            p.score_tile = tile;
            p.keys = form == 0 ? view0 : view1;
            ws.poison();
            dsel.poison();
            indexer_select(p, ws.ptr, ws_bytes, nullptr);
            CUDA_OK(cudaDeviceSynchronize());
            scores = ws.download();
            sel = dsel.download();
        };
        std::vector<float> scores0;
        std::vector<int32_t> sel0;
        run(0, 0, scores0, sel0);
        // Form 1 with its tile chosen (0) and each tile pinned: 64 / 32 / 16 entries per CTA.
        for (int tile : {0, 64, 32, 16}) {
            SCOPED_TRACE("form 1, score tile " + std::to_string(tile));
            std::vector<float> scores1;
            std::vector<int32_t> sel1;
            run(1, tile, scores1, sel1);
            EXPECT_EQ(sel0, sel1) << "selections differ between the forms";
            for (int t = 0; t < T; ++t) {
                const int n = (bh.token_pos[t] + 1) / ratio;
                if (n <= c.topk) continue;  // not scored: every entry selected
                const float* s0 = scores0.data() + size_t(t) * max_entries;
                const float* s1 = scores1.data() + size_t(t) * max_entries;
                EXPECT_EQ(std::memcmp(s0, s1, size_t(n) * sizeof(float)), 0) << "row " << t << ": scores differ";
                std::vector<int32_t> want;
                cpu::topk_indices(s1, n, c.topk, want);
                const std::vector<int32_t> got(sel1.begin() + size_t(t) * c.topk,
                                               sel1.begin() + size_t(t + 1) * c.topk);
                EXPECT_EQ(got, want) << "row " << t << ": not the top-k of the GPU's own scores";
            }
        }
    }
}

// Form 1's scoring tile: the largest of 64 / 32 / 16 entries whose grid covers the SMs, else 16; and a pinned tile
// outside those three is refused, naming it.
TEST(CudaIndexer, ScoreTileFillsTheGpu) {
    EXPECT_EQ(indexer_score_tile(1, 2080, 132), 16);   // one token at an 8k context: 130 CTAs
    EXPECT_EQ(indexer_score_tile(2, 2080, 132), 16);   // 2 x 65 tiles of 32 fall short: 2 x 130 of 16
    EXPECT_EQ(indexer_score_tile(3, 2080, 132), 32);   // 3 x 65 tiles of 32
    EXPECT_EQ(indexer_score_tile(4, 2080, 132), 64);   // 4 x 33 tiles of 64
    EXPECT_EQ(indexer_score_tile(1, 16384, 132), 64);  // a 64k context fills the GPU with tiles of 64
    EXPECT_EQ(indexer_score_tile(1, 600, 132), 16);    // too few entries for any tile: the smallest
    REQUIRE_GPU();
    Rng rng(test_seed());
    BatchHost bh;
    bh.add(0, 4000, 1);
    BatchDev bd(bh);
    const int H = 16, D = 128, topk = 37, ratio = 4, max_entries = 1001;
    const int eb = int(index_entry_bytes(IndexFormat::FP4, D));
    PagedPool pool(1, max_entries + 4, 16, eb, rng);
    Dev<uint16_t> dq(to_bf16_bits(bf16_round(rng.normals(size_t(H) * D))));
    Dev<uint16_t> dw(to_bf16_bits(bf16_round(rng.normals(H))));
    Dev<uint8_t> dpool(pool.bytes);
    Dev<int32_t> dtables(pool.tables), dsel(topk);
    IndexerSelectParams p = indexer_params(bd.batch, H, D, ratio, topk, dq.ptr, dw.ptr,
                                           pool.view(dpool.ptr, dtables.ptr, int32_t(IndexFormat::FP4)), max_entries,
                                           dsel.ptr);
    p.form = 1;
    p.score_tile = 24;
    const size_t ws_bytes = indexer_select_workspace_bytes(1, max_entries);
    Dev<uint8_t> ws(ws_bytes);
    try {
        indexer_select(p, ws.ptr, ws_bytes, nullptr);
        ADD_FAILURE() << "a score tile of 24 was accepted";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("score tile must be 16, 32 or 64, got 24"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace flashseek::cuda::test
