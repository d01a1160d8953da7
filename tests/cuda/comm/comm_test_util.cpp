// Helpers of the communicator tests (comm_test_util.h).
#include "comm_test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cuda/comm/nccl_library.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::test {

uint64_t fresh_seed() {
    if (const char* s = std::getenv("FS_TEST_SEED")) return std::strtoull(s, nullptr, 0);
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
}

int gpu_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

bool nccl_loadable(std::string* why) {
    try {
        cuda::nccl_api();
        return true;
    } catch (const Error& e) {
        if (why) *why = e.what();
        return false;
    }
}

bool nccl_required() {
    const char* v = std::getenv("FLASHSEEK_REQUIRE_NCCL");
    return v && std::strcmp(v, "1") == 0;
}

std::vector<float> random_partial(std::mt19937_64& rng, int64_t n) {
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng) * std::exp2(float(int(rng() % 9) - 4));
    return v;
}

std::vector<uint16_t> reference_sum(const std::vector<std::vector<float>>& partials, const std::vector<int>& members) {
    const size_t n = partials[size_t(members[0])].size();
    std::vector<uint16_t> out(n);
    for (size_t i = 0; i < n; ++i) {
        float sum = partials[size_t(members[0])][i];
        for (size_t m = 1; m < members.size(); ++m) sum += partials[size_t(members[m])][i];
        out[i] = f32_to_bf16(sum);
    }
    return out;
}

std::string cuda_error_text(cudaError_t err) {
    return fmt::format("{} ({})", cudaGetErrorName(err), cudaGetErrorString(err));
}

RankStreams::RankStreams(const std::vector<int>& devices, bool shared) : devices_(devices), shared_(shared) {
    for (size_t r = 0; r < devices.size(); ++r) {
        if (shared && r > 0) {
            streams_.push_back(streams_[0]);
            continue;
        }
        cuda::DeviceGuard on(devices[r]);
        cudaStream_t s = nullptr;
        const cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (err != cudaSuccess)
            fail("test: cannot create a stream on device {}: {}", devices[r], cuda_error_text(err));
        streams_.push_back(s);
    }
}

RankStreams::~RankStreams() {
    for (size_t r = 0; r < streams_.size(); ++r) {
        if (shared_ && r > 0) break;
        cuda::DeviceGuard on(devices_[r]);
        cudaStreamDestroy(streams_[r]);
    }
}

void RankStreams::synchronize() const {
    for (size_t r = 0; r < streams_.size(); ++r) {
        cuda::DeviceGuard on(devices_[r]);
        const cudaError_t err = cudaStreamSynchronize(streams_[r]);
        if (err != cudaSuccess)
            fail("test: stream of rank {} (device {}): {}", r, devices_[r], cuda_error_text(err));
    }
}

namespace {
bool spans_devices(const std::vector<int>& devices) {
    for (int d : devices)
        if (d != devices[0]) return true;
    return false;
}

const char* instantiate_result_name(cudaGraphInstantiateResult result) {
    switch (result) {
        case cudaGraphInstantiateSuccess: return "cudaGraphInstantiateSuccess";
        case cudaGraphInstantiateError: return "cudaGraphInstantiateError";
        case cudaGraphInstantiateInvalidStructure: return "cudaGraphInstantiateInvalidStructure";
        case cudaGraphInstantiateNodeOperationNotSupported: return "cudaGraphInstantiateNodeOperationNotSupported";
        case cudaGraphInstantiateMultipleDevicesNotSupported: return "cudaGraphInstantiateMultipleDevicesNotSupported";
        case cudaGraphInstantiateConditionalHandleUnused: return "cudaGraphInstantiateConditionalHandleUnused";
    }
    return "an unknown cudaGraphInstantiateResult";
}

// The graph's node count, for the failure messages ("?" when even that cannot be read).
std::string node_count(cudaGraph_t graph) {
    size_t count = 0;
    if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return "?";
    return std::to_string(count);
}

// Instantiates one captured graph into *exec; returns "" or why it failed: the error, the instantiation's own verdict
// and the type of the node it blamed (cudaGraphNodeType), so that the next failure explains itself.
std::string instantiate(cudaGraph_t graph, cudaGraphExec_t* exec) {
    cudaGraphInstantiateParams params{};
    const cudaError_t err = cudaGraphInstantiateWithParams(exec, graph, &params);
    if (err == cudaSuccess) return "";
    *exec = nullptr;
    std::string why = fmt::format("{}; verdict {}", cuda_error_text(err), instantiate_result_name(params.result_out));
    cudaGraphNodeType type{};
    if (params.errNode_out && cudaGraphNodeGetType(params.errNode_out, &type) == cudaSuccess)
        why += fmt::format("; at a node of cudaGraphNodeType {}", int(type));
    return why;
}
}  // namespace

void launch_rank_graphs(const std::vector<cudaGraphExec_t>& graphs, const std::vector<int>& devices,
                        const RankStreams& streams, const std::function<void(int rank)>& after) {
    std::vector<cudaError_t> errors(graphs.size(), cudaSuccess);
    auto launch = [&](int r) {
        cuda::DeviceGuard on(devices[size_t(r)]);
        errors[size_t(r)] = cudaGraphLaunch(graphs[size_t(r)], streams[r]);
        if (after) after(r);
    };
    if (spans_devices(devices)) {
        std::vector<std::thread> threads;
        for (int r = 0; r < int(graphs.size()); ++r) threads.emplace_back(launch, r);
        for (std::thread& t : threads) t.join();
    } else {
        for (int r = 0; r < int(graphs.size()); ++r) launch(r);
    }
    for (size_t r = 0; r < errors.size(); ++r)
        if (errors[r] != cudaSuccess)
            fail("test: cudaGraphLaunch of rank {} (device {}): {}", r, devices[r], cuda_error_text(errors[r]));
}

// Each rank's stream is captured on its own (no event joins them: a rank's graph holds its parts alone), in global
// mode, so that any call the communicator makes during the capture that a capture forbids (an allocation, a
// synchronization, from this thread or another) fails the capture here instead of passing unnoticed. Every capture
// ends before any graph is instantiated: cudaGraphInstantiate is itself one of the calls forbidden while a
// global-mode capture is under way in the process, so instantiating rank 0's graph while rank 1's stream was still
// capturing failed (and invalidated rank 1's capture) whenever ranks had streams of their own.
std::vector<cudaGraphExec_t> capture_rank_graphs(const std::vector<int>& devices, const RankStreams& streams,
                                                 const std::function<void()>& enqueue) {
    const bool shared = devices.size() > 1 && streams[0] == streams[1];
    const size_t count = shared ? 1 : devices.size();
    std::string failure;
    size_t begun = 0;
    for (; begun < count; ++begun) {
        cuda::DeviceGuard on(devices[begun]);
        const cudaError_t err = cudaStreamBeginCapture(streams[int(begun)], cudaStreamCaptureModeGlobal);
        if (err != cudaSuccess) {
            failure = fmt::format("beginning the capture of rank {}'s stream (device {}): {}", begun, devices[begun],
                                  cuda_error_text(err));
            break;
        }
    }
    if (failure.empty()) {
        try {
            enqueue();
        } catch (const std::exception& e) {
            failure = fmt::format("enqueueing the calls to capture: {}", e.what());
        }
    }
    std::vector<cudaGraph_t> graphs(begun, nullptr);
    for (size_t r = 0; r < begun; ++r) {
        cuda::DeviceGuard on(devices[r]);
        const cudaError_t err = cudaStreamEndCapture(streams[int(r)], &graphs[r]);
        if (err != cudaSuccess && failure.empty())
            failure = fmt::format("ending the capture of rank {}'s stream (device {}): {}", r, devices[r],
                                  cuda_error_text(err));
    }
    std::vector<cudaGraphExec_t> execs(begun, nullptr);
    for (size_t r = 0; r < begun && failure.empty(); ++r) {
        cuda::DeviceGuard on(devices[r]);
        const std::string why = instantiate(graphs[r], &execs[r]);
        if (!why.empty())
            failure = fmt::format("instantiating rank {}'s graph ({} nodes, device {}): {}", r, node_count(graphs[r]),
                                  devices[r], why);
    }
    for (cudaGraph_t g : graphs)
        if (g) cudaGraphDestroy(g);
    if (!failure.empty()) {
        (void)cudaGetLastError();  // the failed call's error must not surface in a later, unrelated check
        destroy_graphs(execs);
        fail("test: graph capture failed: {}", failure);
    }
    return execs;
}

void destroy_graphs(std::vector<cudaGraphExec_t>& graphs) {
    for (cudaGraphExec_t g : graphs)
        if (g) cudaGraphExecDestroy(g);
    graphs.clear();
}

}  // namespace flashseek::test
