// mhc_pre's partial sums for prefill passes: the split kernel's values (mhc_chunk.cuh), bit for bit, at a fraction
// of its cost on thousands of tokens.
//
// Why a second kernel: the split kernel (mhc.cu) gives each CTA 8 tokens x one 128-element chunk so that a single
// decode token still spreads over 128 CTAs. At 4,096 tokens that is 65,536 short CTAs, each loading 12 KB of fn
// for 8 tokens and then reducing 32 values with a shuffle transpose; it ran at ~0.2 TB/s (0.67 ms per call, 1.1 ms
// with the previous mhc_post and the MoE combine in front, two calls per layer: 18% of a 4,096-token prefill).
// Looping 8 token tiles inside each split CTA did not help (fewer CTAs, same serial chain per tile).
//
// Design: CTA = (64 tokens, one chunk), 8 warps; chunks vary fastest in the grid, so the CTAs resident together
// complete whole token blocks of the workspace ([token][split][row], ws_index) in L2. V4's stream count (4) has its
// own instantiation, every per-stream loop unrolled. Times: docs/perf.md §2.1a.
//  1. Staging. fn's chunk (24 rows x 128, fp32) goes to shared memory before pdl_wait (weights). Then every
//     thread issues its cp.async pieces of the tile's streams (bf16, 8 bytes per token and lane slot, zero-filled
//     past the tokens or K) and, with the previous mhc_post fused, of the tokens' post / comb weights and MoE pair
//     slots (contiguous rows of the tile's tokens, copied as 16-byte blocks): all of the tile's loads are in flight
//     at once. Staged token by token through registers (load, convert, butterfly, next token), each CTA lived
//     ~26 us, mostly waiting on one load at a time. A persistent form (one wave of CTAs walking their tiles, the next
//     tile in flight) measured slower than these independent CTAs, 15 waves of them at 4,096 tokens.
//     With the post fused, o (read, or the MoE combine of the token's expert rows) is computed once per (token,
//     feature) into shared memory (the split kernel computes it once per stream), then warp w mixes tokens w,
//     w + 8, ... in place, lane L the 4 elements of lane slot L, exactly as the split kernel's warp holds them,
//     and stores the new streams. Every staged value is a bf16 value, so the tile stays bf16.
//     The sum of squares is finished in staging with one xor butterfly per token: its leaves are the lanes, and
//     the butterfly's tree is the chunk's.
//  2. Mixing sums. Warp g takes rows g, g + 8, g + 16, lane L tokens L and L + 32: six sums per thread, each
//     evaluated by the thread alone as the chunk's tree (leaf = the 4-element fmaf chain of one slot, pairs by
//     slot bit 4, then 3, ..., then 0), depth first so that five partials per sum are live. No shuffles: every
//     operand is a shared-memory load (bf16 rows padded to 132 elements so that a half warp's 8-byte loads hit
//     distinct banks; fn rows are warp-uniform broadcasts).
//  3. Store. The partials go through shared memory (fn's area, free after the sums) as [token][row], and each
//     token's n_mix + 1 values of the chunk are stored as one contiguous segment. Stored straight from the sum
//     registers, every partial was its own 4-byte sector write: 13.1 M L2 write requests per call at 4,096 tokens,
//     two thirds of the kernel's L2 traffic (Nsight Compute, run 102).
// The partials land in the split kernel's workspace layout, so mhc_finalize is shared.
#include "cuda/mhc/mhc_partial_tiled.cuh"

#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/common/warp_reduce.cuh"

namespace flashseek::cuda {

using namespace mhc_chunk;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTokens = 64;                     // tokens per CTA
constexpr int kRowsPerWarp = kMixMax / kWarps;  // 3
constexpr int kTokensPerLane = kTokens / 32;    // 2
constexpr int kXStride = kChunk + 4;            // bf16 per staged token: rows start 2 banks apart
static_assert(kRowsPerWarp * kWarps == kMixMax && kTokensPerLane * 32 == kTokens, "the thread tile covers the CTA");

// The chunk's sums of lane slots [SLOT, SLOT + 32 >> (5 - LEVEL)) strided as the butterfly pairs them, for the
// thread's tokens x rows: a leaf is the slot's fmaf chain from 0 (the split kernel's per-lane partial); a node adds
// its two subtrees, which differ in slot bit 5 - LEVEL. The root (LEVEL 5, SLOT 0) is the xor butterfly's sum.
template <int LEVEL, int SLOT>
__device__ __forceinline__ void chunk_tree(const uint16_t* const (&xr)[kTokensPerLane],
                                           const float* const (&fr)[kRowsPerWarp],
                                           float (&s)[kTokensPerLane][kRowsPerWarp]) {
    if constexpr (LEVEL == 0) {
        float w[kRowsPerWarp][kPerLane], xv[kTokensPerLane][kPerLane];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
            *reinterpret_cast<float4*>(w[r]) = *reinterpret_cast<const float4*>(fr[r] + SLOT * kPerLane);
#pragma unroll
        for (int t = 0; t < kTokensPerLane; ++t) {  // 4 bf16 -> fp32: the high halves of 32-bit words
            const uint2 raw = *reinterpret_cast<const uint2*>(xr[t] + SLOT * kPerLane);
            xv[t][0] = __uint_as_float(raw.x << 16);
            xv[t][1] = __uint_as_float(raw.x & 0xffff0000u);
            xv[t][2] = __uint_as_float(raw.y << 16);
            xv[t][3] = __uint_as_float(raw.y & 0xffff0000u);
        }
#pragma unroll
        for (int t = 0; t < kTokensPerLane; ++t) {
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) s[t][r] = slot_partial(w[r], xv[t]);
        }
    } else {
        float hi[kTokensPerLane][kRowsPerWarp];
        chunk_tree<LEVEL - 1, SLOT>(xr, fr, s);
        chunk_tree<LEVEL - 1, SLOT + (kSlots >> LEVEL)>(xr, fr, hi);
#pragma unroll
        for (int t = 0; t < kTokensPerLane; ++t) {
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) s[t][r] = s[t][r] + hi[t][r];
        }
    }
}

// Dynamic shared memory, in this order (every piece a multiple of 16 bytes):
//   fs [kMixMax][kChunk] fp32 (after the sums: the tile's partials [kTokens][n_mix + 1], transposed for the store),
//   xs [kTokens][kXStride] bf16, sq [kTokens] fp32 (sums of squares);
//   fused mhc_post: os [kTokens][kChunk / N] fp32 (o), post [kTokens][N], comb [kTokens][N * N] fp32;
//   fused combine: slots [kTokens][top_k] int32.
struct TiledSmem {
    size_t xs, sq, os, post, comb, slots, total;
    __host__ __device__ TiledSmem(bool fused, int N, int top_k) {
        xs = size_t(kMixMax) * kChunk * 4;
        sq = xs + size_t(kTokens) * kXStride * 2;
        os = sq + size_t(kTokens) * 4;
        post = os + (fused ? size_t(kTokens) * (kChunk / N) * 4 : 0);
        comb = post + (fused ? size_t(kTokens) * N * 4 : 0);
        slots = comb + (fused ? size_t(kTokens) * N * N * 4 : 0);
        total = slots + size_t(kTokens) * top_k * 4;
    }
};
static_assert(kTokens * (kMixMax + 1) <= kMixMax * kChunk, "the transposed partials fit in fn's staging area");

// `total` bytes of a per-token array (contiguous rows of the tile's tokens) into shared memory: the first `valid`
// bytes from src, the rest zeros. 16-byte pieces when src is 16-byte aligned (`vec`), else 4-byte ones; `valid` and
// `total` are multiples of 4 (of 16 with vec: kTokens rows of 4-byte elements).
__device__ __forceinline__ void stage_rows(void* dst, const void* src, int valid, int total, bool vec) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    if (vec) {
        for (int i = int(threadIdx.x) * 16; i < total; i += kThreads * 16) {
            const int v = min(max(valid - i, 0), 16);
            if (v == 16 || v == 0) {
                cp_async_cg16_zfill(d + i, v > 0 ? s + i : s, v);
            } else {  // the last valid piece: 4-byte copies, so that no read reaches past the array
#pragma unroll
                for (int w = 0; w < 16; w += 4) cp_async_ca_zfill<4>(d + i + w, w < v ? s + i + w : s, w < v ? 4 : 0);
            }
        }
    } else {
        for (int i = int(threadIdx.x) * 4; i < total; i += kThreads * 4) {
            const int v = valid > i ? 4 : 0;
            cp_async_ca_zfill<4>(d + i, v > 0 ? s + i : s, v);
        }
    }
}

// NS: the stream count at compile time (V4's 4: every per-stream loop and index unrolled), 0 = a.n_streams.
template <int NS>
__global__ void __launch_bounds__(kThreads, 4) mhc_partial_tiled_kernel(MhcPartialArgs a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int N = NS > 0 ? NS : a.n_streams;
    const bool combine = combines_moe(a.pin);
    const bool fused = a.pin.o || combine;  // host-checked: interleaved, aligned
    const int top_k = combine ? a.pin.top_k : 0;
    const TiledSmem lay(fused, N, top_k);
    float(*fs)[kChunk] = reinterpret_cast<float(*)[kChunk]>(smem);
    uint16_t(*xs)[kXStride] = reinterpret_cast<uint16_t(*)[kXStride]>(smem + lay.xs);
    float* sq = reinterpret_cast<float*>(smem + lay.sq);
    float* os = reinterpret_cast<float*>(smem + lay.os);
    float* post_s = reinterpret_cast<float*>(smem + lay.post);
    float* comb_s = reinterpret_cast<float*>(smem + lay.comb);
    int32_t* slots = reinterpret_cast<int32_t*>(smem + lay.slots);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int split = blockIdx.x;
    const int64_t D = a.dim, K = int64_t(N) * D;
    const int t0 = blockIdx.y * kTokens;
    const int nt = min(kTokens, a.n_tokens - t0);
    const int n_out = a.n_mix + 1;

    // Index math once per thread: every loop below keeps a thread on its lane's slot (strides are multiples of 32),
    // and divisions by the stream count stay out of the loops (in them, ~100 integer instructions per item made the
    // staging 69% of a plain call's stall samples).
    int stream = 0;
    const int64_t kb = chunk_origin(split, lane, N, D, a.interleaved, stream);  // this lane's slot
    const int64_t left = K - kb;  // elements of the slot inside K (the last chunk may be partial)
    const int slot_valid = left <= 0 ? 0 : left < kPerLane ? int(left) : kPerLane;
    const bool full = a.aligned && slot_valid == kPerLane;

    // fn's chunk, rows past n_mix zero (weights: before the wait, common/pdl.cuh). Warp w: rows w + 8 j.
#pragma unroll
    for (int o = warp; o < kMixMax; o += kWarps) {
        const float* src = a.fn + int64_t(o) * K + kb;
        float w[kPerLane];
        if (o < a.n_mix && full) {
            *reinterpret_cast<float4*>(w) = __ldg(reinterpret_cast<const float4*>(src));
        } else {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) w[i] = o < a.n_mix && i < slot_valid ? __ldg(src + i) : 0.f;
        }
        *reinterpret_cast<float4*>(&fs[o][lane * kPerLane]) = *reinterpret_cast<const float4*>(w);
    }
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();

    // The tile's streams (and the fused post's per-token inputs), all requested at once. Warp w: tokens w + 8 j.
    {
        const bf16* src = a.x + (int64_t(t0) + warp) * K + kb;
        const int64_t step = int64_t(kWarps) * K;
#pragma unroll 4
        for (int tt = warp; tt < kTokens; tt += kWarps, src += step) {
            uint16_t* dst = &xs[tt][lane * kPerLane];
            if (a.aligned) {
                const int valid = tt < nt ? slot_valid : 0;
                cp_async_ca_zfill<8>(dst, valid > 0 ? static_cast<const void*>(src) : a.x, valid * 2);
            } else {  // scalar fallback (K % 4 != 0 or misaligned streams)
#pragma unroll
                for (int i = 0; i < kPerLane; ++i)
                    dst[i] = tt < nt && i < slot_valid ? __bfloat16_as_ushort(src[i]) : uint16_t(0);
            }
        }
    }
    if (fused) {  // post, comb and pair slots: contiguous rows of the tile's tokens, copied as blocks
        stage_rows(post_s, a.pin.post + int64_t(t0) * N, nt * N * 4, kTokens * N * 4, a.stage16);
        stage_rows(comb_s, a.pin.comb + int64_t(t0) * N * N, nt * N * N * 4, kTokens * N * N * 4, a.stage16);
        if (combine)
            stage_rows(slots, a.pin.pair_slot + int64_t(t0) * top_k, nt * top_k * 4, kTokens * top_k * 4, a.stage16);
    }
    cp_async_wait_all();
    __syncthreads();

    const int slots_per_stream = kSlots / N;  // (interleaved) feature quads of the chunk
    const int q = lane % slots_per_stream;    // this lane's quad
    const int features = kChunk / N;          // (interleaved) features of the chunk
    if (fused) {
        // o once per (token, feature quad) instead of once per stream: lane L takes quad L % (32 / N) of token
        // w * N + L / (32 / N) + 8 N j, so a routed row's 16-byte pieces are read as whole segments.
        const int64_t d0 = int64_t(split) * features + q * kPerLane;
#pragma unroll 2
        for (int tt = warp * N + lane / slots_per_stream; tt < nt; tt += kWarps * N) {
            float of[kPerLane];
            post_o_features<8>(a.pin, slots + tt * top_k, t0 + tt, D, d0, of);
            *reinterpret_cast<float4*>(&os[tt * features + q * kPerLane]) = *reinterpret_cast<const float4*>(of);
        }
        __syncthreads();
    }
    // Per token (warp w: tokens w + 8 j; lane = slot): the fused post's mix in place, and the sum of squares.
    {
        bf16* xg = a.x + (int64_t(t0) + warp) * K + kb;
        const int64_t xstep = int64_t(kWarps) * K;
        for (int tt = warp; tt < nt; tt += kWarps, xg += xstep) {
            float xv[kPerLane];
            if (fused) {
                float of[kPerLane], ck[kMaxStreams], xj[kMaxStreams][kPerLane];
                *reinterpret_cast<float4*>(of) = *reinterpret_cast<const float4*>(&os[tt * features + q * kPerLane]);
#pragma unroll
                for (int j = 0; j < kMaxStreams; ++j) {
                    ck[j] = j < N ? comb_s[(tt * N + j) * N + stream] : 0.f;
#pragma unroll
                    for (int i = 0; i < kPerLane; ++i) xj[j][i] = 0.f;
                    if (j < N)
                        bf16x4_to_float(
                            *reinterpret_cast<const uint2*>(&xs[tt][(j * slots_per_stream + q) * kPerLane]), xj[j]);
                }
                post_mix4(post_s[tt * N + stream], ck, of, xj, N, xv);
                uint2 raw;
                __nv_bfloat162* h2 = reinterpret_cast<__nv_bfloat162*>(&raw);
                h2[0] = __floats2bfloat162_rn(xv[0], xv[1]);
                h2[1] = __floats2bfloat162_rn(xv[2], xv[3]);
                __syncwarp();  // every lane has read the token's old streams
                *reinterpret_cast<uint2*>(&xs[tt][lane * kPerLane]) = raw;
                *reinterpret_cast<uint2*>(xg) = raw;  // in place (old values all read)
            } else {
                bf16x4_to_float(*reinterpret_cast<const uint2*>(&xs[tt][lane * kPerLane]), xv);
            }
            const float s2 = warp_sum(slot_partial(xv, xv));  // pairs by lane bit 4, 3, 2, 1, 0: the chunk's tree
            if (lane == 0) sq[tt] = s2;
        }
    }
    __syncthreads();  // the tile is final

    // Mixing sums: warp g rows g + 8 r, lane tokens lane + 32 t (head mode: warps past n_mix have no row).
    float s[kTokensPerLane][kRowsPerWarp];
    if (warp < a.n_mix) {
        const uint16_t* const xr[kTokensPerLane] = {xs[lane], xs[lane + 32]};
        const float* const fr[kRowsPerWarp] = {fs[warp], fs[warp + kWarps], fs[warp + 2 * kWarps]};
        chunk_tree<5, 0>(xr, fr, s);
    }
    __syncthreads();  // fn's area is free: the partials are transposed through it, [token][row]
    float* tp = &fs[0][0];
    if (warp < a.n_mix) {
#pragma unroll
        for (int t = 0; t < kTokensPerLane; ++t) {
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
                const int o = warp + kWarps * r;
                if (o < a.n_mix) tp[(lane + 32 * t) * n_out + o] = s[t][r];  // odd n_out (V4: 25): no bank conflict
            }
        }
    }
    if (int(threadIdx.x) < nt) tp[threadIdx.x * n_out + a.n_mix] = sq[threadIdx.x];
    __syncthreads();
    // One token's n_out partials of this chunk are contiguous in the workspace (ws_index): warp w stores tokens
    // w + 8 j, one segment each, instead of one scattered 4-byte store per partial.
    for (int tt = warp; tt < nt; tt += kWarps) {
        float* dst = a.ws + ws_index(int64_t(t0) + tt, split, 0, a.splits, n_out);
        for (int o = lane; o < n_out; o += 32) dst[o] = tp[tt * n_out + o];
    }
}

}  // namespace

void mhc_partial_tiled(const MhcPartialArgs& a, cudaStream_t stream) {
    // Chunks vary fastest: the CTAs resident together cover whole token blocks of the workspace ([token][split][row]:
    // every chunk's segment of a few token tiles), so a block is complete in L2 before it is evicted.
    FS_REQUIRE((a.n_tokens + kTokens - 1) / kTokens <= 65535, "mhc_partial_tiled: ", a.n_tokens, " tokens");
    const dim3 grid(a.splits, (a.n_tokens + kTokens - 1) / kTokens);
    const bool fused = a.pin.o || combines_moe(a.pin);
    const int top_k = combines_moe(a.pin) ? a.pin.top_k : 0;
    const size_t smem = TiledSmem(fused, a.n_streams, top_k).total;
    FS_REQUIRE(smem <= 200 * 1024, "mhc_partial_tiled: top_k ", top_k, " needs ", smem, " bytes of shared memory");
    auto* kernel = a.n_streams == 4 ? mhc_partial_tiled_kernel<4> : mhc_partial_tiled_kernel<0>;
    allow_dynamic_smem(kernel, smem);
    launch_pdl("mhc_partial_tiled_kernel", kernel, grid, dim3(kThreads), smem, stream, a);
    CUDA_CHECK_LAUNCH("mhc_partial_tiled_kernel");
}

}  // namespace flashseek::cuda
