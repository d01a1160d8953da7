// Rectangular parts of a row-major tensor as byte regions, for reading one rank's slice of a checkpoint tensor
// straight from the mapped file: a range of dim 0 is one contiguous run of bytes; a range of dim 1 is one run per
// row, a fixed pitch apart (what cudaMemcpy2D takes, so a GPU upload needs no host copy either). Ranges are checked
// against the tensor's shape; an Error names the tensor.
#pragma once
#include <cstddef>
#include <cstdint>

#include "loader/safetensors.h"

namespace flashseek {

// `runs` runs of `run_bytes` bytes; run i starts at data + i * pitch.
struct ByteRegion {
    const uint8_t* data = nullptr;
    size_t run_bytes = 0;
    size_t runs = 0;
    size_t pitch = 0;

    size_t bytes() const { return run_bytes * runs; }
};

// Every byte of the tensor: one run.
ByteRegion tensor_whole(const TensorView& t);
// Dim-0 range [begin, end) (any rank >= 1): one run.
ByteRegion tensor_rows(const TensorView& t, int64_t begin, int64_t end);
// Dim-1 range [begin, end) of a tensor of rank >= 2 (dims after 1 travel with their column): one run per dim-0 row.
ByteRegion tensor_columns(const TensorView& t, int64_t begin, int64_t end);

// Copies the region's runs back to back into dst (region.bytes() bytes).
void copy_region(const ByteRegion& region, uint8_t* dst);

}  // namespace flashseek
