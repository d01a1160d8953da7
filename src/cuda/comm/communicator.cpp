// Communicator (communicator.h): what every implementation shares: group registration and the validation of every
// call (so that a bad argument is refused, naming the field and the rank, before any rank has been enqueued: a
// collective half enqueued would leave the other ranks waiting), and the choice of an implementation by name.
#include "cuda/comm/communicator.h"

#include <algorithm>
#include <cstdint>

#include "cuda/comm/device_memory.h"
#include "util/error.h"

namespace flashseek::cuda {
namespace {

bool is_legacy_stream(cudaStream_t stream) { return stream == nullptr || stream == cudaStreamLegacy; }

// Whether `stream` (of `device`) is inside a graph capture; an invalidated capture counts (it is still under way).
bool is_capturing(cudaStream_t stream, int device, int rank, const char* call) {
    // The legacy stream is never captured, and querying it while a blocking stream of its device captures is an error.
    if (is_legacy_stream(stream)) return false;
    DeviceGuard on(device);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t err = cudaStreamIsCapturing(stream, &status);
    FS_CHECK(err == cudaSuccess, "{}: cannot tell whether rank {}'s stream is being captured: {} ({})", call, rank,
             cudaGetErrorName(err), cudaGetErrorString(err));
    return status != cudaStreamCaptureStatusNone;
}

// Every part of a call is captured into a graph, or none: a captured part runs only when its graph is launched, so
// eager parts of the same call would wait at the barriers for peers that have not run (a hang until the time-out).
template <typename Part>
void require_uniform_capture(std::span<const Part> parts, const std::vector<int>& ranks,
                             const std::vector<int>& devices, const char* call) {
    int captured = -1, eager = -1;
    for (size_t i = 0; i < parts.size(); ++i) {
        const int rank = ranks[i];
        if (is_capturing(parts[i].stream, devices[size_t(rank)], rank, call))
            captured = int(i);
        else
            eager = int(i);
        if (captured < 0 || eager < 0) continue;
        const int c = ranks[size_t(captured)], e = ranks[size_t(eager)];
        fail("{}: rank {}'s stream is being captured into a graph and rank {}'s {}; every rank's part of a call must "
             "be captured (each rank's stream into its graph) or none, since a captured part runs only when its graph "
             "is launched",
             call, c, e,
             is_legacy_stream(parts[size_t(eager)].stream)
                 ? "is the legacy default stream, which cannot be captured"
                 : "is not");
    }
}

}  // namespace

Communicator::Communicator(std::vector<int> rank_devices, const CommOptions& options)
    : devices_(std::move(rank_devices)), options_(options) {
    FS_CHECK(!devices_.empty() && int(devices_.size()) <= kMaxCommRanks, "communicator: {} ranks (1..{})",
             devices_.size(), kMaxCommRanks);
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess) device_count = 0;
    for (size_t r = 0; r < devices_.size(); ++r)
        FS_CHECK(devices_[r] >= 0 && devices_[r] < device_count,
                 "communicator: rank {} is placed on device {}, but this machine has {} CUDA device(s)", r,
                 devices_[r], device_count);
    FS_CHECK(options_.max_elements >= 1, "communicator: max_elements must be >= 1, got {}", options_.max_elements);
    FS_CHECK(options_.max_gather_elements >= 1, "communicator: max_gather_elements must be >= 1, got {}",
             options_.max_gather_elements);
    FS_CHECK(options_.two_shot_min_bytes >= 0, "communicator: two_shot_min_bytes must be >= 0, got {}",
             options_.two_shot_min_bytes);
    FS_CHECK(options_.barrier_timeout_ms >= 1, "communicator: barrier_timeout_ms must be >= 1, got {}",
             options_.barrier_timeout_ms);
}

void Communicator::register_all_group() {
    std::vector<int> every(devices_.size());
    for (size_t r = 0; r < every.size(); ++r) every[r] = int(r);
    all_ = group(every);
}

CommGroup Communicator::group(std::span<const int> ranks) {
    FS_CHECK(!ranks.empty(), "communicator group: no ranks");
    for (size_t i = 0; i < ranks.size(); ++i) {
        FS_CHECK(ranks[i] >= 0 && ranks[i] < this->ranks(), "communicator group: rank {} (entry {}) is outside [0, {})",
                 ranks[i], i, this->ranks());
        FS_CHECK(i == 0 || ranks[i] > ranks[i - 1],
                 "communicator group: ranks must be distinct and ascending (entry {} is {} after {})", i, ranks[i],
                 ranks[i - 1]);
    }
    const std::vector<int> list(ranks.begin(), ranks.end());
    for (size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g] == list) return CommGroup{int(g)};
    add_group(int(groups_.size()), list);
    groups_.push_back(list);
    return CommGroup{int(groups_.size() - 1)};
}

const std::vector<int>& Communicator::group_ranks(CommGroup g) const {
    FS_CHECK(g.index >= 0 && size_t(g.index) < groups_.size(), "communicator: group {} was not registered here",
             g.index);
    return groups_[size_t(g.index)];
}

void Communicator::all_reduce_bf16(CommGroup g, std::span<const ReducePart> parts, int64_t n) {
    const std::vector<int>& members = group_ranks(g);
    FS_CHECK(parts.size() == members.size(), "all_reduce_bf16: {} parts for a group of {} ranks", parts.size(),
             members.size());
    FS_CHECK(n >= 0 && n <= options_.max_elements, "all_reduce_bf16: n = {} is outside [0, {}] (max_elements)", n,
             options_.max_elements);
    for (size_t i = 0; i < parts.size(); ++i) {
        const ReducePart& p = parts[i];
        FS_CHECK(p.partial && p.out, "all_reduce_bf16: rank {} has a null {}", members[i],
                 p.partial ? "out" : "partial");
        const auto pb = reinterpret_cast<uintptr_t>(p.partial), ob = reinterpret_cast<uintptr_t>(p.out);
        FS_CHECK(ob + uintptr_t(n) * 2 <= pb || pb + uintptr_t(n) * 4 <= ob,
                 "all_reduce_bf16: rank {}'s out overlaps its partial", members[i]);
    }
    if (n == 0) return;
    require_uniform_capture(parts, members, devices_, "all_reduce_bf16");
    do_all_reduce(g.index, members, parts, n);
}

void Communicator::gather_columns(std::span<const GatherPart> parts, int64_t rows, float* out, int64_t ldo) {
    FS_CHECK(int(parts.size()) == ranks(), "gather_columns: {} parts for {} ranks", parts.size(), ranks());
    FS_CHECK(rows >= 0, "gather_columns: rows = {} is negative", rows);
    FS_CHECK(out != nullptr, "gather_columns: out is null");
    FS_CHECK(ldo >= 1, "gather_columns: ldo = {} must be >= 1", ldo);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (size_t r = 0; r < parts.size(); ++r) {
        const GatherPart& p = parts[r];
        FS_CHECK(p.cols >= 0 && p.col_begin >= 0 && p.col_begin + p.cols <= ldo,
                 "gather_columns: rank {}'s columns [{}, {}) are outside the output's [0, {})", r, p.col_begin,
                 p.col_begin + p.cols, ldo);
        FS_CHECK(p.ld >= p.cols, "gather_columns: rank {}'s ld = {} is below its cols = {}", r, p.ld, p.cols);
        FS_CHECK(p.block != nullptr || p.cols == 0 || rows == 0, "gather_columns: rank {}'s block is null", r);
        FS_CHECK(rows * p.cols <= options_.max_gather_elements,
                 "gather_columns: rank {}'s block has {} x {} elements, above max_gather_elements {}", r, rows,
                 p.cols, options_.max_gather_elements);
        if (p.cols > 0) ranges.emplace_back(p.col_begin, p.col_begin + p.cols);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        FS_CHECK(ranges[i].first >= ranges[i - 1].second,
                 "gather_columns: column ranges [{}, {}) and [{}, {}) overlap", ranges[i - 1].first,
                 ranges[i - 1].second, ranges[i].first, ranges[i].second);
    if (rows == 0) return;
    require_uniform_capture(parts, group_ranks(all_), devices_, "gather_columns");
    do_gather(parts, rows, out, ldo);
}

std::unique_ptr<Communicator> make_communicator(CommKind kind, std::vector<int> rank_devices,
                                                const CommOptions& options) {
    switch (kind) {
        case CommKind::SameDevice: {
            FS_CHECK(!rank_devices.empty(), "same-device communicator: no ranks");
            for (size_t r = 1; r < rank_devices.size(); ++r)
                FS_CHECK(rank_devices[r] == rank_devices[0],
                         "same-device communicator: rank {} is on device {}, rank 0 on device {}", r, rank_devices[r],
                         rank_devices[0]);
            return make_same_device_communicator(int(rank_devices.size()), rank_devices[0], options);
        }
        case CommKind::Peer: return make_peer_communicator(std::move(rank_devices), options);
        case CommKind::Nccl: return make_nccl_communicator(std::move(rank_devices), options);
    }
    fail("communicator: unknown kind {}", int(kind));
}

CommKind parse_comm_kind(const std::string& name, const std::string& what) {
    if (name == "same-device") return CommKind::SameDevice;
    if (name == "peer") return CommKind::Peer;
    if (name == "nccl") return CommKind::Nccl;
    fail("{}: unknown communicator \"{}\" (same-device, peer or nccl)", what, name);
}

const char* comm_kind_name(CommKind kind) {
    switch (kind) {
        case CommKind::SameDevice: return "same-device";
        case CommKind::Peer: return "peer";
        case CommKind::Nccl: return "nccl";
    }
    return "unknown";
}

}  // namespace flashseek::cuda
