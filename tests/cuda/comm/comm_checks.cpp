// The communicator checks (comm_checks.h). Inputs go up and outputs come down by asynchronous copies on the ranks'
// streams, so the rounds and replays of a check follow each other on the device with no host synchronization
// between them (a rank may run ahead of its peers, as in the backend); everything is compared at the end.
#include "comm_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::test {
namespace {

using cuda::CommGroup;
using cuda::DeviceGuard;
using cuda::GatherPart;
using cuda::ReducePart;

// What one rank's output of one all-reduce must hold, and where its copy came down.
struct ReduceResult {
    std::vector<int> members;
    const std::vector<std::vector<float>>* partials;  // every rank's partial of that call
    const uint16_t* got;
    std::string what;
};

void upload(const std::vector<float>& values, float* device_dst, int device, cudaStream_t stream, PinnedPool& pool) {
    float* src = pool.take<float>(values.size());
    std::memcpy(src, values.data(), values.size() * sizeof(float));
    DeviceGuard on(device);
    ASSERT_EQ(cudaMemcpyAsync(device_dst, src, values.size() * sizeof(float), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
}

template <typename T>
const T* download(const T* device_src, int64_t n, int device, cudaStream_t stream, PinnedPool& pool) {
    T* dst = pool.take<T>(size_t(n));
    DeviceGuard on(device);
    EXPECT_EQ(cudaMemcpyAsync(dst, device_src, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost, stream), cudaSuccess);
    return dst;
}

// Bit for bit against the rank-order reference, or (exact = false) within what a reordered fp32 sum rounded to
// bf16 may differ: half a bf16 step of the sum plus the fp32 rounding of every addition.
void expect_reduced(const ReduceResult& r, int64_t n, bool exact) {
    const std::vector<uint16_t> want = reference_sum(*r.partials, r.members);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
        bool ok = r.got[i] == want[size_t(i)];
        if (!ok && !exact) {
            double sum = 0, magnitude = 0;
            for (int m : r.members) {
                sum += (*r.partials)[size_t(m)][size_t(i)];
                magnitude += std::fabs((*r.partials)[size_t(m)][size_t(i)]);
            }
            ok = std::fabs(double(bf16_to_f32(r.got[i])) - sum) <= std::ldexp(std::fabs(sum), -8) + magnitude * 1e-6;
        }
        if (!ok && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0) << r.what << ": " << bad << " of " << n << " elements differ; first at " << first << ": got 0x"
                      << std::hex << (first >= 0 ? r.got[first] : 0) << ", want 0x"
                      << (first >= 0 ? want[size_t(first)] : 0) << std::dec;
}

// Nothing outside [data, data + n) of a guarded array was written.
template <typename T>
void expect_guards_intact(const GuardedArray<T>& a, int device, const std::string& what) {
    std::vector<unsigned char> raw(size_t(a.raw_size()) * sizeof(T));
    DeviceGuard on(device);
    ASSERT_EQ(cudaMemcpy(raw.data(), a.raw(), raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    const size_t lo = size_t(a.raw_index(0)) * sizeof(T), hi = size_t(a.raw_index(a.size())) * sizeof(T);
    for (size_t b = 0; b < raw.size(); ++b)
        if ((b < lo || b >= hi) && raw[b] != GuardedArray<T>::kSentinel) {
            ADD_FAILURE() << what << ": byte " << b << " outside the output was written";
            return;
        }
}

std::string group_name(const std::vector<int>& members) { return fmt::format("group {{{}}}", fmt::join(members, ",")); }

}  // namespace

std::vector<std::vector<int>> neighbour_groups(int ranks, int size) {
    std::vector<std::vector<int>> groups;
    for (int first = 0; first + size <= ranks; first += size) {
        groups.emplace_back();
        for (int r = first; r < first + size; ++r) groups.back().push_back(r);
    }
    return groups;
}

void check_all_reduce(cuda::Communicator& comm, const RankStreams& streams, const ReduceCheck& c,
                      std::mt19937_64& rng) {
    const int ranks = comm.ranks();
    const int64_t n = c.n;
    std::vector<GuardedArray<float>> partial;
    for (int r = 0; r < ranks; ++r) partial.emplace_back(comm.device_of(r), n, c.offset);
    std::vector<CommGroup> handles;
    std::vector<std::vector<GuardedArray<uint16_t>>> outs(c.groups.size());
    for (size_t g = 0; g < c.groups.size(); ++g) {
        handles.push_back(comm.group(c.groups[g]));
        for (int m : c.groups[g]) outs[g].emplace_back(comm.device_of(m), n, c.offset);
    }
    PinnedPool pool;
    std::vector<std::vector<std::vector<float>>> inputs(size_t(c.rounds));
    std::vector<ReduceResult> results;
    for (int round = 0; round < c.rounds; ++round) {
        std::vector<std::vector<float>>& host = inputs[size_t(round)];
        for (int r = 0; r < ranks; ++r) {
            host.push_back(random_partial(rng, n));
            upload(host.back(), partial[size_t(r)].data(), comm.device_of(r), streams[r], pool);
        }
        for (size_t g = 0; g < c.groups.size(); ++g) {
            const std::vector<int>& members = c.groups[g];
            std::vector<ReducePart> parts;
            for (size_t i = 0; i < members.size(); ++i)
                parts.push_back({partial[size_t(members[i])].data(), outs[g][i].data(), streams[members[i]]});
            comm.all_reduce_bf16(handles[g], parts, n);
            for (size_t i = 0; i < members.size(); ++i) {
                const int m = members[i];
                results.push_back({members, &host, download(outs[g][i].data(), n, comm.device_of(m), streams[m], pool),
                                   fmt::format("{} round {} rank {}", group_name(members), round, m)});
            }
        }
    }
    streams.synchronize();
    comm.check_health();
    for (const ReduceResult& r : results) expect_reduced(r, n, c.exact);
    for (size_t g = 0; g < c.groups.size(); ++g)
        for (size_t i = 0; i < c.groups[g].size(); ++i)
            expect_guards_intact(outs[g][i], comm.device_of(c.groups[g][i]), group_name(c.groups[g]) + " output");
}

void check_all_reduce_graphs(cuda::Communicator& comm, const RankStreams& streams, const std::vector<int>& group,
                             int64_t n, int replays, std::mt19937_64& rng, bool exact) {
    constexpr int kCalls = 3;  // A, B, A again: an odd count, so the staging halves alternate between replays
    const int ranks = comm.ranks();
    const CommGroup handle = comm.group(group);
    std::vector<GuardedArray<float>> a, b;
    std::vector<std::vector<GuardedArray<uint16_t>>> outs(kCalls + 1);  // [call][member]; the last: the eager call
    for (int r = 0; r < ranks; ++r) {
        a.emplace_back(comm.device_of(r), n);
        b.emplace_back(comm.device_of(r), n);
    }
    for (auto& o : outs)
        for (int m : group) o.emplace_back(comm.device_of(m), n);
    auto call = [&](int which, std::vector<GuardedArray<float>>& in) {
        std::vector<ReducePart> parts;
        for (size_t i = 0; i < group.size(); ++i)
            parts.push_back({in[size_t(group[i])].data(), outs[size_t(which)][i].data(), streams[group[i]]});
        comm.all_reduce_bf16(handle, parts, n);
    };
    PinnedPool pool;
    std::vector<std::vector<float>> warm;
    for (int r = 0; r < ranks; ++r) {
        warm.push_back(random_partial(rng, n));
        upload(warm.back(), a[size_t(r)].data(), comm.device_of(r), streams[r], pool);
    }
    call(kCalls, a);  // eager first: every lazy per-device set-up happens before the capture
    streams.synchronize();

    std::vector<cudaGraphExec_t> graphs = capture_rank_graphs(comm.devices(), streams, [&] {
        call(0, a);
        call(1, b);
        call(2, a);
    });
    std::vector<std::vector<std::vector<float>>> in_a(static_cast<size_t>(replays)), in_b(static_cast<size_t>(replays));
    std::vector<ReduceResult> results;
    for (int k = 0; k < replays; ++k) {
        for (int r = 0; r < ranks; ++r) {
            in_a[size_t(k)].push_back(random_partial(rng, n));
            in_b[size_t(k)].push_back(random_partial(rng, n));
            upload(in_a[size_t(k)].back(), a[size_t(r)].data(), comm.device_of(r), streams[r], pool);
            upload(in_b[size_t(k)].back(), b[size_t(r)].data(), comm.device_of(r), streams[r], pool);
        }
        launch_rank_graphs(graphs, comm.devices(), streams);
        call(kCalls, a);  // an eager call between replays shares the epochs
        for (int which = 0; which <= kCalls; ++which)
            for (size_t i = 0; i < group.size(); ++i)
                results.push_back({group, which == 1 ? &in_b[size_t(k)] : &in_a[size_t(k)],
                                   download(outs[size_t(which)][i].data(), n, comm.device_of(group[i]),
                                            streams[group[i]], pool),
                                   group_name(group) + " replay " + std::to_string(k) + " call " +
                                       std::to_string(which) + " rank " + std::to_string(group[i])});
    }
    streams.synchronize();
    comm.check_health();
    destroy_graphs(graphs);
    for (const ReduceResult& r : results) expect_reduced(r, n, exact);
}

void check_gather(cuda::Communicator& comm, const RankStreams& streams, int64_t rows, int64_t cols, bool root_in_place,
                  int rounds, bool in_graph, std::mt19937_64& rng) {
    const int ranks = comm.ranks();
    std::vector<int64_t> cut(size_t(ranks) + 1, 0);
    for (int r = 1; r < ranks; ++r) cut[size_t(r)] = int64_t(rng() % uint64_t(cols + 1));
    cut[size_t(ranks)] = cols;
    std::sort(cut.begin(), cut.end());
    const int64_t ldo = cols + 3;  // three columns nobody owns
    GuardedArray<float> out(comm.device_of(0), rows * ldo);
    std::vector<GuardedArray<float>> blocks;
    std::vector<GatherPart> parts;
    for (int r = 0; r < ranks; ++r) {
        const int64_t width = cut[size_t(r) + 1] - cut[size_t(r)];
        const int64_t ld = width + (r % 2) * 5;
        blocks.emplace_back(comm.device_of(r), std::max<int64_t>(1, rows * ld));
        if (r == 0 && root_in_place)
            parts.push_back({out.data() + cut[0], ldo, cut[0], width, streams[0]});
        else
            parts.push_back({blocks.back().data(), ld, cut[size_t(r)], width, streams[r]});
    }
    std::vector<cudaGraphExec_t> graphs;
    if (in_graph) {
        comm.gather_columns(parts, rows, out.data(), ldo);  // eager first (lazy set-up before the capture)
        streams.synchronize();
        graphs = capture_rank_graphs(comm.devices(), streams,
                                     [&] { comm.gather_columns(parts, rows, out.data(), ldo); });
    }
    PinnedPool pool;
    std::vector<std::vector<std::vector<float>>> values(static_cast<size_t>(rounds));
    std::vector<const float*> got;
    for (int round = 0; round < rounds; ++round) {
        for (int r = 0; r < ranks; ++r) {
            const GatherPart& p = parts[size_t(r)];
            values[size_t(round)].push_back(random_partial(rng, rows * p.cols));
            if (p.cols == 0) continue;
            float* src = pool.take<float>(size_t(rows * p.cols));
            std::memcpy(src, values[size_t(round)].back().data(), size_t(rows * p.cols) * sizeof(float));
            DeviceGuard on(comm.device_of(r));
            ASSERT_EQ(cudaMemcpy2DAsync(const_cast<float*>(p.block), size_t(p.ld) * 4, src, size_t(p.cols) * 4,
                                        size_t(p.cols) * 4, size_t(rows), cudaMemcpyHostToDevice, p.stream),
                      cudaSuccess);
        }
        if (in_graph)
            launch_rank_graphs(graphs, comm.devices(), streams);
        else
            comm.gather_columns(parts, rows, out.data(), ldo);
        got.push_back(download(out.data(), rows * ldo, comm.device_of(0), streams[0], pool));
    }
    streams.synchronize();
    comm.check_health();
    destroy_graphs(graphs);
    uint32_t sentinel = 0;
    std::memset(&sentinel, GuardedArray<float>::kSentinel, sizeof(sentinel));
    for (int round = 0; round < rounds; ++round) {
        int64_t bad = 0;
        for (int64_t row = 0; row < rows; ++row) {
            for (int r = 0; r < ranks; ++r)
                for (int64_t c = 0; c < parts[size_t(r)].cols; ++c)
                    bad += got[size_t(round)][row * ldo + cut[size_t(r)] + c] !=
                           values[size_t(round)][size_t(r)][size_t(row * parts[size_t(r)].cols + c)];
            for (int64_t c = cols; c < ldo; ++c) {
                uint32_t bits = 0;
                std::memcpy(&bits, &got[size_t(round)][row * ldo + c], 4);
                bad += bits != sentinel;
            }
        }
        EXPECT_EQ(bad, 0) << "gather round " << round << ": " << bad << " of " << rows * ldo << " elements wrong";
    }
    expect_guards_intact(out, comm.device_of(0), "gather output");
}

}  // namespace flashseek::test
