// Requests a byte range into L2 ahead of its readers: the weight prefetch of a decode pass (KernelPolicy switch
// "weight_prefetch", forward_attention.cpp), which asks for the next weight-streaming GEMV's matrix while the
// latency-bound ops before it run and HBM idles. Fire and forget: the kernel issues the requests and exits, no
// reader waits for it and nothing is written, so it changes no result; a line not yet in L2 when its reader comes
// is read from HBM as before. sm_90+ only (one cp.async.bulk.prefetch.L2 per 16 KB piece, the copy engines walk
// the lines); elsewhere nothing is enqueued (a line-by-line prefetch there would keep its CTAs busy for as long as
// the transfer).
// Why not inside the GEMV (rejected, docs/perf-log/2026-12-01_decode-latency.md run 20): a kernel prefetching its
// own weights at its start puts the prefetches in the same queues as its demand loads and measured 15% slower
// steps; here the range is requested a whole op or more before its reader starts.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace flashseek::cuda {

// Enqueues the prefetch of [p, p + bytes) on `stream` (p and bytes any; null or empty range, or a device below
// sm_90: nothing).
void prefetch_to_l2(const void* p, size_t bytes, cudaStream_t stream);

}  // namespace flashseek::cuda
