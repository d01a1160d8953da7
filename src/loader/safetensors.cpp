// Safetensors reading (mmap, bounded header validation) and writing. Every malformed input becomes an Error that
// names the file and, where there is one, the tensor; nothing here reads outside the mapped range.
#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "util/error.h"

namespace flashseek {

namespace {

// The header is JSON text; real checkpoints need about 10 MB for 70k tensors in one file. Anything beyond this
// bound is rejected before allocating, so a corrupted length cannot exhaust memory.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kMaxRank = 8;

struct DTypeInfo {
    DType type;
    const char* name;
    size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::BF16, "BF16", 2},      {DType::F16, "F16", 2},          {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},        {DType::F8_E4M3, "F8_E4M3", 1},  {DType::F8_E8M0, "F8_E8M0", 1},
    {DType::I8, "I8", 1},          {DType::U8, "U8", 1},            {DType::I16, "I16", 2},
    {DType::I32, "I32", 4},        {DType::I64, "I64", 8},          {DType::BOOL, "BOOL", 1},
};

std::string sys_error() { return std::strerror(errno); }

}  // namespace

const char* dtype_name(DType t) {
    for (const auto& d : kDTypes)
        if (d.type == t) return d.name;
    return "?";
}

size_t dtype_size(DType t) {
    for (const auto& d : kDTypes)
        if (d.type == t) return d.size;
    return 0;
}

bool parse_dtype(const std::string& s, DType* out) {
    for (const auto& d : kDTypes) {
        if (s == d.name) {
            *out = d.type;
            return true;
        }
    }
    return false;
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string TensorView::shape_str() const { return shape_to_string(shape); }

namespace {

// Recognizes PyTorch pickle (protocol 2-5) and zip-based torch.save files, which must never be loaded: unpickling
// runs arbitrary code.
bool looks_like_pickle(const uint8_t* p, size_t n) {
    if (n >= 2 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5) return true;
    if (n >= 4 && p[0] == 'P' && p[1] == 'K' && p[2] == 3 && p[3] == 4) return true;
    return false;
}

// Parses the header JSON, rejecting duplicate keys at any depth (nlohmann would silently keep the last one, so a
// duplicated tensor name could hide a second, conflicting entry).
nlohmann::json parse_header_json(const std::string& text, const std::string& path) {
    std::vector<std::unordered_set<std::string>> keys;  // the keys seen so far in each open object
    std::string duplicate;
    auto callback = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (ev == E::object_start) {
            keys.emplace_back();
        } else if (ev == E::object_end) {
            if (!keys.empty()) keys.pop_back();
        } else if (ev == E::key && !keys.empty() && duplicate.empty()) {
            std::string k = parsed.get<std::string>();
            if (!keys.back().insert(k).second) duplicate = std::move(k);
        }
        return true;
    };
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text, callback);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: safetensors header is not valid JSON ({})", path, e.what());
    }
    FS_CHECK(duplicate.empty(), "{}: safetensors header has the key '{}' twice (duplicate tensor name?)", path,
             duplicate);
    FS_CHECK(j.is_object(), "{}: safetensors header is not a JSON object", path);
    return j;
}

int64_t json_to_dim(const nlohmann::json& v, const std::string& path, const std::string& name, const char* field) {
    FS_CHECK(v.is_number_integer(), "{}: tensor '{}': {} entries must be non-negative integers, got {}", path, name,
             field, v.dump());
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        FS_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()), "{}: tensor '{}': {} value {} is too large",
                 path, name, field, u);
        return int64_t(u);
    }
    const int64_t x = v.get<int64_t>();
    FS_CHECK(x >= 0, "{}: tensor '{}': {} entries must be non-negative, got {}", path, name, field, x);
    return x;
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FS_CHECK(fd >= 0, "{}: cannot open: {}", path, sys_error());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const std::string err = sys_error();
        ::close(fd);
        fail("{}: cannot stat: {}", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path);
    }
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    f->size_ = size_t(st.st_size);
    if (f->size_ > 0) {
        void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const std::string err = sys_error();
            ::close(fd);
            fail("{}: mmap failed: {}", path, err);
        }
        f->map_ = m;
    }
    ::close(fd);  // the mapping stays valid after close

    const auto* base = static_cast<const uint8_t*>(f->map_);
    const size_t size = f->size_;
    if (looks_like_pickle(base, size))
        fail("{}: this is a PyTorch pickle checkpoint; pickle files can run arbitrary code and are refused "
             "(convert it to safetensors)", path);
    FS_CHECK(size >= 8, "{}: truncated: {} bytes, too short for the 8-byte safetensors header length", path, size);
    uint64_t header_len = 0;
    std::memcpy(&header_len, base, 8);  // little-endian on every supported host
    FS_CHECK(header_len <= kMaxHeaderBytes, "{}: safetensors header length {} exceeds the {} byte limit "
             "(corrupted or not a safetensors file)", path, header_len, kMaxHeaderBytes);
    FS_CHECK(header_len <= size - 8, "{}: truncated: header length {} runs past the end of the {} byte file", path,
             header_len, size);
    FS_CHECK(header_len >= 2, "{}: safetensors header length {} is too small for a JSON object", path, header_len);

    const std::string text(reinterpret_cast<const char*>(base + 8), size_t(header_len));
    const nlohmann::json header = parse_header_json(text, path);
    const size_t data_start = 8 + size_t(header_len);
    const size_t data_size = size - data_start;

    struct Range {
        uint64_t begin, end;
        const std::string* name;
    };
    std::vector<Range> ranges;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            FS_CHECK(entry.is_object(), "{}: __metadata__ must be an object of strings", path);
            for (const auto& [k, v] : entry.items()) {
                FS_CHECK(v.is_string(), "{}: __metadata__ value of '{}' must be a string", path, k);
                f->metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        FS_CHECK(!name.empty(), "{}: a tensor has an empty name", path);
        FS_CHECK(entry.is_object(), "{}: tensor '{}': entry must be an object", path, name);
        for (const auto& [k, v] : entry.items()) {
            (void)v;
            FS_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", "{}: tensor '{}': unknown field '{}'",
                     path, name, k);
        }
        FS_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), "{}: tensor '{}': missing string field "
                 "'dtype'", path, name);
        FS_CHECK(entry.contains("shape") && entry["shape"].is_array(), "{}: tensor '{}': missing array field "
                 "'shape'", path, name);
        FS_CHECK(entry.contains("data_offsets") && entry["data_offsets"].is_array() &&
                     entry["data_offsets"].size() == 2,
                 "{}: tensor '{}': 'data_offsets' must be an array [begin, end]", path, name);
        TensorView t;
        t.name = name;
        const std::string dt = entry["dtype"].get<std::string>();
        FS_CHECK(parse_dtype(dt, &t.dtype), "{}: tensor '{}': unknown dtype '{}'", path, name, dt);
        const auto& shape = entry["shape"];
        FS_CHECK(shape.size() <= kMaxRank, "{}: tensor '{}': rank {} exceeds {}", path, name, shape.size(),
                 kMaxRank);
        // numel * dtype size, checked for overflow at every step.
        uint64_t nbytes = dtype_size(t.dtype);
        for (const auto& d : shape) {
            const int64_t dim = json_to_dim(d, path, name, "shape");
            t.shape.push_back(dim);
            if (dim != 0 && nbytes > std::numeric_limits<uint64_t>::max() / uint64_t(dim))
                fail("{}: tensor '{}': shape {} overflows the byte size", path, name, shape.dump());
            nbytes *= uint64_t(dim);
        }
        const uint64_t begin = uint64_t(json_to_dim(entry["data_offsets"][0], path, name, "data_offsets"));
        const uint64_t end = uint64_t(json_to_dim(entry["data_offsets"][1], path, name, "data_offsets"));
        FS_CHECK(begin <= end, "{}: tensor '{}': data_offsets [{}, {}] are reversed", path, name, begin, end);
        FS_CHECK(end <= data_size, "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes; "
                 "file truncated?)", path, name, begin, end, data_size);
        FS_CHECK(end - begin == nbytes, "{}: tensor '{}': {} x {} needs {} bytes but data_offsets [{}, {}] hold {}",
                 path, name, dt, shape.dump(), nbytes, begin, end, end - begin);
        t.nbytes = size_t(nbytes);
        t.data = base + data_start + begin;
        auto [it, inserted] = f->tensors_.emplace(name, std::move(t));
        FS_CHECK(inserted, "{}: duplicate tensor name '{}'", path, name);
        ranges.push_back({begin, end, &it->first});
    }
    // Tensors must tile the data area exactly, as the safetensors library requires: overlaps would alias two
    // tensors, and holes or trailing bytes mean the header and the data disagree.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t pos = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
        const Range& r = ranges[i];
        FS_CHECK(r.begin >= pos, "{}: tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", path,
                 *ranges[i - 1].name, *r.name, ranges[i - 1].begin, ranges[i - 1].end, r.begin, r.end);
        FS_CHECK(r.begin == pos, "{}: {} unused bytes before tensor '{}' (data_offsets begin {}, expected {})", path,
                 r.begin - pos, *r.name, r.begin, pos);
        pos = r.end;
    }
    FS_CHECK(pos == data_size, "{}: {} bytes of data after the last tensor are not described by the header", path,
             data_size - pos);
    return f;
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap(map_, size_);
}

void write_safetensors(const std::string& path, const std::vector<const TensorData*>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    // Order as the Python safetensors writer does: larger dtypes first, then by name, so that every tensor starts
    // at a multiple of its element size (the header is padded to 8 bytes).
    std::vector<const TensorData*> order(tensors.begin(), tensors.end());
    std::stable_sort(order.begin(), order.end(), [](const TensorData* a, const TensorData* b) {
        const size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
        return sa != sb ? sa > sb : a->name < b->name;
    });
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        header["__metadata__"] = m;
    }
    uint64_t offset = 0;
    for (const TensorData* t : order) {
        FS_CHECK(!header.contains(t->name), "write_safetensors {}: duplicate tensor '{}'", path, t->name);
        uint64_t numel = 1;
        for (auto d : t->shape) numel *= uint64_t(d);
        FS_CHECK(numel * dtype_size(t->dtype) == t->bytes.size(), "write_safetensors {}: tensor '{}' has {} bytes, "
                 "its shape and dtype need {}", path, t->name, t->bytes.size(), numel * dtype_size(t->dtype));
        nlohmann::ordered_json e;
        e["dtype"] = dtype_name(t->dtype);
        e["shape"] = t->shape;
        e["data_offsets"] = {offset, offset + t->bytes.size()};
        header[t->name] = e;
        offset += t->bytes.size();
    }
    std::string text = header.dump();
    while ((8 + text.size()) % 8 != 0) text.push_back(' ');
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    FS_CHECK(out.good(), "{}: cannot create: {}", path, sys_error());
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const TensorData* t : order) out.write(reinterpret_cast<const char*>(t->bytes.data()),
                                               std::streamsize(t->bytes.size()));
    out.close();
    FS_CHECK(out.good(), "{}: write failed: {}", path, sys_error());
}

}  // namespace flashseek
