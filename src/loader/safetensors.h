// Safetensors checkpoints, memory-mapped: one file, or shards listed in model.safetensors.index.json.
// The header is parsed with hard bounds (size, offsets in range, no overlap, shape x dtype = byte size), so a
// truncated or corrupted file gives an Error naming the file and tensor, never a crash. Pickle/.bin is refused.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace flashseek {

enum class DType : uint8_t { BF16, F16, F32, F64, F8_E4M3, F8_E8M0, I8, U8, I16, I32, I64, BOOL };

const char* dtype_name(DType t);           // the safetensors spelling, e.g. "F8_E4M3"
size_t dtype_size(DType t);                // bytes per element
bool parse_dtype(const std::string& s, DType* out);
std::string shape_to_string(const std::vector<int64_t>& shape);  // "[1024, 4096]"

// A read-only view of one tensor's bytes inside a mapped file (or any other owner).
struct TensorView {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;
    size_t nbytes = 0;

    bool empty() const { return data == nullptr; }
    int64_t numel() const;
    int64_t dim(int i) const { return shape.at(size_t(i)); }
    std::string shape_str() const;  // "[1024, 4096]"
};

class SafetensorsFile {
public:
    // Maps `path` and validates its header; throws Error naming the file on any problem.
    static std::unique_ptr<SafetensorsFile> open(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    size_t file_size() const { return size_; }

private:
    SafetensorsFile() = default;
    std::string path_;
    void* map_ = nullptr;
    size_t size_ = 0;
    std::map<std::string, TensorView> tensors_;
    std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: config.json plus model.safetensors or shards + model.safetensors.index.json.
class Checkpoint {
public:
    static std::unique_ptr<Checkpoint> open(const std::string& dir);

    const std::string& dir() const { return dir_; }
    // nullptr when absent.
    const TensorView* find(const std::string& name) const;
    const TensorView& get(const std::string& name) const;  // throws Error naming the tensor when absent
    const std::map<std::string, const TensorView*>& all() const { return index_; }
    size_t total_bytes() const;

    // Replaces the bytes of tensor `name` by `bytes` (same size; dtype and shape stay), owned by this checkpoint:
    // find/get/all return the new bytes from then on, the mapped file is not touched. For load-time weight
    // transformations (ScopedCheckpointTransform). Throws Error naming the tensor when absent or the size differs.
    void replace_tensor_data(const std::string& name, std::vector<uint8_t> bytes);

private:
    struct OwnedTensor {
        TensorView view;
        std::vector<uint8_t> bytes;
    };
    static std::unique_ptr<Checkpoint> open_files(const std::string& dir);
    std::string dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, const TensorView*> index_;
    std::map<std::string, std::unique_ptr<OwnedTensor>> owned_;
};

// A load-time transformation that Checkpoint::open applies to every checkpoint it opens while the guard lives.
// Backends open their checkpoints themselves (CPU and CUDA alike), so a command that changes the weights for
// every backend (`flashseek logits --perturb-norms`) installs one around create_backend. Process-wide, one at a
// time (a second guard while one lives is an Error); the transformation runs under a lock.
class ScopedCheckpointTransform {
public:
    explicit ScopedCheckpointTransform(std::function<void(Checkpoint&)> transform);
    ~ScopedCheckpointTransform();
    ScopedCheckpointTransform(const ScopedCheckpointTransform&) = delete;
    ScopedCheckpointTransform& operator=(const ScopedCheckpointTransform&) = delete;
    // How many checkpoints it has transformed so far.
    int applications() const;

private:
    std::function<void(Checkpoint&)> transform_;
    int applications_ = 0;
    friend class Checkpoint;
};

// Writes tensors to one safetensors file (used by gen-checkpoint and by tests that build damaged files).
struct TensorData {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::vector<const TensorData*>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace flashseek
