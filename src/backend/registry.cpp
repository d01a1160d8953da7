// The backend registry: a name -> factory map behind a mutex, and the numerics name parser the CLI commands share.
#include "backend/registry.h"

#include <map>
#include <mutex>

#include "util/error.h"

namespace flashseek {

namespace {

struct Registry {
    std::mutex mu;
    std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
    static Registry r;
    return r;
}

}  // namespace

Numerics parse_numerics(const std::string& name) {
    if (name == "exact") return Numerics::Exact;
    if (name == "release") return Numerics::Release;
    fail("numerics '{}' is not one of: exact, release", name);
}

void register_backend(const std::string& name, BackendFactory factory) {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    r.factories[name] = std::move(factory);
}

std::vector<std::string> registered_backends() {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    std::vector<std::string> names;
    for (const auto& [name, f] : r.factories) names.push_back(name);
    return names;
}

std::unique_ptr<Backend> create_backend(const std::string& model_dir, const BackendOptions& opt) {
    BackendFactory factory;
    std::string known;
    {
        Registry& r = registry();
        std::lock_guard lock(r.mu);
        auto it = r.factories.find(opt.backend);
        if (it != r.factories.end()) factory = it->second;
        for (const auto& [name, f] : r.factories) known += (known.empty() ? "" : ", ") + name;
    }
    if (factory) return factory(model_dir, opt);
    if (opt.backend == "cuda")
        fail("backend 'cuda': this build of flashseek has no CUDA support (rebuild with nvcc present and "
             "-DFLASHSEEK_CUDA=ON)");
    fail("backend '{}' is not one of: {}", opt.backend, known.empty() ? "(none registered)" : known);
}

}  // namespace flashseek
