// The main of test_cuda_comm: the gtest suite, or the all-reduce micro-benchmark with --bench (bench_comm.cpp).
#include <gtest/gtest.h>

#include <cstring>

namespace flashseek::test {
int run_benchmarks(int argc, char** argv);
}

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--bench") == 0) return flashseek::test::run_benchmarks(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
