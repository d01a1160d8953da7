// SafetensorsFile: round trips through write_safetensors, and every kind of damaged file is rejected with an
// Error that names the file and the tensor or field (never a crash: the fuzz test mutates valid files at random,
// and the sanitizer build checks that no byte outside the mapping is read).
#include <gtest/gtest.h>

#include <cstring>

#include "loader/safetensors.h"
#include "loader_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

std::string valid_file(const TempDir& dir, std::mt19937_64& rng, std::vector<TensorData>* keep = nullptr) {
    std::vector<TensorData> ts;
    ts.push_back(random_tensor("a.weight", DType::BF16, {3, 5}, rng));
    ts.push_back(random_tensor("b.scale", DType::F8_E8M0, {2, 3}, rng));
    ts.push_back(random_tensor("c", DType::F32, {7}, rng));
    ts.push_back(random_tensor("d.packed", DType::I8, {4, 3}, rng));
    ts.push_back(random_tensor("e.ids", DType::I64, {2, 2}, rng));
    ts.push_back(random_tensor("f.fp8", DType::F8_E4M3, {1, 9}, rng));
    ts.push_back(random_tensor("g.empty", DType::F32, {0, 4}, rng));
    std::vector<const TensorData*> ptrs;
    for (const auto& t : ts) ptrs.push_back(&t);
    const std::string path = dir.file("valid.safetensors");
    write_safetensors(path, ptrs, {{"format", "pt"}});
    if (keep) *keep = std::move(ts);
    return path;
}

}  // namespace

TEST(Safetensors, RoundTrip) {
    TempDir dir;
    const uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    std::vector<TensorData> ts;
    const std::string path = valid_file(dir, rng, &ts);
    const auto f = SafetensorsFile::open(path);
    ASSERT_EQ(f->tensors().size(), ts.size()) << "seed " << seed;
    EXPECT_EQ(f->metadata().at("format"), "pt");
    for (const auto& t : ts) {
        const TensorView& v = f->tensors().at(t.name);
        EXPECT_EQ(v.name, t.name);
        EXPECT_EQ(v.dtype, t.dtype);
        EXPECT_EQ(v.shape, t.shape);
        ASSERT_EQ(v.nbytes, t.bytes.size());
        if (v.nbytes) {
            EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), v.nbytes), 0) << t.name << " seed " << seed;
            // Sorted by element size, so every tensor is aligned to its element size within the mapping.
            EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype), 0u) << t.name;
        }
    }
    EXPECT_EQ(f->tensors().at("a.weight").shape_str(), "[3, 5]");
    EXPECT_EQ(f->tensors().at("a.weight").numel(), 15);
}

TEST(Safetensors, DtypeNames) {
    for (const char* n : {"BF16", "F16", "F32", "F64", "F8_E4M3", "F8_E8M0", "I8", "U8", "I16", "I32", "I64", "BOOL"}) {
        DType t;
        ASSERT_TRUE(parse_dtype(n, &t)) << n;
        EXPECT_STREQ(dtype_name(t), n);
        EXPECT_GT(dtype_size(t), 0u);
    }
    DType t;
    EXPECT_FALSE(parse_dtype("F8_E5M2", &t));
    EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
    EXPECT_EQ(dtype_size(DType::I64), 8u);
}

// ---- damaged files: each case writes a file and names what the error must mention ----

struct Damaged {
    const char* what;
    std::string bytes;
    std::vector<std::string> must_mention;
};

TEST(Safetensors, RejectsDamagedFiles) {
    TempDir dir;
    const std::string four(4, 'x'), six(6, 'y');
    std::vector<Damaged> cases = {
        {"empty file", "", {"truncated"}},
        {"shorter than the length field", std::string("\x10\0\0", 3), {"truncated"}},
        {"header length beyond the file", [] {
             std::string s = raw_safetensors("{}", "");
             s[0] = 100;  // claims 100 header bytes, the file holds 2
             return s;
         }(), {"truncated", "header length 100"}},
        {"header too large", [] {
             std::string s(8, '\0');
             const uint64_t n = 200ull << 20;
             std::memcpy(s.data(), &n, 8);
             return s + "{}";
         }(), {"limit"}},
        {"header not JSON", raw_safetensors("{\"a\": [1, 2", ""), {"not valid JSON"}},
        {"header is an array", raw_safetensors("[1, 2, 3]", ""), {"not a JSON object"}},
        {"unknown dtype", raw_safetensors(R"({"t":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", four),
         {"'t'", "unknown dtype", "F7"}},
        {"offsets beyond the data", raw_safetensors(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four),
         {"'t'", "past the end"}},
        {"shape x dtype != bytes", raw_safetensors(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four),
         {"'t'", "needs 8 bytes"}},
        {"overlapping tensors",
         raw_safetensors(R"({"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"I8","shape":[4],"data_offsets":[2,6]}})",
                         six),
         {"overlap", "'a'", "'b'"}},
        {"duplicate names",
         raw_safetensors(R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"I8","shape":[2],"data_offsets":[2,4]}})",
                         four),
         {"'a'", "twice"}},
        {"reversed offsets", raw_safetensors(R"({"t":{"dtype":"I8","shape":[0],"data_offsets":[4,0]}})", four),
         {"'t'", "reversed"}},
        {"negative dimension", raw_safetensors(R"({"t":{"dtype":"I8","shape":[-4],"data_offsets":[0,4]}})", four),
         {"'t'", "non-negative"}},
        {"non-integer dimension", raw_safetensors(R"({"t":{"dtype":"I8","shape":[2.5],"data_offsets":[0,4]}})", four),
         {"'t'", "shape"}},
        {"shape overflow",
         raw_safetensors(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", four),
         {"'t'", "overflow"}},
        {"missing dtype", raw_safetensors(R"({"t":{"shape":[4],"data_offsets":[0,4]}})", four), {"'t'", "dtype"}},
        {"offsets not a pair", raw_safetensors(R"({"t":{"dtype":"I8","shape":[4],"data_offsets":[0]}})", four),
         {"'t'", "data_offsets"}},
        {"unknown field", raw_safetensors(R"({"t":{"dtype":"I8","shape":[4],"data_offsets":[0,4],"x":1}})", four),
         {"'t'", "unknown field"}},
        {"hole between tensors",
         raw_safetensors(R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"I8","shape":[2],"data_offsets":[4,6]}})",
                         six),
         {"unused bytes", "'b'"}},
        {"trailing data", raw_safetensors(R"({"t":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", six),
         {"after the last tensor"}},
        {"metadata not strings", raw_safetensors(R"({"__metadata__":{"k":1}})", ""), {"__metadata__"}},
        {"pickle (protocol 2)", std::string("\x80\x02}q\x00(X\x05\x00\x00\x00model", 16), {"pickle", "refused"}},
        {"torch zip archive", std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10), {"pickle", "refused"}},
    };
    int i = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        const std::string path = dir.file("damaged-" + std::to_string(i++) + ".safetensors");
        write_bytes(path, c.bytes);
        std::vector<std::string> parts = c.must_mention;
        parts.push_back(path);  // every error names the file
        try {
            SafetensorsFile::open(path);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            const std::string msg = e.what();
            for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
        }
    }
    EXPECT_GE(cases.size(), 20u);
}

TEST(Safetensors, DeeplyNestedHeadersAreRejectedWithoutCrashing) {
    TempDir dir;
    const int depth = 200000;
    write_bytes(dir.file("deep1.safetensors"), raw_safetensors(std::string(depth, '[') + std::string(depth, ']'), ""));
    expect_error([&] { SafetensorsFile::open(dir.file("deep1.safetensors")); }, {"not a JSON object"});
    std::string nested;
    for (int i = 0; i < depth; ++i) nested += "{\"a\":";
    nested += "1" + std::string(depth, '}');
    write_bytes(dir.file("deep2.safetensors"), raw_safetensors(nested, ""));
    expect_error([&] { SafetensorsFile::open(dir.file("deep2.safetensors")); }, {"'a'"});
}

TEST(Safetensors, RejectsTruncatedAtEveryLength) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    const std::string good = read_bytes(valid_file(dir, rng));
    const std::string path = dir.file("cut.safetensors");
    for (size_t n = 0; n < good.size(); ++n) {
        write_bytes(path, good.substr(0, n));
        EXPECT_THROW(SafetensorsFile::open(path), Error) << "cut at " << n << " of " << good.size();
    }
    write_bytes(path, good);
    EXPECT_NO_THROW(SafetensorsFile::open(path));
}

TEST(Safetensors, MissingFileAndDirectory) {
    TempDir dir;
    expect_error([&] { SafetensorsFile::open(dir.file("nope.safetensors")); }, {"nope.safetensors", "cannot open"});
    expect_error([&] { SafetensorsFile::open(dir.str()); }, {"not a regular file"});
}

// Random mutations of a valid file must either load or throw flashseek::Error; anything else (a crash, another
// exception, a sanitizer report) fails.
TEST(Safetensors, FuzzedHeadersNeverCrash) {
    TempDir dir;
    const uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    const std::string good = read_bytes(valid_file(dir, rng));
    uint64_t header_len;
    std::memcpy(&header_len, good.data(), 8);
    const std::string path = dir.file("fuzz.safetensors");
    int accepted = 0;
    for (int iter = 0; iter < 1500; ++iter) {
        std::string b = good;
        const int edits = 1 + int(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t pos = rng() % (8 + header_len);  // mostly the length field and the header text
            switch (rng() % 3) {
                case 0: b[pos] = char(rng()); break;
                case 1: b[pos] = "0123456789[]{},:\"-"[rng() % 18]; break;
                default: b.erase(pos, 1 + rng() % 8); break;
            }
        }
        if (rng() % 4 == 0) b.resize(rng() % b.size());
        write_bytes(path, b);
        try {
            SafetensorsFile::open(path);
            ++accepted;
        } catch (const Error&) {
        }
    }
    SUCCEED() << "seed " << seed << ": " << accepted << " mutated files still valid";
}
