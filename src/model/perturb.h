// The reference's own sensitivity: every RMSNorm weight multiplied by (1 + s * 2^-8), s = +-1 per channel from a
// seed, rounded to bf16 (round to nearest even): a perturbation of the size of one bf16 rounding error. A run with
// perturbed norms against the unperturbed run of the same backend and numerics measures how far equally valid
// roundings can move the logits of a model ("envelope"; scripts/compare_logits.py --envelope). Done on the weights
// at load time (Checkpoint level), so the CPU and CUDA backends see the same perturbed tensors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "model/config.h"

namespace flashseek {

// Per-channel relative step of the perturbation: 2^-8, one bf16 ulp at mantissa 2 (half an ulp at 1).
inline constexpr float kNormPerturbationStep = 1.f / 256.f;

// Names of every RMSNorm weight of a checkpoint of `cfg` (BF16, 1-D, "...norm.weight" in the inventory):
// attn_norm, ffn_norm, attn.q_norm, attn.kv_norm, the attention and indexer compressors' norms, the final norm and
// the MTP layers' norms. Stable order.
std::vector<std::string> rmsnorm_weight_names(const ModelConfig& cfg);

// The sign s of each of the n channels of tensor `name`: a splitmix64 stream seeded with
// fnv1a_u64(seed, fnv1a(name)); channel c gets -1 when the top bit of the stream's (c+1)-th output is set, else +1.
// Machine-independent.
std::vector<int8_t> norm_perturbation_signs(uint64_t seed, const std::string& name, int64_t n);

// bf16(w * (1 + s * 2^-8)), round to nearest even.
uint16_t perturb_bf16_value(uint16_t w, int sign);

struct NormPerturbationSummary {
    int tensors = 0;       // norm tensors perturbed
    int64_t values = 0;    // channels in them
    int64_t changed = 0;   // channels whose bf16 value changed (a +2^-8 step on a value with mantissa exactly 1.0
                           // is half an ulp and rounds back to even, so a few stay)
};

// Replaces every RMSNorm weight of `ckpt` (a checkpoint of `cfg`) by its perturbation with `seed`; every other
// tensor is untouched. Throws Error naming the tensor if one is missing or not a BF16 vector.
NormPerturbationSummary perturb_norm_weights(const ModelConfig& cfg, Checkpoint& ckpt, uint64_t seed);

// Parses the SEED of `--perturb-norms SEED`: a decimal integer in [0, 2^64). Error naming the flag otherwise.
uint64_t parse_perturbation_seed(const std::string& text);

// Installs a ScopedCheckpointTransform that perturbs the norms (seed `seed`, config from the checkpoint
// directory's config.json) of every checkpoint opened while the returned guard lives; *summary (if given)
// receives the last application's counts.
std::unique_ptr<ScopedCheckpointTransform> install_norm_perturbation(uint64_t seed,
                                                                     NormPerturbationSummary* summary = nullptr);

}  // namespace flashseek
