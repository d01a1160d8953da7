// rope_inv_freq (model/rope.h). Compiled without FMA contraction: the table must not depend on the build flags.
#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace flashseek {

std::vector<float> rope_inv_freq(int rope_dim, double theta, const RopeScaling* yarn) {
    FS_CHECK(rope_dim > 0 && rope_dim % 2 == 0, "qk_rope_head_dim must be a positive even number, got {}", rope_dim);
    const int half = rope_dim / 2;
    std::vector<float> extrap(static_cast<size_t>(half)), out(static_cast<size_t>(half));
    std::vector<float> pos_freq(static_cast<size_t>(half));
    for (int i = 0; i < half; ++i) {
        const float e = float(2 * i) / float(rope_dim);
        pos_freq[size_t(i)] = float(std::pow(theta, double(e)));
        extrap[size_t(i)] = 1.f / pos_freq[size_t(i)];
    }
    if (!yarn || yarn->type != "yarn") return extrap;
    const double factor = yarn->factor;
    const double orig = double(yarn->original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
        return (rope_dim * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(theta));
    };
    double low = std::max(0.0, std::floor(correction_dim(yarn->beta_fast)));
    double high = std::min(double(rope_dim - 1), std::ceil(correction_dim(yarn->beta_slow)));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
        const float interp = 1.f / (float(factor) * pos_freq[size_t(i)]);
        float ramp = (float(i) - float(low)) / (float(high) - float(low));
        ramp = std::clamp(ramp, 0.f, 1.f);
        const float extrap_factor = 1.f - ramp;
        out[size_t(i)] = interp * (1.f - extrap_factor) + extrap[size_t(i)] * extrap_factor;
    }
    return out;
}

}  // namespace flashseek
