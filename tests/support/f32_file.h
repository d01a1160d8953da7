// Reading a file of little-endian float32 values (what `flashseek logits` writes) in tests.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "util/error.h"

namespace flashseek::test_support {

// Every value of the file, or exactly `count` of them (count >= 0: any other size is an Error naming the file and
// both sizes). A file that cannot be opened, or whose size is not a whole number of values, is an Error too.
inline std::vector<float> read_f32_file(const std::string& path, int64_t count = -1) {
    std::ifstream in(path, std::ios::binary);
    FS_CHECK(in.good(), "{}: cannot open", path);
    in.seekg(0, std::ios::end);
    const auto size = int64_t(in.tellg());
    if (count >= 0)
        FS_CHECK(size == count * 4, "{}: {} bytes, expected {} float32 values ({} bytes)", path, size, count, count * 4);
    FS_CHECK(size % 4 == 0, "{}: {} bytes is not a whole number of float32 values", path, size);
    in.seekg(0);
    std::vector<float> v(static_cast<size_t>(size / 4));
    in.read(reinterpret_cast<char*>(v.data()), std::streamsize(size));
    FS_CHECK(in.good() || v.empty(), "{}: read failed", path);
    return v;
}

}  // namespace flashseek::test_support
