// SameDeviceCommunicator: the virtual ranks of a parallel layout on one device (communicator.h). The ranks' partials
// are all on this device, so one reduce kernel (reduce.cuh) reads them all and writes every rank's output, and the
// gather is one strided copy per rank. Both run on the one stream every rank's work is enqueued on: the ranks' parts
// must name the same stream (their kernels run in stream order, so nothing else orders them).
#include <algorithm>
#include <memory>

#include "cuda/comm/communicator.h"
#include "cuda/comm/copy_columns.cuh"
#include "cuda/comm/device_memory.h"
#include "cuda/comm/reduce.cuh"
#include "util/error.h"

namespace flashseek::cuda {
namespace {

static_assert(kMaxReduceRanks >= kMaxCommRanks, "the reduce kernel takes every rank of a communicator");

class SameDeviceCommunicator final : public Communicator {
public:
    SameDeviceCommunicator(int ranks, int device, const CommOptions& options)
        : Communicator(std::vector<int>(size_t(std::max(ranks, 1)), device), options) {
        FS_CHECK(ranks >= 1, "same-device communicator: {} ranks", ranks);
        register_all_group();
    }
    const char* kind_name() const override { return "same-device"; }

private:
    void add_group(int, const std::vector<int>&) override {}

    template <typename Part>
    cudaStream_t common_stream(std::span<const Part> parts, const char* call) const {
        for (size_t i = 1; i < parts.size(); ++i)
            FS_CHECK(parts[i].stream == parts[0].stream,
                     "{} (same-device communicator): part {} is on another stream than part 0; the virtual ranks of "
                     "one device share one stream",
                     call, i);
        return parts[0].stream;
    }

    void do_all_reduce(int, const std::vector<int>&, std::span<const ReducePart> parts, int64_t n) override {
        const cudaStream_t stream = common_stream(parts, "all_reduce_bf16");
        const float* partials[kMaxReduceRanks];
        uint16_t* outs[kMaxReduceRanks];
        for (size_t i = 0; i < parts.size(); ++i) {
            partials[i] = parts[i].partial;
            outs[i] = parts[i].out;
        }
        DeviceGuard on(device_of(0));
        reduce_partials_to_bf16(partials, outs, int(parts.size()), n, stream);
    }

    void do_gather(std::span<const GatherPart> parts, int64_t rows, float* out, int64_t ldo) override {
        const cudaStream_t stream = common_stream(parts, "gather_columns");
        DeviceGuard on(device_of(0));
        for (const GatherPart& p : parts) {
            float* dst = out + p.col_begin;
            if (p.block == dst && p.ld == ldo) continue;  // already in place
            copy_block_columns(p.block, p.ld, dst, ldo, rows, p.cols, stream);
        }
    }
};

}  // namespace

std::unique_ptr<Communicator> make_same_device_communicator(int ranks, int device, const CommOptions& options) {
    return std::make_unique<SameDeviceCommunicator>(ranks, device, options);
}

}  // namespace flashseek::cuda
