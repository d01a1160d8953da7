// Device pieces of sparse attention shared by the decode kernels (sparse_attention.cu) and the prefill kernel
// (sparse_attention_prefill.cu; the indexer's tensor-core scorer uses the mma / copy wrappers too): the KV
// dequantization to bf16, the mma.sync / ldmatrix / cp.async wrappers, the per-tile online-softmax step of the
// tensor-core kernels and the output epilogue (normalization with the sink, inverse RoPE).
// Both tensor-core kernels evaluate every score, probability and accumulator through exactly these functions, in
// the same order per element, which is what makes a query's prefill result bit-identical to the decode kernel's
// (one split). The fp32 multiply-adds whose contraction could differ between two call sites are written as
// explicit __fmaf_rn / __fmul_rn.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/attention/sparse_attention.cuh"
#include "cuda/common/attn_helpers.cuh"

namespace flashseek::cuda::attn_detail {

constexpr int kTile = 32;   // candidates per softmax tile (= cpu::kSoftmaxTile: the rounding groups of P)
constexpr int kMmaPad = 8;  // bf16 row padding of shared tiles: 16-byte aligned rows, conflict-free ldmatrix

// 8 dims [d, d+8) of a KV entry (kv_entry.cuh formats), in two steps so that a thread can have several chunks'
// loads in flight before it converts any: load_chunk8_raw issues the loads (none where src is null: a masked
// candidate, whose chunk converts to zeros), convert_chunk8 turns them into 4 bf16 pairs; FP8 values dequantize
// exactly. A branch between one chunk's loads and the next's (the format, the rope part, the mask) made the
// compiler wait for each chunk before issuing the next (docs/perf-log/2026-12-06_attention-kv-loads.md).
struct RawChunk8 {
    uint2 lo, hi;        // BF16 / rope dims: the 16 bytes; FP8 no-rope dims: lo = the 8 codes
    uint32_t scale_byte; // FP8 no-rope dims: the e8m0 scale of the 64-dim block
    bool fp8;            // lo holds FP8 codes (else lo, hi are the bf16 pairs, zeros when masked)
};
__device__ __forceinline__ RawChunk8 load_chunk8_raw(const uint8_t* src, KvFormat fmt, int dim, int rope_dim, int d) {
    const int nope = dim - rope_dim;
    RawChunk8 r;
    r.fp8 = fmt != KvFormat::BF16 && d < nope;
    const uint8_t* at = fmt == KvFormat::BF16 ? src + 2 * d : r.fp8 ? src + d : src + nope + 2 * (d - nope);
    r.lo = r.hi = make_uint2(0, 0);
    r.scale_byte = 0;
    if (src) r.lo = *reinterpret_cast<const uint2*>(at);  // entries are 8-byte aligned
    if (src && !r.fp8) r.hi = *reinterpret_cast<const uint2*>(at + 8);
    if (src && r.fp8) r.scale_byte = src[nope + 2 * rope_dim + d / 64];
    if (!src) r.fp8 = false;  // masked: the zeros of lo, hi as bf16
    return r;
}
__device__ __forceinline__ uint4 convert_chunk8(const RawChunk8& r) {
    if (!r.fp8) return make_uint4(r.lo.x, r.lo.y, r.hi.x, r.hi.y);
    const float s = e8m0_value(uint8_t(r.scale_byte));
    const uint32_t w[2] = {r.lo.x, r.lo.y};
    uint32_t packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t word = w[i / 2] >> (16 * (i % 2));
        const __nv_bfloat162 v =
            __floats2bfloat162_rn(from_e4m3(uint8_t(word & 0xff)) * s, from_e4m3(uint8_t((word >> 8) & 0xff)) * s);
        packed[i] = *reinterpret_cast<const uint32_t*>(&v);
    }
    return make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// Carves 16-byte aligned arrays off a kernel's dynamic shared memory in order; with raw = nullptr it only adds up
// the size (and hands out null pointers), so the host sizes a launch with the same function the kernel lays its
// memory out with.
struct SmemCarver {
    unsigned char* raw = nullptr;
    size_t size = 0;
    template <typename T>
    __host__ __device__ T* take(size_t count) {
        const size_t at = size;
        size = (size + count * sizeof(T) + 15) / 16 * 16;
        return raw ? reinterpret_cast<T*>(raw + at) : nullptr;
    }
};

// ---- tensor-core wrappers (sm_80+) ----------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
// c += a . b for one m16n8k16 bf16 tile, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// cp.async: 16 bytes global -> shared; src_bytes = 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` (0..2) of this thread's commit groups are still in flight.
__device__ __forceinline__ void cp_async_wait(int pending) {
    if (pending <= 0)
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    else if (pending == 1)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 2;\n" ::: "memory");
}

// Multiplies the accumulator rows of lane / 4 (fragment elements 0, 1) by f_lo and lane / 4 + 8 (2, 3) by f_hi.
template <int NT>
__device__ __forceinline__ void scale_rows(float (&acc)[NT][4], float f_lo, float f_hi) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        acc[j][0] *= f_lo;
        acc[j][1] *= f_lo;
        acc[j][2] *= f_hi;
        acc[j][3] *= f_hi;
    }
}

// ---- online softmax of the tensor-core kernels, one 32-candidate tile of one (query, head) row ----------------
// P is rounded to bf16 relative to the tile's own max (so the rounding depends on the tile's candidates only), and
// must stay bf16 for the mma, so the tile's factor beta = e^(m_tile - m_new) is applied to the accumulators: they
// are multiplied by acc_before = alpha / beta = e^(m_prev - m_tile) before the tile's PV product and by
// acc_after = beta after it. A tile more than 64 below the running max adds less than e^-64 of it: dropped, which
// also keeps acc_before finite.
struct TileStep {
    float m_tile, m_new;
    bool use;
    float alpha, beta;            // e^(m_prev - m_new), e^(m_tile - m_new) (0 when dropped)
    float acc_before, acc_after;  // accumulator factors around the tile's PV product
};
// The exponentials are evaluated whatever the case and then selected (a value not taken may be inf or NaN): as
// conditional expressions the compiler put each expf behind a divergent branch of its own.
__device__ __forceinline__ TileStep tile_step(float m_prev, float m_tile) {
    TileStep t;
    t.m_tile = m_tile;
    t.m_new = fmaxf(m_prev, m_tile);
    t.use = m_tile != -INFINITY && m_prev - m_tile <= 64.f;
    const float e_tile = expf(m_tile - t.m_new), e_prev = expf(m_prev - t.m_new), e_before = expf(m_prev - m_tile);
    t.beta = t.use ? e_tile : 0.f;
    t.alpha = t.m_new == -INFINITY ? 1.f : e_prev;
    t.acc_before = t.use ? e_before : t.alpha;
    t.acc_after = t.use ? t.beta : 1.f;
    return t;
}
// Unrounded probability of score s (-inf for masked candidates gives 0).
__device__ __forceinline__ float tile_prob(const TileStep& t, float s) {
    const float e = expf(s - t.m_tile);
    return t.use ? e : 0.f;
}
// Running denominator after the tile, given the sum of its unrounded probabilities.
__device__ __forceinline__ float tile_denominator(const TileStep& t, float l_prev, float tile_sum) {
    return __fmaf_rn(l_prev, t.alpha, __fmul_rn(tile_sum, t.beta));
}
// Output factor of a row from its final running max m and denominator l, with the sink in the denominator
// (rescaled to max(m, sink) so that a large sink cannot overflow).
__device__ __forceinline__ float output_factor(float m, float l, float sink) {
    const float M = fmaxf(m, sink);
    const float scale_acc = m == -INFINITY ? 0.f : expf(m - M);
    return scale_acc / __fmaf_rn(l, scale_acc, expf(sink - M));
}

// The inverse RoPE of one output pair (dims 2i, 2i+1 of the rope part), c, s = rope_cos_sin(pos, inv_freq[i]): the
// reference rounds the attention output to bf16 before de-rotating it, so x0, x1 are rounded first (a no-op for
// values that are bf16 already).
__device__ __forceinline__ void derotate_pair(float& x0, float& x1, float c, float s) {
    x0 = round_bf16(x0);
    x1 = round_bf16(x1);
    rope_rotate(x0, x1, c, s, true);
}

// Writes out_h for the pair d2 of head h of row t: value (already normalized) de-rotated at pos.
__device__ __forceinline__ void write_out_pair(const SparseAttentionParams& p, int t, int h, int d2, float x0, float x1,
                                               int64_t pos) {
    const int D = p.head_dim;
    const int rope_first_pair = D / 2 - p.rope.n_pairs;
    if (d2 >= rope_first_pair) {
        float c, s;
        rope_cos_sin(pos, p.rope.inv_freq[d2 - rope_first_pair], c, s);
        derotate_pair(x0, x1, c, s);
    }
    reinterpret_cast<__nv_bfloat162*>(p.out + t * p.out_stride + int64_t(h) * D)[d2] = __floats2bfloat162_rn(x0, x1);
}

}  // namespace flashseek::cuda::attn_detail
