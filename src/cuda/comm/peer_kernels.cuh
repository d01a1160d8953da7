// The kernels of flashseek's own all-reduce and gather over peer-to-peer memory (PeerCommunicator): every rank runs
// one kernel on its own device; the kernels of a call meet at barriers made of flags in device memory.
//
// Barriers. A rank's side of a group owns a PeerSignals block in its device memory. CTA b of rank p "signals phase
// k of epoch e" to rank r by storing e (release, system scope) into r's flags[k][b][p], after a CTA barrier and
// after everything CTA b wrote for that phase; CTA b of rank r waits for phase k by polling its own flags[k][b][p] of
// every peer p (acquire, system scope) until they reach e. Flags are per CTA, and CTA b of every rank handles the
// same elements, so no CTA waits on another CTA of its own grid and nothing needs a grid-wide barrier. A grid is
// small enough for every CTA of every rank sharing a device to be resident at once (PeerCommunicator sizes it from
// the occupancy), so a spinning CTA never keeps a peer's CTA from being scheduled; the kernels let their dependents
// launch (PDL) only after their barriers have passed.
//
// Epochs. The epoch of a call is PeerSignals::epoch + 1, read by every CTA when it starts; the last CTA to finish
// (a counter in the same block) stores it back. It lives in device memory, so a captured graph replays with fresh
// epochs; every rank makes the same sequence of calls per group, so its epochs match its peers'. A peer can be at
// most one call ahead (it cannot finish call e + 1 before this rank has signalled e + 1), so flags are compared
// with wrap-around arithmetic and a call's staging half is chosen by epoch parity: a rank writes half e % 2 at call
// e + 2 only after every peer has signalled e + 1, i.e. has finished reading call e.
//
// Staging. Each rank copies its fp32 partial into its own staging half before signalling and the peers read that
// copy, so the caller's partial may be overwritten as soon as the rank's kernel has finished, and the kernels take
// no per-call peer pointers. The two-shot variant also keeps its reduced slice in a bf16 staging half.
//
// Time-out. A barrier that waits longer than PeerCallArgs::timeout_ns writes who waited for whom into a host-mapped
// CommFailure and traps: an error at the next synchronization instead of a hang.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/comm/communicator.h"

namespace flashseek::cuda {

inline constexpr int kPeerThreads = 512;
inline constexpr int kPeerMaxCtas = 64;

// One rank's side of one group (or of the gather), in its device memory, zeroed at creation.
struct PeerSignals {
    uint32_t epoch;    // of the last completed call
    uint32_t arrived;  // CTAs of the current call that have finished
    uint32_t flags[2][kPeerMaxCtas][kMaxCommRanks];  // [phase][CTA][source rank's index in the group]
};

// Written by a barrier that timed out (host-mapped memory; `failed` last, after the fields).
struct CommFailure {
    int32_t rank, peer, group, phase, cta;
    uint32_t epoch;
    volatile uint32_t failed;
};

// What every peer kernel needs to know about its call and group.
struct PeerCallArgs {
    PeerSignals* signals[kMaxCommRanks] = {};  // each member's signals (peer pointers)
    int me = 0, size = 1;                 // this rank's index in the group and the group's size
    int rank = 0, group = 0;              // for the failure record: the communicator rank, the group index
    uint64_t timeout_ns = 0;
    CommFailure* failure = nullptr;
};

struct PeerReduceArgs {
    PeerCallArgs call;
    const float* partial = nullptr;  // own [n]
    uint16_t* out = nullptr;         // own [n]
    int64_t n = 0;
    float* staging[kMaxCommRanks] = {};      // each member's fp32 staging: two halves of `stride` elements
    uint16_t* gathered[kMaxCommRanks] = {};  // each member's bf16 staging (two-shot): two halves of `stride`
    int64_t stride = 0;                      // a multiple of 4
};

struct PeerGatherArgs {
    PeerCallArgs call;  // over every rank; rank 0 holds the output
    const float* block = nullptr;
    int64_t ld = 0, col_begin = 0, cols = 0;
    float* out = nullptr;  // rank 0's [rows, ldo] (a peer pointer for the other ranks)
    int64_t ldo = 0, rows = 0;
    bool in_place = false;  // the block already sits at its place in out (nothing to copy)
};

// CTAs of one call: enough for the elements, at most max_ctas (the same on every rank of the call).
int peer_reduce_ctas(int64_t n, int size, bool two_shot, int max_ctas);
int peer_gather_ctas(int64_t rows, int64_t max_cols, int max_ctas);
// CTAs of the peer kernels the current device holds resident at once (occupancy x SMs, the least over the kernels
// that groups of up to max_group_size ranks use).
int peer_resident_ctas(int max_group_size);

// Enqueue on `stream` (a stream of the current device, which must be the rank's).
void launch_peer_all_reduce(const PeerReduceArgs& args, bool two_shot, int ctas, cudaStream_t stream);
void launch_peer_gather(const PeerGatherArgs& args, int ctas, cudaStream_t stream);

}  // namespace flashseek::cuda
