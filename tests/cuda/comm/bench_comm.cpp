// `test_cuda_comm --bench`: the all-reduce micro-benchmark of issue 17 item 2. Messages of 8 KB .. 1 MB (the bf16
// result; the fp32 partials are twice that), each implementation inside CUDA graphs (one graph per rank holding
// --calls all-reduces back to back, replayed --reps times, timed by events on rank 0's stream: every call is a
// barrier with every peer, so rank 0's time is the collective's) and NCCL also launched eagerly. The median per
// call, per size and implementation, as a table (and JSON with --json FILE).
//
// Placement: one rank per GPU on a machine with several (at most --ranks), else --ranks virtual ranks on GPU 0 (the
// peer kernels between streams of one device: their cost without the link; NCCL then runs its single rank).
// Options: --sizes 8K,16K,... --calls 50 --reps 30 --ranks N --virtual --json FILE.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "comm_test_util.h"
#include "cuda/comm/nccl_library.h"
#include "util/error.h"

namespace flashseek::test {
namespace {

struct BenchOptions {
    std::vector<int64_t> sizes{8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20};
    int calls = 50, reps = 30, ranks = 0;
    bool force_virtual = false;
    std::string json;
};

int64_t parse_bytes(const std::string& s) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    const std::string unit = end ? std::string(end) : "";
    const int64_t scale = unit == "K" || unit == "k"   ? 1024
                          : unit == "M" || unit == "m" ? 1 << 20
                          : unit.empty()               ? 1
                                                       : 0;
    FS_CHECK(v > 0 && scale > 0, "--sizes: cannot read \"{}\" (a byte count such as 8K or 1M)", s);
    FS_CHECK(v * scale % 2 == 0, "--sizes: {} bytes is not a whole number of bf16 values", v * scale);
    return v * scale;
}

BenchOptions parse(int argc, char** argv) {
    BenchOptions o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            FS_CHECK(i + 1 < argc, "{} needs a value", a);
            return argv[++i];
        };
        if (a == "--bench") continue;
        if (a == "--sizes") {
            o.sizes.clear();
            const std::string list = value();
            for (size_t b = 0; b <= list.size();) {
                const size_t e = std::min(list.find(',', b), list.size());
                o.sizes.push_back(parse_bytes(list.substr(b, e - b)));
                b = e + 1;
            }
        } else if (a == "--calls") {
            o.calls = std::stoi(value());
        } else if (a == "--reps") {
            o.reps = std::stoi(value());
        } else if (a == "--ranks") {
            o.ranks = std::stoi(value());
        } else if (a == "--virtual") {
            o.force_virtual = true;
        } else if (a == "--json") {
            o.json = value();
        } else {
            fail("test_cuda_comm --bench: unknown option {}", a);
        }
    }
    FS_CHECK(o.calls >= 1 && o.reps >= 1, "--calls and --reps must be >= 1");
    FS_CHECK(o.ranks >= 0 && o.ranks <= cuda::kMaxCommRanks, "--ranks must be in [1, {}]", cuda::kMaxCommRanks);
    return o;
}

// Every rank's partial (random) and output, sized for the largest message.
struct RankBuffers {
    std::vector<cuda::DeviceMemory> partial, out;
    RankBuffers(const std::vector<int>& devices, int64_t n) {
        std::mt19937_64 rng(fresh_seed());
        for (int d : devices) {
            partial.emplace_back(d, size_t(n) * 4, "bench partial");
            out.emplace_back(d, size_t(n) * 2, "bench output");
            const std::vector<float> v = random_partial(rng, n);
            cuda::DeviceGuard on(d);
            FS_CHECK(cudaMemcpy(partial.back().as<float>(), v.data(), size_t(n) * 4, cudaMemcpyHostToDevice) ==
                         cudaSuccess,
                     "bench: upload");
        }
    }
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

class Timer {
public:
    explicit Timer(int device) : device_(device) {
        cuda::DeviceGuard on(device);
        cudaEventCreate(&start_);
        cudaEventCreate(&stop_);
    }
    ~Timer() {
        cuda::DeviceGuard on(device_);
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    // Microseconds per call of `calls` calls enqueued by `body` (median of `reps` repetitions after 3 warm-ups).
    template <typename Body>
    double per_call_us(const RankStreams& streams, int calls, int reps, Body body) {
        std::vector<double> samples;
        for (int rep = -3; rep < reps; ++rep) {
            {
                cuda::DeviceGuard on(device_);
                cudaEventRecord(start_, streams[0]);
            }
            body();
            {
                cuda::DeviceGuard on(device_);
                cudaEventRecord(stop_, streams[0]);
            }
            streams.synchronize();
            float ms = 0;
            cudaEventElapsedTime(&ms, start_, stop_);
            if (rep >= 0) samples.push_back(double(ms) * 1000.0 / calls);
        }
        return median(samples);
    }

private:
    int device_;
    cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

std::vector<cuda::ReducePart> parts_of(const RankBuffers& b, const RankStreams& streams, int ranks) {
    std::vector<cuda::ReducePart> parts;
    for (int r = 0; r < ranks; ++r)
        parts.push_back({b.partial[size_t(r)].as<float>(), b.out[size_t(r)].as<uint16_t>(), streams[r]});
    return parts;
}

double graph_us(cuda::Communicator& comm, const RankStreams& streams, const RankBuffers& b, int64_t n,
                const BenchOptions& o) {
    const std::vector<cuda::ReducePart> parts = parts_of(b, streams, comm.ranks());
    comm.all_reduce_bf16(comm.all(), parts, n);  // lazy set-up outside the capture
    streams.synchronize();
    std::vector<cudaGraphExec_t> graphs = capture_rank_graphs(comm.devices(), streams, [&] {
        for (int c = 0; c < o.calls; ++c) comm.all_reduce_bf16(comm.all(), parts, n);
    });
    Timer timer(comm.device_of(0));
    const double us =
        timer.per_call_us(streams, o.calls, o.reps, [&] { launch_rank_graphs(graphs, comm.devices(), streams); });
    destroy_graphs(graphs);
    comm.check_health();
    return us;
}

double eager_us(cuda::Communicator& comm, const RankStreams& streams, const RankBuffers& b, int64_t n,
                const BenchOptions& o) {
    const std::vector<cuda::ReducePart> parts = parts_of(b, streams, comm.ranks());
    Timer timer(comm.device_of(0));
    return timer.per_call_us(streams, o.calls, o.reps, [&] {
        for (int c = 0; c < o.calls; ++c) comm.all_reduce_bf16(comm.all(), parts, n);
    });
}

std::string cell(const std::optional<double>& us) { return us ? fmt::format("{:.2f}", *us) : "—"; }

}  // namespace

int run_benchmarks(int argc, char** argv) {
    try {
        const BenchOptions o = parse(argc, argv);
        const int gpus = gpu_count();
        FS_CHECK(gpus >= 1, "no CUDA device");
        std::vector<int> devices;
        const bool virtual_ranks = o.force_virtual || gpus < 2;
        if (virtual_ranks)
            devices.assign(size_t(o.ranks > 0 ? o.ranks : 2), 0);
        else
            for (int d = 0; d < std::min(gpus, o.ranks > 0 ? o.ranks : gpus); ++d) devices.push_back(d);
        const int ranks = int(devices.size());
        const int64_t max_n = *std::max_element(o.sizes.begin(), o.sizes.end()) / 2;
        cuda::CommOptions co;
        co.max_elements = max_n;
        co.max_gather_elements = 1;

        cudaDeviceProp prop{};
        cudaGetDeviceProperties(&prop, 0);
        std::printf("all-reduce micro-benchmark: %d rank(s) %s (%s), %d calls per graph, median of %d replays\n", ranks,
                    virtual_ranks ? "as virtual ranks on GPU 0" : "on distinct GPUs", prop.name, o.calls, o.reps);
        std::string nccl_why;
        const bool nccl = nccl_loadable(&nccl_why);
        const int nccl_ranks = virtual_ranks ? 1 : ranks;
        if (nccl)
            std::printf("NCCL %d from %s, %d rank(s); NCCL_NVLS_ENABLE=%s\n", cuda::nccl_api().version,
                        cuda::nccl_api().path.c_str(), nccl_ranks,
                        std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "(unset: set to 0)");
        else
            std::printf("NCCL not loadable: %s\n", nccl_why.c_str());

        RankStreams streams(devices, /*shared=*/false);
        RankBuffers buffers(devices, max_n);
        co.algorithm = cuda::PeerAlgorithm::OneShot;
        auto one_shot = cuda::make_peer_communicator(devices, co);
        co.algorithm = cuda::PeerAlgorithm::TwoShot;
        auto two_shot = cuda::make_peer_communicator(devices, co);
        co.algorithm = cuda::PeerAlgorithm::Auto;
        const cuda::CommOptions auto_options = co;
        std::unique_ptr<cuda::Communicator> nccl_comm;
        std::vector<int> nccl_devices(devices.begin(), devices.begin() + nccl_ranks);
        std::unique_ptr<RankStreams> nccl_streams;
        if (nccl) {
            nccl_comm = cuda::make_nccl_communicator(nccl_devices, co);
            nccl_streams = std::make_unique<RankStreams>(nccl_devices, false);
        }

        const std::string header = fmt::format(
            "| message (bf16) | elements | one-shot, graph (µs) | two-shot, graph (µs) | Auto picks | NCCL{}, graph "
            "(µs) | NCCL{}, eager (µs) |\n|---|---|---|---|---|---|---|\n",
            virtual_ranks ? " (1 rank)" : "", virtual_ranks ? " (1 rank)" : "");
        std::printf("\n%s", header.c_str());
        std::string json = fmt::format("{{\"ranks\": {}, \"virtual\": {}, \"device\": \"{}\", \"calls\": {}, \"reps\": "
                                       "{}, \"rows\": [",
                                       ranks, virtual_ranks ? "true" : "false", prop.name, o.calls, o.reps);
        for (size_t i = 0; i < o.sizes.size(); ++i) {
            const int64_t n = o.sizes[i] / 2;
            const double os = graph_us(*one_shot, streams, buffers, n, o);
            const double ts = graph_us(*two_shot, streams, buffers, n, o);
            std::optional<double> ng, ne;
            if (nccl_comm) {
                ng = graph_us(*nccl_comm, *nccl_streams, buffers, n, o);
                ne = eager_us(*nccl_comm, *nccl_streams, buffers, n, o);
            }
            const bool picks_two = ranks > 1 && n * 4 >= auto_options.two_shot_min_bytes * (ranks == 2 ? 4 : 1);
            const std::string row =
                fmt::format("| {} KB | {} | {:.2f} | {:.2f} | {} | {} | {} |\n", o.sizes[i] / 1024, n, os, ts,
                            picks_two ? "two-shot" : "one-shot", cell(ng), cell(ne));
            std::fputs(row.c_str(), stdout);
            std::fflush(stdout);
            json += fmt::format("{}{{\"bytes\": {}, \"one_shot_graph_us\": {:.3f}, \"two_shot_graph_us\": {:.3f}, "
                                "\"nccl_graph_us\": {}, \"nccl_eager_us\": {}}}",
                                i ? ", " : "", o.sizes[i], os, ts, ng ? fmt::format("{:.3f}", *ng) : "null",
                                ne ? fmt::format("{:.3f}", *ne) : "null");
        }
        json += "]}\n";
        if (!o.json.empty()) {
            std::ofstream f(o.json);
            FS_CHECK(f.good(), "--json: cannot write {}", o.json);
            f << json;
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "test_cuda_comm --bench: %s\n", e.what());
        return 1;
    }
}

}  // namespace flashseek::test
