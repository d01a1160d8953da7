// The L2 prefetch of a byte range (cuda/common/l2_prefetch.cuh), which the decode pass's "weight_prefetch" issues on
// a side branch: ranges of any alignment and size (one byte, a 64 KB piece and one more byte, several MB with a
// ragged end, the 16-byte widening at both ends) launch without error, directly and inside a captured CUDA graph
// (the backend's decode passes are graphs), and leave every byte of the buffer as it was; a null or empty range is
// nothing. What it buys is a timing question: flashseek bench with FLASHSEEK_FORCE=weight_prefetch.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "cuda/common/l2_prefetch.cuh"
#include "cuda/common/random_fill.cuh"
#include "test_support.h"

namespace flashseek {
namespace {

#define EXPECT_CUDA_OK(call) EXPECT_EQ((call), cudaSuccess) << #call

TEST(L2Prefetch, AnyRangeLeavesTheBytesAndRunsInAGraph) {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed=" + std::to_string(seed));
    const size_t n = (size_t(5) << 20) + 77;
    unsigned char* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, n), cudaSuccess);
    cuda::fill_random(buf, n, cuda::FillParams{cuda::FillKind::BYTES}, seed, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<unsigned char> before(n), after(n);
    ASSERT_EQ(cudaMemcpy(before.data(), buf, n, cudaMemcpyDeviceToHost), cudaSuccess);

    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    auto enqueue_all = [&] {
        cuda::prefetch_to_l2(buf + 3, 1, stream);
        cuda::prefetch_to_l2(buf + 17, (size_t(64) << 10) + 1, stream);
        cuda::prefetch_to_l2(buf + 1, n - 2, stream);
        cuda::prefetch_to_l2(buf, n, stream);
        cuda::prefetch_to_l2(nullptr, 1000, stream);
        cuda::prefetch_to_l2(buf, 0, stream);
    };
    enqueue_all();
    EXPECT_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_CUDA_OK(cudaGetLastError());

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    enqueue_all();
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < 3; ++i) EXPECT_CUDA_OK(cudaGraphLaunch(exec, stream));
    EXPECT_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_CUDA_OK(cudaGetLastError());

    ASSERT_EQ(cudaMemcpy(after.data(), buf, n, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(before.data(), after.data(), n), 0) << "a prefetch changed the buffer";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    cudaFree(buf);
}

}  // namespace
}  // namespace flashseek
