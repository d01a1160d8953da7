// Byte regions of tensor slices (tensor_region.h).
#include "loader/tensor_region.h"

#include <cstring>

#include "util/error.h"

namespace flashseek {

namespace {

void check_range(const TensorView& t, int dim, int64_t begin, int64_t end) {
    FS_CHECK(!t.empty(), "tensor '{}': no data to slice", t.name);
    FS_CHECK(int(t.shape.size()) > dim, "tensor '{}': shape {} has no dim {} to slice", t.name, t.shape_str(), dim);
    FS_CHECK(begin >= 0 && begin <= end && end <= t.shape[size_t(dim)],
             "tensor '{}': range [{}, {}) of dim {} is outside its shape {}", t.name, begin, end, dim, t.shape_str());
}

// Bytes of one index step along `dim` (the product of the later dims times the element size).
size_t stride_bytes(const TensorView& t, int dim) {
    size_t s = dtype_size(t.dtype);
    for (size_t d = size_t(dim) + 1; d < t.shape.size(); ++d) s *= size_t(t.shape[d]);
    return s;
}

}  // namespace

ByteRegion tensor_whole(const TensorView& t) {
    FS_CHECK(!t.empty() || t.nbytes == 0, "tensor '{}': no data", t.name);
    return {t.data, t.nbytes, 1, t.nbytes};
}

ByteRegion tensor_rows(const TensorView& t, int64_t begin, int64_t end) {
    check_range(t, 0, begin, end);
    const size_t row = stride_bytes(t, 0);
    const size_t run = size_t(end - begin) * row;
    return {t.data + size_t(begin) * row, run, 1, run};
}

ByteRegion tensor_columns(const TensorView& t, int64_t begin, int64_t end) {
    check_range(t, 1, begin, end);
    const size_t column = stride_bytes(t, 1);
    return {t.data + size_t(begin) * column, size_t(end - begin) * column, size_t(t.shape[0]),
            size_t(t.shape[1]) * column};
}

void copy_region(const ByteRegion& r, uint8_t* dst) {
    if (r.bytes() == 0) return;
    if (r.pitch == r.run_bytes) {
        std::memcpy(dst, r.data, r.bytes());
        return;
    }
    for (size_t i = 0; i < r.runs; ++i) std::memcpy(dst + i * r.run_bytes, r.data + i * r.pitch, r.run_bytes);
}

}  // namespace flashseek
