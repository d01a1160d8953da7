// The communicators against the host (comm_checks.h): the same-device reduce, the peer one-shot / two-shot
// all-reduce with virtual ranks on one GPU and with ranks on several, NCCL with one rank (and with several on a
// machine that has them), graph capture and replay, the gather, the refusals and the barrier time-out. Tests that
// need more GPUs than the machine has are skipped, saying how many they need.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm_checks.h"
#include "cuda/comm/nccl_library.h"
#include "util/error.h"

namespace flashseek::test {
namespace {

using cuda::CommOptions;
using cuda::PeerAlgorithm;

#define FS_REQUIRE_GPUS(count)                                                                               \
    do {                                                                                                     \
        if (gpu_count() < (count))                                                                           \
            GTEST_SKIP() << "needs " << (count) << " CUDA device(s); this machine has " << gpu_count();      \
    } while (0)

// Every test draws its data from a fresh seed, printed with any failure (FS_TEST_SEED=... reproduces it).
class SeededTest : public ::testing::Test {
protected:
    SeededTest()
        : seed_(fresh_seed()), trace_(__FILE__, __LINE__, "FS_TEST_SEED=" + std::to_string(seed_)), rng(seed_) {}
    uint64_t seed_;
    ::testing::ScopedTrace trace_;
    std::mt19937_64 rng;
};
using CommSameDevice = SeededTest;
using CommPeerVirtual = SeededTest;
using CommPeerMultiGpu = SeededTest;
using CommNccl = SeededTest;

// The error message of `body`, or "" when it does not throw.
template <typename Body>
std::string error_of(Body body) {
    try {
        body();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::vector<std::vector<int>> every_group_shape(int ranks) {
    std::vector<std::vector<int>> groups = neighbour_groups(ranks, ranks);  // all
    for (int size : {1, 2, 4})
        if (size < ranks && ranks % size == 0)
            for (auto& g : neighbour_groups(ranks, size)) groups.push_back(g);
    if (ranks >= 3) groups.push_back({0, ranks - 1});  // non-neighbours
    return groups;
}

// ---- refusals (no GPU needed for most) -----------------------------------------------------------------------
TEST(CommRefusals, NamesTheDeviceAndTheKind) {
    EXPECT_NE(error_of([] { cuda::make_same_device_communicator(2, 99); }).find("rank 0 is placed on device 99"),
              std::string::npos);
    EXPECT_NE(error_of([] { cuda::make_peer_communicator({0, -1}); }).find("is placed on device"), std::string::npos);
    EXPECT_NE(error_of([] { cuda::parse_comm_kind("mpi", "FLASHSEEK_COMM"); }).find("FLASHSEEK_COMM: unknown"),
              std::string::npos);
    for (cuda::CommKind k : {cuda::CommKind::SameDevice, cuda::CommKind::Peer, cuda::CommKind::Nccl})
        EXPECT_EQ(cuda::parse_comm_kind(cuda::comm_kind_name(k), "x"), k);
}

TEST(CommRefusals, NamesTheBadArgument) {
    FS_REQUIRE_GPUS(1);
    auto comm = cuda::make_same_device_communicator(4, 0);
    EXPECT_NE(error_of([&] { comm->group(std::vector<int>{1, 0}); }).find("distinct and ascending"), std::string::npos);
    EXPECT_NE(error_of([&] { comm->group(std::vector<int>{0, 4}); }).find("rank 4 (entry 1) is outside [0, 4)"),
              std::string::npos);
    GuardedArray<float> p(0, 16);
    GuardedArray<uint16_t> o(0, 16);
    std::vector<cuda::ReducePart> two(2, cuda::ReducePart{p.data(), o.data(), nullptr});
    EXPECT_NE(error_of([&] { comm->all_reduce_bf16(comm->all(), two, 16); }).find("2 parts for a group of 4"),
              std::string::npos);
    std::vector<cuda::ReducePart> four(4, cuda::ReducePart{p.data(), o.data(), nullptr});
    EXPECT_NE(error_of([&] { comm->all_reduce_bf16(comm->all(), four, comm->options().max_elements + 1); })
                  .find("max_elements"),
              std::string::npos);
    four[2].out = nullptr;
    EXPECT_NE(error_of([&] { comm->all_reduce_bf16(comm->all(), four, 16); }).find("rank 2 has a null out"),
              std::string::npos);
    four[2] = {p.data(), reinterpret_cast<uint16_t*>(p.data() + 4), nullptr};
    EXPECT_NE(error_of([&] { comm->all_reduce_bf16(comm->all(), four, 16); }).find("rank 2's out overlaps"),
              std::string::npos);
    std::vector<cuda::GatherPart> g(4, cuda::GatherPart{p.data(), 4, 0, 4, nullptr});
    for (int r = 0; r < 4; ++r) g[size_t(r)].col_begin = 4 * r;
    g[3].col_begin = 2;
    EXPECT_NE(error_of([&] { comm->gather_columns(g, 1, p.data(), 16); }).find("overlap"), std::string::npos);
    g[3].col_begin = 14;
    EXPECT_NE(error_of([&] { comm->gather_columns(g, 1, p.data(), 16); }).find("outside the output"),
              std::string::npos);
}

TEST(CommRefusals, SameDeviceNeedsOneStream) {
    FS_REQUIRE_GPUS(1);
    auto comm = cuda::make_same_device_communicator(2, 0);
    RankStreams streams({0, 0}, /*shared=*/false);
    GuardedArray<float> p0(0, 64), p1(0, 64);
    GuardedArray<uint16_t> o0(0, 64), o1(0, 64);
    const std::vector<cuda::ReducePart> parts{{p0.data(), o0.data(), streams[0]}, {p1.data(), o1.data(), streams[1]}};
    EXPECT_NE(error_of([&] { comm->all_reduce_bf16(comm->all(), parts, 64); }).find("share one stream"),
              std::string::npos);
}

TEST(CommRefusals, PeerNeedsAStreamPerRank) {
    FS_REQUIRE_GPUS(1);
    auto comm = cuda::make_peer_communicator({0, 0});
    RankStreams streams({0, 0}, /*shared=*/true);
    GuardedArray<float> p0(0, 64), p1(0, 64);
    GuardedArray<uint16_t> o0(0, 64), o1(0, 64);
    const std::vector<cuda::ReducePart> parts{{p0.data(), o0.data(), streams[0]}, {p1.data(), o1.data(), streams[1]}};
    EXPECT_NE(error_of([&] { comm->all_reduce_bf16(comm->all(), parts, 64); })
                  .find("ranks 0 and 1 are enqueued on the same stream"),
              std::string::npos);
}

// A call with some ranks' streams inside a graph capture and others not would run the eager parts now and the
// captured ones only at replay (the eager ones waiting at the barriers until the time-out): refused before anything
// is enqueued, so the capture under way stays valid and empty.
TEST(CommRefusals, PartlyCapturedCallsAreRefused) {
    FS_REQUIRE_GPUS(1);
    auto comm = cuda::make_peer_communicator({0, 0});
    RankStreams streams({0, 0}, /*shared=*/false);
    GuardedArray<float> p0(0, 64), p1(0, 64), out(0, 16);
    GuardedArray<uint16_t> o0(0, 64), o1(0, 64);
    const std::vector<cuda::ReducePart> parts{{p0.data(), o0.data(), streams[0]}, {p1.data(), o1.data(), streams[1]}};
    std::vector<cuda::ReducePart> legacy = parts;
    legacy[0].stream = nullptr;
    const std::vector<cuda::GatherPart> gather{{p0.data(), 8, 0, 8, streams[0]}, {p1.data(), 8, 8, 8, streams[1]}};

    ASSERT_EQ(cudaStreamBeginCapture(streams[1], cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const std::string reduce_error = error_of([&] { comm->all_reduce_bf16(comm->all(), parts, 64); });
    const std::string legacy_error = error_of([&] { comm->all_reduce_bf16(comm->all(), legacy, 64); });
    const std::string gather_error = error_of([&] { comm->gather_columns(gather, 1, out.data(), 16); });
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(streams[1], &graph);
    size_t nodes = 1;
    if (graph) {
        EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
        cudaGraphDestroy(graph);
    }
    EXPECT_EQ(end, cudaSuccess) << cuda_error_text(end);
    EXPECT_EQ(nodes, 0u) << "a refused call enqueued a part into the capture";

    const std::string captured_and_eager = "rank 1's stream is being captured into a graph and rank 0's is not";
    EXPECT_NE(reduce_error.find("all_reduce_bf16: " + captured_and_eager), std::string::npos) << reduce_error;
    EXPECT_NE(gather_error.find("gather_columns: " + captured_and_eager), std::string::npos) << gather_error;
    EXPECT_NE(legacy_error.find("rank 0's is the legacy default stream, which cannot be captured"), std::string::npos)
        << legacy_error;

    // Outside any capture the same parts run: the refusal left nothing behind.
    comm->all_reduce_bf16(comm->all(), parts, 64);
    streams.synchronize();
    comm->check_health();
}

TEST(CommRefusals, NcclRefusesTwoRanksOnOneDevice) {
    FS_REQUIRE_GPUS(1);
    EXPECT_NE(error_of([] { cuda::make_nccl_communicator({0, 0}); }).find("ranks 0 and 1 are both on device 0"),
              std::string::npos);
}

// NCCL loads (version 2.18 or later) where the machine has it; where it does not, the error lists where it looked.
TEST(CommNcclLibrary, LoadsOrSaysWhereItLooked) {
    std::string why;
    if (nccl_loadable(&why)) {
        EXPECT_GE(cuda::nccl_api().version, cuda::kNcclMinVersion);
        EXPECT_FALSE(cuda::nccl_api().path.empty());
    } else {
        EXPECT_NE(why.find("looked at"), std::string::npos) << why;
        EXPECT_NE(why.find("nvidia/nccl/lib"), std::string::npos) << why;  // the PyPI wheel's place is among them
    }
}

// A library that is not there is named, in a fresh process (the loaded library is kept for the process's life).
void load_missing_library() {
    setenv("FLASHSEEK_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    const std::string e = error_of([] { cuda::nccl_api(); });
    std::fprintf(stderr, "%s\n", e.c_str());
    std::_Exit(e.empty() ? 4 : 3);
}

TEST(CommNcclLibraryDeathTest, MissingLibraryIsNamed) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(load_missing_library(), ::testing::ExitedWithCode(3),
                "cannot load FLASHSEEK_NCCL_LIBRARY=/nonexistent/libnccl.so.2");
}

// ---- same device ---------------------------------------------------------------------------------------------
TEST_F(CommSameDevice, AllReduceIsExactInRankOrder) {
    FS_REQUIRE_GPUS(1);
    for (int ranks = 1; ranks <= 8; ++ranks) {
        SCOPED_TRACE(testing::Message() << ranks << " ranks");
        auto comm = cuda::make_same_device_communicator(ranks, 0);
        RankStreams streams(comm->devices(), /*shared=*/true);
        for (int64_t n : {int64_t(1), int64_t(4096 + 37), int64_t(3 * 4096)})
            check_all_reduce(*comm, streams, {every_group_shape(ranks), n, 0, 2}, rng);
        check_all_reduce_graphs(*comm, streams, neighbour_groups(ranks, ranks)[0], 4096, 3, rng);
    }
}

TEST_F(CommSameDevice, GatherPlacesEveryBlock) {
    FS_REQUIRE_GPUS(1);
    for (int ranks : {1, 2, 3, 8}) {
        auto comm = cuda::make_same_device_communicator(ranks, 0);
        RankStreams streams(comm->devices(), /*shared=*/true);
        check_gather(*comm, streams, 5, 1000 + ranks, /*root_in_place=*/false, 2, /*in_graph=*/false, rng);
        check_gather(*comm, streams, 3, 777, /*root_in_place=*/true, 2, /*in_graph=*/true, rng);
    }
}

// ---- peer: virtual ranks on one device --------------------------------------------------------------------------
// The ranks' kernels run on separate streams of one device and meet at the barriers; their grids are cut so that
// every rank's CTAs are resident together, which is what makes this sound.
CommOptions peer_options(PeerAlgorithm algorithm, int64_t max_elements = int64_t(1) << 16) {
    CommOptions o;
    o.algorithm = algorithm;
    o.max_elements = max_elements;
    o.max_gather_elements = max_elements;
    o.barrier_timeout_ms = 20000;
    return o;
}

void check_peer_reduce(const std::vector<int>& devices, std::mt19937_64& rng) {
    for (PeerAlgorithm algorithm : {PeerAlgorithm::OneShot, PeerAlgorithm::TwoShot, PeerAlgorithm::Auto}) {
        SCOPED_TRACE(testing::Message() << devices.size() << " ranks, algorithm " << int(algorithm));
        CommOptions o = peer_options(algorithm);
        o.two_shot_min_bytes = 16 << 10;  // Auto: both sides of the switch within the sizes below
        auto comm = cuda::make_peer_communicator(devices, o);
        RankStreams streams(devices, /*shared=*/false);
        const int ranks = int(devices.size());
        for (int64_t n : {int64_t(1), int64_t(4096 + 37), int64_t(40000)})
            check_all_reduce(*comm, streams, {every_group_shape(ranks), n, 0, 3}, rng);
        check_all_reduce(*comm, streams, {every_group_shape(ranks), 4096 + 5, /*offset=*/1, 2}, rng);  // unaligned
        check_all_reduce_graphs(*comm, streams, neighbour_groups(ranks, ranks)[0], 4096, 4, rng);
        if (ranks % 2 == 0 && ranks > 2)
            check_all_reduce_graphs(*comm, streams, neighbour_groups(ranks, 2)[0], 8192, 3, rng);
    }
}

TEST_F(CommPeerVirtual, AllReduceIsExactInRankOrder) {
    FS_REQUIRE_GPUS(1);
    for (int ranks = 1; ranks <= 8; ++ranks) check_peer_reduce(std::vector<int>(size_t(ranks), 0), rng);
}

// Many calls back to back with no host synchronization: the epochs and the staging halves must keep up when a
// rank runs ahead of its peers.
TEST_F(CommPeerVirtual, LongRunsOfCallsStayExact) {
    FS_REQUIRE_GPUS(1);
    auto comm = cuda::make_peer_communicator({0, 0, 0, 0}, peer_options(PeerAlgorithm::Auto));
    RankStreams streams(comm->devices(), /*shared=*/false);
    check_all_reduce(*comm, streams, {{{0, 1}, {2, 3}, {0, 1, 2, 3}}, 4096, 0, 40}, rng);
}

TEST_F(CommPeerVirtual, GatherPlacesEveryBlock) {
    FS_REQUIRE_GPUS(1);
    for (int ranks : {1, 2, 3, 4, 8}) {
        auto comm = cuda::make_peer_communicator(std::vector<int>(size_t(ranks), 0), peer_options(PeerAlgorithm::Auto));
        RankStreams streams(comm->devices(), /*shared=*/false);
        check_gather(*comm, streams, 7, 3000 + ranks, /*root_in_place=*/false, 3, /*in_graph=*/false, rng);
        check_gather(*comm, streams, 4, 2500, /*root_in_place=*/true, 3, /*in_graph=*/true, rng);
    }
}

// A rank whose part never runs: the peer waiting for it gives up after the time-out with an error naming both (in
// a child process: the trap ends the device context).
void reduce_with_a_stalled_rank() {
    CommOptions o = peer_options(PeerAlgorithm::OneShot, 4096);
    o.barrier_timeout_ms = 200;
    auto comm = cuda::make_peer_communicator({0, 0}, o);
    RankStreams streams(comm->devices(), /*shared=*/false);
    GuardedArray<float> p0(0, 4096), p1(0, 4096);
    GuardedArray<uint16_t> o0(0, 4096), o1(0, 4096);
    // Rank 1's stream is held by a host function until well after rank 0's time-out.
    static std::atomic<bool> release{false};
    cudaLaunchHostFunc(
        streams[1],
        [](void*) {
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (!release.load() && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        },
        nullptr);
    const std::vector<cuda::ReducePart> parts{{p0.data(), o0.data(), streams[0]}, {p1.data(), o1.data(), streams[1]}};
    comm->all_reduce_bf16(comm->all(), parts, 4096);
    const cudaError_t sync = cudaStreamSynchronize(streams[0]);
    release = true;
    const std::string e = error_of([&] { comm->check_health(); });
    std::fprintf(stderr, "sync: %s; %s\n", cudaGetErrorName(sync), e.c_str());
    std::_Exit(e.empty() ? 4 : 3);
}

TEST(CommPeerVirtualDeathTest, BarrierTimeOutIsAnErrorNamingTheRanks) {
    FS_REQUIRE_GPUS(1);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(reduce_with_a_stalled_rank(), ::testing::ExitedWithCode(3),
                "rank 0 \\(device 0\\) waited more than 200 ms for rank 1 \\(device 0\\)");
}

// ---- peer: ranks on several devices ------------------------------------------------------------------------------
std::vector<int> distinct_devices(int max_ranks) {
    std::vector<int> devices;
    for (int d = 0; d < std::min(gpu_count(), max_ranks); ++d) devices.push_back(d);
    return devices;
}

TEST_F(CommPeerMultiGpu, AllReduceIsExactInRankOrder) {
    FS_REQUIRE_GPUS(2);
    check_peer_reduce(distinct_devices(8), rng);
    // Two ranks per device (ranks 2d and 2d + 1 on device d): peers on other devices and on the same one.
    std::vector<int> doubled;
    for (int d : distinct_devices(4)) doubled.insert(doubled.end(), {d, d});
    check_peer_reduce(doubled, rng);
}

TEST_F(CommPeerMultiGpu, GatherPlacesEveryBlock) {
    FS_REQUIRE_GPUS(2);
    auto comm = cuda::make_peer_communicator(distinct_devices(8), peer_options(PeerAlgorithm::Auto));
    RankStreams streams(comm->devices(), /*shared=*/false);
    check_gather(*comm, streams, 9, 5000, /*root_in_place=*/false, 3, /*in_graph=*/false, rng);
    check_gather(*comm, streams, 16, 4000, /*root_in_place=*/true, 3, /*in_graph=*/true, rng);
}

// ---- NCCL --------------------------------------------------------------------------------------------------------
// One rank: the plumbing (loading, initialization, the grouped calls, the bf16 rounding, graph capture) with an
// all-reduce that is the identity and a gather that is a copy.
TEST_F(CommNccl, OneRank) {
    FS_REQUIRE_GPUS(1);
    FS_SKIP_WITHOUT_NCCL();
    SCOPED_TRACE(testing::Message() << "NCCL " << cuda::nccl_api().path << " version " << cuda::nccl_api().version);
    CommOptions o;
    o.max_elements = 1 << 15;
    o.max_gather_elements = 1 << 15;
    const bool nvls_set_before = std::getenv("NCCL_NVLS_ENABLE") != nullptr;
    auto comm = cuda::make_nccl_communicator({0}, o);
    if (!nvls_set_before) {
        EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
    }
    RankStreams streams(comm->devices(), /*shared=*/false);
    for (int64_t n : {int64_t(1), int64_t(4096 + 37)}) check_all_reduce(*comm, streams, {{{0}}, n, 0, 3}, rng);
    check_all_reduce(*comm, streams, {{{0}}, 999, /*offset=*/1, 2}, rng);
    check_all_reduce_graphs(*comm, streams, {0}, 4096, 3, rng);
    check_gather(*comm, streams, 6, 1500, /*root_in_place=*/false, 2, /*in_graph=*/false, rng);
    check_gather(*comm, streams, 6, 1500, /*root_in_place=*/true, 2, /*in_graph=*/true, rng);
    check_gather(*comm, streams, 3, 1000, /*root_in_place=*/false, 2, /*in_graph=*/true, rng);
}

// Several ranks (a machine with several GPUs): exact for groups of one or two (a + b = b + a), NCCL's order beyond.
TEST_F(CommNccl, MultiGpu) {
    FS_REQUIRE_GPUS(2);
    FS_SKIP_WITHOUT_NCCL();
    const std::vector<int> devices = distinct_devices(8);
    const int ranks = int(devices.size());
    auto comm = cuda::make_nccl_communicator(devices);
    RankStreams streams(devices, /*shared=*/false);
    std::vector<std::vector<int>> small, large;
    for (auto& g : every_group_shape(ranks)) (g.size() <= 2 ? small : large).push_back(g);
    for (int64_t n : {int64_t(4096 + 37), int64_t(40000)}) {
        check_all_reduce(*comm, streams, {small, n, 0, 3, /*exact=*/true}, rng);
        if (!large.empty()) check_all_reduce(*comm, streams, {large, n, 0, 3, /*exact=*/false}, rng);
    }
    check_all_reduce_graphs(*comm, streams, neighbour_groups(ranks, ranks)[0], 4096, 3, rng, /*exact=*/ranks <= 2);
    check_gather(*comm, streams, 9, 5000, /*root_in_place=*/false, 3, /*in_graph=*/false, rng);
    check_gather(*comm, streams, 16, 4000, /*root_in_place=*/true, 3, /*in_graph=*/true, rng);
}

}  // namespace
}  // namespace flashseek::test
