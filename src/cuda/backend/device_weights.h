// Model weights on the GPU, kept in their checkpoint formats (FP8 e4m3 + E8M0/F32 128x128 block scales, packed
// FP4 e2m1 + E8M0 per-32 scales, bf16, f32): no dequantized copies. Two sources fill the same store:
//  * upload_checkpoint: copies each needed tensor's bytes from the memory-mapped checkpoint;
//  * generate_dummy_weights: random tensors of the inventory's dtypes and shapes drawn directly on the GPU (no
//    disk), sized so that every linear layer keeps unit-variance activations, for any config (full V4-Flash too).
// bind_device_weights then builds the same ModelWeights structure the CPU uses, with device pointers in `data`.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "cuda/backend/cuda_util.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "model/sharding.h"
#include "model/weights.h"

namespace flashseek::cuda {

struct DeviceTensorStore {
    DeviceBuffer arena;                        // every tensor lives in this one allocation (256-byte aligned)
    std::map<std::string, TensorView> views;   // name -> view whose data points into `arena`
    size_t total_bytes = 0;

    const TensorView* find(const std::string& name) const;
    const TensorView& get(const std::string& name) const;  // throws Error naming the tensor
};

// True when `name` is used by a forward over the first n_layers layers (globals and layers.<L>. with L < n_layers;
// never mtp.*).
bool tensor_needed(const std::string& name, int n_layers);

// Copies the tensors a forward of the first n_layers layers needs. progress(done, total) may cancel (returns false).
DeviceTensorStore upload_checkpoint(const Checkpoint& ckpt, int n_layers,
                                    const std::function<bool(size_t, size_t)>& progress = {});

// Random weights for `cfg` (first n_layers layers) generated on the device from `seed`; with `rank`, only that rank's
// slices, in their local shapes (a tensor every rank holds whole gets the same values on every rank).
DeviceTensorStore generate_dummy_weights(const ModelConfig& cfg, int n_layers, uint64_t seed,
                                         const RankSlice* rank = nullptr);

// One rank's slices of a checkpoint (model/shard_reader.h): only its tensors, of a sliced tensor only the slice's
// bytes, copied from the mapped files straight to the device. progress(done, total) may cancel (returns false).
DeviceTensorStore upload_shard(const Checkpoint& ckpt, const ModelConfig& cfg, int n_layers, const RankSlice& rank,
                               const std::function<bool(size_t, size_t)>& progress = {});

// Binds the structure for the first n_layers layers; missing tensors are reported by name. A shard's store holds the
// routed experts [expert_begin, expert_end) only (expert_end < 0: all), bound at indices 0.., and the shared expert
// only with `shared`; its sliced tensors carry their local shapes.
ModelWeights bind_device_weights(const ModelConfig& cfg, const DeviceTensorStore& store, int n_layers,
                                 int expert_begin = 0, int expert_end = -1, bool shared = true);

}  // namespace flashseek::cuda
