// Checkpoint directories: single file, shards + model.safetensors.index.json, and every way the index and the
// shards can disagree; pickle-only folders are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "loader/safetensors.h"
#include "loader_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {

// Writes tensors t0..t5 into two shards and the matching index; returns the tensors.
std::vector<TensorData> write_sharded(const TempDir& dir, std::mt19937_64& rng) {
    std::vector<TensorData> ts;
    for (int i = 0; i < 6; ++i)
        ts.push_back(random_tensor("t" + std::to_string(i), i % 2 ? DType::BF16 : DType::F32, {i + 1, 3}, rng));
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    for (int s = 0; s < 2; ++s) {
        std::vector<const TensorData*> part;
        const std::string shard = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
        for (int i = s * 3; i < s * 3 + 3; ++i) {
            part.push_back(&ts[size_t(i)]);
            index["weight_map"][ts[size_t(i)].name] = shard;
        }
        write_safetensors(dir.file(shard), part);
    }
    write_bytes(dir.file("model.safetensors.index.json"), index.dump(2));
    return ts;
}

nlohmann::json read_index(const TempDir& dir) {
    return nlohmann::json::parse(read_bytes(dir.file("model.safetensors.index.json")));
}
void write_index(const TempDir& dir, const nlohmann::json& j) {
    write_bytes(dir.file("model.safetensors.index.json"), j.dump());
}

}  // namespace

TEST(Checkpoint, SingleFile) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    auto a = random_tensor("x", DType::F32, {4, 4}, rng), b = random_tensor("y", DType::I64, {3}, rng);
    write_safetensors(dir.file("model.safetensors"), {&a, &b});
    const auto ck = Checkpoint::open(dir.str());
    EXPECT_EQ(ck->all().size(), 2u);
    EXPECT_EQ(ck->total_bytes(), 64u + 24u);
    ASSERT_NE(ck->find("x"), nullptr);
    EXPECT_EQ(std::memcmp(ck->get("y").data, b.bytes.data(), 24), 0);
    EXPECT_EQ(ck->find("z"), nullptr);
    expect_error([&] { ck->get("z"); }, {"'z'", "not found"});
}

TEST(Checkpoint, ShardsWithIndex) {
    TempDir dir;
    const uint64_t seed = fresh_seed();
    std::mt19937_64 rng(seed);
    const auto ts = write_sharded(dir, rng);
    const auto ck = Checkpoint::open(dir.str());
    ASSERT_EQ(ck->all().size(), 6u);
    for (const auto& t : ts) {
        const TensorView& v = ck->get(t.name);
        EXPECT_EQ(v.shape, t.shape);
        EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), t.bytes.size()), 0) << t.name << " seed " << seed;
    }
}

TEST(Checkpoint, SeveralFilesWithoutIndex) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    auto a = random_tensor("x", DType::F32, {2}, rng), b = random_tensor("y", DType::F32, {2}, rng);
    write_safetensors(dir.file("part-a.safetensors"), {&a});
    write_safetensors(dir.file("part-b.safetensors"), {&b});
    EXPECT_EQ(Checkpoint::open(dir.str())->all().size(), 2u);
    write_safetensors(dir.file("part-c.safetensors"), {&a});  // x twice
    expect_error([&] { Checkpoint::open(dir.str()); }, {"'x'", "both"});
}

TEST(Checkpoint, MissingShard) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    write_sharded(dir, rng);
    std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
    expect_error([&] { Checkpoint::open(dir.str()); },
                 {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "does not exist"});
}

TEST(Checkpoint, IndexPointsToWrongShard) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    write_sharded(dir, rng);
    auto j = read_index(dir);
    j["weight_map"]["t4"] = "model-00001-of-00002.safetensors";
    write_index(dir, j);
    expect_error([&] { Checkpoint::open(dir.str()); },
                 {"'t4'", "listed in shard 'model-00001-of-00002.safetensors'", "stored in shard"});
}

TEST(Checkpoint, IndexListsAbsentTensor) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    write_sharded(dir, rng);
    auto j = read_index(dir);
    j["weight_map"]["ghost"] = "model-00001-of-00002.safetensors";
    write_index(dir, j);
    expect_error([&] { Checkpoint::open(dir.str()); }, {"'ghost'", "missing"});
}

TEST(Checkpoint, ShardHoldsUnlistedTensor) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    write_sharded(dir, rng);
    auto j = read_index(dir);
    j["weight_map"].erase("t1");
    write_index(dir, j);
    expect_error([&] { Checkpoint::open(dir.str()); }, {"'t1'", "not listed"});
}

TEST(Checkpoint, BadIndexFiles) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    write_sharded(dir, rng);
    write_bytes(dir.file("model.safetensors.index.json"), "{\"weight_map\": ");
    expect_error([&] { Checkpoint::open(dir.str()); }, {"model.safetensors.index.json", "not valid JSON"});
    write_index(dir, {{"metadata", {}}});
    expect_error([&] { Checkpoint::open(dir.str()); }, {"weight_map"});
    write_index(dir, {{"weight_map", {{"t0", 7}}}});
    expect_error([&] { Checkpoint::open(dir.str()); }, {"'t0'", "shard file name"});
    write_index(dir, {{"weight_map", {{"t0", "../outside.safetensors"}}}});
    expect_error([&] { Checkpoint::open(dir.str()); }, {"'t0'", "not a plain file name"});
    write_index(dir, {{"weight_map", nlohmann::json::object()}});
    expect_error([&] { Checkpoint::open(dir.str()); }, {"weight_map is empty"});
}

TEST(Checkpoint, DamagedShardNamesTheShard) {
    TempDir dir;
    std::mt19937_64 rng(fresh_seed());
    write_sharded(dir, rng);
    const std::string shard = dir.file("model-00002-of-00002.safetensors");
    const std::string bytes = read_bytes(shard);
    write_bytes(shard, bytes.substr(0, bytes.size() - 5));
    expect_error([&] { Checkpoint::open(dir.str()); }, {"model-00002-of-00002.safetensors", "past the end"});
}

TEST(Checkpoint, RefusesPickleAndEmptyFolders) {
    TempDir dir;
    expect_error([&] { Checkpoint::open(dir.str()); }, {"no model.safetensors"});
    write_bytes(dir.file("pytorch_model.bin"), std::string("\x80\x02}q\x00.", 6));
    expect_error([&] { Checkpoint::open(dir.str()); }, {"pytorch_model.bin", "pickle", "refused"});
    // A .bin that is really pickle, renamed to .safetensors, is refused by content.
    write_bytes(dir.file("model.safetensors"), std::string("\x80\x04\x95\x00\x00", 5));
    expect_error([&] { Checkpoint::open(dir.str()); }, {"model.safetensors", "pickle"});
    expect_error([&] { Checkpoint::open(dir.file("does-not-exist")); }, {"does-not-exist", "not a checkpoint directory"});
}
