// Reading one rank's shard of a checkpoint: only the tensors the rank holds, and of a sliced tensor only the slice's
// bytes, straight from the memory-mapped files (a row range is one contiguous byte range, a column range one run per
// row). No rank materializes the whole model: the bytes a rank reads are exactly those its slices cover.
//
// locate_shard says where every needed byte is (for a GPU upload: one cudaMemcpy / cudaMemcpy2D per tensor from the
// mapping, no host copy); read_shard copies them into host memory. Both validate each tensor they take against the
// inventory first (present, dtype, shape; a scale may be F8_E8M0 or F32), so a slice never reads outside a
// tensor, and report every problem by name in one Error. Routed experts stored as FP8 where config.json does not
// name expert_dtype are recognized from the first expert's dtype, as bind_weights does.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "loader/tensor_region.h"
#include "model/config.h"
#include "model/sharding.h"

namespace flashseek {

struct ShardTensorSource {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> full_shape;  // in the checkpoint
    std::vector<int64_t> shape;       // as the rank stores it
    TensorSlice slice;
    ByteRegion source;  // the slice's bytes in the mapped checkpoint
};

struct ShardSources {
    ModelConfig config;  // the config with the stored expert format filled in
    std::vector<ShardTensorSource> tensors;  // in the inventory's order
    size_t bytes = 0;                        // what reading them reads
    size_t tensors_skipped = 0;              // tensors of the scope the rank does not hold (other ranks' experts)
};

// scope.f32_block_scales is ignored: each scale tensor's dtype is read from its header.
ShardSources locate_shard(const Checkpoint& ckpt, const ModelConfig& cfg, const RankSlice& rank,
                          const ShardScope& scope);

struct ShardData {
    std::vector<TensorData> tensors;  // the rank's tensors in their stored (sliced) shapes, inventory order
    std::vector<TensorSlice> slices;  // the slice each of them is, of the checkpoint tensor of the same name
    size_t bytes_read = 0;            // bytes copied from the checkpoint (= the tensors' bytes)
    std::map<std::string, size_t> by_name;  // tensor name -> index into tensors

    const TensorData* find(const std::string& name) const;  // nullptr when the rank does not hold it
};

ShardData read_shard(const Checkpoint& ckpt, const ModelConfig& cfg, const RankSlice& rank, const ShardScope& scope);

}  // namespace flashseek
