// Shared helpers of the backend tests: one tiny generated checkpoint per test process (fresh seed, printed by the
// tests that depend on it), random token ids and token files, temporary paths and running the built `flashseek`
// binary (tests/support/run_command.h).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "model/checkpoint_gen.h"
#include "model/config.h"
#include "run_command.h"

namespace backend_test {

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

// A path under the temp folder, unique to this process (`prefix` names the test file), removed at exit.
inline std::string temp_path(const std::string& prefix, const std::string& name) {
    const std::string p = (std::filesystem::temp_directory_path() /
                           ("flashseek-test-" + prefix + "-" + std::to_string(::getpid()) + "-" + name))
                              .string();
    temp_paths().paths.push_back(p);
    return p;
}

// Runs `flashseek ARGS` (the binary built with the tests): exit status and stdout + stderr.
inline flashseek::test_support::CommandResult run_flashseek(const std::string& args) {
    return flashseek::test_support::run_command(std::string(FLASHSEEK_BIN) + " " + args);
}

// Writes token ids as a token file, with the mix of separators a user's file may have (spaces, line breaks).
inline void write_token_file(const std::string& path, const std::vector<int32_t>& ids) {
    std::ofstream f(path);
    for (size_t i = 0; i < ids.size(); ++i) f << ids[i] << (i % 7 == 6 ? "\n" : "  ");
    f.close();
    FS_CHECK(f.good(), "{}: write failed", path);
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

}  // namespace backend_test
