// The communication of tensor / expert parallel ranks driven by one host thread: every rank has a device (several
// ranks may share one) and enqueues on a stream of that device. The backend needs two collectives:
//
//  * all_reduce_bf16: over a group of ranks (the tp ranks of an expert group, or all ranks), each rank holding an
//    fp32 partial [n]; every rank of the group receives bf16(sum of the partials) in its own bf16 buffer [n]. The sum
//    is taken in rank order ((p0 + p1) + p2) + ... by the same-device and peer implementations (bit-identical to
//    each other and to reduce.cuh), in NCCL's order by the NCCL implementation (identical for one or two ranks).
//  * gather_columns: the vocabulary-parallel head's logits: rank r holds [rows, cols_r] fp32 destined for columns
//    [col_begin_r, col_begin_r + cols_r) of a [rows, ldo] output on rank 0.
//
// One call enqueues the collective on every participating rank's stream before it returns, so the host never waits
// on one rank while another still lacks its part (no deadlock between ranks driven by one thread). Calls are
// asynchronous and graph-capturable: between calls (and between the capture of a graph and its replays) nothing is
// synchronized, allocated or re-parameterized; what changes from call to call (the barrier epochs of the peer
// implementation) lives in device memory and is advanced by the kernels themselves. Groups are registered with
// group() before any capture (registration allocates). Every rank must make the same sequence of calls per group,
// and a rank's calls must be ordered on its device (one stream, or streams ordered by events). A call's parts are
// captured all or none (each rank's stream into a graph of its own is enough: no event joins the ranks' captures);
// a call with some parts captured and others eager is refused, naming a rank of each.
//
// Implementations (factories below): SameDeviceCommunicator (virtual ranks on one device and one stream: the reduce
// kernel of reduce.cuh), PeerCommunicator (flashseek's one-shot / two-shot all-reduce over peer-to-peer memory,
// peer_communicator.cpp), NcclCommunicator (NCCL loaded at run time, nccl_communicator.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flashseek::cuda {

// At most this many ranks in one communicator (the kernels carry one pointer per rank in their arguments).
inline constexpr int kMaxCommRanks = 16;

// A registered group of ranks (Communicator::group). Cheap to copy; valid for the communicator's lifetime.
struct CommGroup {
    int index = -1;
};

// One rank's side of all_reduce_bf16. The buffers are on the rank's device; `out` must not overlap `partial`.
struct ReducePart {
    const float* partial = nullptr;  // [n] fp32, read only
    uint16_t* out = nullptr;         // [n] bf16 bits
    cudaStream_t stream = nullptr;   // a stream of the rank's device (nullptr: its legacy default stream)
};

// One rank's side of gather_columns: a [rows, cols] fp32 block with row stride `ld` on the rank's device, destined
// for columns [col_begin, col_begin + cols) of the output.
struct GatherPart {
    const float* block = nullptr;
    int64_t ld = 0;
    int64_t col_begin = 0, cols = 0;
    cudaStream_t stream = nullptr;
};

// How the peer implementation reduces: one-shot (every rank reads every peer's whole partial; the fewest steps, for
// small messages) or two-shot (reduce-scatter then all-gather; each rank reads 1/ranks of every partial, for large
// ones); Auto picks by size (CommOptions::two_shot_min_bytes).
enum class PeerAlgorithm { Auto, OneShot, TwoShot };

struct CommOptions {
    // The largest n of all_reduce_bf16 and rows x cols of one rank's gather_columns block: the peer and NCCL
    // implementations size their staging buffers by them (at construction, never during calls).
    int64_t max_elements = int64_t(1) << 20;
    int64_t max_gather_elements = int64_t(1) << 20;
    PeerAlgorithm algorithm = PeerAlgorithm::Auto;
    // Auto: two-shot from this many bytes of fp32 partial per rank, one-shot below. A group of two saves only a
    // quarter of its remote reads with two-shot and pays a second barrier: it switches at four times this size.
    int64_t two_shot_min_bytes = int64_t(256) << 10;
    // The peer barriers give up after this long without the peers' signal: the kernel records which rank waited
    // for which (Communicator::check_health names them) and traps, so a lost peer becomes an error, not a hang.
    int barrier_timeout_ms = 30000;
};

enum class CommKind { SameDevice, Peer, Nccl };

class Communicator {
public:
    virtual ~Communicator() = default;
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    // "same-device", "peer" or "nccl".
    virtual const char* kind_name() const = 0;
    int ranks() const { return int(devices_.size()); }
    int device_of(int rank) const { return devices_.at(size_t(rank)); }
    const std::vector<int>& devices() const { return devices_; }  // rank r's device at r
    const CommOptions& options() const { return options_; }

    // Registers the ranks of a group: distinct, ascending, in [0, ranks()); the group's i-th rank is ranks[i]. The
    // same list again returns the same group. Allocates (staging, flags, sub-communicators): call before capturing.
    CommGroup group(std::span<const int> ranks);
    // The group of every rank.
    CommGroup all() { return all_; }
    const std::vector<int>& group_ranks(CommGroup g) const;

    // parts[i] is the group's i-th rank's side. Every part's `out` receives bf16(sum of the parts' partials), n <=
    // options().max_elements. Enqueued on every part's stream; returns without waiting.
    void all_reduce_bf16(CommGroup g, std::span<const ReducePart> parts, int64_t n);
    // parts[r] is rank r's block (every rank takes part); out is [rows, ldo] fp32 on rank 0's device, written at
    // every part's columns (the column ranges must be disjoint and inside [0, ldo); other columns are untouched).
    // A block that already sits at its place in out (block == out + col_begin, ld == ldo: a rank on rank 0's device
    // that wrote its logits there) is not copied.
    void gather_columns(std::span<const GatherPart> parts, int64_t rows, float* out, int64_t ldo);

    // Throws Error naming the rank, the peer, the group and the call if a barrier of this communicator timed out
    // (the kernel trapped: every later CUDA call on that device fails too); does nothing otherwise. Host only, cheap.
    virtual void check_health() const {}

protected:
    Communicator(std::vector<int> rank_devices, const CommOptions& options);
    // The group's resources: called once per newly registered group (index = its position).
    virtual void add_group(int index, const std::vector<int>& ranks) = 0;
    virtual void do_all_reduce(int group, const std::vector<int>& ranks, std::span<const ReducePart> parts,
                               int64_t n) = 0;
    virtual void do_gather(std::span<const GatherPart> parts, int64_t rows, float* out, int64_t ldo) = 0;
    // Derived constructors call this last (it registers the all-ranks group through add_group).
    void register_all_group();

private:
    std::vector<int> devices_;
    CommOptions options_;
    std::vector<std::vector<int>> groups_;
    CommGroup all_;
};

// Every rank on `device`; every call's parts must share one stream (the kernels of all ranks run there in order).
std::unique_ptr<Communicator> make_same_device_communicator(int ranks, int device, const CommOptions& options = {});
// Rank r on rank_devices[r]. Ranks on different devices need peer access between them (refused with the pair
// named otherwise); ranks sharing a device are allowed (their kernels must run concurrently: separate streams).
std::unique_ptr<Communicator> make_peer_communicator(std::vector<int> rank_devices, const CommOptions& options = {});
// Rank r on rank_devices[r], one rank per device (NCCL refuses two ranks on one GPU). NCCL is loaded at run time
// (nccl_library.h says where it looks); NCCL_NVLS_ENABLE=0 is set unless the environment already sets it.
std::unique_ptr<Communicator> make_nccl_communicator(std::vector<int> rank_devices, const CommOptions& options = {});
std::unique_ptr<Communicator> make_communicator(CommKind kind, std::vector<int> rank_devices,
                                                const CommOptions& options = {});

// "same-device" | "peer" | "nccl"; an unknown name is refused naming `what` (e.g. "FLASHSEEK_COMM").
CommKind parse_comm_kind(const std::string& name, const std::string& what);
const char* comm_kind_name(CommKind kind);

}  // namespace flashseek::cuda
