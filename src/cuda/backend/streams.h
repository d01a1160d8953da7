// The streams of one CUDA backend instance: the main stream every pass is enqueued on, and eleven side streams for the
// independent branches of a sub-block (the window KV; the indexer's compressor; the attention compressor or the shared
// expert; each compressor's gate projection, beside its kv projection; the indexer's query path in decode passes
// ("indexer_branch"); the indexer's weights_proj; mhc_pre's post and comb; the L2 prefetch of the next weight GEMV's
// matrix where it forces "weight_prefetch"; wo_a's widening to bf16 where a pass takes it; one token's routed-expert
// tile, packed beside the routing). A branch is forked from the main stream by an event and joined back by another (or
// into another branch, which is joined back), so a captured graph holds it as parallel nodes and its latency-bound
// kernels overlap the main path's. Each stream has its own split-K workspace: linears running at the same time on two
// streams must not share partial sums and counters.
#pragma once
#include <cuda_runtime.h>

#include <array>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {

// Where an op is enqueued: a stream and the split-K workspace its linears use.
struct Lane {
    cudaStream_t stream = nullptr;
    const GemmWorkspace* ws = nullptr;
};

class SideStream {
public:
    // with_workspace: a split-K workspace for the linears of the branch (32 MB; branches that run none go without).
    explicit SideStream(bool with_workspace = true);
    ~SideStream();
    SideStream(const SideStream&) = delete;
    SideStream& operator=(const SideStream&) = delete;

private:
    friend class StreamSet;
    void recreate(int priority);  // a new stream at this priority (before any work is enqueued)
    cudaStream_t stream_ = nullptr;
    cudaEvent_t forked_ = nullptr, done_ = nullptr;
    GemmWorkspace ws_{};
    bool open_ = false;  // forked and not yet joined
};

class StreamSet {
public:
    StreamSet();
    ~StreamSet();
    StreamSet(const StreamSet&) = delete;
    StreamSet& operator=(const StreamSet&) = delete;

    cudaStream_t main() const { return main_; }
    Lane main_lane() const { return {main_, &main_ws_}; }
    // Starts a branch on `side` (after everything enqueued on the main stream so far) and returns its lane; with
    // branches off (KernelPolicy::branches, or a profiled step, whose per-op events need one stream) the main lane.
    Lane fork(SideStream& side);
    // Makes the main stream wait for everything enqueued on `side` since fork (no-op when it was not forked).
    void join(SideStream& side);
    // Makes another branch's lane wait for it instead (the main stream then waits for `side` through `into`'s join).
    void join_into(SideStream& side, const Lane& into);
    // A pass that threw mid-branch (its capture was discarded) left branches open: forget them.
    void reset_branches();

    void set_branches(bool on) { branches_ = on; }
    // The side streams at the device's greatest priority (true) or the default one, before any work is enqueued.
    void set_branch_priority(bool greatest);
    bool branches() const { return branches_; }
    void set_single_stream(bool on) { single_stream_ = on; }  // profiling: every op on the main stream

    SideStream window_kv, index_compressor, aux;  // aux: the attention compressor, then the shared expert
    SideStream compressor_gate, index_compressor_gate;  // each compressor's gate GEMV beside its wkv GEMV
    SideStream index_query;                       // the indexer's wq_b and q preparation (forward_attention.cpp)
    SideStream index_weights;                     // the indexer's weights_proj (forward_attention.cpp)
    SideStream mhc_mix{false};                    // mhc_pre's post and comb, the Sinkhorn (forward.cpp)
    SideStream weight_prefetch{false};            // L2 prefetch of a weight matrix (ForwardPass::prefetch_weights)
    SideStream wo_a_widen{false};                 // wo_a widened to bf16 beside the query path (forward_attention)
    SideStream expert_pack{false};                // one token's routed-expert tile beside the routing (forward_moe)

private:
    std::array<SideStream*, 11> side_streams();  // every side stream above
    cudaStream_t main_ = nullptr;
    GemmWorkspace main_ws_{};
    bool branches_ = true;
    bool single_stream_ = false;
};

}  // namespace flashseek::cuda
