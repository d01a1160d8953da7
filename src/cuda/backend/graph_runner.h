// CUDA graphs for the passes of one backend instance, keyed by PassShape: the first time a shape is seen it runs
// eagerly (lazy initializations happen outside capture), the second time it is captured and instantiated, from then
// on replayed. A capture that fails (an op that synchronizes or allocates) leaves that shape eager, with a warning:
// graphs are an optimization, never a reason to fail a step.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <set>

#include "backend/diagnostics.h"
#include "cuda/backend/pass_shape.h"

namespace flashseek::cuda {

class GraphRunner {
public:
    GraphRunner() = default;
    ~GraphRunner();
    GraphRunner(const GraphRunner&) = delete;
    GraphRunner& operator=(const GraphRunner&) = delete;

    // Runs enqueue() (which enqueues one pass of `shape` on `stream`) through a graph when `graph_ok` and graphs
    // are on, else eagerly.
    void run(const PassShape& shape, bool graph_ok, cudaStream_t stream, const std::function<void()>& enqueue);
    void set_enabled(bool on) { enabled_ = on; }
    // Drops every captured graph (after a change of what a pass enqueues, e.g. branches on or off).
    void clear();
    // How the passes offered with graph_ok ran so far (passes without it are not counted).
    const GraphCounts& counts() const { return counts_; }

private:
    bool enabled_ = true;
    std::map<PassShape, cudaGraphExec_t> graphs_;
    std::map<PassShape, int> seen_;
    std::set<PassShape> no_graph_;
    GraphCounts counts_;
};

}  // namespace flashseek::cuda
