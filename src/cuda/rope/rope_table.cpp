// Host construction of the RoPE frequency table from the model config (model/rope.h rope_inv_freq, the table the
// CPU reference uses too, so the two backends rotate by identical fp32 frequencies).
#include "cuda/rope/rope.cuh"
#include "model/rope.h"
#include "util/error.h"

namespace flashseek::cuda {

RopeTable make_rope_table(int rope_dim, double theta, const RopeScaling* yarn) {
    FS_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim / 2 <= kMaxRopePairs,
             "qk_rope_head_dim must be even and at most {}, got {}", 2 * kMaxRopePairs, rope_dim);
    const std::vector<float> f = rope_inv_freq(rope_dim, theta, yarn);
    RopeTable t;
    t.n_pairs = rope_dim / 2;
    for (int i = 0; i < t.n_pairs; ++i) t.inv_freq[i] = f[size_t(i)];
    return t;
}

RopeTable make_rope_table(const ModelConfig& cfg, int ratio) {
    if (ratio > 0) return make_rope_table(cfg.qk_rope_head_dim, cfg.compress_rope_theta, &cfg.rope_scaling);
    return make_rope_table(cfg.qk_rope_head_dim, cfg.rope_theta, nullptr);
}

}  // namespace flashseek::cuda
