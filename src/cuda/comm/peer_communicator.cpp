// PeerCommunicator: flashseek's own all-reduce and gather over peer-to-peer memory (communicator.h; the kernels and
// their protocol in peer_kernels.cuh). The host side: peer access between every pair of devices the ranks use
// (refused, naming the pair, where the hardware has none), per group and member the signals and staging buffers in
// the member's device memory, the kernel arguments that never change (every member's buffers), and per call the
// choice of one-shot / two-shot and of the grid, identical on every rank of the call. Ranks sharing a device are
// allowed (the virtual ranks of a test): their grids are cut so that every rank's CTAs fit on the device at once.
#include <algorithm>
#include <memory>

#include "cuda/comm/communicator.h"
#include "cuda/comm/device_memory.h"
#include "cuda/comm/peer_kernels.cuh"
#include "util/error.h"

namespace flashseek::cuda {
namespace {

void check_cuda(cudaError_t err, const std::string& what) {
    if (err != cudaSuccess)
        fail("peer communicator: {}: {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

class PeerCommunicator final : public Communicator {
public:
    PeerCommunicator(std::vector<int> rank_devices, const CommOptions& options)
        : Communicator(std::move(rank_devices), options), failure_(sizeof(CommFailure), "the barrier failure record") {
        enable_peer_access();
        // Every rank's grid: the CTAs its device holds resident, shared among the ranks placed there.
        rank_ctas_.resize(size_t(ranks()));
        for (int r = 0; r < ranks(); ++r) {
            DeviceGuard on(device_of(r));
            const int sharing = int(std::count(devices().begin(), devices().end(), device_of(r)));
            rank_ctas_[size_t(r)] = std::clamp(peer_resident_ctas(ranks()) / sharing, 1, kPeerMaxCtas);
        }
        for (int r = 0; r < ranks(); ++r) {
            gather_signals_.emplace_back(device_of(r), sizeof(PeerSignals), "the gather's signals");
            all_ranks_.push_back(r);
        }
        register_all_group();
    }
    const char* kind_name() const override { return "peer"; }

    void check_health() const override {
        const CommFailure& f = *failure_.as<CommFailure>();
        if (!f.failed) return;
        const bool gather = f.group < 0;
        const int peer_rank = gather ? f.peer : group_ranks(CommGroup{f.group})[size_t(f.peer)];
        fail("peer communicator: rank {} (device {}) waited more than {} ms for rank {} (device {}) at barrier {} of "
             "call {} of {} (CTA {}); the kernel trapped, so the device's context is lost. A rank's part of a "
             "collective was not enqueued, or its stream never got there",
             f.rank, device_of(f.rank), options().barrier_timeout_ms, peer_rank, device_of(peer_rank), f.phase,
             f.epoch, gather ? std::string("the gather") : fmt::format("group {}", f.group), f.cta);
    }

private:
    // One member's buffers in one group.
    struct Member {
        DeviceMemory signals, staging, gathered;
    };
    struct Group {
        std::vector<Member> members;
        PeerReduceArgs args;  // the members' pointers, shared by every call
        int max_ctas = 1;
    };

    void enable_peer_access() {
        std::vector<int> devices = this->devices();
        std::sort(devices.begin(), devices.end());
        devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
        for (int a : devices)
            for (int b : devices) {
                if (a == b) continue;
                int can = 0;
                check_cuda(cudaDeviceCanAccessPeer(&can, a, b), fmt::format("cudaDeviceCanAccessPeer({}, {})", a, b));
                FS_CHECK(can, "peer communicator: device {} cannot access device {}'s memory (cudaDeviceCanAccessPeer "
                              "= 0: no peer-to-peer path between them); use the NCCL communicator",
                         a, b);
                DeviceGuard on(a);
                const cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
                if (err == cudaErrorPeerAccessAlreadyEnabled)
                    (void)cudaGetLastError();  // enabled earlier in this process: what we need
                else
                    check_cuda(err, fmt::format("enabling device {}'s access to device {}", a, b));
            }
    }

    PeerCallArgs call_args(int group, int size) const {
        PeerCallArgs c{};
        c.size = size;
        c.group = group;
        c.timeout_ns = uint64_t(options().barrier_timeout_ms) * 1000000ull;
        c.failure = failure_.as<CommFailure>();
        return c;
    }

    void add_group(int index, const std::vector<int>& ranks) override {
        Group g;
        const int size = int(ranks.size());
        const int64_t stride = (options().max_elements + 3) / 4 * 4;
        g.args.call = call_args(index, size);
        g.args.stride = stride;
        g.max_ctas = kPeerMaxCtas;
        for (int i = 0; i < size; ++i) {
            const int device = device_of(ranks[size_t(i)]);
            Member m;
            m.signals = DeviceMemory(device, sizeof(PeerSignals), "a group's signals");
            if (size > 1) {
                m.staging = DeviceMemory(device, size_t(stride) * 2 * sizeof(float), "the all-reduce staging");
                m.gathered = DeviceMemory(device, size_t(stride) * 2 * sizeof(uint16_t), "the two-shot staging");
            }
            g.args.call.signals[i] = m.signals.as<PeerSignals>();
            g.args.staging[i] = m.staging.as<float>();
            g.args.gathered[i] = m.gathered.as<uint16_t>();
            g.max_ctas = std::min(g.max_ctas, rank_ctas_[size_t(ranks[size_t(i)])]);
            g.members.push_back(std::move(m));
        }
        if (groups_.size() <= size_t(index)) groups_.resize(size_t(index) + 1);
        groups_[size_t(index)] = std::move(g);
    }

    // Two ranks' kernels on one stream would run one after the other, the first waiting at its barrier for the
    // second forever: refused (virtual ranks sharing a stream take the same-device communicator).
    template <typename Part>
    void require_own_streams(std::span<const Part> parts, const std::vector<int>& ranks, const char* call) const {
        for (size_t i = 0; i < parts.size(); ++i)
            for (size_t j = i + 1; j < parts.size(); ++j)
                FS_CHECK(parts[i].stream != parts[j].stream || device_of(ranks[i]) != device_of(ranks[j]),
                         "{} (peer communicator): ranks {} and {} are enqueued on the same stream; each rank needs its "
                         "own (the same-device communicator serves ranks that share one)",
                         call, ranks[i], ranks[j]);
    }

    bool use_two_shot(int64_t n, int size) const {
        if (size < 2) return false;
        switch (options().algorithm) {
            case PeerAlgorithm::OneShot: return false;
            case PeerAlgorithm::TwoShot: return true;
            case PeerAlgorithm::Auto: break;
        }
        const int64_t threshold = options().two_shot_min_bytes * (size == 2 ? 4 : 1);
        return n * int64_t(sizeof(float)) >= threshold;
    }

    void do_all_reduce(int group, const std::vector<int>& ranks, std::span<const ReducePart> parts,
                       int64_t n) override {
        require_own_streams(parts, ranks, "all_reduce_bf16");
        const Group& g = groups_.at(size_t(group));
        const int size = int(ranks.size());
        const bool two_shot = use_two_shot(n, size);
        const int ctas = peer_reduce_ctas(n, size, two_shot, g.max_ctas);
        for (int i = 0; i < size; ++i) {
            PeerReduceArgs a = g.args;
            a.call.me = i;
            a.call.rank = ranks[size_t(i)];
            a.partial = parts[size_t(i)].partial;
            a.out = parts[size_t(i)].out;
            a.n = n;
            DeviceGuard on(device_of(ranks[size_t(i)]));
            launch_peer_all_reduce(a, two_shot, ctas, parts[size_t(i)].stream);
        }
    }

    void do_gather(std::span<const GatherPart> parts, int64_t rows, float* out, int64_t ldo) override {
        require_own_streams(parts, all_ranks_, "gather_columns");
        int64_t max_cols = 0;
        for (const GatherPart& p : parts) max_cols = std::max(max_cols, p.cols);
        int cap = kPeerMaxCtas;
        for (int c : rank_ctas_) cap = std::min(cap, c);
        const int ctas = peer_gather_ctas(rows, max_cols, cap);
        PeerGatherArgs a{};
        a.call = call_args(-1, ranks());
        for (int r = 0; r < ranks(); ++r) a.call.signals[r] = gather_signals_[size_t(r)].as<PeerSignals>();
        a.out = out;
        a.ldo = ldo;
        a.rows = rows;
        for (int r = 0; r < ranks(); ++r) {
            const GatherPart& p = parts[size_t(r)];
            a.call.me = a.call.rank = r;
            a.block = p.block;
            a.ld = p.ld;
            a.col_begin = p.col_begin;
            a.cols = p.cols;
            a.in_place = p.block == out + p.col_begin && p.ld == ldo;
            DeviceGuard on(device_of(r));
            launch_peer_gather(a, ctas, p.stream);
        }
    }

    MappedHostMemory failure_;
    std::vector<int> rank_ctas_;
    std::vector<DeviceMemory> gather_signals_;
    std::vector<Group> groups_;
    std::vector<int> all_ranks_;
};

}  // namespace

std::unique_ptr<Communicator> make_peer_communicator(std::vector<int> rank_devices, const CommOptions& options) {
    return std::make_unique<PeerCommunicator>(std::move(rank_devices), options);
}

}  // namespace flashseek::cuda
