// Implementation of test_support.h.
#include "test_support.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include <unistd.h>

#include "backend/diagnostics.h"
#include "backend/registry.h"
#include "backends/builtin.h"
#include "model/checkpoint_gen.h"
#include "model/config.h"

namespace flashseek::test {

namespace {
// Every test of this executable creates backends by name.
const bool g_backends_registered = (register_builtin_backends(), true);
}  // namespace

uint64_t fresh_seed() {
    if (const char* s = std::getenv("FLASHSEEK_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007ull;
}

std::string source_dir() {
    const char* env = std::getenv("FLASHSEEK_SOURCE_DIR");
    return env && *env ? std::string(env) : std::string(FLASHSEEK_SOURCE_DIR);
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int64_t vocab) {
    std::uniform_int_distribution<int32_t> d(2, int32_t(vocab - 1));
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = d(rng);
    return t;
}

std::unique_ptr<Backend> make_layout(const std::string& dir, Numerics num, int tp, int ep) {
    BackendOptions o;
    o.backend = "cuda";
    o.numerics = num;
    o.max_sequences = 2;
    o.max_context = 4096;
    o.tp = tp;
    o.ep = ep;
    return create_backend(dir, o);
}

bool profiled_step_has_op(Backend& be, std::span<const SequenceStep> steps, std::string_view op) {
    const StepProfile p = be.diagnostics()->profile_step(steps);
    return std::any_of(p.ops.begin(), p.ops.end(), [&](const OpTime& o) { return o.op == op; });
}

bool have_gpu() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

std::string tiny_checkpoint(const std::string& config, uint64_t seed) {
    static std::mutex mu;
    static std::map<std::pair<std::string, uint64_t>, std::string> made;
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_pair(config, seed);
    if (auto it = made.find(key); it != made.end()) return it->second;
    const auto dir = std::filesystem::temp_directory_path() /
                     ("flashseek_cuda_backend_test_" + std::to_string(::getpid()) + "_" + config + "_" +
                      std::to_string(seed));
    const ModelConfig cfg = load_model_config(source_dir() + "/tests/data/configs/" + config + ".json");
    GenOptions opt;
    opt.seed = seed;
    generate_checkpoint(cfg, dir.string(), opt);
    made[key] = dir.string();
    return dir.string();
}

Agreement compare_rows(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab) {
    Agreement a;
    const int64_t rows = int64_t(ref.size()) / vocab;
    if (rows == 0 || ours.size() != ref.size()) {
        a.max_rel = INFINITY;
        return a;
    }
    int agree = 0;
    std::vector<double> rels;
    rels.reserve(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
        double num = 0, den = 0;
        int64_t ao = 0, ar = 0;
        for (int64_t j = 0; j < vocab; ++j) {
            const double o = ours[size_t(r * vocab + j)], f = ref[size_t(r * vocab + j)];
            num += (o - f) * (o - f);
            den += f * f;
            if (o > ours[size_t(r * vocab + ao)]) ao = j;
            if (f > ref[size_t(r * vocab + ar)]) ar = j;
        }
        const double rel = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
        a.max_rel = std::max(a.max_rel, rel);
        a.mean_rel += rel / double(rows);
        rels.push_back(rel);
        agree += ao == ar;
    }
    a.argmax = double(agree) / double(rows);
    a.rows = rows;
    std::sort(rels.begin(), rels.end());
    a.median_rel = rels[rels.size() / 2];
    a.p90_rel = rels[std::min(rels.size() - 1, size_t(double(rels.size()) * 0.9))];
    return a;
}

double envelope_limit(double envelope_error) {
    constexpr double kFactor = 1.5, kFloor = 2e-2;
    return std::max(kFactor * envelope_error, kFloor);
}

std::string envelope_violation(const Agreement& ours, const Agreement& env) {
    constexpr double kArgmaxSlack = 0.02, kSigmas = 3.0;
    const double p = std::clamp(env.argmax, 0.0, 1.0);
    const double sampling = ours.rows > 0 ? kSigmas * std::sqrt(p * (1.0 - p) / double(ours.rows)) : 0.0;
    const double argmax_slack = std::max(kArgmaxSlack, sampling);
    std::ostringstream why;
    const double med_lim = envelope_limit(env.median_rel), p90_lim = envelope_limit(env.p90_rel);
    if (!(ours.median_rel <= med_lim)) why << "median rel " << ours.median_rel << " > " << med_lim << "; ";
    if (!(ours.p90_rel <= p90_lim)) why << "p90 rel " << ours.p90_rel << " > " << p90_lim << "; ";
    if (!(ours.argmax >= env.argmax - argmax_slack))
        why << "argmax " << ours.argmax << " < " << env.argmax - argmax_slack << "; ";
    if (!why.str().empty())
        why << "(envelope: median " << env.median_rel << ", p90 " << env.p90_rel << ", max " << env.max_rel
            << ", argmax " << env.argmax << ")";
    return why.str();
}

}  // namespace flashseek::test
