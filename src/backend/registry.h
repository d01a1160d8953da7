// Creating a Backend by name. Backends register a factory here; the layer that knows them all (src/backends,
// register_builtin_backends) does so at start-up, so this layer never references a library above it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/options.h"

namespace flashseek {

// model_dir: a checkpoint directory (config.json + safetensors), or with opt.dummy_weights a config file or a
// directory holding one. Throws Error naming the problem.
using BackendFactory = std::function<std::unique_ptr<Backend>(const std::string& model_dir, const BackendOptions&)>;

// Adds or replaces the factory for `name`. Thread-safe.
void register_backend(const std::string& name, BackendFactory factory);

// The registered names, sorted.
std::vector<std::string> registered_backends();

// Creates opt.backend. An unknown name is an Error listing the registered ones; "cuda" in a build without it says
// so.
std::unique_ptr<Backend> create_backend(const std::string& model_dir, const BackendOptions& opt);

}  // namespace flashseek
