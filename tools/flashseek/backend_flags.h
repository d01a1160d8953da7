// The backend flags every model-running command shares (generate, logits, serve, bench): which backend, its
// numerics, CPU threads, a layer prefix, dummy weights, the prefill chunk and the parallel layout, declared once so that their names,
// defaults and help texts agree. Numerics default to exact on the CPU reference and release on a device backend.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "backend/options.h"
#include "layout_flags.h"

namespace flashseek::cli {

struct BackendFlags {
    std::string backend = "cpu";
    std::string numerics;     // empty: exact on cpu, release elsewhere
    int threads = 0;
    int layers = 0;
    bool dummy_weights = false;
    int prefill_chunk = 0;
    LayoutFlags layout;  // --tp / --ep
};

// Adds --backend, --numerics, --threads, --layers, --prefill-chunk, --tp, --ep and (with_dummy) --dummy-weights;
// the current values of `flags` are the defaults.
void add_backend_flags(CLI::App& app, BackendFlags& flags, bool with_dummy = false);

// The options those flags describe (numerics resolved); other fields at their defaults.
BackendOptions backend_options(const BackendFlags& flags);

}  // namespace flashseek::cli
