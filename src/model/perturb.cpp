// --perturb-norms: a one-rounding-error perturbation of every RMSNorm weight, applied to the checkpoint's tensors
// at load time (see perturb.h).
#include "model/perturb.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "model/weights.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/numeric.h"
#include "util/random.h"

namespace flashseek {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> rmsnorm_weight_names(const ModelConfig& cfg) {
    std::vector<std::string> names;
    for (const TensorSpec& t : expected_tensors(cfg))
        if (t.dtype == DType::BF16 && t.shape.size() == 1 && ends_with(t.name, "norm.weight")) names.push_back(t.name);
    return names;
}

std::vector<int8_t> norm_perturbation_signs(uint64_t seed, const std::string& name, int64_t n) {
    uint64_t state = fnv1a_u64(seed, fnv1a_str(name));
    std::vector<int8_t> s(static_cast<size_t>(n));
    for (auto& x : s) x = (splitmix64(state) >> 63) ? int8_t(-1) : int8_t(1);
    return s;
}

uint16_t perturb_bf16_value(uint16_t w, int sign) {
    // The product is exact in fp32 (8 significant bits x 9), so the only rounding is the one to bf16.
    return f32_to_bf16(bf16_to_f32(w) * (1.f + float(sign) * kNormPerturbationStep));
}

NormPerturbationSummary perturb_norm_weights(const ModelConfig& cfg, Checkpoint& ckpt, uint64_t seed) {
    NormPerturbationSummary sum;
    for (const std::string& name : rmsnorm_weight_names(cfg)) {
        const TensorView* t = ckpt.find(name);
        FS_CHECK(t != nullptr, "--perturb-norms: {}: norm tensor '{}' is missing", ckpt.dir(), name);
        FS_CHECK(t->dtype == DType::BF16 && t->shape.size() == 1,
                 "--perturb-norms: {}: norm tensor '{}' is {} {}, expected a BF16 vector", ckpt.dir(), name,
                 dtype_name(t->dtype), t->shape_str());
        const int64_t n = t->shape[0];
        const auto signs = norm_perturbation_signs(seed, name, n);
        std::vector<uint8_t> bytes(t->nbytes);
        for (int64_t i = 0; i < n; ++i) {
            uint16_t w, p;
            std::memcpy(&w, t->data + 2 * i, 2);
            p = perturb_bf16_value(w, signs[size_t(i)]);
            sum.changed += p != w;
            std::memcpy(bytes.data() + 2 * i, &p, 2);
        }
        ckpt.replace_tensor_data(name, std::move(bytes));
        ++sum.tensors;
        sum.values += n;
    }
    return sum;
}

uint64_t parse_perturbation_seed(const std::string& text) {
    const bool digits = !text.empty() && text.size() <= 20 &&
                        text.find_first_not_of("0123456789") == std::string::npos;
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = digits ? std::strtoull(text.c_str(), &end, 10) : 0;
    FS_CHECK(digits && errno == 0 && end && *end == '\0',
             "--perturb-norms: SEED must be a decimal integer in [0, 2^64), got '{}'", text);
    return uint64_t(v);
}

std::unique_ptr<ScopedCheckpointTransform> install_norm_perturbation(uint64_t seed, NormPerturbationSummary* summary) {
    return std::make_unique<ScopedCheckpointTransform>([seed, summary](Checkpoint& ckpt) {
        const ModelConfig cfg = load_model_config(ckpt.dir() + "/config.json");
        const NormPerturbationSummary s = perturb_norm_weights(cfg, ckpt, seed);
        if (summary) *summary = s;
    });
}

}  // namespace flashseek
