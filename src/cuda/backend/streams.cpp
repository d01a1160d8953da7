// StreamSet (streams.h): an event recorded on the main stream starts a branch, another recorded on the side stream
// ends it, so a stream capture records the branch as parallel graph nodes and eager runs overlap the same way.
#include "cuda/backend/streams.h"

#include "cuda/backend/cuda_util.h"
#include "util/error.h"

namespace flashseek::cuda {

SideStream::SideStream(bool with_workspace) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    if (with_workspace) ws_ = create_gemm_workspace();
}

SideStream::~SideStream() {
    destroy_gemm_workspace(ws_);
    if (forked_) cudaEventDestroy(forked_);
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
}

void SideStream::recreate(int priority) {
    FS_CHECK(!open_, "CUDA backend: a side stream was recreated while forked");
    if (stream_) CUDA_CHECK(cudaStreamDestroy(stream_));
    stream_ = nullptr;
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
}

StreamSet::StreamSet() {
    CUDA_CHECK(cudaStreamCreateWithFlags(&main_, cudaStreamNonBlocking));
    main_ws_ = create_gemm_workspace();
}

StreamSet::~StreamSet() {
    destroy_gemm_workspace(main_ws_);
    if (main_) cudaStreamDestroy(main_);
}

Lane StreamSet::fork(SideStream& s) {
    if (!branches_ || single_stream_) return main_lane();
    FS_CHECK(!s.open_, "CUDA backend: a side stream was forked twice without a join");
    CUDA_CHECK(cudaEventRecord(s.forked_, main_));
    CUDA_CHECK(cudaStreamWaitEvent(s.stream_, s.forked_, 0));
    s.open_ = true;
    return {s.stream_, &s.ws_};
}

void StreamSet::join(SideStream& s) { join_into(s, main_lane()); }

void StreamSet::join_into(SideStream& s, const Lane& into) {
    if (!s.open_) return;
    s.open_ = false;
    CUDA_CHECK(cudaEventRecord(s.done_, s.stream_));
    CUDA_CHECK(cudaStreamWaitEvent(into.stream, s.done_, 0));
}

std::array<SideStream*, 11> StreamSet::side_streams() {
    return {&window_kv, &index_compressor, &aux, &compressor_gate, &index_compressor_gate, &index_query,
            &index_weights, &mhc_mix, &weight_prefetch, &wo_a_widen, &expert_pack};
}

void StreamSet::set_branch_priority(bool greatest) {
    int least = 0, most = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &most));
    for (SideStream* s : side_streams()) s->recreate(greatest ? most : least);
}

void StreamSet::reset_branches() {
    for (SideStream* s : side_streams()) s->open_ = false;
}

}  // namespace flashseek::cuda
