// Checkpoint::replace_tensor_data and ScopedCheckpointTransform: owned replacement bytes visible through
// find/get/all without touching the file; size and name errors; the transform hook of Checkpoint::open.
#include <gtest/gtest.h>

#include <cstring>

#include "loader/safetensors.h"
#include "loader_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

void write_two_tensors(const std::string& dir) {
    TensorData a{"a", DType::F32, {2}, std::vector<uint8_t>(8)};
    TensorData b{"b", DType::BF16, {3}, std::vector<uint8_t>(6, 0x11)};
    const float av[2] = {1.5f, -2.f};
    std::memcpy(a.bytes.data(), av, 8);
    write_safetensors(dir + "/model.safetensors", {&a, &b});
}

}  // namespace

TEST(CheckpointReplace, ReplacementIsVisibleEverywhereAndFileUntouched) {
    TempDir dir;
    write_two_tensors(dir.str());
    const std::string before = read_bytes(dir.file("model.safetensors"));
    auto ck = Checkpoint::open(dir.str());
    const uint8_t* mapped_b = ck->get("b").data;
    const float nv[2] = {7.f, 8.f};
    std::vector<uint8_t> bytes(8);
    std::memcpy(bytes.data(), nv, 8);
    ck->replace_tensor_data("a", bytes);
    const TensorView& a = ck->get("a");
    EXPECT_EQ(ck->find("a"), &a);
    EXPECT_EQ(ck->all().at("a"), &a);
    EXPECT_EQ(a.name, "a");
    EXPECT_EQ(a.dtype, DType::F32);
    EXPECT_EQ(a.shape, std::vector<int64_t>{2});
    ASSERT_EQ(a.nbytes, 8u);
    EXPECT_EQ(std::memcmp(a.data, nv, 8), 0);
    EXPECT_EQ(ck->get("b").data, mapped_b) << "other tensors keep their mapped bytes";
    // A second replacement of the same tensor wins.
    bytes[0] ^= 0xff;
    ck->replace_tensor_data("a", bytes);
    EXPECT_EQ(ck->get("a").data[0], bytes[0]);
    EXPECT_EQ(read_bytes(dir.file("model.safetensors")), before) << "the file must not change";
    EXPECT_EQ(std::memcmp(Checkpoint::open(dir.str())->get("a").data, "\0\0\xc0\x3f", 4), 0);  // 1.5f
}

TEST(CheckpointReplace, ErrorsNameTheTensor) {
    TempDir dir;
    write_two_tensors(dir.str());
    auto ck = Checkpoint::open(dir.str());
    std::string m = message_of([&] { ck->replace_tensor_data("b", std::vector<uint8_t>(4)); });
    EXPECT_NE(m.find("cannot replace tensor 'b' (6 bytes) with 4 bytes"), std::string::npos) << m;
    m = message_of([&] { ck->replace_tensor_data("zz", {}); });
    EXPECT_NE(m.find("cannot replace tensor 'zz': not in the checkpoint"), std::string::npos) << m;
}

TEST(CheckpointTransform, AppliedToEachOpenWhileInstalledOnly) {
    TempDir dir;
    write_two_tensors(dir.str());
    std::vector<std::string> seen;
    {
        ScopedCheckpointTransform t([&](Checkpoint& ck) {
            seen.push_back(ck.dir());
            ck.replace_tensor_data("b", std::vector<uint8_t>(6, 0x22));
        });
        EXPECT_EQ(Checkpoint::open(dir.str())->get("b").data[5], 0x22);
        EXPECT_EQ(Checkpoint::open(dir.str())->get("b").data[0], 0x22);
        EXPECT_EQ(t.applications(), 2);
        const std::string m = message_of([] { ScopedCheckpointTransform u([](Checkpoint&) {}); });
        EXPECT_NE(m.find("another checkpoint transformation is installed"), std::string::npos) << m;
    }
    EXPECT_EQ(seen, (std::vector<std::string>{dir.str(), dir.str()}));
    EXPECT_EQ(Checkpoint::open(dir.str())->get("b").data[0], 0x11);
    // An error inside the transformation propagates from open and leaves the hook usable.
    {
        ScopedCheckpointTransform t([](Checkpoint& ck) { ck.replace_tensor_data("nope", {}); });
        const std::string m = message_of([&] { Checkpoint::open(dir.str()); });
        EXPECT_NE(m.find("'nope'"), std::string::npos) << m;
    }
    ScopedCheckpointTransform again([](Checkpoint&) {});
    Checkpoint::open(dir.str());
    EXPECT_EQ(again.applications(), 1);
}
