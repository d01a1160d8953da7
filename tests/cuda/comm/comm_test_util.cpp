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

RankStreams::RankStreams(const std::vector<int>& devices, bool shared) : devices_(devices), shared_(shared) {
    for (size_t r = 0; r < devices.size(); ++r) {
        if (shared && r > 0) {
            streams_.push_back(streams_[0]);
            continue;
        }
        cuda::DeviceGuard on(devices[r]);
        cudaStream_t s = nullptr;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
            fail("test: cannot create a stream on device {}", devices[r]);
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
            fail("test: stream of rank {} (device {}): {}", r, devices_[r], cudaGetErrorString(err));
    }
}

namespace {
bool spans_devices(const std::vector<int>& devices) {
    for (int d : devices)
        if (d != devices[0]) return true;
    return false;
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
        if (errors[r] != cudaSuccess) fail("test: cudaGraphLaunch of rank {}: {}", r, cudaGetErrorString(errors[r]));
}

std::vector<cudaGraphExec_t> capture_rank_graphs(const std::vector<int>& devices, const RankStreams& streams,
                                                 const std::function<void()>& enqueue) {
    const bool shared = devices.size() > 1 && streams[0] == streams[1];
    const size_t count = shared ? 1 : devices.size();
    for (size_t r = 0; r < count; ++r) {
        cuda::DeviceGuard on(devices[r]);
        if (cudaStreamBeginCapture(streams[int(r)], cudaStreamCaptureModeGlobal) != cudaSuccess)
            fail("test: cannot begin capturing rank {}'s stream", r);
    }
    std::string failure;
    try {
        enqueue();
    } catch (const std::exception& e) {
        failure = e.what();
    }
    std::vector<cudaGraphExec_t> execs;
    for (size_t r = 0; r < count; ++r) {
        cuda::DeviceGuard on(devices[r]);
        cudaGraph_t graph = nullptr;
        const cudaError_t end = cudaStreamEndCapture(streams[int(r)], &graph);
        if (end != cudaSuccess && failure.empty())
            failure = fmt::format("capture of rank {}: {}", r, cudaGetErrorString(end));
        cudaGraphExec_t exec = nullptr;
        if (graph && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess && failure.empty())
            failure = fmt::format("instantiating rank {}'s graph", r);
        if (graph) cudaGraphDestroy(graph);
        execs.push_back(exec);
    }
    if (!failure.empty()) {
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
