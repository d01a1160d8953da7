// Random checkpoint generation (see checkpoint_gen.h). Every tensor is cut into stripes of rows; each stripe draws
// from its own RNG stream seeded by (seed, tensor name, stripe), so threads can fill stripes in any order and the
// result is still bit-identical. Quantized weights are drawn in float, then quantized the way real checkpoints
// are: per block, scale = 2^ceil(log2(amax / qmax)) (E8M0) or amax / qmax (F32 scales).
#include "model/checkpoint_gen.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "loader/safetensors.h"
#include "model/weights.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/numeric.h"
#include "util/random.h"

namespace flashseek {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kStripeRows = 128;  // = the FP8 block height, so a stripe holds whole scale blocks

bool ends_with(const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Block scale for values whose largest magnitude is amax, for a format whose largest finite value is qmax.
// E8M0: the smallest power of two 2^e with amax / 2^e <= qmax, i.e. e = ceil(log2(amax / qmax)).
struct BlockScale {
    float scale;   // multiply the quantized value by this to dequantize
    uint8_t e8m0;  // byte, when stored as E8M0
};
BlockScale choose_scale(float amax, float qmax, bool f32_scales) {
    amax = std::max(amax, 1e-30f);
    if (f32_scales) return {amax / qmax, 0};
    int e = 0;
    const float m = std::frexp(amax / qmax, &e);  // amax/qmax = m 2^e, m in [0.5, 1)
    if (m == 0.5f) e -= 1;                        // exact power of two: ceil(log2) = e - 1
    e = std::clamp(e, -127, 127);
    return {std::ldexp(1.f, e), uint8_t(e + 127)};
}

// A tensor being generated, with the scale tensor that belongs to it (quantized linears only).
struct Job {
    const TensorSpec* spec = nullptr;
    const TensorSpec* scale_spec = nullptr;
    TensorData* data = nullptr;
    TensorData* scale = nullptr;
    uint64_t name_hash = 0;
    int64_t rows = 1, cols = 1;  // logical 2-D view: rows x cols (packed FP4: cols = logical inputs)
};

enum class Kind { Norm, Embed, Matrix, HcBase, HcScale, Ape, Sink, RouterBias, Tid2eid, Fp8, Fp4 };

Kind kind_of(const TensorSpec& t) {
    const std::string& n = t.name;
    if (t.dtype == DType::F8_E4M3) return Kind::Fp8;
    if (t.dtype == DType::I8) return Kind::Fp4;
    if (t.dtype == DType::I64) return Kind::Tid2eid;
    if (n == "embed.weight") return Kind::Embed;
    if (ends_with(n, "norm.weight")) return Kind::Norm;
    if (ends_with(n, "_base")) return Kind::HcBase;
    if (ends_with(n, "_scale")) return Kind::HcScale;
    if (ends_with(n, ".ape")) return Kind::Ape;
    if (ends_with(n, "attn_sink")) return Kind::Sink;
    if (ends_with(n, "gate.bias")) return Kind::RouterBias;
    return Kind::Matrix;  // [out, in] weights (bf16 linears, gate, compressor, weights_proj) and hc fn
}

void store(const TensorSpec& t, std::vector<uint8_t>& bytes, int64_t i, double v) {
    if (t.dtype == DType::BF16) {
        const uint16_t h = f32_to_bf16(float(v));
        std::memcpy(&bytes[size_t(i) * 2], &h, 2);
    } else {  // F32
        const float f = float(v);
        std::memcpy(&bytes[size_t(i) * 4], &f, 4);
    }
}

// Fills rows [r0, r1) of a job from the stripe's own RNG.
void fill_stripe(const Job& job, int64_t stripe, uint64_t seed, int n_experts, bool f32_scales) {
    Rng rng(mix_seed(seed, job.name_hash, uint64_t(stripe)));
    const TensorSpec& t = *job.spec;
    const int64_t r0 = stripe * kStripeRows, r1 = std::min(job.rows, r0 + kStripeRows);
    const int64_t cols = job.cols;
    std::vector<uint8_t>& out = job.data->bytes;
    const double inv_sqrt_in = 1.0 / std::sqrt(double(cols));
    switch (kind_of(t)) {
        case Kind::Norm:
            for (int64_t i = r0 * cols; i < r1 * cols; ++i) store(t, out, i, 1.0 + 0.1 * rng.normal());
            break;
        case Kind::Embed:
            for (int64_t i = r0 * cols; i < r1 * cols; ++i) store(t, out, i, rng.normal());
            break;
        case Kind::Matrix:
            for (int64_t i = r0 * cols; i < r1 * cols; ++i) store(t, out, i, rng.normal() * inv_sqrt_in);
            break;
        case Kind::HcBase:
        case Kind::Ape:
            for (int64_t i = r0 * cols; i < r1 * cols; ++i) store(t, out, i, 0.5 * rng.normal());
            break;
        case Kind::HcScale:  // positive, away from 0, so every mHC term matters
            for (int64_t i = r0 * cols; i < r1 * cols; ++i) store(t, out, i, 0.25 + 0.75 * rng.uniform());
            break;
        case Kind::Sink:
            for (int64_t i = r0 * cols; i < r1 * cols; ++i) store(t, out, i, rng.normal());
            break;
        case Kind::RouterBias:
            for (int64_t i = r0 * cols; i < r1 * cols; ++i) store(t, out, i, 0.1 * rng.normal());
            break;
        case Kind::Tid2eid: {
            // Partial Fisher-Yates: k distinct expert ids per row.
            std::vector<int64_t> ids(static_cast<size_t>(n_experts));
            for (int64_t r = r0; r < r1; ++r) {
                for (int e = 0; e < n_experts; ++e) ids[size_t(e)] = e;
                for (int64_t j = 0; j < cols; ++j) {
                    const uint64_t pick = uint64_t(j) + rng.below(uint64_t(n_experts - j));
                    std::swap(ids[size_t(j)], ids[size_t(pick)]);
                    std::memcpy(&out[size_t(r * cols + j) * 8], &ids[size_t(j)], 8);
                }
            }
            break;
        }
        case Kind::Fp8: {
            // Each 128x128 block gets its own spread 2^U(-1/2, 1/2) around 1/sqrt(in), so block scales differ.
            const int64_t nbj = (cols + 127) / 128;
            const int64_t bi = r0 / 128;
            std::vector<double> sigma(static_cast<size_t>(nbj));
            for (auto& s : sigma) s = inv_sqrt_in * exp2_exact(rng.uniform() - 0.5);
            std::vector<float> w(size_t((r1 - r0) * cols));
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    w[size_t((r - r0) * cols + c)] = float(rng.normal() * sigma[size_t(c / 128)]);
            for (int64_t bj = 0; bj < nbj; ++bj) {
                const int64_t c0 = bj * 128, c1 = std::min(cols, c0 + 128);
                float amax = 0.f;
                for (int64_t r = r0; r < r1; ++r)
                    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[size_t((r - r0) * cols + c)]));
                const BlockScale s = choose_scale(amax, 448.f, f32_scales);
                for (int64_t r = r0; r < r1; ++r)
                    for (int64_t c = c0; c < c1; ++c)
                        out[size_t(r * cols + c)] = f32_to_e4m3(w[size_t((r - r0) * cols + c)] / s.scale);
                const int64_t si = bi * nbj + bj;
                if (f32_scales) std::memcpy(&job.scale->bytes[size_t(si) * 4], &s.scale, 4);
                else job.scale->bytes[size_t(si)] = s.e8m0;
            }
            break;
        }
        case Kind::Fp4: {
            // One scale per 32 inputs (MX style); two e2m1 codes per byte, low nibble first.
            const int64_t groups = cols / 32;
            float w[32];
            for (int64_t r = r0; r < r1; ++r) {
                for (int64_t g = 0; g < groups; ++g) {
                    const double sigma = inv_sqrt_in * exp2_exact(rng.uniform() - 0.5);
                    float amax = 0.f;
                    for (int k = 0; k < 32; ++k) {
                        w[k] = float(rng.normal() * sigma);
                        amax = std::max(amax, std::fabs(w[k]));
                    }
                    const BlockScale s = choose_scale(amax, 6.f, f32_scales);
                    for (int k = 0; k < 32; k += 2) {
                        const uint8_t lo = f32_to_e2m1(w[k] / s.scale), hi = f32_to_e2m1(w[k + 1] / s.scale);
                        out[size_t(r * (cols / 2) + g * 16 + k / 2)] = uint8_t(lo | (hi << 4));
                    }
                    const int64_t si = r * groups + g;
                    if (f32_scales) std::memcpy(&job.scale->bytes[size_t(si) * 4], &s.scale, 4);
                    else job.scale->bytes[size_t(si)] = s.e8m0;
                }
            }
            break;
        }
    }
}

// One job per tensor, except that a quantized weight and its scale form one job (they are computed together); the
// inventory guarantees that `X.scale` immediately follows `X.weight` for quantized linears.
std::vector<Job> make_jobs(const std::vector<TensorSpec>& specs, std::vector<TensorData>& storage) {
    std::vector<Job> jobs;
    storage.resize(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
        const TensorSpec& t = specs[i];
        TensorData& d = storage[i];
        d.name = t.name;
        d.dtype = t.dtype;
        d.shape = t.shape;
        int64_t numel = 1;
        for (auto s : t.shape) numel *= s;
        d.bytes.assign(size_t(numel) * dtype_size(t.dtype), 0);
        if (ends_with(t.name, ".scale") && i > 0 &&
            (specs[i - 1].dtype == DType::F8_E4M3 || specs[i - 1].dtype == DType::I8)) {
            jobs.back().scale_spec = &t;
            jobs.back().scale = &d;
            continue;
        }
        Job j;
        j.spec = &t;
        j.data = &d;
        j.name_hash = fnv1a_str(t.name);
        if (t.shape.size() >= 1) j.rows = t.shape[0];
        j.cols = 1;
        for (size_t k = 1; k < t.shape.size(); ++k) j.cols *= t.shape[k];
        if (t.dtype == DType::I8) j.cols *= 2;  // logical inputs of packed FP4
        jobs.push_back(j);
    }
    for (const Job& j : jobs)
        FS_CHECK(!(j.spec->dtype == DType::F8_E4M3 || j.spec->dtype == DType::I8) || j.scale,
                 "gen-checkpoint: quantized tensor '{}' has no scale tensor", j.spec->name);
    return jobs;
}

void run_parallel(const std::vector<std::pair<const Job*, int64_t>>& work, uint64_t seed, int n_experts,
                  bool f32_scales, int threads) {
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto worker = [&] {
        for (;;) {
            const size_t i = next.fetch_add(1);
            if (i >= work.size()) return;
            try {
                fill_stripe(*work[i].first, work[i].second, seed, n_experts, f32_scales);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
            }
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) {
        try {
            pool.emplace_back(worker);
        } catch (const std::system_error&) {
            break;  // no more threads available (a loaded machine): the remaining ones share the work
        }
    }
    worker();
    for (auto& t : pool) t.join();
    if (error) std::rethrow_exception(error);
}

std::string shard_name(int i, int k) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, k); }

}  // namespace

GenSummary generate_checkpoint(const ModelConfig& cfg_in, const std::string& out_dir, const GenOptions& opt) {
    ModelConfig cfg = cfg_in;
    if (opt.expert_dtype) {
        cfg.expert_dtype = *opt.expert_dtype;
        cfg.expert_dtype_explicit = true;
    }
    validate_model_config(cfg, "gen-checkpoint config");
    FS_CHECK(opt.shards >= 1 && opt.shards <= 99999, "gen-checkpoint: --shards must be in [1, 99999], got {}",
             opt.shards);
    InventoryOptions inv;
    inv.include_mtp = true;
    inv.f32_block_scales = opt.f32_scales;
    const std::vector<TensorSpec> specs = expected_tensors(cfg, inv);

    std::error_code ec;
    fs::create_directories(out_dir, ec);
    FS_CHECK(!ec, "{}: cannot create directory: {}", out_dir, ec.message());
    // Remove model files from an earlier run so the directory never mixes two layouts.
    for (const auto& e : fs::directory_iterator(out_dir, ec)) {
        const std::string n = e.path().filename().string();
        if (ends_with(n, ".safetensors") || n == "model.safetensors.index.json") fs::remove(e.path(), ec);
    }
    {
        std::ofstream cf((fs::path(out_dir) / "config.json").string(), std::ios::binary | std::ios::trunc);
        cf << model_config_to_json(cfg);
        FS_CHECK(cf.good(), "{}/config.json: write failed", out_dir);
    }

    // Shards: contiguous runs of the inventory order with roughly equal bytes (like the official release).
    size_t total = 0;
    for (const auto& t : specs) {
        int64_t n = 1;
        for (auto s : t.shape) n *= s;
        total += size_t(n) * dtype_size(t.dtype);
    }
    // Units: a tensor, or a quantized weight together with its scale (they share a shard).
    std::vector<size_t> unit_of(specs.size());
    size_t n_units = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const bool is_scale = i > 0 && ends_with(specs[i].name, ".scale") &&
                              (specs[i - 1].dtype == DType::F8_E4M3 || specs[i - 1].dtype == DType::I8);
        unit_of[i] = is_scale ? unit_of[i - 1] : n_units++;
    }
    const int k = int(std::min<size_t>(size_t(opt.shards), n_units));
    // Each shard gets about total/k bytes; shard numbers never skip, and every shard gets at least one unit.
    std::vector<size_t> shard_of(specs.size());
    {
        size_t acc = 0, prev = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
            int64_t n = 1;
            for (auto d : specs[i].shape) n *= d;
            if (i > 0 && unit_of[i] == unit_of[i - 1]) {
                shard_of[i] = shard_of[i - 1];
            } else {
                const size_t u = unit_of[i];
                size_t target = total ? size_t((unsigned __int128)acc * size_t(k) / total) : 0;
                target = std::clamp(target, prev, prev + 1);
                const size_t must = size_t(k - 1) > (n_units - 1 - u) ? size_t(k - 1) - (n_units - 1 - u) : 0;
                shard_of[i] = std::min(std::max(target, must), size_t(k - 1));
                prev = shard_of[i];
            }
            acc += size_t(n) * dtype_size(specs[i].dtype);
        }
    }
    const int threads = opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    std::map<std::string, std::string> sorted_map;
    for (int s = 0; s < k; ++s) {
        std::vector<TensorSpec> shard_specs;
        for (size_t i = 0; i < specs.size(); ++i)
            if (shard_of[i] == size_t(s)) shard_specs.push_back(specs[i]);
        if (shard_specs.empty()) continue;
        std::vector<TensorData> storage;
        const std::vector<Job> jobs = make_jobs(shard_specs, storage);
        std::vector<std::pair<const Job*, int64_t>> work;
        for (const Job& j : jobs)
            for (int64_t st = 0; st * kStripeRows < std::max<int64_t>(j.rows, 1); ++st) work.push_back({&j, st});
        run_parallel(work, opt.seed, cfg.n_routed_experts, opt.f32_scales, threads);
        std::vector<const TensorData*> ptrs;
        for (const auto& d : storage) ptrs.push_back(&d);
        const std::string name = k == 1 ? "model.safetensors" : shard_name(s, k);
        write_safetensors((fs::path(out_dir) / name).string(), ptrs, {{"format", "pt"}});
        for (const auto& d : storage) sorted_map[d.name] = name;
    }
    if (k > 1) {
        for (const auto& [t, f] : sorted_map) weight_map[t] = f;
        nlohmann::ordered_json index;
        index["metadata"] = {{"total_size", total}};
        index["weight_map"] = weight_map;
        std::ofstream idx((fs::path(out_dir) / "model.safetensors.index.json").string(),
                          std::ios::binary | std::ios::trunc);
        idx << index.dump(2) << "\n";
        FS_CHECK(idx.good(), "{}/model.safetensors.index.json: write failed", out_dir);
    }
    return {specs.size(), total};
}

}  // namespace flashseek
