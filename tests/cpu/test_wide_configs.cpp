// Wide configs through the CPU reference. Random valid configs (random_config.h; the seed is fresh each run and
// printed with any failure) must be accepted, get a generated checkpoint and run in exact numerics with finite
// logits; a prompt run at once, in chunks and token by token must give the same logits, so the incremental state
// is right for every shape (windows of one token, ratios of 1 or 3, rotary-only heads, ...). Release numerics
// run wherever check_release_numerics_supported allows and are refused naming index_head_dim elsewhere. A few
// configs also go through the flashseek binary (gen-checkpoint + logits), which must reproduce the in-process
// logits. Agreement with HF transformers on such configs is the golden test's (tests/data/goldens/wide-*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/forward.h"
#include "cpu/model.h"
#include "model/checkpoint_gen.h"
#include "model/config.h"
#include "forward_test_util.h"
#include "random_config.h"
#include "util/error.h"

using namespace flashseek;
using namespace flashseek::cpu;
using namespace flashseek::test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& tag)
        : path(fs::temp_directory_path() / ("flashseek-wide-" + std::to_string(::getpid()) + "-" + tag)) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::vector<int> prefill_then_decode(int64_t total, int64_t prefill) {
    std::vector<int> s = {int(prefill)};
    s.resize(size_t(total - prefill + 1), 1);
    return s;
}

bool all_finite(const std::vector<float>& v) {
    for (float x : v)
        if (!std::isfinite(x)) return false;
    return true;
}

bool has_indexer(const ModelConfig& c) {
    for (int r : c.compress_ratios)
        if (r == 4) return true;
    return false;
}

int run_shell(const std::string& cmd, std::string& output) {
    output.clear();
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
    const int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<float> read_f32(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

// One random config end to end in process.
void check_random_config(uint64_t seed, int index, ThreadPool* pool) {
    Rng rng(mix_seed(seed, uint64_t(index)));
    const auto j = test::random_config(rng);
    SCOPED_TRACE("config " + std::to_string(index) + " of seed " + std::to_string(seed) + ": " + j.dump());
    ModelConfig cfg;
    try {
        cfg = parse_model_config(j.dump(), "random-config.json");
    } catch (const Error& e) {
        FAIL() << "a valid config was refused: " << e.what();
    }
    TempDir dir("cfg" + std::to_string(index));
    GenOptions gen;
    gen.seed = rng.next_u64();
    gen.threads = 2;
    generate_checkpoint(cfg, dir.path.string(), gen);

    CpuModelOptions exact;
    exact.pool = pool;
    const auto m = load_cpu_model(dir.path.string(), exact);
    // Long enough to complete windows of every drawn ratio up to 24 several times (and one of 128).
    const int64_t T = 140;
    const auto tokens = random_tokens(T, cfg.vocab_size, rng.next_u64());
    const auto full = run_steps(*m, tokens, {int(T)}, pool);
    ASSERT_EQ(full.size(), size_t(T * cfg.vocab_size));
    ASSERT_TRUE(all_finite(full)) << "non-finite logits";
    EXPECT_LE(max_rel_diff(run_steps(*m, tokens, chunks(T, 5), pool), full), 1e-5) << "chunks of 5";
    EXPECT_LE(max_rel_diff(run_steps(*m, tokens, prefill_then_decode(T, 11), pool), full), 1e-5)
        << "prefill 11 + decode";

    CpuModelOptions release = exact;
    release.release = true;
    if (!has_indexer(cfg) || (cfg.index_head_dim & (cfg.index_head_dim - 1)) == 0) {
        const auto mr = load_cpu_model(dir.path.string(), release);
        const std::vector<int32_t> head(tokens.begin(), tokens.begin() + 40);
        const auto rel = run_steps(*mr, head, {40}, pool);
        EXPECT_TRUE(all_finite(rel)) << "release numerics: non-finite logits";
        EXPECT_LE(max_rel_diff(run_steps(*mr, head, chunks(40, 3), pool), rel), 1e-5)
            << "release numerics, chunks of 3";
    } else {
        try {
            load_cpu_model(dir.path.string(), release);
            ADD_FAILURE() << "release numerics accepted index_head_dim " << cfg.index_head_dim;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("index_head_dim"), std::string::npos) << e.what();
        }
    }
}

}  // namespace

TEST(WideConfigs, RandomValidConfigsRunThroughTheCpuReference) {
    const uint64_t seed = fresh_seed();
    std::printf("wide configs: seed %llu\n", (unsigned long long)seed);
    ThreadPool pool(2);
    for (int i = 0; i < 32; ++i) check_random_config(seed, i, &pool);
}

// gen-checkpoint + logits through the binary give exactly the in-process logits (the CLI adds no shape limit).
TEST(WideConfigs, RandomConfigsThroughTheFlashseekBinary) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    for (int i = 0; i < 3; ++i) {
        Rng rng(mix_seed(seed, uint64_t(i)));
        const auto j = test::random_config(rng);
        SCOPED_TRACE(j.dump());
        TempDir dir("bin" + std::to_string(i));
        const fs::path config = dir.path / "config-in.json", model = dir.path / "model",
                       tokens_file = dir.path / "tokens.txt", logits = dir.path / "logits.bin";
        std::ofstream(config) << j.dump(2);
        const uint64_t ck_seed = rng.below(1u << 30);
        const int64_t vocab = j["vocab_size"].get<int64_t>(), T = 60, prefill = 23;
        const auto tokens = random_tokens(T, vocab, rng.next_u64());
        {
            std::ofstream t(tokens_file);
            for (int32_t v : tokens) t << v << ' ';
        }
        std::string out;
        const std::string bin = FLASHSEEK_BIN;
        const std::string gen = "'" + bin + "' gen-checkpoint --config '" + config.string() + "' --out '" +
                                model.string() + "' --seed " + std::to_string(ck_seed);
        ASSERT_EQ(run_shell(gen, out), 0) << out;
        const std::string logits_cmd = "'" + bin + "' logits --model '" + model.string() + "' --tokens '" +
                                       tokens_file.string() + "' --prefill " + std::to_string(prefill) +
                                       " --backend cpu --numerics exact --output '" + logits.string() + "'";
        ASSERT_EQ(run_shell(logits_cmd, out), 0) << out;
        const auto got = read_f32(logits);
        const auto m = load_cpu_model(model.string(), {});
        const auto want = run_steps(*m, tokens, prefill_then_decode(T, prefill), nullptr);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_LE(max_rel_diff(got, want), 1e-6);
    }
}
