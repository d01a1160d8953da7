// nccl_api (nccl_library.h): libnccl.so.2 found by the run-time library search (cuda/common/runtime_library.h),
// its entry points resolved, the version checked. Loaded once; the library stays loaded for the life of the process
// (NCCL keeps threads and exit handlers).
#include "cuda/comm/nccl_library.h"

#include <dlfcn.h>

#include <memory>
#include <mutex>

#include "cuda/common/runtime_library.h"
#include "util/error.h"

namespace flashseek::cuda {
namespace {

RuntimeLibrarySpec nccl_spec() {
    RuntimeLibrarySpec spec;
    spec.file = "libnccl.so.2";
    spec.override_variable = "FLASHSEEK_NCCL_LIBRARY";
    spec.wheel_folder = "nvidia/nccl/lib";  // the PyPI wheels nvidia-nccl-cu13 / -cu12
    return spec;
}

template <typename Fn>
void resolve(void* handle, const std::string& path, const char* symbol, Fn& fn, bool required) {
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    FS_CHECK(fn || !required, "NCCL: {} has no entry point {} (not an NCCL 2 library?)", path, symbol);
}

NcclApi load() {
    const RuntimeLibrarySpec spec = nccl_spec();
    const RuntimeLibrary lib = load_runtime_library(spec);
    FS_CHECK(lib.handle || !lib.forced, "NCCL: cannot load {}", lib.looked.empty() ? "" : lib.looked.front());
    if (!lib.handle) {
        fail("NCCL: {} was not found. FLASHSEEK_NCCL_LIBRARY is unset; looked at:{}\nInstall NCCL (the CUDA toolkit's "
             "package, or `pip install nvidia-nccl-cu13`) or set FLASHSEEK_NCCL_LIBRARY to the file",
             spec.file, looked_lines(lib));
    }
    void* const handle = lib.handle;
    const std::string& path = lib.path;
    NcclApi api;
    api.path = path;
    resolve(handle, path, "ncclGetVersion", api.get_version, true);
    resolve(handle, path, "ncclGetErrorString", api.get_error_string, true);
    resolve(handle, path, "ncclGetLastError", api.get_last_error, true);
    resolve(handle, path, "ncclCommInitAll", api.comm_init_all, true);
    resolve(handle, path, "ncclCommSplit", api.comm_split, true);
    resolve(handle, path, "ncclCommFinalize", api.comm_finalize, true);
    resolve(handle, path, "ncclCommDestroy", api.comm_destroy, true);
    resolve(handle, path, "ncclGroupStart", api.group_start, true);
    resolve(handle, path, "ncclGroupEnd", api.group_end, true);
    resolve(handle, path, "ncclAllReduce", api.all_reduce, true);
    resolve(handle, path, "ncclSend", api.send, true);
    resolve(handle, path, "ncclRecv", api.recv, true);
    FS_CHECK(api.get_version(&api.version) == kNcclSuccess, "NCCL: ncclGetVersion failed in {}", path);
    FS_CHECK(api.version >= kNcclMinVersion, "NCCL: {} is version {}; flashseek needs NCCL 2.18 or later", path,
             api.version);
    return api;
}

}  // namespace

const NcclApi& nccl_api() {
    // Loaded once; a failure is not cached, so the error is raised (with its full message) on every attempt.
    static std::mutex mutex;
    static std::unique_ptr<NcclApi> api;
    std::lock_guard<std::mutex> lock(mutex);
    if (!api) api = std::make_unique<NcclApi>(load());
    return *api;
}

}  // namespace flashseek::cuda
