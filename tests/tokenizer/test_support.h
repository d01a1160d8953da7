// Shared helpers for the tokenizer tests: the project tokenizer (loaded once), fresh seeds, file helpers; commands
// run through tests/support/run_command.h.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "run_command.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace flashseek::test {

inline std::string source_path(const std::string& rel) { return std::string(FLASHSEEK_SOURCE_DIR) + "/" + rel; }
inline std::string v4_tokenizer_path() { return source_path("assets/tokenizer/deepseek-v4/tokenizer.json"); }

inline const tokenizer::Tokenizer& v4() {
    static const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(v4_tokenizer_path());
    return tok;
}

inline std::uint64_t fresh_seed() {
    static std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) | rd();
}

inline std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

inline std::string temp_dir(const std::string& name) {
    const std::string dir = ::testing::TempDir() + "flashseek_" + name + "_" + std::to_string(fresh_seed() % 1000000007);
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace flashseek::test
