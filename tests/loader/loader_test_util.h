// Helpers for loader tests (and the model tests built on them): temporary folders, hand-made safetensors files
// (valid, or damaged on purpose) and the checks of error messages.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "error_message.h"
#include "loader/safetensors.h"
#include "util/error.h"

namespace flashseek::test {

// A fresh folder under the system temp dir, removed when the object goes away.
class TempDir {
public:
    TempDir() {
        static int counter = 0;
        path_ = std::filesystem::temp_directory_path() /
                ("flashseek-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
                 std::to_string(std::random_device{}()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string str() const { return path_.string(); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// A raw safetensors file: 8-byte length + header text + data bytes.
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
    std::string s(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(s.data(), &n, 8);
    return s + header + data;
}

inline TensorData random_tensor(const std::string& name, DType dt, std::vector<int64_t> shape, std::mt19937_64& rng) {
    TensorData t{name, dt, std::move(shape), {}};
    size_t n = dtype_size(dt);
    for (auto d : t.shape) n *= size_t(d);
    t.bytes.resize(n);
    for (auto& b : t.bytes) b = uint8_t(rng());
    return t;
}

// Runs f, expects a flashseek::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
    try {
        f();
        ADD_FAILURE() << "expected an error mentioning '" << *parts.begin() << "'";
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

inline uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

}  // namespace flashseek::test
