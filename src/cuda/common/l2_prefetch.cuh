// Requests a byte range into L2 ahead of its readers: the weight prefetch of a decode pass (KernelPolicy switch
// "weight_prefetch", forward_attention.cpp), which asks for the next weight-streaming GEMV's matrix while the
// latency-bound ops before it run and HBM idles. Fire and forget: the kernel issues the requests and exits, no
// reader waits for it and nothing is written, so it changes no result; a line not yet in L2 when its reader comes
// is read from HBM as before. On sm_90+ one cp.async.bulk.prefetch.L2 per 64 KB piece (the copy engines walk the
// lines), elsewhere one prefetch.global.L2 per 128-byte line.
// Why not inside the GEMV (rejected, docs/perf-log/2026-12-01_decode-latency.md run 20): a kernel prefetching its
// own weights at its start puts the prefetches in the same queues as its demand loads and measured 15% slower
// steps; here the range is requested a whole op or more before its reader starts.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace flashseek::cuda {

// Enqueues the prefetch of [p, p + bytes) on `stream` (p and bytes any; null or empty: nothing).
void prefetch_to_l2(const void* p, size_t bytes, cudaStream_t stream);

}  // namespace flashseek::cuda
