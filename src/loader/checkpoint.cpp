// Checkpoint directories: one model.safetensors, or shards listed in model.safetensors.index.json (the index and
// the shards must agree exactly: every listed shard exists, every listed tensor is in its shard, every stored
// tensor is listed). Pickle checkpoints (.bin/.pt/...) are refused.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "loader/safetensors.h"
#include "util/error.h"

namespace flashseek {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr uintmax_t kMaxIndexBytes = 256ull << 20;

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_pickle_name(const std::string& name) {
    for (const char* ext : {".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"})
        if (ends_with(name, ext)) return true;
    return false;
}

// A shard name from the index must be a plain file name inside the checkpoint directory (no path traversal).
bool is_plain_file_name(const std::string& s) {
    return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
           s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

std::string read_text_file(const std::string& path, uintmax_t limit) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    FS_CHECK(!ec, "{}: cannot read: {}", path, ec.message());
    FS_CHECK(size <= limit, "{}: {} bytes exceeds the {} byte limit", path, size, limit);
    std::ifstream in(path, std::ios::binary);
    FS_CHECK(in.good(), "{}: cannot open", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::mutex g_transform_mutex;
ScopedCheckpointTransform* g_transform = nullptr;  // guarded by g_transform_mutex

}  // namespace

ScopedCheckpointTransform::ScopedCheckpointTransform(std::function<void(Checkpoint&)> transform)
    : transform_(std::move(transform)) {
    FS_CHECK(transform_ != nullptr, "ScopedCheckpointTransform: empty transformation");
    std::lock_guard<std::mutex> lock(g_transform_mutex);
    FS_CHECK(g_transform == nullptr, "ScopedCheckpointTransform: another checkpoint transformation is installed");
    g_transform = this;
}

ScopedCheckpointTransform::~ScopedCheckpointTransform() {
    std::lock_guard<std::mutex> lock(g_transform_mutex);
    if (g_transform == this) g_transform = nullptr;
}

int ScopedCheckpointTransform::applications() const {
    std::lock_guard<std::mutex> lock(g_transform_mutex);
    return applications_;
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
    std::unique_ptr<Checkpoint> ck = open_files(dir);
    std::lock_guard<std::mutex> lock(g_transform_mutex);
    if (g_transform) {
        g_transform->transform_(*ck);
        ++g_transform->applications_;
    }
    return ck;
}

void Checkpoint::replace_tensor_data(const std::string& name, std::vector<uint8_t> bytes) {
    const auto it = index_.find(name);
    FS_CHECK(it != index_.end(), "{}: cannot replace tensor '{}': not in the checkpoint", dir_, name);
    FS_CHECK(bytes.size() == it->second->nbytes, "{}: cannot replace tensor '{}' ({} bytes) with {} bytes", dir_,
             name, it->second->nbytes, bytes.size());
    auto owned = std::make_unique<OwnedTensor>();
    owned->view = *it->second;
    owned->bytes = std::move(bytes);
    owned->view.data = owned->bytes.data();
    it->second = &owned->view;
    owned_[name] = std::move(owned);  // frees a previous replacement, whose view index_ no longer points to
}

std::unique_ptr<Checkpoint> Checkpoint::open_files(const std::string& dir) {
    std::error_code ec;
    FS_CHECK(fs::is_directory(dir, ec), "{}: not a checkpoint directory (it does not exist or is not a directory)",
             dir);
    std::unique_ptr<Checkpoint> ck(new Checkpoint());
    ck->dir_ = dir;
    const fs::path root(dir);
    const std::string index_path = (root / kIndexName).string();

    if (fs::exists(index_path, ec)) {
        const std::string text = read_text_file(index_path, kMaxIndexBytes);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            fail("{}: not valid JSON ({})", index_path, e.what());
        }
        FS_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                 "{}: missing object 'weight_map'", index_path);
        std::map<std::string, std::string> weight_map;  // tensor -> shard
        std::set<std::string> shards;
        for (const auto& [tensor, shard] : j["weight_map"].items()) {
            FS_CHECK(shard.is_string(), "{}: weight_map entry for tensor '{}' must be a shard file name", index_path,
                     tensor);
            const std::string s = shard.get<std::string>();
            FS_CHECK(is_plain_file_name(s), "{}: tensor '{}' names shard '{}', which is not a plain file name in "
                     "the checkpoint directory", index_path, tensor, s);
            weight_map[tensor] = s;
            shards.insert(s);
        }
        FS_CHECK(!weight_map.empty(), "{}: weight_map is empty", index_path);
        std::map<std::string, const SafetensorsFile*> by_name;
        for (const std::string& s : shards) {
            const std::string p = (root / s).string();
            if (!fs::exists(p, ec)) {
                const auto it = std::find_if(weight_map.begin(), weight_map.end(),
                                             [&](const auto& kv) { return kv.second == s; });
                fail("{}: shard '{}' (listed for tensor '{}') does not exist in {}", index_path, s, it->first, dir);
            }
            ck->files_.push_back(SafetensorsFile::open(p));
            by_name[s] = ck->files_.back().get();
        }
        for (const auto& [tensor, shard] : weight_map) {
            const auto& stored = by_name.at(shard)->tensors();
            const auto it = stored.find(tensor);
            if (it == stored.end()) {
                for (const auto& [other_name, other] : by_name) {
                    if (other->tensors().count(tensor))
                        fail("{}: tensor '{}' is listed in shard '{}' but stored in shard '{}'", index_path, tensor,
                             shard, other_name);
                }
                fail("{}: tensor '{}' is listed in shard '{}' but missing from it", index_path, tensor, shard);
            }
            ck->index_[tensor] = &it->second;
        }
        for (const auto& [shard, file] : by_name) {
            for (const auto& [tensor, view] : file->tensors()) {
                (void)view;
                const auto it = weight_map.find(tensor);
                if (it == weight_map.end())
                    fail("{}: tensor '{}' stored in shard '{}' is not listed in the index", index_path, tensor, shard);
                if (it->second != shard)
                    fail("{}: tensor '{}' is stored in shard '{}' but the index lists it in shard '{}'", index_path,
                         tensor, shard, it->second);
            }
        }
        return ck;
    }

    // No index: model.safetensors, or every *.safetensors file of the directory (names must not repeat).
    std::vector<std::string> files, pickles;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
        const std::string name = entry.path().filename().string();
        if (!entry.is_regular_file(ec)) continue;
        if (ends_with(name, ".safetensors")) files.push_back(name);
        else if (is_pickle_name(name)) pickles.push_back(name);
    }
    FS_CHECK(!ec, "{}: cannot list directory: {}", dir, ec.message());
    std::sort(files.begin(), files.end());
    std::sort(pickles.begin(), pickles.end());
    if (files.empty()) {
        FS_CHECK(pickles.empty(), "{}: only PyTorch pickle weights found ('{}'); pickle checkpoints can run "
                 "arbitrary code and are refused (convert them to safetensors)", dir, pickles.front());
        fail("{}: no model.safetensors, no {} and no *.safetensors files", dir, kIndexName);
    }
    if (std::find(files.begin(), files.end(), "model.safetensors") != files.end()) files = {"model.safetensors"};
    for (const std::string& name : files) {
        ck->files_.push_back(SafetensorsFile::open((root / name).string()));
        for (const auto& [tensor, view] : ck->files_.back()->tensors()) {
            auto [it, inserted] = ck->index_.emplace(tensor, &view);
            FS_CHECK(inserted, "{}: tensor '{}' is stored both in '{}' and in another file", dir, tensor, name);
            (void)it;
        }
    }
    return ck;
}

const TensorView* Checkpoint::find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(const std::string& name) const {
    const TensorView* t = find(name);
    FS_CHECK(t != nullptr, "{}: tensor '{}' not found in the checkpoint", dir_, name);
    return *t;
}

size_t Checkpoint::total_bytes() const {
    size_t n = 0;
    for (const auto& [name, t] : index_) n += t->nbytes;
    return n;
}

}  // namespace flashseek
