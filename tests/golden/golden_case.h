// One committed golden (tests/data/goldens/<name>/): its metadata, and the pieces the golden test needs to
// regenerate the checkpoint and compare `flashseek logits` per position against the HF transformers logits
// written by scripts/make_goldens.py (running the binary and reading the logits: tests/support). Every malformed input gives a flashseek::Error naming the file and field.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace flashseek::golden {

struct GoldenCase {
    std::string name;
    std::filesystem::path dir;          // tests/data/goldens/<name>
    std::filesystem::path config_path;  // <dir>/config.json
    std::filesystem::path logits_path;  // <dir>/logits.bin
    uint64_t seed = 0;                  // gen-checkpoint seed (when checkpoint_dir is empty)
    std::filesystem::path checkpoint_dir;  // a committed checkpoint (trained models), else empty
    std::string content_hash;           // as printed by `flashseek inspect` ("fnv1a64:...")
    int prefill = 0;
    int n_tokens = 0;
    int64_t vocab_size = 0;
    std::vector<int32_t> tokens;
    double tolerance = 1e-4;            // per-position relative L2 error bound
};

// Parses <dir>/meta.json and checks it against the files beside it.
GoldenCase load_golden_case(const std::filesystem::path& dir);

// Every folder under `root` that holds a meta.json, sorted by name.
std::vector<std::filesystem::path> list_golden_dirs(const std::filesystem::path& root);

// ||ours_t - golden_t|| / ||golden_t|| for each row t of [rows, cols] matrices (double accumulation).
std::vector<double> per_position_rel_err(const float* ours, const float* golden, int64_t rows, int64_t cols);

// The value of "content-hash: X" in `flashseek inspect` output; Error when absent.
std::string parse_content_hash(const std::string& inspect_output);

}  // namespace flashseek::golden
