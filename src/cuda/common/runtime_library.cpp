// The search for run-time loaded libraries (runtime_library.h): candidate folders, glob, dlopen.
#include "cuda/common/runtime_library.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace flashseek::cuda {
namespace {

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
std::vector<std::string> candidate_folders(const RuntimeLibrarySpec& spec) {
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
    if (spec.wheel_folder.empty()) return folders;
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
    for (const std::string& root : site_roots) folders.push_back(root + "/" + spec.wheel_folder);
    return folders;
}

}  // namespace

RuntimeLibrary load_runtime_library(const RuntimeLibrarySpec& spec) {
    RuntimeLibrary lib;
    const std::string forced = spec.override_variable.empty() ? "" : env_or_empty(spec.override_variable.c_str());
    if (!forced.empty()) {
        lib.forced = true;
        lib.handle = dlopen(forced.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib.handle) {
            lib.path = forced;
        } else {
            const char* why = dlerror();
            lib.looked.push_back(fmt::format("{}={}: {}", spec.override_variable, forced, why ? why : "unknown error"));
        }
        return lib;
    }
    // The spec's own folders first, as literal paths (a build folder may hold glob characters).
    for (const std::string& folder : spec.first_folders) {
        const std::string file = folder + "/" + spec.file;
        if (!is_file(file)) {
            lib.looked.push_back(folder);
            continue;
        }
        lib.handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib.handle) {
            lib.path = file;
            return lib;
        }
        const char* err = dlerror();
        lib.looked.push_back(fmt::format("{} ({} exists but does not load: {})", folder, file, err ? err : "?"));
    }
    lib.handle = dlopen(spec.file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) {
        lib.path = spec.file;
        return lib;
    }
    const char* why = dlerror();
    lib.looked.push_back(fmt::format("the dynamic loader's search for {} (LD_LIBRARY_PATH={}): {}", spec.file,
                                     env_or_empty("LD_LIBRARY_PATH"), why ? why : "not found"));
    for (const std::string& folder : candidate_folders(spec)) {
        lib.looked.push_back(folder);
        for (const std::string& file : glob_files(folder + "/" + spec.file)) {
            lib.handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (lib.handle) {
                lib.path = file;
                return lib;
            }
            const char* err = dlerror();
            lib.looked.back() += fmt::format(" ({} exists but does not load: {})", file, err ? err : "?");
        }
    }
    return lib;
}

std::string looked_lines(const RuntimeLibrary& lib) {
    std::string where;
    for (const std::string& l : lib.looked) where += "\n  " + l;
    return where;
}

std::string executable_folder() {
    std::string buf(4096, '\0');
    const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) return "";
    buf.resize(size_t(n));
    const size_t slash = buf.rfind('/');
    return slash == std::string::npos ? "" : buf.substr(0, slash);
}

}  // namespace flashseek::cuda
