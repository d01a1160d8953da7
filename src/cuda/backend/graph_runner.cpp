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
    if (!graph_ok || !enabled_) {
        enqueue();
        return;
    }
    auto it = graphs_.find(s);
    if (it == graphs_.end()) {
        if (seen_[s]++ == 0 || no_graph_.count(s)) {
            enqueue();
            return;
        }
        cudaGraph_t graph = nullptr;
        FS_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
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
            enqueue();
            return;
        }
        it = graphs_.emplace(s, exec).first;
    }
    FS_CUDA_TRY(cudaGraphLaunch(it->second, stream));
}

}  // namespace flashseek::cuda
