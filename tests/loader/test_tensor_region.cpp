// Byte regions of tensor slices: row and column ranges of random tensors of several dtypes and ranks, read through a
// written and mapped safetensors file, equal an element-by-element extraction; ranges outside the shape are refused
// with an Error naming the tensor.
#include <gtest/gtest.h>

#include "loader/safetensors.h"
#include "loader/tensor_region.h"
#include "loader_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

// The bytes of elements [r0, r1) x [c0, c1) x (all later dims) of a row-major tensor, gathered one element at a time.
std::vector<uint8_t> gather(const TensorData& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const size_t es = dtype_size(t.dtype);
    int64_t inner = 1;
    for (size_t d = 2; d < t.shape.size(); ++d) inner *= t.shape[d];
    const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
    std::vector<uint8_t> out;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
            for (int64_t i = 0; i < inner; ++i)
                for (size_t b = 0; b < es; ++b)
                    out.push_back(t.bytes[size_t(((r * cols + c) * inner + i)) * es + b]);
    return out;
}

std::vector<uint8_t> copy_of(const ByteRegion& r) {
    std::vector<uint8_t> out(r.bytes());
    copy_region(r, out.data());
    return out;
}

}  // namespace

TEST(TensorRegion, RowsAndColumnsOfMappedTensors) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    TempDir dir;
    std::vector<TensorData> ts;
    ts.push_back(random_tensor("fp8", DType::F8_E4M3, {12, 20}, rng));
    ts.push_back(random_tensor("bf16", DType::BF16, {7, 9}, rng));
    ts.push_back(random_tensor("f32.rank3", DType::F32, {5, 6, 3}, rng));
    ts.push_back(random_tensor("i64", DType::I64, {4, 2}, rng));
    ts.push_back(random_tensor("vector", DType::F32, {11}, rng));
    std::vector<const TensorData*> ptrs;
    for (const auto& t : ts) ptrs.push_back(&t);
    write_safetensors(dir.file("t.safetensors"), ptrs);
    const auto file = SafetensorsFile::open(dir.file("t.safetensors"));
    for (const TensorData& t : ts) {
        SCOPED_TRACE(t.name);
        const TensorView& v = file->tensors().at(t.name);
        EXPECT_EQ(copy_of(tensor_whole(v)), t.bytes);
        const int64_t rows = t.shape[0];
        const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
        for (int trial = 0; trial < 20; ++trial) {
            const int64_t a = int64_t(rng() % uint64_t(rows + 1)), b = int64_t(rng() % uint64_t(rows + 1));
            const int64_t r0 = std::min(a, b), r1 = std::max(a, b);
            const ByteRegion rr = tensor_rows(v, r0, r1);
            EXPECT_EQ(rr.runs, 1u);
            EXPECT_EQ(copy_of(rr), gather(t, r0, r1, 0, cols));
            if (t.shape.size() < 2) continue;
            const int64_t x = int64_t(rng() % uint64_t(cols + 1)), y = int64_t(rng() % uint64_t(cols + 1));
            const int64_t c0 = std::min(x, y), c1 = std::max(x, y);
            const ByteRegion cr = tensor_columns(v, c0, c1);
            EXPECT_EQ(cr.runs, size_t(rows));
            EXPECT_EQ(cr.bytes(), gather(t, 0, rows, c0, c1).size());
            EXPECT_EQ(copy_of(cr), gather(t, 0, rows, c0, c1));
        }
    }
}

TEST(TensorRegion, OutOfRangeIsRefusedByName) {
    std::mt19937_64 rng(fresh_seed());
    TensorData t = random_tensor("layers.0.attn.wq_b.weight", DType::F8_E4M3, {8, 4}, rng);
    TensorView v{t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()};
    expect_error([&] { tensor_rows(v, 2, 9); }, {"layers.0.attn.wq_b.weight", "[2, 9)", "[8, 4]"});
    expect_error([&] { tensor_rows(v, 5, 4); }, {"layers.0.attn.wq_b.weight"});
    expect_error([&] { tensor_columns(v, -1, 2); }, {"layers.0.attn.wq_b.weight", "dim 1"});
    TensorData vec = random_tensor("attn_sink", DType::F32, {6}, rng);
    TensorView vv{vec.name, vec.dtype, vec.shape, vec.bytes.data(), vec.bytes.size()};
    expect_error([&] { tensor_columns(vv, 0, 1); }, {"attn_sink", "no dim 1"});
}
