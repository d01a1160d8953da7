// GraphRunner (graph_runner.h): eager first run, capture on the second, replay after.
#include "cuda/backend/graph_runner.h"

#include <cstdio>
#include <exception>
#include <string>

#include "cuda/backend/cuda_util.h"

namespace flashseek::cuda {

GraphRunner::~GraphRunner() { clear(); }

void GraphRunner::clear() {
    for (auto& [shape, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
}

void GraphRunner::run(const PassShape& s, bool graph_ok, cudaStream_t stream, const std::function<void()>& enqueue) {
    if (!graph_ok) {
        enqueue();
        return;
    }
    if (!enabled_) {
        ++counts_.eager;
        enqueue();
        return;
    }
    auto it = graphs_.find(s);
    if (it == graphs_.end()) {
        const bool first = seen_[s]++ == 0;
        if (first || no_graph_.count(s)) {
            ++(first ? counts_.first_eager : counts_.eager);
            enqueue();
            return;
        }
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
        std::string why;
        try {
            enqueue();
        } catch (const std::exception& e) {
            why = e.what();
        }
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        cudaGraphExec_t exec = nullptr;
        if (why.empty() && end == cudaSuccess && graph) {
            const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
            if (inst != cudaSuccess) why = std::string("instantiate: ") + cudaGetErrorString(inst);
        } else if (why.empty()) {
            why = std::string("end capture: ") + cudaGetErrorString(end);
        }
        if (graph) cudaGraphDestroy(graph);
        if (!why.empty()) {
            cudaGetLastError();
            no_graph_.insert(s);
            std::fprintf(stderr, "flashseek cuda: decode pass of %d rows runs without a CUDA graph (%s)\n", s.n_rows,
                         why.c_str());
            ++counts_.eager;
            enqueue();
            return;
        }
        it = graphs_.emplace(s, exec).first;
        ++counts_.captured;
    } else {
        ++counts_.replayed;
    }
    CUDA_CHECK(cudaGraphLaunch(it->second, stream));
}

}  // namespace flashseek::cuda
