// Sparse attention kernels (see sparse_attention.cuh for the math and the candidate rules).
// Main kernel, per CTA (query t, heads h0..h0+7, split s), 256 threads, tiles of 32 candidates:
//  1. load: each thread dequantizes 8-dim chunks of the tile's entries into bf16 shared rows padded by one word
//     (row stride = 257 words for 512 dims), so lane-per-entry reads below are bank-conflict free;
//  2. QK: thread (entry = lane, slice = warp) forms partial dots over head_dim/8 dims for all 8 heads; a second
//     pass sums the 8 slices: thread (head = warp, entry = lane);
//  3. online softmax per head (one warp per head), probabilities rounded to bf16 relative to their own tile's max and
//     then rescaled to the running max in fp32 (splits start on tile boundaries), so the rounding of a candidate does
//     not depend on the split count, i.e. not on the pass or batch size (cpu::sparse_attention_sink, kSoftmaxTile);
//     the merge (combine_kernel) still adds the splits' partial sums in another fp32 order than one split does, so
//     the split count moves the bf16 output by a rare one-ulp flip before the inverse RoPE (up to one ulp of the
//     pair's larger component after it: test_attention_ops.cpp, split_merge_bound), not bit for bit; the prefill
//     kernel is the bit-invariant path (sparse_attention_prefill.cuh);
//  4. PV: thread owns dim pairs (tid, tid+256) for all 8 heads, accumulating in fp32 registers.
// Candidate lists are per query (window from the ring, compressed ids from top-k or all visible), so decode and
// chunked prefill use the same kernel. A tile of masked candidates only (the unused top-k slots below 2,048
// positions) is computed like any other: it loads nothing, and skipping it measured no faster (run 411,
// docs/perf-log/2026-12-06_attention-kv-loads.md).
#include <algorithm>

#include "cuda/attention/attn_tile.cuh"
#include "cuda/attention/kv_entry.cuh"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/linear.cuh"  // WeightKind, ActNumerics (the prepared output's layout and numerics)
#include "cuda/gemm/prepare_block.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kHeads = 8;      // heads per CTA
constexpr int kThreads = 256;
constexpr int kSlices = kThreads / kTile;  // dim slices in the QK pass
constexpr int kMaxPairs = 2;   // dim pairs per thread in the PV pass: head_dim <= 2 * 2 * 256 = 1024

struct Candidates {
    int n_win, n_comp_slots, n_vis;
    int64_t pos;
    int slot;
};

__device__ __forceinline__ Candidates candidates_of(const SparseAttentionParams& p, int t) {
    Candidates c;
    c.pos = p.batch.token_pos[t];
    c.slot = p.batch.seq_slot[p.batch.token_seq[t]];
    c.n_win = c.pos + 1 < p.window ? int(c.pos + 1) : p.window;
    c.n_vis = p.ratio > 0 ? int((c.pos + 1) / p.ratio) : 0;
    c.n_comp_slots = p.ratio > 0 ? (p.topk ? p.topk_width : c.n_vis) : 0;
    return c;
}

// Entry address of candidate i, or nullptr when the slot is empty / not visible.
__device__ __forceinline__ const uint8_t* candidate_entry(const SparseAttentionParams& p, const Candidates& c, int t,
                                                          int i, KvFormat& fmt) {
    if (i < c.n_win) {
        fmt = p.ring.format;
        return ring_entry(p.ring, c.slot, c.pos - c.n_win + 1 + i);
    }
    const int j = i - c.n_win;
    const int w = p.topk ? p.topk[t * p.topk_stride + j] : j;
    if (w < 0 || w >= c.n_vis) return nullptr;
    fmt = KvFormat(p.comp.format);
    return paged_entry(p.comp, c.slot, w);
}

// Candidates [c_begin, c_end) of split `split`: splits start on tile boundaries, so every tile holds the same
// candidates (and P the same rounding, see the kernels' softmax) whatever the split count.
__device__ __forceinline__ void split_range(int total, int n_splits, int split, int& c_begin, int& c_end) {
    const int per_split = ((total + kTile - 1) / kTile + n_splits - 1) / n_splits * kTile;
    c_begin = split * per_split;
    c_end = min(total, c_begin + per_split);
}

// Threads 0..kTile-1 resolve the entry addresses of the tile's candidates [base, base + kTile) once (each a chain of
// dependent loads) into shared memory: ptr (nullptr = masked: past c_end, an empty slot, not visible), fmt, valid.
__device__ __forceinline__ void resolve_tile(const SparseAttentionParams& p, const Candidates& c, int t, int base,
                                             int c_end, const uint8_t** ptr, int* fmt, int* valid) {
    if (threadIdx.x < kTile) {
        KvFormat f = KvFormat::BF16;
        const uint8_t* src = base + threadIdx.x < c_end ? candidate_entry(p, c, t, base + threadIdx.x, f) : nullptr;
        ptr[threadIdx.x] = src;
        fmt[threadIdx.x] = int(f);
        valid[threadIdx.x] = src != nullptr;
    }
}

// Dequantizes the resolved tile into bf16 shared rows of D + kRowPad elements (masked entries as zeros), in
// batches of kLoadBatch 8-dim chunks per thread: every load of a batch is issued (load_chunk8_raw) before the
// first conversion, so a tile costs one round trip to the KV cache per thread, not one per chunk. Rows that stay
// 16-byte aligned (the tensor-core kernel's) take one 16-byte store per chunk; the SIMT kernel's rows, padded by
// one word, four 4-byte stores.
template <int kRowPad>
__device__ __forceinline__ void dequantize_tile(const uint8_t* const* ptr, const int* fmt, int D, int rope_dim,
                                                bf16* kv) {
    constexpr int kLoadBatch = 8;
    const int chunks = D / 8, total = kTile * chunks;
    // chunk i is (entry i / chunks, dims 8 * (i % chunks)); a thread's consecutive chunks are kThreads apart
    const int step_e = kThreads / chunks, step_c = kThreads % chunks;
    auto advance = [&](int& e, int& c) {
        e += step_e;
        c += step_c;
        if (c >= chunks) {
            c -= chunks;
            ++e;
        }
    };
    for (int i0 = threadIdx.x; i0 < total; i0 += kLoadBatch * kThreads) {
        const int e0 = i0 / chunks, c0 = i0 - e0 * chunks;
        RawChunk8 raw[kLoadBatch];
        int e = e0, c = c0;
#pragma unroll
        for (int k = 0; k < kLoadBatch; ++k) {
            const bool in_tile = i0 + k * kThreads < total;
            raw[k] = load_chunk8_raw(in_tile ? ptr[e] : nullptr, in_tile ? KvFormat(fmt[e]) : KvFormat::BF16, D,
                                     rope_dim, 8 * c);
            advance(e, c);
        }
        e = e0;
        c = c0;
#pragma unroll
        for (int k = 0; k < kLoadBatch; ++k) {
            if (i0 + k * kThreads >= total) break;
            const uint4 out = convert_chunk8(raw[k]);
            if constexpr (kRowPad % 8 == 0) {
                *reinterpret_cast<uint4*>(kv + e * (D + kRowPad) + 8 * c) = out;
            } else {
                uint32_t* dst = reinterpret_cast<uint32_t*>(kv + e * (D + kRowPad) + 8 * c);
                dst[0] = out.x;
                dst[1] = out.y;
                dst[2] = out.z;
                dst[3] = out.w;
            }
            advance(e, c);
        }
    }
}

// SIMT kv rows of D + 2 bf16: an odd number of words, so the lane-per-entry reads are bank-conflict free.
constexpr int kSimtRowPad = 2;

struct Smem {
    float* q;      // [D][kHeads] (dim-major: one 32-byte broadcast gives a dim's 8 heads)
    bf16* kv;      // [kTile][D + kSimtRowPad]
    float* part;   // [kSlices][kHeads][kTile]
    float* prob;   // [kTile][kHeads]
    float* alpha;  // [kHeads]
    int* valid;    // [kTile]
    int* fmt;      // [kTile]
    const uint8_t** ptr;  // [kTile] entry addresses of the tile's candidates (nullptr = masked)
};

// The SIMT kernel's shared memory, carved with plain pointer arithmetic (every piece is a multiple of 16 bytes; the
// SmemCarver's rounding would cost the kernel a few instructions), and its size on the host.
__device__ __forceinline__ Smem carve(unsigned char* raw, int D) {
    Smem s;
    s.q = reinterpret_cast<float*>(raw);
    s.kv = reinterpret_cast<bf16*>(s.q + kHeads * D);
    s.part = reinterpret_cast<float*>(s.kv + kTile * (D + kSimtRowPad));
    s.prob = s.part + kSlices * kHeads * kTile;
    s.alpha = s.prob + kHeads * kTile;
    s.valid = reinterpret_cast<int*>(s.alpha + kHeads);
    s.fmt = s.valid + kTile;
    s.ptr = reinterpret_cast<const uint8_t**>(s.fmt + kTile);  // 8-byte aligned: every size above is
    return s;
}

size_t smem_bytes(int D) {
    return size_t(kHeads) * D * 4 + size_t(kTile) * (D + kSimtRowPad) * 2 + size_t(kSlices) * kHeads * kTile * 4 +
           size_t(kHeads) * kTile * 4 + kHeads * 4 + kTile * 4 + kTile * 4 + kTile * 8;
}

__global__ void __launch_bounds__(kThreads) attention_kernel(SparseAttentionParams p, int n_splits, float* ws_o,
                                                             float* ws_ml) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int D = p.head_dim, H = p.n_heads;
    const Smem sm = carve(smem_raw, D);
    const int t = blockIdx.x, h0 = blockIdx.y * kHeads, split = blockIdx.z;
    const int n_heads_here = min(kHeads, H - h0);
    const Candidates c = candidates_of(p, t);
    int c_begin, c_end;
    split_range(c.n_win + c.n_comp_slots, n_splits, split, c_begin, c_end);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    for (int i = threadIdx.x; i < kHeads * D; i += kThreads) {
        const int h = i / D, d = i % D;
        sm.q[d * kHeads + h] = h < n_heads_here ? __bfloat162float(p.q[t * p.q_stride + int64_t(h0 + h) * D + d]) : 0.f;
    }
    float m_run = -INFINITY, l_run = 0.f;  // per head `warp` (all lanes hold the same values)
    float acc[kMaxPairs][kHeads][2];
#pragma unroll
    for (int k = 0; k < kMaxPairs; ++k)
#pragma unroll
        for (int h = 0; h < kHeads; ++h) acc[k][h][0] = acc[k][h][1] = 0.f;

    for (int base = c_begin; base < c_end; base += kTile) {
        __syncthreads();  // previous tile fully consumed
        resolve_tile(p, c, t, base, c_end, sm.ptr, sm.fmt, sm.valid);
        __syncthreads();
        dequantize_tile<kSimtRowPad>(sm.ptr, sm.fmt, D, p.rope_dim, sm.kv);
        __syncthreads();
        {  // QK partials: entry = lane, slice = warp
            const int e = lane, sl = warp;
            const int d_begin = sl * (D / kSlices), d_end = d_begin + D / kSlices;
            float dot[kHeads];
#pragma unroll
            for (int h = 0; h < kHeads; ++h) dot[h] = 0.f;
            const __nv_bfloat162* row = reinterpret_cast<const __nv_bfloat162*>(sm.kv + e * (D + kSimtRowPad));
            for (int d = d_begin; d < d_end; d += 2) {
                const float2 kk = __bfloat1622float2(row[d / 2]);
                float q0[kHeads], q1[kHeads];
                *reinterpret_cast<float4*>(q0) = *reinterpret_cast<const float4*>(sm.q + d * kHeads);
                *reinterpret_cast<float4*>(q0 + 4) = *reinterpret_cast<const float4*>(sm.q + d * kHeads + 4);
                *reinterpret_cast<float4*>(q1) = *reinterpret_cast<const float4*>(sm.q + (d + 1) * kHeads);
                *reinterpret_cast<float4*>(q1 + 4) = *reinterpret_cast<const float4*>(sm.q + (d + 1) * kHeads + 4);
#pragma unroll
                for (int h = 0; h < kHeads; ++h) {
                    dot[h] = fmaf(q0[h], kk.x, dot[h]);
                    dot[h] = fmaf(q1[h], kk.y, dot[h]);
                }
            }
#pragma unroll
            for (int h = 0; h < kHeads; ++h) sm.part[(sl * kHeads + h) * kTile + e] = dot[h];
        }
        __syncthreads();
        {  // scores + online softmax: head = warp, entry = lane
            const int h = warp, e = lane;
            float s = 0.f;
#pragma unroll
            for (int sl = 0; sl < kSlices; ++sl) s += sm.part[(sl * kHeads + h) * kTile + e];
            s = sm.valid[e] ? s * p.softmax_scale : -INFINITY;
            // P is rounded to bf16 relative to its own tile's max, then brought to the running max in fp32: the
            // rounding depends on the tile's candidates only, not on the split or the tiles before.
            const float m_tile = warp_max(s);
            const float m_new = fmaxf(m_run, m_tile);
            const float pe = m_tile == -INFINITY ? 0.f : expf(s - m_tile);
            const float beta = m_tile == -INFINITY ? 0.f : expf(m_tile - m_new);
            const float alpha = m_new == -INFINITY ? 1.f : expf(m_run - m_new);
            l_run = l_run * alpha + warp_sum(pe) * beta;
            m_run = m_new;
            sm.prob[e * kHeads + h] = attn_detail::round_bf16(pe) * beta;
            if (lane == 0) sm.alpha[h] = alpha;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kMaxPairs; ++k) {  // PV
            const int d2 = threadIdx.x + k * kThreads;
            if (d2 >= D / 2) break;
#pragma unroll
            for (int h = 0; h < kHeads; ++h) {
                acc[k][h][0] *= sm.alpha[h];
                acc[k][h][1] *= sm.alpha[h];
            }
            for (int e = 0; e < kTile; ++e) {
                const float2 v =
                    __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(sm.kv + e * (D + kSimtRowPad))[d2]);
                float pr[kHeads];
                *reinterpret_cast<float4*>(pr) = *reinterpret_cast<const float4*>(sm.prob + e * kHeads);
                *reinterpret_cast<float4*>(pr + 4) = *reinterpret_cast<const float4*>(sm.prob + e * kHeads + 4);
#pragma unroll
                for (int h = 0; h < kHeads; ++h) {
                    acc[k][h][0] = fmaf(pr[h], v.x, acc[k][h][0]);
                    acc[k][h][1] = fmaf(pr[h], v.y, acc[k][h][1]);
                }
            }
        }
    }
    // publish m, l of every head (held by warp h) through shared memory
    __syncthreads();
    if (lane == 0) {
        sm.alpha[warp] = m_run;
        sm.prob[warp] = l_run;
    }
    __syncthreads();
    if (n_splits == 1) {
#pragma unroll
        for (int k = 0; k < kMaxPairs; ++k) {
            const int d2 = threadIdx.x + k * kThreads;
            if (d2 >= D / 2) break;
            for (int h = 0; h < n_heads_here; ++h) {
                const float m = sm.alpha[h], l = sm.prob[h];
                const float sink = p.sink[h0 + h];
                const float M = fmaxf(m, sink);
                const float scale_acc = m == -INFINITY ? 0.f : expf(m - M);
                const float denom = l * scale_acc + expf(sink - M);
                const float f = scale_acc / denom;
                write_out_pair(p, t, h0 + h, d2, acc[k][h][0] * f, acc[k][h][1] * f, c.pos);
            }
        }
        return;
    }
    const int64_t part = (int64_t(t) * n_splits + split) * H;
#pragma unroll
    for (int k = 0; k < kMaxPairs; ++k) {
        const int d2 = threadIdx.x + k * kThreads;
        if (d2 >= D / 2) break;
        for (int h = 0; h < n_heads_here; ++h) {
            float2* o = reinterpret_cast<float2*>(ws_o + (part + h0 + h) * D);
            o[d2] = make_float2(acc[k][h][0], acc[k][h][1]);
        }
    }
    if (threadIdx.x < n_heads_here) {
        ws_ml[(part + h0 + threadIdx.x) * 2] = sm.alpha[threadIdx.x];
        ws_ml[(part + h0 + threadIdx.x) * 2 + 1] = sm.prob[threadIdx.x];
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor-core variant: CTA = (query, 16 heads, split); 8 warps; tiles of 32 candidates.
//  QK: S[16 heads x 32 entries] with mma.sync m16n8k16 (A = q rows from shared memory, B = KV rows, which are
//      exactly the "col" operand); warp w takes entries 8*(w%4).. over half the dims (w/4), halves summed in smem.
//  softmax: warp w owns heads 2w, 2w+1, lane = entry (as the SIMT path); P rounded to bf16 into shared memory.
//  PV: O[16 heads x D] += P[16 x 32] V[32 x D]; warp w owns dims [w*D/8, (w+1)*D/8), V fragments through
//      ldmatrix.trans, fp32 accumulators in registers (D/16 per thread). head_dim % 64 == 0, <= 512.
constexpr int kMmaHeads = 16;
struct MmaSmem {
    bf16* q;       // [16][D + pad]
    bf16* kv;      // [kTile][D + pad]
    float* sp;     // [2][16][kTile + 1] QK partials of the two dim halves
    bf16* pr;      // [16][kTile + pad] probabilities
    float* alpha;  // [2][16]: accumulator factor before this tile's PV, then after it
    float* ml;     // [16][2] final m, l
    int* valid;    // [kTile]
    int* fmt;      // [kTile]
    const uint8_t** ptr;  // [kTile]
};

// The tensor-core kernel's shared memory; the same function sizes it on the host (raw = nullptr).
__host__ __device__ inline size_t mma_smem_layout(int D, MmaSmem& s, unsigned char* raw) {
    SmemCarver c{raw};
    s.q = c.take<bf16>(size_t(kMmaHeads) * (D + kMmaPad));
    s.kv = c.take<bf16>(size_t(kTile) * (D + kMmaPad));
    s.sp = c.take<float>(size_t(2) * kMmaHeads * (kTile + 1));
    s.pr = c.take<bf16>(size_t(kMmaHeads) * (kTile + kMmaPad));
    s.alpha = c.take<float>(2 * kMmaHeads);
    s.ml = c.take<float>(kMmaHeads * 2);
    s.valid = c.take<int>(kTile);
    s.fmt = c.take<int>(kTile);
    s.ptr = c.take<const uint8_t*>(kTile);
    return c.size;
}
size_t mma_smem_bytes(int D) {
    MmaSmem unused;
    return mma_smem_layout(D, unused, nullptr);
}

__global__ void __launch_bounds__(kThreads) attention_mma_kernel(SparseAttentionParams p, int n_splits, float* ws_o,
                                                                 float* ws_ml) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int D = p.head_dim, H = p.n_heads, DP = D + kMmaPad;
    MmaSmem sm;
    mma_smem_layout(D, sm, smem_raw);
    const int t = blockIdx.x, h0 = blockIdx.y * kMmaHeads, split = blockIdx.z;
    const int n_heads_here = min(kMmaHeads, H - h0);
    const Candidates c = candidates_of(p, t);
    int c_begin, c_end;
    split_range(c.n_win + c.n_comp_slots, n_splits, split, c_begin, c_end);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // q rows (bf16, 16-byte chunks); heads past H are zero
    for (int i = threadIdx.x; i < kMmaHeads * (D / 8); i += kThreads) {
        const int h = i / (D / 8), d = (i % (D / 8)) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (h < n_heads_here) v = *reinterpret_cast<const uint4*>(p.q + t * p.q_stride + int64_t(h0 + h) * D + d);
        *reinterpret_cast<uint4*>(sm.q + h * DP + d) = v;
    }
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // heads 2*warp, 2*warp+1
    constexpr int kMaxNt = 512 / 64;   // PV n-tiles per warp for D <= 512
    const int nt_count = D / 64;       // D/8 dims per warp, 8 per n-tile
    float acc[kMaxNt][4];
#pragma unroll
    for (int j = 0; j < kMaxNt; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

    for (int base = c_begin; base < c_end; base += kTile) {
        __syncthreads();  // previous tile fully consumed
        resolve_tile(p, c, t, base, c_end, sm.ptr, sm.fmt, sm.valid);
        __syncthreads();
        dequantize_tile<kMmaPad>(sm.ptr, sm.fmt, D, p.rope_dim, sm.kv);
        __syncthreads();
        {  // QK: entries 8*(warp%4).., dims of half warp/4
            const int nt = warp % 4, kh = warp / 4;
            float sc[4] = {0.f, 0.f, 0.f, 0.f};
            const int k_begin = kh * (D / 2), k_end = k_begin + D / 2;
            const uint32_t a_base = smem_u32(sm.q + (lane % 16) * DP + (lane / 16) * 8);
            const uint32_t b_base = smem_u32(sm.kv + (nt * 8 + lane % 8) * DP + ((lane / 8) % 2) * 8);
            for (int k0 = k_begin; k0 < k_end; k0 += 16) {
                uint32_t a0, a1, a2, a3, b0, b1;
                ldsm_x4(a_base + k0 * 2, a0, a1, a2, a3);
                ldsm_x2(b_base + k0 * 2, b0, b1);
                mma_16816(sc, a0, a1, a2, a3, b0, b1);
            }
            const int r = lane / 4, col = nt * 8 + 2 * (lane % 4);
            float* dst = sm.sp + kh * kMmaHeads * (kTile + 1);
            dst[r * (kTile + 1) + col] = sc[0];
            dst[r * (kTile + 1) + col + 1] = sc[1];
            dst[(r + 8) * (kTile + 1) + col] = sc[2];
            dst[(r + 8) * (kTile + 1) + col + 1] = sc[3];
        }
        __syncthreads();
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {  // online softmax: heads 2*warp + hh, lane = entry
            const int h = 2 * warp + hh, e = lane;
            float s = sm.sp[h * (kTile + 1) + e] + sm.sp[kMmaHeads * (kTile + 1) + h * (kTile + 1) + e];
            s = sm.valid[e] ? s * p.softmax_scale : -INFINITY;
            // As the SIMT kernel: P rounded relative to the tile's own max; the accumulators take the tile's factor
            // around the PV product (attn_tile.cuh tile_step).
            const TileStep st = tile_step(m_run[hh], warp_max(s));
            const float pe = tile_prob(st, s);
            l_run[hh] = tile_denominator(st, l_run[hh], warp_sum(pe));
            m_run[hh] = st.m_new;
            sm.pr[h * (kTile + kMmaPad) + e] = __float2bfloat16_rn(pe);
            if (lane == 0) {
                sm.alpha[h] = st.acc_before;
                sm.alpha[kMmaHeads + h] = st.acc_after;
            }
        }
        __syncthreads();
        {  // PV: dims [warp*D/8, (warp+1)*D/8)
            scale_rows(acc, sm.alpha[lane / 4], sm.alpha[lane / 4 + 8]);
            const int n_base = warp * (D / 8);
#pragma unroll
            for (int ks = 0; ks < kTile / 16; ++ks) {
                uint32_t a0, a1, a2, a3;
                ldsm_x4(smem_u32(sm.pr + (lane % 16) * (kTile + kMmaPad) + ks * 16 + (lane / 16) * 8), a0, a1, a2, a3);
                const int v_row = ks * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
                for (int j = 0; j < kMaxNt; j += 2) {
                    if (j >= nt_count) break;
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4_t(smem_u32(sm.kv + v_row * DP + n_base + j * 8 + (lane / 16) * 8), b0, b1, b2, b3);
                    mma_16816(acc[j], a0, a1, a2, a3, b0, b1);
                    if (j + 1 < nt_count) mma_16816(acc[j + 1], a0, a1, a2, a3, b2, b3);
                }
            }
            scale_rows(acc, sm.alpha[kMmaHeads + lane / 4], sm.alpha[kMmaHeads + lane / 4 + 8]);
        }
    }
    __syncthreads();
    if (lane == 0) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            sm.ml[(2 * warp + hh) * 2] = m_run[hh];
            sm.ml[(2 * warp + hh) * 2 + 1] = l_run[hh];
        }
    }
    __syncthreads();
    const int n_base = warp * (D / 8);
    // fn(head hl of the CTA, dim, its pair's two fp32 sums) for every output pair this thread holds
    auto each_pair = [&](auto&& fn) {
#pragma unroll
        for (int j = 0; j < kMaxNt; ++j) {
            if (j >= nt_count) break;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int hl = lane / 4 + 8 * half;
                if (hl >= n_heads_here) continue;
                fn(hl, n_base + j * 8 + 2 * (lane % 4), acc[j][2 * half], acc[j][2 * half + 1]);
            }
        }
    };
    if (n_splits == 1) {
        each_pair([&](int hl, int dim, float x0, float x1) {
            const float f = output_factor(sm.ml[hl * 2], sm.ml[hl * 2 + 1], p.sink[h0 + hl]);
            write_out_pair(p, t, h0 + hl, dim / 2, x0 * f, x1 * f, c.pos);
        });
        return;
    }
    // A split's partial sums: their stores in a loop of their own. Interleaved with the one-split path above, a split
    // CTA jumped across 16 inlined copies of the de-rotation's double-precision sincos, cold code whose instruction
    // fetches were a quarter of the kernel's stall samples at one sequence (run 603,
    // docs/perf-log/2026-12-07_attention-fusions.md).
    const int64_t part = (int64_t(t) * n_splits + split) * H;
    float* rows = ws_o + (part + h0) * D;  // head hl's row at rows + hl * D
    each_pair([&](int hl, int dim, float x0, float x1) {
        reinterpret_cast<float2*>(rows + hl * D)[dim / 2] = make_float2(x0, x1);
    });
    if (threadIdx.x < n_heads_here) {
        ws_ml[(part + h0 + threadIdx.x) * 2] = sm.ml[threadIdx.x * 2];
        ws_ml[(part + h0 + threadIdx.x) * 2 + 1] = sm.ml[threadIdx.x * 2 + 1];
    }
}

// The merged output of head h of row t prepared for the next linear (SparseAttentionParams::prepared_values): the
// bf16 values the CTA has just stored, read back as prepare_activation reads them, a half warp per 128-block (8
// features per lane: prepare_block.cuh's x8 form, the same bits as prepare_kernel's); the last row's CTAs also
// write their heads' columns of the padding rows up to the next multiple of 8.
__device__ __forceinline__ void prepare_merged_head(const SparseAttentionParams& p, int t, int h) {
    __syncthreads();  // every thread's stores of the row are visible to the CTA
    const int D = p.head_dim, K = p.n_heads * D, lane = int(threadIdx.x) & 31;
    const __nv_bfloat16* row = p.out + t * p.out_stride + int64_t(h) * D;
    for (int c = int(threadIdx.x); c < D / 8; c += int(blockDim.x)) {  // D % 128 == 0: whole half warps
        float v[8];
        bf16x8_to_float(reinterpret_cast<const uint4*>(row)[c], v);
        store_prepared_features_x8(p.prepared_values, p.prepared_scales, K, t, h * D / 8 + c, p.prepared_layout,
                                   p.prepared_numerics, v, lane);
    }
    if (t != p.batch.n_tokens - 1) return;
    const float none[8] = {};
    for (int64_t pad = p.batch.n_tokens; pad < (int64_t(p.batch.n_tokens) + 7) / 8 * 8; ++pad)
        for (int c = int(threadIdx.x); c < D / 8; c += int(blockDim.x))
            store_prepared_features_x8(p.prepared_values, p.prepared_scales, K, pad, h * D / 8 + c,
                                       p.prepared_layout, p.prepared_numerics, none, lane, /*zero=*/true);
}

// The splits' merge, one CTA per (token, head). Every split's (m, l) is read at once (one thread per split), so are
// the output pairs of all splits (up to kCombineBatch loads in flight per thread), instead of three passes over the
// splits in which each split's loads waited for the previous one's (~15 dependent L2 round trips at one sequence,
// where the merge cost ~6 us per layer on the step's critical path). The arithmetic and its order are the serial
// form's: M = max(sink, every m), denom = expf(sink - M) then + l * expf(m - M) per split in split order (each thread
// sums it itself), each output pair fmaf(o, expf(m - M), x) in split order; splits with m = -inf are skipped (their
// partials are never read).
constexpr int kMaxSplits = 64;     // splits_for's clamp
constexpr int kCombineBatch = 16;  // output loads in flight per thread
__global__ void __launch_bounds__(kThreads) combine_kernel(SparseAttentionParams p, int n_splits, const float* ws_o,
                                                           const float* ws_ml) {
    pdl_wait_and_trigger(p.merge_launches_next_early);  // PDL contract: before any read of earlier kernels' output
    __shared__ float s_l[kMaxSplits], s_f[kMaxSplits], s_max[kMaxSplits / 32];
    __shared__ uint32_t s_live[kMaxSplits / 32];
    const int t = blockIdx.x, h = blockIdx.y, D = p.head_dim, H = p.n_heads;
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const float sink = p.sink[h];
    float m = -INFINITY;
    if (tid < kMaxSplits) {
        if (tid < n_splits) {
            const float2 ml = reinterpret_cast<const float2*>(ws_ml)[(int64_t(t) * n_splits + tid) * H + h];
            m = ml.x;
            s_l[tid] = ml.y;
        }
        const uint32_t live = __ballot_sync(0xffffffffu, tid < n_splits && m != -INFINITY);
        float w = m;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, o));
        if (lane == 0) {
            s_max[warp] = w;
            s_live[warp] = live;
        }
    }
    __syncthreads();
    float M = sink;  // fmaxf ignores NaN and -inf, so the maximum does not depend on the order it is taken in
#pragma unroll
    for (int w = 0; w < kMaxSplits / 32; ++w) M = fmaxf(M, s_max[w]);
    if (tid < n_splits) s_f[tid] = m != -INFINITY ? expf(m - M) : 0.f;
    uint64_t live = 0;
#pragma unroll
    for (int w = 0; w < kMaxSplits / 32; ++w) live |= uint64_t(s_live[w]) << (32 * w);
    __syncthreads();
    float denom = expf(sink - M);
    for (int s = 0; s < n_splits; ++s)
        if ((live >> s) & 1) denom = fmaf(s_l[s], s_f[s], denom);
    const int64_t pos = p.batch.token_pos[t];
    const int64_t split_stride = int64_t(H) * D / 2;  // float2 elements between one split's partial and the next's
    const float2* o_base = reinterpret_cast<const float2*>(ws_o) + (int64_t(t) * n_splits * H + h) * D / 2;
    for (int d2 = tid; d2 < D / 2; d2 += int(blockDim.x)) {
        float x0 = 0.f, x1 = 0.f;
        for (int s0 = 0; s0 < n_splits; s0 += kCombineBatch) {
            float2 o[kCombineBatch];
#pragma unroll
            for (int j = 0; j < kCombineBatch; ++j) {
                const int s = s0 + j;
                o[j] = s < n_splits && ((live >> s) & 1) ? o_base[s * split_stride + d2] : make_float2(0.f, 0.f);
            }
#pragma unroll
            for (int j = 0; j < kCombineBatch; ++j) {
                const int s = s0 + j;
                if (s < n_splits && ((live >> s) & 1)) {
                    const float f = s_f[s];
                    x0 = fmaf(o[j].x, f, x0);
                    x1 = fmaf(o[j].y, f, x1);
                }
            }
        }
        write_out_pair(p, t, h, d2, x0 / denom, x1 / denom, pos);
    }
    if (p.prepared_values) prepare_merged_head(p, t, h);
}

int sm_count() {
    static int n = [] {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            return 132;
        return v;
    }();
    return n;
}

int splits_for(int n_tokens, int n_heads, int max_candidates, int heads_per_cta) {
    const int groups = (n_heads + heads_per_cta - 1) / heads_per_cta;
    const int ctas = std::max(1, n_tokens * groups);
    const int want = (2 * sm_count() + ctas - 1) / ctas;
    const int most = std::max(1, (max_candidates + kTile - 1) / kTile);
    return std::clamp(want, 1, std::min(most, kMaxSplits));
}

// The attention catalogue's choice for a step and its split count.
struct AttentionLaunch {
    bool mma = false;
    int splits = 1;
};
AttentionLaunch attention_launch(const SparseAttentionParams& p, const KernelPolicy& policy) {
    const int D = p.head_dim;
    const bool mma_fits = D % 64 == 0 && D <= 512 && p.q_stride % 8 == 0 && reinterpret_cast<uintptr_t>(p.q) % 16 == 0;
    // attn_mma where forced and it fits, else where preferred (decode batches of attn_mma_min_seqs or more, by
    // default every decode pass: at one sequence -0.03 to -0.045 ms per 20-layer step in two A/B rounds,
    // docs/perf-log/2026-12-01_decode-latency.md; prefill keeps SIMT) and not disabled.
    const bool decode_batch = p.batch.max_seq_tokens == 1 && p.batch.n_tokens >= policy.attn_mma_min_seqs;
    AttentionLaunch a;
    a.mma = mma_fits && (policy.is_forced("attn_mma") ||
                         (!policy.is_forced("attn_simt") && !policy.is_disabled("attn_mma") && decode_batch));
    if (policy.is_disabled("attn_simt") && mma_fits) a.mma = true;
    a.splits = splits_for(p.batch.n_tokens, p.n_heads, p.max_candidates, a.mma ? kMmaHeads : kHeads);
    return a;
}

}  // namespace

bool sparse_attention_merges(const SparseAttentionParams& p, const KernelPolicy& policy) {
    return p.batch.n_tokens > 0 && attention_launch(p, policy).splits > 1;
}

size_t sparse_attention_workspace_bytes(int max_tokens, int n_heads, int head_dim, int max_candidates) {
    size_t best = 0;
    for (int t = 1; t <= std::max(1, max_tokens); ++t) {
        for (int hpc : {kHeads, kMmaHeads}) {
            const int s = splits_for(t, n_heads, max_candidates, hpc);
            if (s > 1) best = std::max(best, size_t(t) * s * n_heads * (size_t(head_dim) + 2) * sizeof(float));
        }
    }
    return best;
}

std::string_view sparse_attention(const SparseAttentionParams& p, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream, const KernelPolicy& policy) {
    const int D = p.head_dim;
    FS_ATTN_REQUIRE(D >= 16 && D % 16 == 0 && D <= 2 * kMaxPairs * kThreads,
                    "sparse_attention: head_dim must be a multiple of 16 in [16, {}], got {}", 2 * kMaxPairs * kThreads, D);
    FS_ATTN_REQUIRE(p.n_heads > 0 && p.q && p.out && p.sink, "sparse_attention: q, out and attn_sink are required");
    FS_ATTN_REQUIRE(p.window >= 1 && p.ring.base && p.ring.ring_entries >= p.window,
                    "sparse_attention: the ring ({} entries) must hold the window ({})", p.ring.ring_entries, p.window);
    FS_ATTN_REQUIRE(2 * p.rope.n_pairs <= D && p.rope_dim >= 0 && p.rope_dim < D,
                    "sparse_attention: rope_dim {} (table {}) must be below head_dim {}", p.rope_dim, 2 * p.rope.n_pairs, D);
    FS_ATTN_REQUIRE(p.ring.format == KvFormat::BF16 || (D - p.rope_dim) % 64 == 0,
                    "sparse_attention: FP8 entries need head_dim - rope_dim to be a multiple of 64");
    FS_ATTN_REQUIRE(p.ratio == 0 || p.comp.base, "sparse_attention: compressed entries are required when ratio > 0");
    FS_ATTN_REQUIRE(p.max_candidates >= 1, "sparse_attention: max_candidates must be positive");
    if (p.batch.n_tokens <= 0) return "none";
    const AttentionLaunch a = attention_launch(p, policy);
    const bool mma = a.mma;
    const int hpc = mma ? kMmaHeads : kHeads;
    const int splits = a.splits;
    if (p.prepared_values) {
        FS_ATTN_REQUIRE(splits > 1, "sparse_attention: the output is prepared by the merge, and this step has none "
                        "(one split: check sparse_attention_merges)");
        FS_ATTN_REQUIRE(p.prepared_scales && D % 128 == 0 && p.out_stride % 8 == 0 &&
                            reinterpret_cast<uintptr_t>(p.out) % 16 == 0 &&
                            (p.prepared_layout == int(WeightKind::FP8_BLOCK128) ||
                             p.prepared_layout == int(WeightKind::FP4_BLOCK32)),
                        "sparse_attention: a prepared output needs scales, head_dim % 128 == 0 (got {}), a 16-byte "
                        "aligned output with out_stride % 8 == 0 (got {}) and an FP8 / FP4 layout", D, p.out_stride);
    }
    float *ws_o = nullptr, *ws_ml = nullptr;
    if (splits > 1) {
        const size_t need = size_t(p.batch.n_tokens) * splits * p.n_heads * (size_t(D) + 2) * sizeof(float);
        FS_ATTN_REQUIRE(workspace && workspace_bytes >= need,
                        "sparse_attention: workspace of {} bytes is smaller than the {} needed", workspace_bytes, need);
        ws_o = static_cast<float*>(workspace);
        ws_ml = ws_o + size_t(p.batch.n_tokens) * splits * p.n_heads * D;
    }
    const dim3 grid(p.batch.n_tokens, (p.n_heads + hpc - 1) / hpc, splits);
    if (mma) {
        const size_t smem = mma_smem_bytes(D);
        allow_dynamic_smem(attention_mma_kernel, smem);
        launch_pdl("attention_mma_kernel", attention_mma_kernel, dim3(grid), dim3(kThreads), smem, stream, p, splits,
                   ws_o, ws_ml);
    } else {
        const size_t smem = smem_bytes(D);
        allow_dynamic_smem(attention_kernel, smem);
        launch_pdl("attention_kernel", attention_kernel, dim3(grid), dim3(kThreads), smem, stream, p, splits, ws_o,
                   ws_ml);
    }
    CUDA_CHECK_LAUNCH(mma ? "attention_mma_kernel" : "attention_kernel");
    if (splits > 1) {
        launch_pdl("combine_kernel", combine_kernel, dim3(dim3(p.batch.n_tokens, p.n_heads)), dim3(kThreads), 0,
                   stream, p, splits, ws_o, ws_ml);
        CUDA_CHECK_LAUNCH("combine_kernel");
    }
    return mma ? "attn_mma" : "attn_simt";
}

}  // namespace flashseek::cuda
