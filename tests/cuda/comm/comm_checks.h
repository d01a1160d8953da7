// The checks every communicator goes through (comm_checks.cpp), each against the host: the all-reduce of every
// group of a list for several rounds without a host synchronization in between (bit for bit in rank order, or
// within NCCL's own order's tolerance), the same inside graphs replayed with fresh inputs and mixed with eager calls,
// and the gather of unequal, strided blocks. Each also checks that nothing outside the outputs was written.
#pragma once
#include <random>
#include <vector>

#include "comm_test_util.h"

namespace flashseek::test {

struct ReduceCheck {
    std::vector<std::vector<int>> groups;
    int64_t n = 4096;
    int64_t offset = 0;  // elements added to every caller buffer's address: unaligned buffers when odd
    int rounds = 3;
    bool exact = true;  // false: NCCL's order over more than two ranks (tolerance of a reordered fp32 sum)
};

void check_all_reduce(cuda::Communicator& comm, const RankStreams& streams, const ReduceCheck& c,
                      std::mt19937_64& rng);

// One graph per rank holding three all-reduces of `group` (two partials, one reused), replayed `replays` times with
// new partials uploaded before each replay and an eager all-reduce after it.
void check_all_reduce_graphs(cuda::Communicator& comm, const RankStreams& streams, const std::vector<int>& group,
                             int64_t n, int replays, std::mt19937_64& rng, bool exact = true);

// gather_columns of `rows` rows: the ranks' column counts random (some zero), their blocks strided, rank 0's block
// in place when `root_in_place`; the output has unowned columns that must stay untouched. `in_graph`: captured once
// and replayed every round.
void check_gather(cuda::Communicator& comm, const RankStreams& streams, int64_t rows, int64_t cols, bool root_in_place,
                  int rounds, bool in_graph, std::mt19937_64& rng);

// Groups of `size` neighbouring ranks covering ranks [0, ranks) (the tensor-parallel groups of expert groups).
std::vector<std::vector<int>> neighbour_groups(int ranks, int size);

}  // namespace flashseek::test
