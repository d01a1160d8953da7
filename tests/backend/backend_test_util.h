// Shared helpers of the backend tests: one tiny generated checkpoint per test process (fresh seed, printed by the
// tests that depend on it), random token ids, temporary paths and running the built `flashseek` binary.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "model/checkpoint_gen.h"
#include "model/config.h"

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

struct RunResult {
    int status = -1;
    std::string output;  // stdout + stderr
};

// Runs `flashseek ARGS` (the binary built with the tests) and collects its exit status and output.
inline RunResult run_flashseek(const std::string& args) {
    const std::string cmd = std::string(FLASHSEEK_BIN) + " " + args + " 2>&1";
    RunResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
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
