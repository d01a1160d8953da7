// register_builtin_backends: the CPU reference always, the CUDA backend where this build has it.
#include "backends/builtin.h"

#include <mutex>

#include "backend/registry.h"
#include "cpu/cpu_backend.h"
#ifdef FLASHSEEK_HAVE_CUDA
#include "cuda/backend/cuda_backend.h"
#endif

namespace flashseek {

void register_builtin_backends() {
    static std::once_flag once;
    std::call_once(once, [] {
        register_backend("cpu", [](const std::string& dir, const BackendOptions& opt) -> std::unique_ptr<Backend> {
            return std::make_unique<CpuBackend>(dir, opt);
        });
#ifdef FLASHSEEK_HAVE_CUDA
        register_backend("cuda", &create_cuda_backend);
#endif
    });
}

}  // namespace flashseek
