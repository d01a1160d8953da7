// create_backend: "cpu" builds the CPU reference backend, "cuda" defers to the CUDA backend when this build has
// one. Also the numerics name parser shared by the CLI commands.
#include "engine/factory.h"

#include "engine/cpu_backend.h"
#include "util/error.h"

namespace flashseek {

Numerics parse_numerics(const std::string& name) {
    if (name == "exact") return Numerics::Exact;
    if (name == "release") return Numerics::Release;
    fail("numerics '{}' is not one of: exact, release", name);
}

std::unique_ptr<Backend> create_backend(const std::string& model_dir, const BackendOptions& opt) {
    if (opt.backend == "cpu") return std::make_unique<CpuBackend>(model_dir, opt);
    if (opt.backend == "cuda") {
#ifdef FLASHSEEK_HAVE_CUDA
        return create_cuda_backend(model_dir, opt);
#else
        fail("backend 'cuda': this build of flashseek has no CUDA support (rebuild with nvcc present and "
             "-DFLASHSEEK_CUDA=ON)");
#endif
    }
    fail("backend '{}' is not one of: cpu, cuda", opt.backend);
}

}  // namespace flashseek
