// nccl_api (nccl_library.h): the search for libnccl.so.2, dlopen / dlsym, the version check. Loaded once; the
// library stays loaded for the life of the process (NCCL keeps threads and exit handlers).
#include "cuda/comm/nccl_library.h"

#include <dlfcn.h>
#include <glob.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sys/stat.h>

#include "util/error.h"

namespace flashseek::cuda {
namespace {

constexpr const char* kLibraryName = "libnccl.so.2";

std::string env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

bool is_file(const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Every file matching the glob pattern, in glob's (sorted) order.
std::vector<std::string> glob_files(const std::string& pattern) {
    std::vector<std::string> out;
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    return out;
}

// The folders (or glob patterns of folders) searched after the loader's own search, in order.
std::vector<std::string> candidate_folders() {
    std::vector<std::string> folders;
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
        const std::string root = env_or_empty(var);
        if (root.empty()) continue;
        for (const char* sub : {"/lib64", "/lib", "/targets/*/lib"}) folders.push_back(root + sub);
    }
    for (const char* f : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/targets/*/lib",
                          "/usr/local/cuda-*/lib64", "/usr/local/cuda-*/lib", "/usr/lib/x86_64-linux-gnu",
                          "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"})
        folders.emplace_back(f);
    // The PyPI wheels (nvidia-nccl-cu13, nvidia-nccl-cu12) put the library in site-packages/nvidia/nccl/lib.
    std::vector<std::string> site_roots;
    for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
        const std::string root = env_or_empty(var);
        if (!root.empty()) site_roots.push_back(root + "/lib/python3*/site-packages");
    }
    const std::string python_path = env_or_empty("PYTHONPATH");
    for (size_t begin = 0; begin <= python_path.size() && !python_path.empty();) {
        const size_t end = std::min(python_path.find(':', begin), python_path.size());
        if (end > begin) site_roots.push_back(python_path.substr(begin, end - begin));
        begin = end + 1;
    }
    const std::string home = env_or_empty("HOME");
    if (!home.empty()) site_roots.push_back(home + "/.local/lib/python3*/site-packages");
    for (const char* f : {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
                          "/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages",
                          "/opt/conda/lib/python3*/site-packages"})
        site_roots.emplace_back(f);
    for (const std::string& root : site_roots) folders.push_back(root + "/nvidia/nccl/lib");
    return folders;
}

template <typename Fn>
void resolve(void* handle, const std::string& path, const char* symbol, Fn& fn, bool required) {
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    FS_CHECK(fn || !required, "NCCL: {} has no entry point {} (not an NCCL 2 library?)", path, symbol);
}

NcclApi load() {
    std::vector<std::string> looked;
    void* handle = nullptr;
    std::string path;
    const std::string forced = env_or_empty("FLASHSEEK_NCCL_LIBRARY");
    if (!forced.empty()) {
        handle = dlopen(forced.c_str(), RTLD_NOW | RTLD_LOCAL);
        const char* why = handle ? nullptr : dlerror();
        FS_CHECK(handle, "NCCL: cannot load FLASHSEEK_NCCL_LIBRARY={}: {}", forced, why ? why : "unknown error");
        path = forced;
    } else {
        handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL);
        if (handle) {
            path = kLibraryName;
        } else {
            const char* why = dlerror();
            looked.push_back(fmt::format("the dynamic loader's search for {} (LD_LIBRARY_PATH={}): {}", kLibraryName,
                                         env_or_empty("LD_LIBRARY_PATH"), why ? why : "not found"));
            for (const std::string& folder : candidate_folders()) {
                looked.push_back(folder);
                for (const std::string& file : glob_files(folder + "/" + kLibraryName)) {
                    handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
                    if (handle) {
                        path = file;
                        break;
                    }
                    const char* err = dlerror();
                    looked.back() += fmt::format(" ({} exists but does not load: {})", file, err ? err : "?");
                }
                if (handle) break;
            }
        }
    }
    if (!handle) {
        std::string where;
        for (const std::string& l : looked) where += "\n  " + l;
        fail("NCCL: {} was not found. FLASHSEEK_NCCL_LIBRARY is unset; looked at:{}\nInstall NCCL (the CUDA toolkit's "
             "package, or `pip install nvidia-nccl-cu13`) or set FLASHSEEK_NCCL_LIBRARY to the file",
             kLibraryName, where);
    }
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

std::vector<std::string> nccl_candidate_files() {
    std::vector<std::string> files;
    for (const std::string& folder : candidate_folders())
        for (const std::string& file : glob_files(folder + "/" + kLibraryName))
            if (is_file(file)) files.push_back(file);
    return files;
}

}  // namespace flashseek::cuda
