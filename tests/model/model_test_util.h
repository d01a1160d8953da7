// Helpers for model tests: config files from tests/data/configs, JSON edits, checkpoint rewriting and hashing.
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loader/loader_test_util.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "util/hash.h"

namespace flashseek::test {

inline std::string config_path(const std::string& name) {
    return std::string(FLASHSEEK_SOURCE_DIR) + "/tests/data/configs/" + name;
}
inline nlohmann::ordered_json config_json(const std::string& name) {
    return nlohmann::ordered_json::parse(read_bytes(config_path(name)));
}

// Copies of every tensor of a checkpoint, to modify and write back.
inline std::vector<TensorData> copy_tensors(const Checkpoint& ck) {
    std::vector<TensorData> out;
    for (const auto& [name, v] : ck.all())
        out.push_back({name, v->dtype, v->shape, std::vector<uint8_t>(v->data, v->data + v->nbytes)});
    return out;
}
inline void write_model(const std::string& dir, const std::vector<TensorData>& ts) {
    std::vector<const TensorData*> ptrs;
    for (const auto& t : ts) ptrs.push_back(&t);
    write_safetensors(dir + "/model.safetensors", ptrs);
}
inline TensorData* find_tensor(std::vector<TensorData>& ts, const std::string& name) {
    for (auto& t : ts)
        if (t.name == name) return &t;
    return nullptr;
}

// The same content hash as `flashseek inspect`: per tensor in name order, its name, dtype, shape and bytes.
inline uint64_t content_hash(const Checkpoint& ck) {
    uint64_t h = kFnvOffset;
    for (const auto& [name, t] : ck.all()) {
        h = fnv1a_str(name, h);
        h = fnv1a_str(dtype_name(t->dtype), h);
        for (auto s : t->shape) h = fnv1a_u64(uint64_t(s), h);
        h = fnv1a_u64(fnv1a(t->data, t->nbytes), h);
    }
    return h;
}

}  // namespace flashseek::test
