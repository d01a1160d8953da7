// Side-stream branches of a sub-block (backend_impl.h: SideStream, Lane, fork, join): an event recorded on the main
// stream starts the branch, another recorded on the side stream ends it, so a stream capture records the branch as
// parallel graph nodes and eager runs overlap the same way.
#include "cuda/backend/backend_impl.h"
#include "util/error.h"

namespace flashseek::cuda {

void SideStream::create() {
    FS_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    FS_CUDA_TRY(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    FS_CUDA_TRY(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    ws = create_gemm_workspace();
}

void SideStream::destroy() noexcept {
    destroy_gemm_workspace(ws);
    if (forked) cudaEventDestroy(forked);
    if (done) cudaEventDestroy(done);
    if (stream) cudaStreamDestroy(stream);
    forked = done = nullptr;
    stream = nullptr;
}

Lane CudaBackendImpl::fork(SideStream& s) {
    if (!branches_ || profiling_) return main_lane();
    FS_CHECK(!s.open, "CUDA backend: a side stream was forked twice without a join");
    FS_CUDA_TRY(cudaEventRecord(s.forked, stream_));
    FS_CUDA_TRY(cudaStreamWaitEvent(s.stream, s.forked, 0));
    s.open = true;
    return {s.stream, &s.ws};
}

void CudaBackendImpl::join(SideStream& s) {
    if (!s.open) return;
    s.open = false;
    FS_CUDA_TRY(cudaEventRecord(s.done, s.stream));
    FS_CUDA_TRY(cudaStreamWaitEvent(stream_, s.done, 0));
}

}  // namespace flashseek::cuda
