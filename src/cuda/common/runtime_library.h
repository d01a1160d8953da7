// Shared libraries flashseek loads at run time (dlopen) instead of linking: NCCL for the multi-GPU communicator,
// CUPTI for the bench's kernel timeline. A build and its tests need neither; the search below finds them in the CUDA
// toolkit, the system folders or a PyPI wheel when a run asks for them.
//
// Where it looks, in order: the file the override variable names (only there, when set); the spec's first folders
// (literal paths); the dynamic loader's own search (LD_LIBRARY_PATH, the loader cache); the CUDA toolkit
// ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda, /usr/local/cuda-*: lib64 / lib / targets/*/lib); the system library
// folders; and the wheel's folder (e.g. nvidia/nccl/lib) in the site-packages of $VIRTUAL_ENV, $CONDA_PREFIX,
// $PYTHONPATH, ~/.local, /usr/local, /usr and /opt/conda.
#pragma once
#include <string>
#include <vector>

namespace flashseek::cuda {

struct RuntimeLibrarySpec {
    std::string file;                        // e.g. "libnccl.so.2"
    std::string override_variable;           // e.g. "FLASHSEEK_NCCL_LIBRARY"
    std::string wheel_folder;                // under site-packages, e.g. "nvidia/nccl/lib"
    std::vector<std::string> first_folders;  // searched first, before the loader's search (literal paths)
};

struct RuntimeLibrary {
    void* handle = nullptr;  // dlopen's, RTLD_NOW | RTLD_LOCAL; null when not found
    std::string path;        // the file loaded
    bool forced = false;     // the override variable was set (then nothing else was tried)
    // Where it looked and why each place failed, one line each (for the caller's error message).
    std::vector<std::string> looked;
};

// Loads the library (never throws). The handle stays open for the life of the process.
RuntimeLibrary load_runtime_library(const RuntimeLibrarySpec& spec);

// `looked`, one indented line each, for an error message ("...; looked at:" + this).
std::string looked_lines(const RuntimeLibrary& lib);

// The folder of the running executable (/proc/self/exe), "" where it cannot be read.
std::string executable_folder();

}  // namespace flashseek::cuda
