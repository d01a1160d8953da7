// GPU tests of the prefill kernels: sparse_attention_prefill against the CPU reference (odd head counts, head_dim
// 64/128/512, windows shorter and longer than the prompt, prompts of 1, 37, 300 and 2000 tokens, window-only,
// all-visible and top-k compressed candidates with -1 and invisible ids, bf16 and FP8 caches), bit-identical to
// the tensor-core decode kernel run with one split and to itself under every launch shape, chunking and batch
// composition, with either stage release (mbarriers, or CTA barriers: a test of its own, which a racecheck run can
// select alone); indexer_select_prefill against cpu::indexer_scores + cpu::topk_indices, against indexer_select, and
// invariant to its row chunking. Outputs are poisoned before every run; the seed is printed (FS_TEST_SEED replays).
#include <map>
#include <memory>
#include <numeric>

#include "attn_reference.h"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/attention/sparse_attention_prefill.cuh"
#include "cuda/indexer/indexer_prefill.cuh"
#include "harness_mode.h"
#include "kv_test_util.h"
#include "util/error.h"

namespace flashseek::cuda::test {
namespace {

// One step's sequences: (state slot, first new position, new tokens).
struct SeqRows {
    int slot, start, n;
};
// What a scene holds for one state slot: query rows first_query .. end-1 over a sequence of `end` positions.
struct SeqSpan {
    int first_query, end;
};

// The cached state of an attention layer on host and device, for sequences that end at known lengths: every
// position's window entry in the ring, every compressed entry in the paged pool, and each query row's q and
// top-k list, all random, so that any step (any chunking of the prompts) can be assembled from it.
struct AttnScene {
    int H, D, R, window, ratio, topk_width;
    bool use_topk;
    KvFormat fmt;
    int n_slots, ring_entries, eb, max_entries;
    std::vector<uint8_t> ring_h;
    std::map<std::pair<int, int>, std::vector<float>> ring_val, comp_val;
    std::map<std::pair<int, int>, std::vector<uint16_t>> q_rows;  // bf16 bits [H * D]
    std::map<std::pair<int, int>, std::vector<int32_t>> topk_rows;
    PagedPool pool;
    std::vector<float> sink;
    RopeTable rope;
    std::vector<float> inv;
    Dev<uint8_t> dring, dpool;
    Dev<int32_t> dtables;
    Dev<float> dsink;

    // spans[slot]: the query rows any step may hold; max_chunk: the largest step of one sequence.
    AttnScene(int H_, int D_, int R_, int window_, int ratio_, bool use_topk_, int topk_width_, KvFormat fmt_,
              const std::vector<SeqSpan>& spans, int max_chunk, bool realistic_topk, Rng& rng)
        : H(H_),
          D(D_),
          R(R_),
          window(window_),
          ratio(ratio_),
          topk_width(topk_width_),
          use_topk(use_topk_),
          fmt(fmt_),
          n_slots(int(spans.size())),
          ring_entries(window_ - 1 + max_chunk + 3),
          eb(int(kv_entry_bytes(fmt_, D_, R_))),
          max_entries(ratio_ ? max_end(spans) / ratio_ : 0),
          pool(int(spans.size()), std::max(1, max_entries), 8, eb, rng),
          rope(yarn_table(R_)),
          inv(inv_of(rope)) {
        ring_h.assign(size_t(n_slots) * ring_entries * eb, 0x5A);
        for (int slot = 0; slot < n_slots; ++slot) {
            const int end = spans[size_t(slot)].end;
            // the ring keeps the last ring_entries positions; a step reads at most window - 1 + max_chunk of them
            for (int pos = std::max(0, end - ring_entries); pos < end; ++pos) put_window(slot, pos, rng);
            for (int w = 0; ratio && w < end / ratio; ++w) {
                auto v = bf16_round(rng.normals(size_t(D), 1.5f));
                std::vector<float> dec(static_cast<size_t>(D));
                encode_kv_entry(v.data(), D, R, fmt, pool.entry(slot, w), dec.data());
                comp_val[{slot, w}] = dec;
            }
            for (int pos = spans[size_t(slot)].first_query; pos < end; ++pos) {
                q_rows[{slot, pos}] = to_bf16_bits(rng.normals(size_t(H) * D));
                const int n_vis = ratio ? (pos + 1) / ratio : 0;
                std::vector<int32_t> list(static_cast<size_t>(topk_width), -1);
                if (realistic_topk) {  // the indexer's form: ascending distinct visible ids, then -1
                    std::vector<int32_t> ids(static_cast<size_t>(n_vis));
                    std::iota(ids.begin(), ids.end(), 0);
                    std::shuffle(ids.begin(), ids.end(), rng.gen);
                    ids.resize(std::min<size_t>(ids.size(), size_t(topk_width)));
                    std::sort(ids.begin(), ids.end());
                    std::copy(ids.begin(), ids.end(), list.begin());
                } else {  // any order, holes, duplicates and ids not visible yet
                    for (auto& x : list) {
                        const int kind = rng.uniform_int(0, 9);
                        x = kind < 2 || n_vis == 0 ? -1
                            : kind == 2            ? n_vis + rng.uniform_int(0, 3)
                                                   : rng.uniform_int(0, n_vis - 1);
                    }
                }
                topk_rows[{slot, pos}] = list;
            }
        }
        sink = rng.normals(size_t(H), 1.f);
        dring = Dev<uint8_t>(ring_h);
        dpool = Dev<uint8_t>(pool.bytes);
        dtables = Dev<int32_t>(pool.tables);
        dsink = Dev<float>(sink);
    }
    static int max_end(const std::vector<SeqSpan>& spans) {
        int e = 0;
        for (const SeqSpan& s : spans) e = std::max(e, s.end);
        return e;
    }
    void put_window(int slot, int pos, Rng& rng) {
        auto v = bf16_round(rng.normals(size_t(D), 1.5f));
        std::vector<float> dec(static_cast<size_t>(D));
        encode_kv_entry(v.data(), D, R, fmt, ring_h.data() + (int64_t(slot) * ring_entries + pos % ring_entries) * eb,
                        dec.data());
        ring_val[{slot, pos}] = dec;
    }
    AttnRowSpec spec() const {
        return AttnRowSpec{H, D, R, window, ratio, 1.f / std::sqrt(float(D)), sink.data(), inv.data()};
    }
};

// The device inputs of one step over a scene, and the kernels run on them.
struct AttnStep {
    const AttnScene& sc;
    BatchHost bh;
    std::unique_ptr<BatchDev> bd;
    std::vector<uint16_t> q;  // bf16 bits [T, H, D]
    std::vector<int32_t> topk;
    Dev<uint16_t> dq, dout;
    Dev<int32_t> dtopk;
    int T = 0;

    AttnStep(const AttnScene& scene, const std::vector<SeqRows>& seqs) : sc(scene) {
        for (const SeqRows& s : seqs) bh.add(s.slot, s.start, s.n);
        bd = std::make_unique<BatchDev>(bh);
        T = bd->batch.n_tokens;
        for (int t = 0; t < T; ++t) {
            const std::pair<int, int> key{bh.slot[size_t(bh.token_seq[size_t(t)])], bh.token_pos[size_t(t)]};
            const auto& qr = sc.q_rows.at(key);
            q.insert(q.end(), qr.begin(), qr.end());
            const auto& tr = sc.topk_rows.at(key);
            topk.insert(topk.end(), tr.begin(), tr.end());
        }
        dq = Dev<uint16_t>(q);
        dout = Dev<uint16_t>(size_t(T) * sc.H * sc.D);
        dtopk = Dev<int32_t>(topk.empty() ? std::vector<int32_t>{-1} : topk);
    }
    SparseAttentionParams params() const {
        return attention_params(
            bd->batch, sc.H, sc.D, sc.R, dq.ptr, dout.ptr, sc.dsink.ptr, sc.rope, sc.window,
            RingView{sc.dring.ptr, int64_t(sc.ring_entries) * sc.eb, sc.ring_entries, sc.eb, sc.fmt}, sc.ratio,
            sc.pool.view(sc.dpool.ptr, sc.dtables.ptr, int32_t(sc.fmt)), sc.use_topk ? dtopk.ptr : nullptr,
            sc.topk_width);
    }
    // Output bits of the prefill kernel.
    std::vector<uint16_t> prefill(const PrefillAttentionTuning& tuning = {}) {
        const SparseAttentionParams p = params();
        const size_t ws_bytes =
            sparse_attention_prefill_workspace_bytes(T, bd->batch.n_seqs, sc.window, sc.max_entries, sc.D);
        Dev<uint8_t> ws(ws_bytes);
        ws.poison();  // rows the kernel does not gather must never be read
        dout.poison();
        sparse_attention_prefill(p, sc.max_entries, ws.ptr, ws_bytes, nullptr, tuning);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return dout.download();
    }
    // Output bits of the tensor-core decode kernel with one split (max_candidates = 1 leaves a single split).
    std::vector<uint16_t> decode_mma_one_split() {
        SparseAttentionParams p = params();
        p.max_candidates = 1;
        const size_t ws_bytes = std::max<size_t>(1, sparse_attention_workspace_bytes(T, sc.H, sc.D, 1));
        Dev<uint8_t> ws(ws_bytes);
        dout.poison();
        EXPECT_EQ(sparse_attention(p, ws.ptr, ws_bytes, nullptr, KernelPolicy::only("attn_mma")), "attn_mma");
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return dout.download();
    }
    // CPU expectation of row t, [H, D].
    std::vector<float> expected(int t) const {
        const int slot = bh.slot[size_t(bh.token_seq[size_t(t)])], pos = bh.token_pos[size_t(t)];
        std::vector<float> o(size_t(sc.H) * sc.D);
        const std::vector<float> q_row = from_bf16_bits(
            std::vector<uint16_t>(q.begin() + size_t(t) * sc.H * sc.D, q.begin() + size_t(t + 1) * sc.H * sc.D));
        reference_attention_row(
            sc.spec(), q_row.data(), pos, sc.use_topk ? topk.data() + size_t(t) * sc.topk_width : nullptr,
            sc.topk_width,
            [&](int64_t p) -> const std::vector<float>& {
                return sc.ring_val.at({slot, int(p)});
            },
            [&](int w) -> const std::vector<float>& {
                return sc.comp_val.at({slot, w});
            },
            o.data());
        return o;
    }
};

size_t count_differences(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
    return n;
}

struct PrefillCase {
    const char* name;
    int H, D, R, window, ratio;
    bool use_topk;
    int topk_width;
    KvFormat fmt;
    std::vector<SeqRows> seqs;  // slots 0..n-1 in order
    int cpu_rows;               // rows compared with the CPU (spread over the step; 0 = all)
    double tol;                 // rel_l2 bound against the CPU
    bool indexer_lists = false;  // top-k rows as the indexer writes them (ascending, -1 at the end) instead of holes
};

// Every case against the CPU reference and the decode kernel; then every launch shape against the default one, bit
// for bit. cta_release: every launch releases its stages through CTA barriers (PrefillAttentionTuning::cta_release)
// and none uses the default mbarrier releases, so that a racecheck run of this form alone sees no other form.
void check_prefill_cases(bool cta_release) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    // Thresholds: bf16 outputs with P rounded to bf16 in both; the fp32 dot products and sums run in another order
    // (a one-ulp bf16 flip of an output is 2^-8 relative), so rel_l2 stays near 1e-3; 5e-3 as the decode test.
    // clang-format off
    const PrefillCase cases[] = {
        {"CSA V4 shape, top-k lists with holes", 64, 512, 64, 128, 4, true, 96, KvFormat::FP8, {{0, 0, 300}}, 40, 5e-3},
        {"HCA V4 shape, 2000-token prompt", 64, 512, 64, 128, 128, false, 0, KvFormat::FP8, {{0, 0, 2000}}, 48, 5e-3},
        {"CSA V4 shape, indexer lists: whole tiles empty", 64, 512, 64, 128, 4, true, 512, KvFormat::FP8,
         {{0, 0, 700}}, 24, 5e-3, true},
        {"CSA continuation + 1-token chunk, 512-wide list", 64, 512, 64, 128, 4, true, 512, KvFormat::FP8,
         {{0, 4000, 37}, {1, 9, 1}}, 12, 5e-3},
        {"window longer than the prompt, all visible", 5, 64, 32, 4096, 4, false, 0, KvFormat::BF16, {{0, 0, 37}}, 0,
         5e-3},
        {"window only, prompts of 1 and 37", 1, 64, 32, 16, 0, false, 0, KvFormat::BF16,
         {{0, 0, 1}, {1, 3, 1}, {2, 50, 37}}, 0, 5e-3},
        {"odd heads, two head groups, HCA", 20, 128, 64, 8, 128, false, 0, KvFormat::FP8, {{0, 200, 300}, {1, 0, 37}},
         60, 5e-3},
        {"17 heads, head_dim 128, bf16 CSA chunk", 17, 128, 64, 128, 4, true, 40, KvFormat::BF16,
         {{0, 1000, 37}, {1, 5, 300}}, 80, 5e-3},
        {"head_dim 256, 3 heads, 2000 tokens, all visible", 3, 256, 64, 64, 4, false, 0, KvFormat::FP8,
         {{0, 0, 2000}}, 64, 5e-3},
    };
    // clang-format on
    for (const PrefillCase& c : cases) {
        SCOPED_TRACE(c.name);
        int64_t case_rows = 0;
        for (const SeqRows& s : c.seqs) case_rows += s.n;
        // sanitizer runs: small cases only (the 38-row V4-shaped continuation stays: the compile-time-sized kernel)
        if (flashseek::test::quick_mode() && int64_t(c.H) * c.D * case_rows > 2'000'000) continue;
        std::vector<SeqSpan> spans;
        int max_chunk = 1;
        for (const SeqRows& s : c.seqs) {
            spans.push_back({s.start, s.start + s.n});
            max_chunk = std::max(max_chunk, s.n);
        }
        AttnScene scene(c.H, c.D, c.R, c.window, c.ratio, c.use_topk, c.topk_width, c.fmt, spans, max_chunk,
                        /*realistic_topk=*/c.indexer_lists, rng);
        AttnStep step(scene, c.seqs);
        PrefillAttentionTuning first;
        first.cta_release = cta_release;
        const auto got_bits = step.prefill(first);
        const auto got = from_bf16_bits(got_bits);

        std::vector<int> rows;
        if (c.cpu_rows == 0 || c.cpu_rows >= step.T) {
            for (int t = 0; t < step.T; ++t) rows.push_back(t);
        } else {
            for (int i = 0; i < c.cpu_rows; ++i) rows.push_back(int(int64_t(i) * (step.T - 1) / (c.cpu_rows - 1)));
        }
        std::vector<float> want, got_rows;
        const size_t row_elems = size_t(c.H) * c.D;
        for (int t : rows) {
            const auto e = step.expected(t);
            want.insert(want.end(), e.begin(), e.end());
            got_rows.insert(got_rows.end(), got.begin() + t * row_elems, got.begin() + (t + 1) * row_elems);
        }
        EXPECT_CLOSE(got_rows, want, c.tol, c.name << " (" << rows.size() << " of " << step.T << " rows)");

        // every launch shape gives the same bits
        // (V4's shape runs the instantiation with compile-time sizes by default, the explicit shapes and
        // {0, 0, false} the runtime-sized one; 1 / 2 / 3 / 4 head groups copy with 1 / 1 / 2 / 2 of them)
        for (PrefillAttentionTuning tn : {PrefillAttentionTuning{1, 1}, PrefillAttentionTuning{1, 3},
                                          PrefillAttentionTuning{4, 2}, PrefillAttentionTuning{2, 1},
                                          PrefillAttentionTuning{3, 2}, PrefillAttentionTuning{0, 0, false}}) {
            tn.cta_release = cta_release;
            EXPECT_EQ(count_differences(step.prefill(tn), got_bits), 0u)
                << c.name << ": head groups " << tn.head_groups << " stages " << tn.stages
                << (tn.allow_fixed_shape ? "" : ", runtime-sized kernel") << (cta_release ? ", CTA releases" : "");
        }
        // bit-identical to the tensor-core decode kernel with one split, where that kernel applies
        if (c.D % 64 == 0 && c.D <= 512) {
            const auto dec = step.decode_mma_one_split();
            EXPECT_EQ(count_differences(dec, got_bits), 0u) << c.name << ": prefill vs decode (mma, one split)";
        }
    }
}

TEST(CudaPrefillAttention, MatchesCpuAndDecodeKernel) {
    REQUIRE_GPU();
    check_prefill_cases(false);
}

// The stage releases through CTA barriers: the same checks, so the same bits as the default form (both equal the
// decode kernel's and agree with the CPU) on every case and launch shape.
TEST(CudaPrefillAttention, CtaReleaseMatchesCpuAndDecodeKernel) {
    REQUIRE_GPU();
    check_prefill_cases(true);
}

// A prompt's rows give the same bits whether it is prefilled in one step or in chunks (1-token chunks included),
// alone or beside other sequences' rows.
TEST(CudaPrefillAttention, ChunkingAndBatchInvariant) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const bool small = flashseek::test::quick_mode();  // sanitizer runs
    for (int ratio : {4, 128}) {
        // slot 0: the prompt under test; slots 1, 2: other sequences sharing the steps
        const int len = small ? 90 : 300, mid = 38 + (len - 38) / 2;
        AttnScene scene(16, small ? 128 : 512, 64, 128, ratio, ratio == 4, 64, KvFormat::FP8,
                        {{0, len}, {0, 140}, {0, 60}}, len, /*realistic_topk=*/true, rng);
        AttnStep whole(scene, {{0, 0, len}});
        const auto ref = whole.prefill();
        const std::vector<std::vector<SeqRows>> steps = {
            {{1, 100, 5}, {0, 0, 37}},
            {{0, 37, 1}},
            {{2, 0, 60}, {0, 38, mid - 38}, {1, 105, 1}},
            {{0, mid, len - mid}, {1, 106, 34}},
        };
        const size_t row_elems = size_t(scene.H) * scene.D;
        for (const auto& seqs : steps) {
            AttnStep step(scene, seqs);
            const auto out = step.prefill();
            size_t diffs = 0, rows = 0;
            for (int t = 0; t < step.T; ++t) {
                if (step.bh.slot[size_t(step.bh.token_seq[size_t(t)])] != 0) continue;
                const int pos = step.bh.token_pos[size_t(t)];
                for (size_t i = 0; i < row_elems; ++i) diffs += out[t * row_elems + i] != ref[pos * row_elems + i];
                ++rows;
            }
            EXPECT_GT(rows, 0u);
            EXPECT_EQ(diffs, 0u) << "ratio " << ratio << ": chunked / batched rows differ from the whole prompt";
        }
    }
}

TEST(CudaPrefillAttention, RejectsBadInput) {
    REQUIRE_GPU();
    Rng rng(test_seed());
    AttnScene scene(4, 64, 32, 8, 4, false, 0, KvFormat::BF16, {{0, 20}}, 20, false, rng);
    AttnStep step(scene, {{0, 0, 20}});
    const size_t ws_bytes =
        sparse_attention_prefill_workspace_bytes(step.T, 1, scene.window, scene.max_entries, scene.D);
    Dev<uint8_t> ws(ws_bytes);
    const SparseAttentionParams good = step.params();
    EXPECT_TRUE(sparse_attention_prefill_supports(good, scene.max_entries));
    EXPECT_THROW(sparse_attention_prefill(good, scene.max_entries, ws.ptr, ws_bytes - 1, nullptr), Error);
    EXPECT_THROW(sparse_attention_prefill(good, scene.max_entries, ws.ptr, ws_bytes, nullptr, {5, 0}), Error);
    SparseAttentionParams p = good;
    p.head_dim = 48;
    EXPECT_FALSE(sparse_attention_prefill_supports(p, scene.max_entries));
    EXPECT_THROW(sparse_attention_prefill(p, scene.max_entries, ws.ptr, ws_bytes, nullptr), Error);
    p = good;
    p.ring.ring_entries = scene.window;  // cannot hold the step's 20 rows beside the window
    EXPECT_FALSE(sparse_attention_prefill_supports(p, scene.max_entries));
    EXPECT_THROW(sparse_attention_prefill(p, scene.max_entries, ws.ptr, ws_bytes, nullptr), Error);
    p = good;
    p.q_stride += 4;  // rows no longer 16-byte aligned
    EXPECT_FALSE(sparse_attention_prefill_supports(p, scene.max_entries));
    EXPECT_THROW(sparse_attention_prefill(p, scene.max_entries, ws.ptr, ws_bytes, nullptr), Error);
    EXPECT_FALSE(sparse_attention_prefill_supports(good, -1));
}

// ---- indexer ---------------------------------------------------------------------------------------------------

struct IndexerCase {
    const char* name;
    int H, D, topk;
    IndexFormat fmt;
    std::vector<SeqRows> seqs;
    int cpu_rows;  // rows compared with the CPU (0 = all)
};

TEST(CudaPrefillIndexer, MatchesCpuAndIsChunkInvariant) {
    REQUIRE_GPU();
    const uint64_t seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const int ratio = 4;
    // clang-format off
    const IndexerCase cases[] = {
        {"V4 shape, 2000-token prompt", 64, 128, 100, IndexFormat::FP4, {{0, 0, 2000}}, 50},
        {"continuation, 37 and 1-token chunks", 64, 128, 64, IndexFormat::FP4,
         {{0, 3000, 37}, {1, 700, 1}, {2, 40, 1}}, 0},
        {"odd heads, bf16 keys, head_dim 64", 5, 64, 37, IndexFormat::BF16, {{0, 0, 300}, {1, 1000, 37}}, 0},
        {"decode-shaped batch", 16, 128, 20, IndexFormat::FP4, {{0, 900, 1}, {1, 77, 1}, {2, 513, 1}, {3, 3, 1}}, 0},
        {"nothing to score (entries <= topk)", 64, 128, 512, IndexFormat::FP4, {{0, 0, 300}}, 0},
    };
    // clang-format on
    for (const IndexerCase& c : cases) {
        SCOPED_TRACE(c.name);
        if (flashseek::test::quick_mode() && c.seqs[0].n > 1000) continue;  // sanitizer runs: small cases only
        const int n_slots = int(c.seqs.size());
        int max_entries = 1;
        for (const SeqRows& s : c.seqs) max_entries = std::max(max_entries, (s.start + s.n) / ratio);
        const int eb = int(index_entry_bytes(c.fmt, c.D));
        PagedPool pool(n_slots, max_entries + 4, 16, eb, rng);
        std::map<std::pair<int, int>, std::vector<float>> keys;
        BatchHost bh;
        for (const SeqRows& s : c.seqs) {
            bh.add(s.slot, s.start, s.n);
            for (int e = 0; e < (s.start + s.n) / ratio; ++e) {
                auto v = bf16_round(rng.normals(size_t(c.D)));
                encode_index_key(v, c.fmt, pool.entry(s.slot, e));
                keys[{s.slot, e}] = v;
            }
        }
        BatchDev bd(bh);
        const int T = bd.batch.n_tokens, H = c.H, D = c.D;
        // q as the indexer prepares it: FP4-simulated per head (exact in bf16)
        std::vector<float> q(size_t(T) * H * D);
        for (size_t r = 0; r < size_t(T) * H; ++r) {
            auto v = bf16_round(rng.normals(size_t(D)));
            cpu::fp4_sim_block32(v.data(), D);
            std::copy(v.begin(), v.end(), q.begin() + r * D);
        }
        auto wraw = bf16_round(rng.normals(size_t(T) * H));
        Dev<uint16_t> dq(to_bf16_bits(q)), dw(to_bf16_bits(wraw));
        Dev<uint8_t> dpool(pool.bytes);
        Dev<int32_t> dtables(pool.tables), dsel(size_t(T) * c.topk);
        const IndexerSelectParams p =
            indexer_params(bd.batch, H, D, ratio, c.topk, dq.ptr, dw.ptr,
                           pool.view(dpool.ptr, dtables.ptr, int32_t(c.fmt)), max_entries, dsel.ptr);
        auto run = [&](size_t ws_bytes) {
            Dev<uint8_t> ws(ws_bytes);
            dsel.poison();
            indexer_select_prefill(p, ws.ptr, ws_bytes, nullptr);
            EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            return dsel.download();
        };
        const auto sel = run(indexer_select_prefill_workspace_bytes(T, max_entries));
        // A workspace of 3 rows: the rows are scored and selected in many chunks, with the same result.
        const auto sel_chunked = run(size_t(3) * max_entries * sizeof(float));
        EXPECT_EQ(sel_chunked, sel) << c.name << ": row chunking changed the selection";

        std::vector<int> rows;
        if (c.cpu_rows == 0 || c.cpu_rows >= T) {
            for (int t = 0; t < T; ++t) rows.push_back(t);
        } else {
            for (int i = 0; i < c.cpu_rows; ++i) rows.push_back(int(int64_t(i) * (T - 1) / (c.cpu_rows - 1)));
        }
        for (int t : rows) {
            const int slot = bh.slot[size_t(bh.token_seq[size_t(t)])];
            const int n = (bh.token_pos[size_t(t)] + 1) / ratio;
            std::vector<float> kk, w(static_cast<size_t>(H)), scores(static_cast<size_t>(n));
            for (int e = 0; e < n; ++e) kk.insert(kk.end(), keys[{slot, e}].begin(), keys[{slot, e}].end());
            for (int h = 0; h < H; ++h) w[size_t(h)] = wraw[size_t(t) * H + h] * p.weights_scale;
            cpu::indexer_scores(q.data() + size_t(t) * H * D, H, D, w.data(), kk.data(), n, scores.data());
            expect_topk_row(
                std::vector<int32_t>(sel.begin() + size_t(t) * c.topk, sel.begin() + size_t(t + 1) * c.topk), scores,
                c.topk, std::string(c.name) + " row " + std::to_string(t));
        }

        // The SIMT indexer_select sums in another order: the same selections up to near-ties at the k-th score.
        const size_t simt_ws = indexer_select_workspace_bytes(T, max_entries);
        Dev<uint8_t> ws(simt_ws);
        dsel.poison();
        indexer_select(p, ws.ptr, simt_ws, nullptr);
        CUDA_OK(cudaDeviceSynchronize());
        const auto simt = dsel.download();
        size_t differing_rows = 0;
        for (int t = 0; t < T; ++t)
            differing_rows += !std::equal(simt.begin() + size_t(t) * c.topk, simt.begin() + size_t(t + 1) * c.topk,
                                          sel.begin() + size_t(t) * c.topk);
        EXPECT_LE(differing_rows, size_t(T) / 20 + 1) << c.name << ": rows whose selection differs from indexer_select";
    }
}

TEST(CudaPrefillIndexer, RejectsBadInput) {
    REQUIRE_GPU();
    Rng rng(test_seed());
    const int H = 8, D = 128, topk = 16, ratio = 4;
    BatchHost bh;
    bh.add(0, 200, 5);
    BatchDev bd(bh);
    const int max_entries = 205 / ratio;
    PagedPool pool(1, max_entries + 1, 16, int(index_entry_bytes(IndexFormat::FP4, D)), rng);
    Dev<uint8_t> dpool(pool.bytes);
    Dev<int32_t> dtables(pool.tables), dsel(size_t(bd.batch.n_tokens) * topk);
    Dev<uint16_t> dq(to_bf16_bits(rng.normals(size_t(bd.batch.n_tokens) * H * D))),
        dw(to_bf16_bits(rng.normals(size_t(bd.batch.n_tokens) * H)));
    const IndexerSelectParams good =
        indexer_params(bd.batch, H, D, ratio, topk, dq.ptr, dw.ptr,
                       pool.view(dpool.ptr, dtables.ptr, int32_t(IndexFormat::FP4)), max_entries, dsel.ptr);
    const size_t ws_bytes = indexer_select_prefill_workspace_bytes(bd.batch.n_tokens, max_entries);
    Dev<uint8_t> ws(ws_bytes);
    EXPECT_TRUE(indexer_select_prefill_supports(good));
    EXPECT_THROW(indexer_select_prefill(good, ws.ptr, sizeof(float) * max_entries - 1, nullptr), Error);
    IndexerSelectParams p = good;
    p.head_dim = 96;  // not a scored head_dim (and the key entries no longer match it)
    EXPECT_FALSE(indexer_select_prefill_supports(p));
    EXPECT_THROW(indexer_select_prefill(p, ws.ptr, ws_bytes, nullptr), Error);
    p.topk = max_entries;  // nothing to score: every visible entry is selected, the scorer's limits do not apply
    EXPECT_TRUE(indexer_select_prefill_supports(p));
    p = good;
    p.topk = 0;
    EXPECT_FALSE(indexer_select_prefill_supports(p));
    EXPECT_THROW(indexer_select_prefill(p, ws.ptr, ws_bytes, nullptr), Error);
}

}  // namespace
}  // namespace flashseek::cuda::test
