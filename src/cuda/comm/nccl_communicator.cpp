// NcclCommunicator: the collectives through NCCL (communicator.h), loaded at run time (nccl_library.h). One host
// thread drives every rank, so each collective is one ncclGroupStart / ncclGroupEnd over the ranks' calls (NCCL
// enqueues nothing before the group ends, so no rank's call blocks waiting for another's). NCCL runs one rank per
// GPU: two ranks on one device are refused here, before NCCL would hang on them.
//
//  * all_reduce_bf16: ncclAllReduce(fp32, sum) from the partial into a per-rank fp32 scratch buffer, then the bf16
//    rounding (reduce.cuh with one rank); the group's communicators are the all-ranks ones, or split off them
//    (ncclCommSplit, grouped) when the group is registered. NCCL's summation order is its own: identical to rank
//    order for one or two ranks (a + b = b + a), not in general.
//  * gather_columns: the ranks' blocks travel to rank 0 by ncclSend / ncclRecv (packed to contiguous rows first
//    where their rows are strided) and are placed by a strided copy.
//
// NCCL_NVLS_ENABLE=0 is set in the environment before the first communicator is initialized, unless the user has
// set it: NVLink SHARP (multicast) can take GPUs of a shared machine out of service.
#include <cstdlib>
#include <memory>

#include "cuda/comm/communicator.h"
#include "cuda/comm/copy_columns.cuh"
#include "cuda/comm/device_memory.h"
#include "cuda/comm/nccl_library.h"
#include "cuda/comm/reduce.cuh"
#include "util/error.h"

namespace flashseek::cuda {
namespace {

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(std::vector<int> rank_devices, const CommOptions& options)
        : Communicator(std::move(rank_devices), options), api_(load_for(*this)) {
        comms_.assign(size_t(ranks()), nullptr);
        check(api_.comm_init_all(comms_.data(), ranks(), devices().data()), "ncclCommInitAll", nullptr);
        try {
            for (int r = 0; r < ranks(); ++r) {
                scratch_.emplace_back(device_of(r), size_t(options.max_elements) * sizeof(float), "the NCCL sum");
                if (r > 0)
                    send_.emplace_back(device_of(r), size_t(options.max_gather_elements) * sizeof(float),
                                       "the NCCL gather's send buffer");
            }
            if (ranks() > 1)
                recv_ = DeviceMemory(device_of(0),
                                     size_t(options.max_gather_elements) * size_t(ranks() - 1) * sizeof(float),
                                     "the NCCL gather's receive buffer");
            register_all_group();
        } catch (...) {
            destroy_comms();  // the destructor does not run for a constructor that throws
            throw;
        }
    }

    ~NcclCommunicator() override { destroy_comms(); }

    const char* kind_name() const override { return "nccl"; }

private:
    // Refuses two ranks on one device (NCCL would hang on them) before loading NCCL; keeps NVLink SHARP off.
    static const NcclApi& load_for(const Communicator& c) {
        for (int a = 0; a < c.ranks(); ++a)
            for (int b = a + 1; b < c.ranks(); ++b)
                FS_CHECK(c.device_of(a) != c.device_of(b),
                         "NCCL communicator: ranks {} and {} are both on device {}; NCCL runs one rank per GPU (the "
                         "same-device or peer communicator runs virtual ranks)",
                         a, b, c.device_of(a));
        setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // before NCCL reads its environment
        return nccl_api();
    }

    void destroy_comms() noexcept {
        // Finalize every communicator in one group (one thread drives them all), then free them; children first.
        std::vector<NcclCommHandle> owned;
        for (const std::vector<NcclCommHandle>& g : split_)
            for (NcclCommHandle c : g)
                if (c) owned.push_back(c);
        for (NcclCommHandle c : comms_)
            if (c) owned.push_back(c);
        api_.group_start();
        for (NcclCommHandle c : owned) api_.comm_finalize(c);
        api_.group_end();
        for (NcclCommHandle c : owned) api_.comm_destroy(c);
        comms_.clear();
        split_.clear();
    }

    void check(int result, const char* call, NcclCommHandle comm) const {
        if (result == kNcclSuccess) return;
        const char* last = api_.get_last_error(comm);
        fail("NCCL: {} failed: {} ({}){}", call, api_.get_error_string(result), result,
             last && *last ? fmt::format(": {}", last) : std::string());
    }

    // The group ends even when a call inside it failed, so that NCCL is never left inside a group.
    template <typename Body>
    void grouped(const char* what, Body body) {
        check(api_.group_start(), "ncclGroupStart", nullptr);
        int first_error = kNcclSuccess;
        const char* failed_call = what;
        body([&](int result, const char* call) {
            if (result != kNcclSuccess && first_error == kNcclSuccess) {
                first_error = result;
                failed_call = call;
            }
        });
        const int end = api_.group_end();
        check(first_error, failed_call, nullptr);
        check(end, what, nullptr);
    }

    void add_group(int index, const std::vector<int>& members) override {
        if (split_.size() <= size_t(index)) split_.resize(size_t(index) + 1);
        if (int(members.size()) == ranks()) return;  // every rank: the communicators of ncclCommInitAll
        std::vector<NcclCommHandle> children(size_t(ranks()), nullptr);
        std::vector<char> in_group(size_t(ranks()), 0);
        for (int r : members) in_group[size_t(r)] = 1;
        grouped("ncclGroupEnd (ncclCommSplit)", [&](auto note) {
            for (int r = 0; r < ranks(); ++r)
                note(api_.comm_split(comms_[size_t(r)], in_group[size_t(r)] ? 0 : kNcclSplitNoColor, r,
                                     &children[size_t(r)], nullptr),
                     "ncclCommSplit");
        });
        std::vector<NcclCommHandle>& mine = split_[size_t(index)];
        for (int r : members) {
            FS_CHECK(children[size_t(r)] != nullptr, "NCCL: ncclCommSplit gave rank {} no communicator", r);
            mine.push_back(children[size_t(r)]);
        }
    }

    NcclCommHandle member_comm(int group, const std::vector<int>& members, size_t i) const {
        const std::vector<NcclCommHandle>& split = split_.at(size_t(group));
        return split.empty() ? comms_[size_t(members[i])] : split[i];
    }

    void do_all_reduce(int group, const std::vector<int>& members, std::span<const ReducePart> parts,
                       int64_t n) override {
        grouped("ncclGroupEnd (ncclAllReduce)", [&](auto note) {
            for (size_t i = 0; i < members.size(); ++i)
                note(api_.all_reduce(parts[i].partial, scratch_[size_t(members[i])].as<float>(), size_t(n),
                                     kNcclFloat32, kNcclSum, member_comm(group, members, i), parts[i].stream),
                     "ncclAllReduce");
        });
        for (size_t i = 0; i < members.size(); ++i) {
            DeviceGuard on(device_of(members[i]));
            const float* sum = scratch_[size_t(members[i])].as<float>();
            uint16_t* out = parts[i].out;
            reduce_partials_to_bf16(&sum, &out, 1, n, parts[i].stream);
        }
    }

    void do_gather(std::span<const GatherPart> parts, int64_t rows, float* out, int64_t ldo) override {
        // Rank r's message: its block when its rows are contiguous, else a packed copy.
        std::vector<const float*> message(parts.size());
        for (int r = 1; r < ranks(); ++r) {
            const GatherPart& p = parts[size_t(r)];
            message[size_t(r)] = p.block;
            if (p.cols > 0 && p.ld != p.cols) {
                DeviceGuard on(device_of(r));
                float* packed = send_[size_t(r - 1)].as<float>();
                copy_block_columns(p.block, p.ld, packed, p.cols, rows, p.cols, p.stream);
                message[size_t(r)] = packed;
            }
        }
        const int64_t slot = options().max_gather_elements;
        grouped("ncclGroupEnd (ncclSend / ncclRecv)", [&](auto note) {
            for (int r = 1; r < ranks(); ++r) {
                const GatherPart& p = parts[size_t(r)];
                if (p.cols == 0) continue;
                const size_t count = size_t(rows * p.cols);
                note(api_.send(message[size_t(r)], count, kNcclFloat32, 0, comms_[size_t(r)], p.stream), "ncclSend");
                note(api_.recv(recv_.as<float>() + (r - 1) * slot, count, kNcclFloat32, r, comms_[0], parts[0].stream),
                     "ncclRecv");
            }
        });
        DeviceGuard on(device_of(0));
        const GatherPart& own = parts[0];
        if (!(own.block == out + own.col_begin && own.ld == ldo))
            copy_block_columns(own.block, own.ld, out + own.col_begin, ldo, rows, own.cols, own.stream);
        for (int r = 1; r < ranks(); ++r) {
            const GatherPart& p = parts[size_t(r)];
            copy_block_columns(recv_.as<float>() + (r - 1) * slot, p.cols, out + p.col_begin, ldo, rows, p.cols,
                               own.stream);
        }
    }

    const NcclApi& api_;
    std::vector<NcclCommHandle> comms_;             // rank r's communicator of every rank
    std::vector<std::vector<NcclCommHandle>> split_;  // per group: its members' split communicators (empty: comms_)
    std::vector<DeviceMemory> scratch_;             // per rank: the fp32 sum
    std::vector<DeviceMemory> send_;                // per rank > 0: its packed block
    DeviceMemory recv_;                             // on rank 0: one slot per other rank
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::vector<int> rank_devices, const CommOptions& options) {
    return std::make_unique<NcclCommunicator>(std::move(rank_devices), options);
}

}  // namespace flashseek::cuda
