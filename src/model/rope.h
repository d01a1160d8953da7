// RoPE inverse frequencies of the model (docs/model.md §2.10): one fp32 table per rotary configuration, shared
// by the CPU reference and the CUDA backend so that both rotate by identical values.
#pragma once
#include <vector>

#include "model/config.h"

namespace flashseek {

// rope_dim/2 inverse frequencies f_i = theta^(-2i/rope_dim) in fp32; with yarn (non-null, type "yarn"):
// f_i = f_i * (1 - ramp_i) + f_i / factor * ramp_i, ramp from the beta_fast/beta_slow correction dims
// (floor/ceil, clamped to [0, rope_dim-1]). No mscale.
std::vector<float> rope_inv_freq(int rope_dim, double theta, const RopeScaling* yarn);

}  // namespace flashseek
