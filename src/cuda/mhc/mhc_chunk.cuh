// The split-K chunk contract shared by mhc_pre's two partial kernels (mhc.cu: split, shaped for decode;
// mhc_partial_tiled.cu: tiled, shaped for prefill). Both compute, for each (token, mixing row, chunk of 128 K
// elements), the same fp32 value with the same operations: lane slot L (0..31) of the chunk owns 4 elements
// (chunk_origin), its partial is an fmaf chain over them from 0, and the 32 slot partials are added pairwise by lane
// bit 4, 3, 2, 1, 0 in turn (the xor butterfly's tree). Which thread performs which add is free, so the two
// kernels write bit-identical partials and the choice between them never changes a result (batch invariance).
// The partials land in one workspace layout, [token][split][row] (row n_mix: the sum of squares; ws_index), so that a
// token's splits * (n_mix + 1) values are one contiguous block: the tiled kernel writes a token's rows of its chunk
// as one segment and the finalize stages a token's block with 16-byte copies.
// Also here: the previous sub-block's mhc_post (optionally with the MoE combine) that either kernel runs in front,
// in place, on interleaved chunks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/attn_helpers.cuh"
#include "cuda/common/numeric.cuh"

namespace flashseek::cuda::mhc_chunk {

using bf16 = __nv_bfloat16;

constexpr int kMixMax = 24;            // (2 + N) * N for N <= 4
constexpr int kPerLane = 4;            // K elements per lane slot
constexpr int kSlots = 32;             // lane slots per chunk
constexpr int kChunk = kSlots * kPerLane;  // K elements per chunk (128 chunks per token at N*D = 16384)
constexpr int kMaxStreams = 4;

__host__ __device__ inline int n_mix_of(int n, bool head) { return head ? n : (2 + n) * n; }
inline int n_splits_of(int64_t k) { return int((k + kChunk - 1) / kChunk); }

// Where the partial of (token t, chunk `split`, mixing row `row`; row n_mix: the sum of squares) lives in the
// workspace: [token][split][row], n_out = n_mix + 1 rows.
__host__ __device__ inline int64_t ws_index(int64_t t, int split, int row, int splits, int n_out) {
    return (t * splits + split) * n_out + row;
}

// Chunk of the split-K partial kernel: 128 contiguous elements of the flattened streams, or (interleaved, when
// N divides 32 and D is a multiple of 128 / N) the same 128 / N features of every stream, lanes 32 / N per stream.
// The interleaved chunk holds every stream value a feature's post mix needs, so the previous sub-block's mhc_post
// can run inside the partial kernel, in place (mhc_pre_fuses_post()).
inline bool interleaved_chunks(int N, int64_t D) { return (N == 1 || N == 2 || N == 4) && D % (kChunk / N) == 0; }

struct PostIn {         // the previous sub-block's mhc_post, fused (o and y_routed null: none)
    const bf16* o;      // [n_tokens, D]
    const float* post;  // [n_tokens, N]
    const float* comb;  // [n_tokens, N, N]
    // Or o = moe_combine(y_routed, pair_slot, y_shared) computed here (its math and order; null o and y_routed
    // with y_routed_bf16 below).
    const float* y_routed;
    const int32_t* pair_slot;
    const float* y_shared;
    int top_k;
    int round_terms;
    // Instead of y_shared: the shared expert's output already rounded to bf16 (round_terms only; the same term).
    const bf16* y_shared_bf16;
    // Instead of y_routed: the routed outputs already rounded to bf16 (round_terms only; the same terms).
    const bf16* y_routed_bf16;
};

// Whether the fused mhc_post combines the MoE terms itself (else it reads o).
__host__ __device__ inline bool combines_moe(const PostIn& pin) { return pin.y_routed || pin.y_routed_bf16; }

// X'_k of one feature: post_k * o + sum_j comb[j, k] X_j, the steps spelled out (free FMA contraction made the separate
// and the fused mhc_post differ in about one element in 1e5).
__device__ __forceinline__ float post_mix(float post_k, float o, const float (&comb_k)[kMaxStreams],
                                          const float (&xj)[kMaxStreams], int N) {
    float s = __fmul_rn(post_k, o);
#pragma unroll
    for (int j = 0; j < kMaxStreams; ++j)
        if (j < N) s = fmaf(comb_k[j], xj[j], s);
    return s;
}

__device__ __forceinline__ void bf16x4_to_float(const uint2& raw, float (&f)[kPerLane]) {
    const float2 a = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&raw)[0]);
    const float2 b = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&raw)[1]);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}

// The fused mhc_post's o for token t, features [d, d + 4): read (pin.o) or combined here as moe.cu's combine_kernel
// does (routed terms in pair order, then the shared expert, bf16 result). `slots` is the token's row of
// pin.pair_slot (global or shared memory). IN_FLIGHT top-k rows are requested together, then added in pair order
// (the split kernel takes 1: 8 rows in registers made it spill).
template <int IN_FLIGHT>
__device__ __forceinline__ void post_o_features(const PostIn& pin, const int32_t* slots, int64_t t, int64_t D,
                                                int64_t d, float (&of)[kPerLane]) {
    if (pin.o) {
        bf16x4_to_float(*reinterpret_cast<const uint2*>(pin.o + t * D + d), of);
        return;
    }
    constexpr int kMaxTopK = IN_FLIGHT;
    float sum[kPerLane] = {0.f, 0.f, 0.f, 0.f};
    const bool round_terms = pin.round_terms;
    auto add = [&](const float4& v) {
        float vv[kPerLane] = {v.x, v.y, v.z, v.w};
        if (round_terms) {
            round_bf16_pair(vv[0], vv[1]);
            round_bf16_pair(vv[2], vv[3]);
        }
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) sum[i] += vv[i];
    };
    // Each form requests all its rows before it uses any (a conversion between two loads would wait for the first).
    // (Two loops of one shape on purpose: written as one template over the row type, the tiled kernel compiled to
    // different address arithmetic, and one A/B measured the prefill 0.6% slower; these loops are the measured form.)
    if (pin.y_routed_bf16) {  // bf16 rows, half the bytes: add()'s rounding leaves them as they are
        for (int j0 = 0; j0 < pin.top_k; j0 += kMaxTopK) {
            const int n = min(kMaxTopK, pin.top_k - j0);
            int32_t slot[kMaxTopK];
            uint2 raw[kMaxTopK];
#pragma unroll
            for (int j = 0; j < kMaxTopK; ++j) {
                slot[j] = j < n ? slots[j0 + j] : -1;
                raw[j] = make_uint2(0u, 0u);
                if (slot[j] >= 0)
                    raw[j] = *reinterpret_cast<const uint2*>(pin.y_routed_bf16 + int64_t(slot[j]) * D + d);
            }
#pragma unroll
            for (int j = 0; j < kMaxTopK; ++j) {
                if (slot[j] < 0) continue;
                float f[kPerLane];
                bf16x4_to_float(raw[j], f);
                add(make_float4(f[0], f[1], f[2], f[3]));
            }
        }
    } else {
        for (int j0 = 0; j0 < pin.top_k; j0 += kMaxTopK) {
            const int n = min(kMaxTopK, pin.top_k - j0);
            int32_t slot[kMaxTopK];
            float4 row[kMaxTopK];
#pragma unroll
            for (int j = 0; j < kMaxTopK; ++j) {
                slot[j] = j < n ? slots[j0 + j] : -1;
                row[j] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (slot[j] >= 0) row[j] = *reinterpret_cast<const float4*>(pin.y_routed + int64_t(slot[j]) * D + d);
            }
#pragma unroll
            for (int j = 0; j < kMaxTopK; ++j)
                if (slot[j] >= 0) add(row[j]);
        }
    }
    if (pin.y_shared) {
        add(*reinterpret_cast<const float4*>(pin.y_shared + t * D + d));
    } else if (pin.y_shared_bf16) {  // bf16 values: add()'s rounding leaves them as they are
        float f[kPerLane];
        bf16x4_to_float(*reinterpret_cast<const uint2*>(pin.y_shared_bf16 + t * D + d), f);
        add(make_float4(f[0], f[1], f[2], f[3]));
    }
    round_bf16_pair(sum[0], sum[1]);
    round_bf16_pair(sum[2], sum[3]);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) of[i] = sum[i];
}

// X'_stream at 4 features from their o, the stream weights (post_k, comb[j][k] as ck[j]) and the N streams' values:
// bf16-rounded like mhc_post_vec_kernel's output.
__device__ __forceinline__ void post_mix4(float pk, const float (&ck)[kMaxStreams], const float (&of)[kPerLane],
                                          const float (&xs)[kMaxStreams][kPerLane], int N, float (&out)[kPerLane]) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const float xj[kMaxStreams] = {xs[0][i], xs[1][i], xs[2][i], xs[3][i]};
        out[i] = post_mix(pk, of[i], ck, xj, N);
    }
    round_bf16_pair(out[0], out[1]);
    round_bf16_pair(out[2], out[3]);
}

// The fused mhc_post of token t, stream `stream`, features [d, d + 4), everything read from global memory.
__device__ __forceinline__ void fused_post_features(const PostIn& pin, const bf16* x, int64_t t, int N, int64_t D,
                                                    int stream, int64_t d, float (&out)[kPerLane]) {
    float of[kPerLane];
    post_o_features<1>(pin, pin.pair_slot ? pin.pair_slot + t * pin.top_k : nullptr, t, D, d, of);
    float ck[kMaxStreams], xs[kMaxStreams][kPerLane];
#pragma unroll
    for (int j = 0; j < kMaxStreams; ++j) {
        ck[j] = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) xs[j][i] = 0.f;
        if (j < N) {
            ck[j] = pin.comb[(t * N + j) * N + stream];
            bf16x4_to_float(*reinterpret_cast<const uint2*>(x + (t * N + j) * D + d), xs[j]);
        }
    }
    post_mix4(pin.post[t * N + stream], ck, of, xs, N, out);
}

// A slot's partial: the fmaf chain over its 4 elements from 0 (the tree's leaf in both partial kernels).
__device__ __forceinline__ float slot_partial(const float (&w)[kPerLane], const float (&x)[kPerLane]) {
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc = fmaf(w[i], x[i], acc);
    return acc;
}

// Where lane slot `slot` of chunk `split` starts in the flattened streams [N * D], and (interleaved) its stream.
__device__ __forceinline__ int64_t chunk_origin(int split, int slot, int N, int64_t D, bool interleaved, int& stream) {
    stream = 0;
    if (!interleaved) return int64_t(split) * kChunk + slot * kPerLane;
    const int slots_per_stream = kSlots / N;
    stream = slot / slots_per_stream;
    return int64_t(stream) * D + int64_t(split) * (kChunk / N) + (slot % slots_per_stream) * kPerLane;
}

}  // namespace flashseek::cuda::mhc_chunk
