// The parallel-layout options every command that places the model on GPUs takes: `--tp N --ep M` (the GPU count is
// their product). Read as text so that a bad value gets the layout parser's error naming the flag.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "model/sharding.h"

namespace flashseek::cli {

struct LayoutFlags {
    std::string tp = "1", ep = "1";

    void add_to(CLI::App& app) {
        app.add_option("--tp", tp, "tensor-parallel ranks: attention heads and each expert's intermediate dim (1)");
        app.add_option("--ep", ep, "expert-parallel groups: the routed experts divided among them (1)");
    }
    ParallelLayout layout() const { return parse_parallel_layout(tp, ep); }
};

}  // namespace flashseek::cli
