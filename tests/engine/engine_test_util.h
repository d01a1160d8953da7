// Shared helpers of the engine tests: one tiny generated checkpoint per test process (fresh seed, printed by the
// tests that depend on it) and random token ids.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "model/checkpoint_gen.h"
#include "model/config.h"

namespace engine_test {

struct TinyModel {
    std::string dir;
    uint64_t seed = 0;
    int64_t vocab = 0;
};

// Removes the files and folders registered with it when the test process exits.
struct TempPaths {
    std::vector<std::string> paths;
    ~TempPaths() {
        std::error_code ec;
        for (const auto& p : paths) std::filesystem::remove_all(p, ec);
    }
};
inline TempPaths& temp_paths() {
    static TempPaths t;
    return t;
}

inline const TinyModel& tiny_model() {
    temp_paths();  // constructed first, so destroyed after the model below
    static const TinyModel m = [] {
        TinyModel t;
        t.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
        t.dir = (std::filesystem::temp_directory_path() /
                 ("flashseek-test-engine-" + std::to_string(::getpid())))
                    .string();
        auto cfg = flashseek::load_model_config(std::string(FLASHSEEK_SOURCE_DIR) +
                                                "/tests/cpu/configs/tiny_all_types.json");
        flashseek::GenOptions opt;
        opt.seed = t.seed;
        temp_paths().paths.push_back(t.dir);
        flashseek::generate_checkpoint(cfg, t.dir, opt);
        t.vocab = cfg.vocab_size;
        std::fprintf(stderr, "engine tests: tiny checkpoint %s, seed %llu\n", t.dir.c_str(),
                     (unsigned long long)t.seed);
        return t;
    }();
    return m;
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = int32_t(g() % uint64_t(vocab));
    return t;
}

}  // namespace engine_test
