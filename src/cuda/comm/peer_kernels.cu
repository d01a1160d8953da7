// The peer all-reduce and gather kernels (peer_kernels.cuh has the protocol). Elements are handled in quads of four
// (one float4 of fp32, one 8-byte group of bf16); quad q belongs to the thread (b * kPeerThreads + t) + k * grid
// threads of its range on every rank alike, which is what lets the barriers be per CTA. The caller's buffers may be
// unaligned (a row offset into a larger buffer): their quads are then moved element by element; the staging
// buffers are always aligned and hold whole quads.
#include "cuda/comm/peer_kernels.cuh"

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/select_pick.cuh"

namespace flashseek::cuda {
namespace {

// ---- flags ------------------------------------------------------------------------------------------------------
__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t global_time_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Polls `flag` until it reaches epoch e (a peer is at most one epoch ahead, so the signed difference decides across
// the wrap-around of the counter); past the time-out, records who waited for whom and traps.
__device__ void wait_flag(const uint32_t* flag, uint32_t e, const PeerCallArgs& c, int peer, int phase) {
    if (int32_t(load_acquire_sys(flag) - e) >= 0) return;
    const uint64_t start = global_time_ns();
    for (uint32_t spins = 1;; ++spins) {
        if (int32_t(load_acquire_sys(flag) - e) >= 0) return;
        if ((spins & 63) == 0 && global_time_ns() - start > c.timeout_ns) {
            CommFailure* f = c.failure;
            f->rank = c.rank;
            f->peer = peer;
            f->group = c.group;
            f->phase = phase;
            f->cta = int32_t(blockIdx.x);
            f->epoch = e;
            __threadfence_system();
            f->failed = 1;
            __threadfence_system();
            __trap();
        }
    }
}

// The CTA's part of a barrier among the group: every thread's writes so far are released to every peer, and after
// it returns every peer's writes before its signal are visible to every thread of the CTA. Thread p talks to peer p.
__device__ void group_barrier(const PeerCallArgs& c, PeerSignals* own, int phase, uint32_t e) {
    __syncthreads();
    const int p = int(threadIdx.x);
    if (p < c.size && p != c.me) {
        store_release_sys(&pick(c.signals, p)->flags[phase][blockIdx.x][c.me], e);
        wait_flag(&own->flags[phase][blockIdx.x][p], e, c, p, phase);
    }
    __syncthreads();
}

// The last CTA of the call to get here stores the call's epoch: the next call on this rank starts from it.
__device__ void finish_call(PeerSignals* own, uint32_t e) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t done = atomicAdd(&own->arrived, 1u);
        if (done == gridDim.x - 1) {
            own->arrived = 0;
            own->epoch = e;
        }
    }
}

// ---- quads ------------------------------------------------------------------------------------------------------
// Quad q of the caller's [n] fp32 buffer; zeros past n.
__device__ __forceinline__ float4 load_caller(const float* p, int64_t q, int64_t n, bool aligned) {
    const int64_t i = q * 4;
    if (aligned && i + 3 < n) return *reinterpret_cast<const float4*>(p + i);
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = i + k < n ? p[i + k] : 0.f;
    return make_float4(v[0], v[1], v[2], v[3]);
}

// Quad q of a staging half (another rank's, written before its signal): through L2, never a stale L1 line.
__device__ __forceinline__ float4 load_staged(const float* half, int64_t q) {
    return __ldcg(reinterpret_cast<const float4*>(half) + q);
}

__device__ __forceinline__ float4 add_in_order(float4 a, float4 b) {  // no contraction: the fixed order
    return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

__device__ __forceinline__ uint2 to_bf16_quad(float4 s) {
    return make_uint2(uint32_t(f32_to_bf16_bits(s.x)) | (uint32_t(f32_to_bf16_bits(s.y)) << 16),
                      uint32_t(f32_to_bf16_bits(s.z)) | (uint32_t(f32_to_bf16_bits(s.w)) << 16));
}

// Quad q of the caller's [n] bf16 output.
__device__ __forceinline__ void store_out(uint16_t* out, int64_t q, int64_t n, uint2 bits, bool aligned) {
    const int64_t i = q * 4;
    if (aligned && i + 3 < n) {
        *reinterpret_cast<uint2*>(out + i) = bits;
        return;
    }
    const uint16_t h[4] = {uint16_t(bits.x), uint16_t(bits.x >> 16), uint16_t(bits.y), uint16_t(bits.y >> 16)};
#pragma unroll
    for (int k = 0; k < 4; ++k)
        if (i + k < n) out[i + k] = h[k];
}

// The sum of quad q over the group in rank order: this rank's value from its own partial, the peers' from their
// staging halves. kR >= size bounds the unrolled loop, so the peers' loads are all issued before the first add.
template <int kR>
__device__ __forceinline__ float4 sum_quad(const PeerReduceArgs& a, int64_t q, int64_t half, bool own_aligned) {
    const PeerCallArgs& c = a.call;
    float4 v[kR];
#pragma unroll
    for (int p = 0; p < kR; ++p)
        if (p < c.size)
            v[p] = p == c.me ? load_caller(a.partial, q, a.n, own_aligned) : load_staged(a.staging[p] + half, q);
    float4 s = v[0];
#pragma unroll
    for (int p = 1; p < kR; ++p)
        if (p < c.size) s = add_in_order(s, v[p]);
    return s;
}

// What a reduce kernel derives from its arguments first: the call's epoch and staging half, the quads and this
// thread's start and stride in the grid-stride loops over them, whether the caller's buffers allow vector access.
struct ReduceFrame {
    PeerSignals* own;
    uint32_t e;
    int64_t half, quads, step, first;
    bool own_aligned, out_aligned;
};

__device__ __forceinline__ ReduceFrame reduce_frame(const PeerReduceArgs& a) {
    ReduceFrame f;
    f.own = pick(a.call.signals, a.call.me);
    f.e = __ldcg(&f.own->epoch) + 1;
    f.half = int64_t(f.e & 1) * a.stride;
    f.quads = (a.n + 3) / 4;
    f.step = int64_t(gridDim.x) * kPeerThreads;
    f.first = int64_t(blockIdx.x) * kPeerThreads + threadIdx.x;
    f.own_aligned = (reinterpret_cast<uintptr_t>(a.partial) & 15) == 0;
    f.out_aligned = (reinterpret_cast<uintptr_t>(a.out) & 7) == 0;
    return f;
}

// ---- kernels ----------------------------------------------------------------------------------------------------
// One-shot: stage the partial, one barrier, every rank sums every quad from every peer.
template <int kR>
__global__ void __launch_bounds__(kPeerThreads) peer_one_shot_kernel(const PeerReduceArgs a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    const PeerCallArgs& c = a.call;
    const ReduceFrame f = reduce_frame(a);
    if (c.size > 1) {
        float4* mine = reinterpret_cast<float4*>(pick(a.staging, c.me) + f.half);
        for (int64_t q = f.first; q < f.quads; q += f.step) mine[q] = load_caller(a.partial, q, a.n, f.own_aligned);
        group_barrier(c, f.own, 0, f.e);
    }
    pdl_trigger();  // every peer's CTA has arrived: dependents can no longer crowd it out
    for (int64_t q = f.first; q < f.quads; q += f.step)
        store_out(a.out, q, a.n, to_bf16_quad(sum_quad<kR>(a, q, f.half, f.own_aligned)), f.out_aligned);
    finish_call(f.own, f.e);
}

// Two-shot: the quads are cut into one slice per rank. Each rank stages the slices of the others, reduces its own
// slice from every peer (rank order, bit-identical to one-shot), stages the bf16 result, and after a second barrier
// copies the other slices' results from their owners.
template <int kR>
__global__ void __launch_bounds__(kPeerThreads) peer_two_shot_kernel(const PeerReduceArgs a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    const PeerCallArgs& c = a.call;
    const ReduceFrame f = reduce_frame(a);
    auto slice_begin = [&](int s) { return f.quads * s / c.size; };

    float4* mine = reinterpret_cast<float4*>(pick(a.staging, c.me) + f.half);
    for (int s = 0; s < c.size; ++s)
        if (s != c.me)
            for (int64_t q = slice_begin(s) + f.first; q < slice_begin(s + 1); q += f.step)
                mine[q] = load_caller(a.partial, q, a.n, f.own_aligned);
    group_barrier(c, f.own, 0, f.e);

    uint2* reduced = reinterpret_cast<uint2*>(pick(a.gathered, c.me) + f.half);
    for (int64_t q = slice_begin(c.me) + f.first; q < slice_begin(c.me + 1); q += f.step) {
        const uint2 bits = to_bf16_quad(sum_quad<kR>(a, q, f.half, f.own_aligned));
        reduced[q] = bits;
        store_out(a.out, q, a.n, bits, f.out_aligned);
    }
    group_barrier(c, f.own, 1, f.e);
    pdl_trigger();

#pragma unroll
    for (int s = 0; s < kR; ++s) {
        if (s >= c.size || s == c.me) continue;
        const uint2* theirs = reinterpret_cast<const uint2*>(a.gathered[s] + f.half);
        for (int64_t q = slice_begin(s) + f.first; q < slice_begin(s + 1); q += f.step)
            store_out(a.out, q, a.n, __ldcg(theirs + q), f.out_aligned);
    }
    finish_call(f.own, f.e);
}

// Gather to rank 0: rank 0 says "out is free" (phase 0) and copies its own block; every other rank waits for that,
// writes its block into rank 0's out over the peer mapping and says "written" (phase 1), which rank 0 waits for.
__global__ void __launch_bounds__(kPeerThreads) peer_gather_kernel(const PeerGatherArgs a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    const PeerCallArgs& c = a.call;
    PeerSignals* own = pick(c.signals, c.me);
    const uint32_t e = __ldcg(&own->epoch) + 1;
    const int p = int(threadIdx.x);
    const int64_t total = a.rows * a.cols;
    const int64_t step = int64_t(gridDim.x) * kPeerThreads;
    auto copy_block = [&] {
        for (int64_t i = int64_t(blockIdx.x) * kPeerThreads + threadIdx.x; i < total; i += step) {
            const int64_t row = i / a.cols, col = i - row * a.cols;
            a.out[row * a.ldo + a.col_begin + col] = a.block[row * a.ld + col];
        }
    };
    if (c.me == 0) {
        if (p > 0 && p < c.size) store_release_sys(&pick(c.signals, p)->flags[0][blockIdx.x][0], e);
        if (!a.in_place) copy_block();
        if (p > 0 && p < c.size) wait_flag(&own->flags[1][blockIdx.x][p], e, c, p, 1);
        __syncthreads();  // no thread lets the dependents launch before the CTA's waits are over
    } else {
        if (p == 0) wait_flag(&own->flags[0][blockIdx.x][0], e, c, 0, 0);
        __syncthreads();
        if (!a.in_place) copy_block();
        __syncthreads();
        if (p == 0) store_release_sys(&c.signals[0]->flags[1][blockIdx.x][c.me], e);
    }
    pdl_trigger();
    finish_call(own, e);
}

template <int kR>
void launch_reduce(const PeerReduceArgs& args, bool two_shot, int ctas, cudaStream_t stream) {
    if (two_shot)
        launch_pdl("peer_two_shot_kernel", peer_two_shot_kernel<kR>, dim3(unsigned(ctas)), dim3(kPeerThreads), 0,
                   stream, args);
    else
        launch_pdl("peer_one_shot_kernel", peer_one_shot_kernel<kR>, dim3(unsigned(ctas)), dim3(kPeerThreads), 0,
                   stream, args);
}

template <typename Kernel>
int resident_per_sm(Kernel kernel) {
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kPeerThreads, 0));
    return blocks;
}

}  // namespace

int peer_reduce_ctas(int64_t n, int size, bool two_shot, int max_ctas) {
    const int64_t quads = (n + 3) / 4;
    const int64_t per_cta_range = two_shot ? (quads + size - 1) / size : quads;
    return int(std::clamp<int64_t>((per_cta_range + kPeerThreads - 1) / kPeerThreads, 1, max_ctas));
}

int peer_gather_ctas(int64_t rows, int64_t max_cols, int max_ctas) {
    const int64_t per_cta = int64_t(kPeerThreads) * 4;  // at least four elements per thread
    return int(std::clamp<int64_t>((rows * max_cols + per_cta - 1) / per_cta, 1, max_ctas));
}

int peer_resident_ctas(int max_group_size) {
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    // The largest variant a group of this communicator uses has the most registers: the fewest resident CTAs.
    auto reduce_per_sm = [&](auto one_shot, auto two_shot) {
        return std::min(resident_per_sm(one_shot), resident_per_sm(two_shot));
    };
    int per_sm = resident_per_sm(peer_gather_kernel);
    if (max_group_size <= 2)
        per_sm = std::min(per_sm, reduce_per_sm(peer_one_shot_kernel<2>, peer_two_shot_kernel<2>));
    else if (max_group_size <= 4)
        per_sm = std::min(per_sm, reduce_per_sm(peer_one_shot_kernel<4>, peer_two_shot_kernel<4>));
    else if (max_group_size <= 8)
        per_sm = std::min(per_sm, reduce_per_sm(peer_one_shot_kernel<8>, peer_two_shot_kernel<8>));
    else
        per_sm = std::min(per_sm, reduce_per_sm(peer_one_shot_kernel<16>, peer_two_shot_kernel<16>));
    return per_sm * sms;
}

void launch_peer_all_reduce(const PeerReduceArgs& args, bool two_shot, int ctas, cudaStream_t stream) {
    FS_REQUIRE(ctas >= 1 && ctas <= kPeerMaxCtas, "peer all-reduce: ", ctas, " CTAs (1..", kPeerMaxCtas, ")");
    FS_REQUIRE(args.call.size >= 1 && args.call.size <= kMaxCommRanks, "peer all-reduce: group of ", args.call.size);
    const int size = args.call.size;
    if (size <= 2)
        launch_reduce<2>(args, two_shot, ctas, stream);
    else if (size <= 4)
        launch_reduce<4>(args, two_shot, ctas, stream);
    else if (size <= 8)
        launch_reduce<8>(args, two_shot, ctas, stream);
    else
        launch_reduce<16>(args, two_shot, ctas, stream);
}

void launch_peer_gather(const PeerGatherArgs& args, int ctas, cudaStream_t stream) {
    FS_REQUIRE(ctas >= 1 && ctas <= kPeerMaxCtas, "peer gather: ", ctas, " CTAs (1..", kPeerMaxCtas, ")");
    launch_pdl("peer_gather_kernel", peer_gather_kernel, dim3(unsigned(ctas)), dim3(kPeerThreads), 0, stream, args);
}

}  // namespace flashseek::cuda
