// Tests of the CUDA backend's parts: weight upload is byte-exact, on-device dummy weights are valid values of
// their formats (and reproducible per seed) for a tiny config and for full-size V4-Flash layers, the forward runs
// on dummy weights of the full config, the state pool's block accounting, the glue kernels against host
// references on poisoned outputs, and the copy-bandwidth probe.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/glue.cuh"
#include "cuda/backend/state_pool.h"
#include "cuda/comm/reduce.cuh"
#include "cuda/common/copy_bandwidth.h"
#include "backend/diagnostics.h"
#include "backend/registry.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "test_support.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek {
namespace {

class CudaParts : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    }
};

std::vector<uint8_t> to_host(const TensorView& v) {
    std::vector<uint8_t> h(v.nbytes);
    if (v.nbytes) {
        EXPECT_EQ(cudaMemcpy(h.data(), v.data, v.nbytes, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
}

TEST_F(CudaParts, UploadIsByteExact) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    const std::string dir = test::tiny_checkpoint("tiny-a", seed % 997 + 1);
    auto ckpt = Checkpoint::open(dir);
    const ModelConfig cfg = load_model_config(dir + "/config.json");
    size_t reported = 0;
    auto store = cuda::upload_checkpoint(*ckpt, cfg.num_hidden_layers, [&](size_t done, size_t total) {
        EXPECT_LE(done, total);
        reported = done;
        return true;
    });
    size_t expected = 0;
    for (const auto& [name, v] : ckpt->all()) {
        if (!cuda::tensor_needed(name, cfg.num_hidden_layers)) {
            EXPECT_EQ(store.find(name), nullptr) << name;
            continue;
        }
        expected += v->nbytes;
        const TensorView* d = store.find(name);
        ASSERT_NE(d, nullptr) << name;
        EXPECT_EQ(d->shape, v->shape) << name;
        const auto h = to_host(*d);
        ASSERT_EQ(std::memcmp(h.data(), v->data, v->nbytes), 0) << name;
    }
    EXPECT_EQ(reported, expected);
    // Binding finds every tensor the forward needs.
    const ModelWeights w = cuda::bind_device_weights(cfg, store, cfg.num_hidden_layers);
    EXPECT_EQ(w.layers.size(), size_t(cfg.num_hidden_layers));
    // A cancelled load stops with an error.
    EXPECT_THROW(cuda::upload_checkpoint(*ckpt, cfg.num_hidden_layers, [](size_t, size_t) { return false; }), Error);
}

void check_dummy_formats(const cuda::DeviceTensorStore& store, const ModelConfig& cfg) {
    for (const auto& [name, v] : store.views) {
        const auto h = to_host(v);
        switch (v.dtype) {
            case DType::F8_E4M3:
                for (uint8_t b : h) ASSERT_NE(b & 0x7f, 0x7f) << name << " holds an e4m3 NaN";
                break;
            case DType::F8_E8M0:
                for (uint8_t b : h) {
                    ASSERT_NE(b, 255) << name << " holds an E8M0 NaN";
                    ASSERT_GT(b, 100) << name;
                    ASSERT_LT(b, 140) << name;
                }
                break;
            case DType::BF16:
                for (size_t i = 0; i < h.size(); i += 2) {
                    uint16_t u;
                    std::memcpy(&u, &h[i], 2);
                    ASSERT_TRUE(std::isfinite(bf16_to_f32(u))) << name;
                    ASSERT_LT(std::fabs(bf16_to_f32(u)), 8.f) << name;
                }
                break;
            case DType::F32:
                for (size_t i = 0; i < h.size(); i += 4) {
                    float f;
                    std::memcpy(&f, &h[i], 4);
                    ASSERT_TRUE(std::isfinite(f)) << name;
                }
                break;
            case DType::I64: {
                const int64_t k = v.shape.back();
                for (size_t r = 0; r < h.size() / 8 / size_t(k); ++r) {
                    std::vector<int64_t> ids(static_cast<size_t>(k));
                    std::memcpy(ids.data(), &h[r * size_t(k) * 8], size_t(k) * 8);
                    for (int64_t j = 0; j < k; ++j) {
                        ASSERT_GE(ids[size_t(j)], 0) << name;
                        ASSERT_LT(ids[size_t(j)], cfg.n_routed_experts) << name;
                        for (int64_t i = 0; i < j; ++i) ASSERT_NE(ids[size_t(i)], ids[size_t(j)]) << name << " row " << r;
                    }
                }
                break;
            }
            default:
                break;
        }
    }
}

TEST_F(CudaParts, DummyWeightsTinyAreValidAndReproducible) {
    const ModelConfig cfg = load_model_config(test::source_dir() + "/tests/data/configs/tiny-b.json");
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    auto a = cuda::generate_dummy_weights(cfg, cfg.num_hidden_layers, seed);
    auto b = cuda::generate_dummy_weights(cfg, cfg.num_hidden_layers, seed);
    auto c = cuda::generate_dummy_weights(cfg, cfg.num_hidden_layers, seed + 1);
    check_dummy_formats(a, cfg);
    ASSERT_EQ(a.views.size(), b.views.size());
    const auto& name = a.views.begin()->first;
    for (const auto& [n, v] : a.views) EXPECT_EQ(to_host(v), to_host(b.get(n))) << n;
    EXPECT_NE(to_host(a.get("head.weight")), to_host(c.get("head.weight"))) << name;
    cuda::bind_device_weights(cfg, a, cfg.num_hidden_layers);
}

// The full V4-Flash config with dummy weights: two layers generated on the device, valid formats, and a forward
// of two sequences gives finite logits.
TEST_F(CudaParts, DummyWeightsFullConfigForward) {
    const std::string path = test::source_dir() + "/tests/data/configs/v4-flash.json";
    const ModelConfig cfg = load_model_config(path);
    {
        auto store = cuda::generate_dummy_weights(cfg, 1, 3);
        EXPECT_GT(store.total_bytes, size_t(3) << 30);  // 256 FP4 experts alone are 3.4 GB
        EXPECT_NE(store.find("layers.0.ffn.experts.255.w2.weight"), nullptr);
        EXPECT_EQ(store.find("layers.1.attn.wq_a.weight"), nullptr);
    }
    BackendOptions o;
    o.backend = "cuda";
    o.numerics = Numerics::Release;
    o.dummy_weights = true;
    o.layers = 3;  // window-only, window-only, ratio 4 (compressor + indexer)
    o.max_sequences = 2;
    o.max_context = 1024;
    o.state_memory_bytes = int64_t(1) << 30;
    auto be = create_backend(path, o);
    EXPECT_EQ(be->config().num_hidden_layers, 3);
    std::mt19937_64 rng(test::fresh_seed());
    std::vector<int32_t> a(300), b(17);
    for (auto& t : a) t = int32_t(rng() % 129000);
    for (auto& t : b) t = int32_t(rng() % 129000);
    const int s0 = be->create_sequence(), s1 = be->create_sequence();
    std::vector<SequenceStep> steps = {{s0, a.data(), 300, false}, {s1, b.data(), 17, false}};
    std::vector<float> l;
    be->forward(steps, l);
    ASSERT_EQ(l.size(), size_t(2 * cfg.vocab_size));
    for (float v : l) ASSERT_TRUE(std::isfinite(v));
    auto& ext = *be->diagnostics();
    std::vector<int32_t> next;
    steps = {{s0, a.data(), 1, false}, {s1, b.data(), 1, false}};
    const StepProfile p = ext.profile_step(steps);
    EXPECT_GT(p.gpu_us, 0);
    EXPECT_FALSE(p.ops.empty());
    EXPECT_GT(p.bytes_weights, 1e8);
    EXPECT_GE(p.distinct_experts, 3 * cfg.num_experts_per_tok);  // >= k distinct per layer
    EXPECT_EQ(be->sequence_length(s0), 301);
}

TEST_F(CudaParts, StatePoolAccounting) {
    cuda::StateGeometry g;
    g.block_tokens = 256;
    g.ring_entries = 144;
    g.kv_entry_bytes = 584;
    g.layers = {{0, 0, 0, 0, 0}, {4, 584, 68, 1024, 512}, {128, 584, 0, 2048, 0}};
    cuda::StatePool pool(g, 3, 2000, int64_t(8) << 20);
    const StateMemoryStats s0 = pool.stats();
    EXPECT_EQ(s0.used_blocks, 0);
    EXPECT_GT(s0.total_blocks, 10);
    EXPECT_EQ(pool.entries_per_block(1), 64);
    EXPECT_EQ(pool.entries_per_block(2), 2);
    EXPECT_GE(pool.comp_offset(2), pool.index_offset(1) + 64 * 68);
    const int a = pool.create(), b = pool.create(), c = pool.create();
    EXPECT_THROW(pool.create(), Error);
    pool.reserve_all({{a, 300}, {b, 1}});
    EXPECT_EQ(pool.stats().used_blocks, 3);
    EXPECT_THROW(pool.reserve_all({{c, 2001}}), OutOfStateMemory);  // beyond max_context
    EXPECT_THROW(pool.reserve_all({{c, s0.total_blocks * 256}}), OutOfStateMemory);
    EXPECT_EQ(pool.stats().used_blocks, 3);  // unchanged
    pool.release(a);
    EXPECT_EQ(pool.stats().used_blocks, 1);
    EXPECT_THROW(pool.release(a), Error);
    EXPECT_EQ(pool.stats().live_sequences, 2);
}

TEST_F(CudaParts, GlueKernelsMatchHost) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd;
    // argmax_rows: vocabularies of one CTA, of slices that end mid-row, of V4's 129,280; ties inside a slice and
    // across slices, NaN and -inf (never win), +0 against -0 (equal: the lower index), a row of NaN / -inf only
    // (0), the maximum in the last entry. Two calls per case: the scratch must come back zeroed.
    {
        const int rows = 7;
        void* scratch = nullptr;
        const size_t scratch_bytes = cuda::argmax_rows_scratch_bytes(rows);
        ASSERT_EQ(cudaMalloc(&scratch, scratch_bytes), cudaSuccess);
        ASSERT_EQ(cudaMemset(scratch, 0, scratch_bytes), cudaSuccess);
        for (int64_t vocab : {int64_t(1), int64_t(1000), int64_t(2049), int64_t(4097), int64_t(129280), int64_t(6151)}) {
            std::vector<float> h(static_cast<size_t>(rows * vocab));
            for (auto& x : h) x = nd(rng);
            auto at = [&](int r, int64_t j) -> float& { return h[size_t(r * vocab + j)]; };
            if (vocab > 10) {
                at(0, 7) = 50.f;  // a tie inside one slice: the lower index wins
                at(0, 9) = 50.f;
                at(1, 3) = NAN;   // NaN never wins
                at(1, vocab - 1) = 60.f;  // the maximum in the last entry
                at(2, 5) = 40.f;  // a tie across slices
                at(2, vocab - 2) = 40.f;
                for (int64_t j = 0; j < vocab; ++j) at(3, j) = j % 3 ? -INFINITY : NAN;  // nothing can win: 0
                for (int64_t j = 0; j < vocab; ++j) at(4, j) = -std::fabs(at(4, j)) - 1.f;
                at(4, vocab / 2) = -0.f;  // -0 then +0: equal, the lower index wins
                at(4, vocab / 2 + 1) = 0.f;
                for (int64_t j = 0; j < vocab; ++j) at(5, j) = -INFINITY;  // -inf never wins, -FLT_MAX may
                at(5, vocab - 3) = -FLT_MAX;
            }
            std::vector<int32_t> want(rows);
            for (int r = 0; r < rows; ++r) {
                int64_t best = -1;
                for (int64_t j = 0; j < vocab; ++j) {
                    const float v = at(r, j);
                    if (v >= -FLT_MAX && (best < 0 || v > at(r, best))) best = j;
                }
                want[size_t(r)] = int32_t(best < 0 ? 0 : best);
            }
            float* d = nullptr;
            int32_t* out = nullptr;
            ASSERT_EQ(cudaMalloc(&d, h.size() * 4), cudaSuccess);
            ASSERT_EQ(cudaMalloc(&out, rows * 4), cudaSuccess);
            ASSERT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
            for (int call = 0; call < 2; ++call) {
                ASSERT_EQ(cudaMemset(out, 0xAB, rows * 4), cudaSuccess);  // poison
                cuda::argmax_rows(d, rows, vocab, out, scratch, scratch_bytes, nullptr);
                std::vector<int32_t> got(rows);
                ASSERT_EQ(cudaMemcpy(got.data(), out, rows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
                for (int r = 0; r < rows; ++r)
                    EXPECT_EQ(got[size_t(r)], want[size_t(r)]) << "vocab " << vocab << " row " << r << " call " << call;
                std::vector<uint8_t> left(scratch_bytes);
                ASSERT_EQ(cudaMemcpy(left.data(), scratch, scratch_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
                EXPECT_EQ(std::count(left.begin(), left.end(), uint8_t(0)), ptrdiff_t(scratch_bytes))
                    << "vocab " << vocab << ": argmax_rows left its scratch non-zero";
            }
            cudaFree(d);
            cudaFree(out);
        }
        EXPECT_THROW(cuda::argmax_rows(nullptr, rows, 1000, nullptr, scratch, scratch_bytes - 1, nullptr), Error);
        cudaFree(scratch);
    }
    // embed_streams and gather_rows.
    const int64_t V = 37, D = 72;
    const int N = 3, T = 6;
    std::vector<uint16_t> emb(static_cast<size_t>(V * D));
    for (auto& e : emb) e = f32_to_bf16(nd(rng));
    std::vector<int32_t> toks(T);
    for (auto& t : toks) t = int32_t(rng() % V);
    uint16_t *d_emb, *d_x, *d_g;
    int32_t* d_t;
    ASSERT_EQ(cudaMalloc(&d_emb, emb.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_x, size_t(T * N * D) * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_g, size_t(T * N * D) * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_t, T * 4), cudaSuccess);
    cudaMemcpy(d_emb, emb.data(), emb.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(d_t, toks.data(), T * 4, cudaMemcpyHostToDevice);
    cudaMemset(d_x, 0xFF, size_t(T * N * D) * 2);
    cuda::embed_streams(reinterpret_cast<const __nv_bfloat16*>(d_emb), V, d_t, T, N, D,
                        reinterpret_cast<__nv_bfloat16*>(d_x), nullptr);
    std::vector<uint16_t> x(static_cast<size_t>(T * N * D));
    cudaMemcpy(x.data(), d_x, x.size() * 2, cudaMemcpyDeviceToHost);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < N; ++j)
            for (int64_t k = 0; k < D; ++k)
                ASSERT_EQ(x[size_t((t * N + j) * D + k)], emb[size_t(toks[size_t(t)] * D + k)]);
    const std::vector<int32_t> rows = {5, 0, 5, 2};
    cudaMemcpy(d_t, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice);
    cudaMemset(d_g, 0xFF, size_t(T * N * D) * 2);
    cuda::gather_rows(reinterpret_cast<const __nv_bfloat16*>(d_x), d_t, int(rows.size()), N * D,
                      reinterpret_cast<__nv_bfloat16*>(d_g), nullptr);
    std::vector<uint16_t> g(rows.size() * size_t(N * D));
    cudaMemcpy(g.data(), d_g, g.size() * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t k = 0; k < N * D; ++k) ASSERT_EQ(g[i * size_t(N * D) + size_t(k)], x[size_t(rows[i] * N * D + k)]);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d_emb);
    cudaFree(d_x);
    cudaFree(d_g);
    cudaFree(d_t);
}

TEST_F(CudaParts, CopyBandwidthIsPlausible) {
    const double bw = cuda::measure_copy_bandwidth(size_t(256) << 20, 5);
    EXPECT_GT(bw, 1e11);   // > 100 GB/s on any supported GPU
    EXPECT_LT(bw, 2e13);   // < 20 TB/s
}

// The shards' all-reduce on one device: the sum of the partials in rank order ((p0 + p1) + p2) + ..., rounded to bf16,
// in every output, bit for bit against the host's same-order sum.
TEST_F(CudaParts, ReducePartialsIsExactInRankOrder) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.f, 1.f);
    for (int ranks : {1, 2, 3, 4, 8}) {
        const int64_t n = 4096 + 37;
        std::vector<std::vector<float>> host(static_cast<size_t>(ranks), std::vector<float>(static_cast<size_t>(n)));
        std::vector<cuda::DeviceBuffer> parts, outs;
        const float* pp[cuda::kMaxReduceRanks];
        uint16_t* op[cuda::kMaxReduceRanks];
        for (int r = 0; r < ranks; ++r) {
            for (auto& v : host[size_t(r)]) v = d(rng) * std::exp2(float(int(rng() % 9) - 4));
            parts.emplace_back(size_t(n) * 4, "partial");
            outs.emplace_back(size_t(n) * 2, "out");
            ASSERT_EQ(cudaMemcpy(parts.back().get(), host[size_t(r)].data(), size_t(n) * 4, cudaMemcpyHostToDevice),
                      cudaSuccess);
            ASSERT_EQ(cudaMemset(outs.back().get(), 0xff, size_t(n) * 2), cudaSuccess);
            pp[r] = parts.back().as<float>();
            op[r] = outs.back().as<uint16_t>();
        }
        cuda::reduce_partials_to_bf16(pp, op, ranks, n, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint16_t> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            float sum = host[0][size_t(i)];
            for (int r = 1; r < ranks; ++r) sum += host[size_t(r)][size_t(i)];
            want[size_t(i)] = f32_to_bf16(sum);
        }
        for (int r = 0; r < ranks; ++r) {
            std::vector<uint16_t> got(static_cast<size_t>(n));
            ASSERT_EQ(cudaMemcpy(got.data(), outs[size_t(r)].get(), size_t(n) * 2, cudaMemcpyDeviceToHost), cudaSuccess);
            EXPECT_EQ(got, want) << "ranks " << ranks << ", output " << r;
        }
    }
}

}  // namespace
}  // namespace flashseek
