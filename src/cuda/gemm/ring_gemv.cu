// Decode GEMV for FP8 block-scaled weights (e4m3 + 128x128 scales) at 1-8 tokens on sm_90+: whole 16-row weight
// tiles streamed by bulk copies into a ring per warp, products on the tensor cores (release numerics: mma.sync
// m16n8k32 e4m3 on the weights' own bytes; exact numerics: m16n8k16 f16 on weights widened to f16).
// Why: at one token the SIMT GEMV (gemv_simt.cu) streams wq_b / wo_b (33.6 MB each) at ~60% of the copy rate and
// bulk_gemv (16-byte cp.async pieces of 256 columns, activation fragments read from global memory per stage) was
// slower still. The weight-stream probe (scripts/probes/weight_stream_probe.cu, docs/perf-log/2026-12-06_ring-gemv.md)
// measured 16 KB fills of whole rows consumed by one warp each with e4m3 mma at 74.5% on an H100, within 6% of the
// same ring with no arithmetic at all: the tensor cores make a weight's arithmetic nearly free, the ring's
// bytes in flight do the rest. Measured (runs 241 and 245, H100, perf table): wq_b 15.68-15.98 us per call against
// simt_gemv's ~17.96 (71% of the copy rate), wo_a 16.46 against 17.98, the indexer's wq_b 5.63 against 8.24, wo_b
// 22.5 against 20.6-20.8 (two warps per SM: slower); yet the one-sequence step is 1.2-2.0% slower with it however
// deployed on wq_b, because the step's side branches beside the query path run longer next to it. Preferred on wo_a
// and wo_b (KernelPolicy::ring_gemv_min_k / ring_gemv_max_k), which run after the attention: with wo_b's tiles in K
// parts the one-sequence step was 0.7% shorter (median of six rounds, runs 802-803).
// Design:
//   - One CTA per SM, four warps; each warp owns a ring of S / (active warps) stages of 16 rows x C columns
//     (C = K for K <= 1,024, else 1,024: 16 KB). A warp's fills are its own row tiles' chunks in K order, so it waits
//     only on its own stages (no parity ambiguity between warps) and refills a stage as soon as it has read it.
//     A fill is one cp.async.bulk of 16 K bytes when the tile's rows are contiguous (K <= 1,024), else one per row.
//   - Row tiles: tile warp w of CTA b takes tiles b + (w + 4 j) * grid (dealing them from a counter of the launch
//     instead measured slower per call and per step, run 244). Where there are fewer tiles than warps (wo_b's 256
//     tiles on 132 SMs: two per CTA), each tile's chunks are split into K parts over the warps left (the plan's
//     k_splits, at most KernelPolicy::ring_gemv_k_parts): every warp streams, and a tile's parts meet at a named
//     barrier of their warps, the later parts' sums added to the first's in part order through shared memory.
//     Without the parts (ring_gemv_k_parts = 1) warps without a tile leave their stages to the others (wo_b: two
//     streaming warps per SM with four stages each, 22.5 us per call against wq_b's 15.7).
//     8 stages per SM (128 KB; a 4-stage ring measured slower per step, run 241).
//   - Weights do not depend on earlier kernels: every warp issues its first fills before griddepcontrol.wait. Then
//     one thread bulk-copies the prepared activation rows into shared memory (one round trip, where per-thread
//     loads of wo_a's 64 KB took eight dependent ones: +4-5 us per call, run 240) while the others read its
//     per-128 scales. Release numerics convert the rows to e4m3 bytes in column order there (rows padded by 64
//     bytes: conflict-free 16-byte fragment reads); exact numerics read the prepared f16 rows as they are.
//   - One token's raw bf16 row (raw_activation, up to kRawMaxCols columns: wo_b's input) is copied the same way and
//     prepared in place by every CTA, prepare_block's math, before the steps above (the same bits as the preparation
//     launch it replaces; taken only where prepare_in_ring is forced: the one-sequence step was 2.9-3.6% slower in
//     runs 905-906, wo_b 9 us longer per call in the graph; the preparation, 8 pieces per thread on 4 warps per SM
//     with the ring full meanwhile, accounts for ~2.6 us of it in eager events).
//   - Fragments: only the sum over k matters inside a 128-column block, so lane (g, t) reads 16 contiguous bytes of
//     rows g and g + 8 per 64 columns. e4m3: its two m16n8k32 steps take words 2j, 2j + 1 as fragment columns
//     4t..4t+3 and 16+4t..16+4t+3, B column g token g's e4m3 bytes in the same order (zero for g >= M). f16: k
//     step j takes word j, in the prepared activation's order (columns 4j, 4j+2 | 4j+1, 4j+3: mma_core.cuh's
//     prepared_pos), so its bytes are permuted to (b0, b2, b1, b3) before widening: bytes b0, b2 as fragment
//     columns 2t, 2t+1 and b1, b3 as 2t+8, 2t+9, B the prepared f16 words as staged.
//   - Per 128-column block the tensor core's fp32 sum is scaled by weight scale x activation scale in one fp32 FMA
//     per output, blocks in K order: deterministic, independent of the other tokens of the call.
// Numerics: exact products (e4m3 x e4m3, or f16 x f16 of exact values), fp32 sums per 32 / 16 columns (tensor core)
// and per 128 (FMA), power-of-two or fp32 scales: the other GEMVs' up to summation order. Variant ring_gemv of the
// linear catalogue.
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/mma_core.cuh"
#include "cuda/gemm/mma_tile.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/gemm/stream_gemv.cuh"

namespace flashseek::cuda::ring_gemv {
namespace {

constexpr int kWarps = 4;
constexpr int kRingStages = 8;  // per CTA, dealt to its active warps
constexpr int kRows = 16;
constexpr int kMaxChunk = 1024;  // columns (bytes) of a row per stage
constexpr int kStageBytes = kRows * kMaxChunk;
constexpr int kMaxTokens = 8;
constexpr size_t kBarBytes = 128;  // kRingStages ring barriers and the activation's
// The K parts' sums (all but a tile's first part): per warp two buffers (tile parity) of 32 lanes x 4 floats.
constexpr size_t kPartialBytes = size_t(kWarps) * 2 * 32 * 4 * sizeof(float);
constexpr int64_t kMinWeightBytes = int64_t(16) << 20;
// A raw bf16 row (raw_activation, one token) is prepared by every CTA for the whole row: up to 8,192 columns (wo_b's
// input: 8 pieces of 8 columns per thread, as many as the conversion to e4m3 bytes); wo_a's 32,768 would be 32 pieces
// per thread, more than the preparation launch it replaces.
constexpr int64_t kRawMaxCols = 8192;

using stream_gemv::Args;

// Columns per stage for rows of K columns (0: K is not streamable in whole chunks).
constexpr int64_t chunk_of(int64_t K) {
    return K <= kMaxChunk ? (K % 128 == 0 ? K : 0) : (K % kMaxChunk == 0 ? kMaxChunk : 0);
}

// Staged activation rows of xk columns: the prepared f16 rows as copied (16 bytes of padding: token g + 1's 32-byte
// fragment reads fall on other banks than token g's), and in release numerics their e4m3 bytes (64 bytes of
// padding, for the 16-byte reads).
constexpr int64_t raw_stride(int64_t xk) { return 2 * xk + 16; }
constexpr int64_t e4m3_stride(int64_t xk) { return xk + 64; }

// K parts per row tile: where few tiles leave warps of a CTA without one (wo_b's 256 tiles on 132 SMs: two tile
// warps), each tile's chunks are split over warps, so that four warps stream per SM. At most max_parts (a power of
// two) and a divisor of the chunks; the parts' sums are added in part order (deterministic).
int k_parts(int64_t tiles, int64_t ctas, int64_t chunks, int max_parts) {
    const int64_t tile_warps = std::min<int64_t>(kWarps, (tiles + ctas - 1) / ctas);
    int p = 1;
    while (2 * p <= max_parts && tile_warps * 2 * p <= kWarps && chunks % (2 * p) == 0) p *= 2;
    return p;
}

// Dynamic shared memory: the ring, the barriers, the partial sums, M raw rows, (release) M e4m3 rows, M x xk / 128
// scales.
constexpr size_t kRingBytes = size_t(kRingStages) * kStageBytes;
size_t smem_bytes(bool e4m3, int64_t M, int64_t xk) {
    return kRingBytes + kBarBytes + kPartialBytes + size_t(M) * size_t(raw_stride(xk)) +
           (e4m3 ? size_t(M) * size_t(e4m3_stride(xk)) : 0) + size_t(M) * size_t(xk / 128) * 4;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace bulk;

// One lane's 64-column piece: 16 bytes of row g (ra) and of row g + 8 (rb) against its token's staged activations
// at xp (16 e4m3 bytes in column order, or 16 prepared f16 values) into d.
template <bool E4M3>
__device__ __forceinline__ void piece(float (&d)[4], const uint4& ra, const uint4& rb, const unsigned char* xp,
                                      bool zero) {
    if constexpr (E4M3) {
        uint4 xv = *reinterpret_cast<const uint4*>(xp);
        if (zero) xv = make_uint4(0u, 0u, 0u, 0u);
        mma_tile::mma_e4m3(d, {ra.x, rb.x, ra.y, rb.y}, xv.x, xv.y);
        mma_tile::mma_e4m3(d, {ra.z, rb.z, ra.w, rb.w}, xv.z, xv.w);
    } else {
        uint4 xa = *reinterpret_cast<const uint4*>(xp), xb = *reinterpret_cast<const uint4*>(xp + 16);
        if (zero) xa = xb = make_uint4(0u, 0u, 0u, 0u);
        const uint32_t wa[4] = {ra.x, ra.y, ra.z, ra.w}, wb[4] = {rb.x, rb.y, rb.z, rb.w};
        const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            mma::mma_f16(d, mma::widen_pair(wa[j], 0x20u), mma::widen_pair(wb[j], 0x20u), mma::widen_pair(wa[j], 0x31u),
                         mma::widen_pair(wb[j], 0x31u), xw[2 * j], xw[2 * j + 1]);
    }
}
#endif

// xk: the activation's columns (K x groups); chunk: columns per stage. E4M3: release numerics
// (the activation is act_quant's e4m3 codes), else exact (f16 values). kRaw: a.x is one raw bf16 row, prepared here
// as prepare_activation would (the same values and scales, so the same bits).
template <bool E4M3, bool kRaw>
__global__ void __launch_bounds__(kWarps * 32, 1) ring_gemv_kernel(const Args a, int xk, int chunk, int parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    pdl_trigger();  // the next PDL kernel may be scheduled (nothing before its wait depends on this one)
    const int tiles = int(a.N / kRows), chunks = int(a.K / chunk), grid = int(gridDim.x);
    const int tile_warps = min(kWarps, (tiles + grid - 1) / grid);
    const int active = tile_warps * parts;
    const int stages = kRingStages / active;
    const int tile_warp = warp / parts, part = warp - tile_warp * parts;
    const int part_chunks = chunks / parts, chunk0 = part * part_chunks;
    uint64_t* const all_bars = reinterpret_cast<uint64_t*>(smem + kRingBytes);
    uint64_t* const bars = all_bars + warp * stages;
    uint64_t* const x_bar = all_bars + kRingStages;
    unsigned char* const ring = smem + size_t(warp) * stages * kStageBytes;
    const int rst = int(raw_stride(xk)), est = int(e4m3_stride(xk)), x_blocks = xk / 128;
    float* const partials = reinterpret_cast<float*>(smem + kRingBytes + kBarBytes);
    unsigned char* const raw = smem + kRingBytes + kBarBytes + kPartialBytes;
    unsigned char* const e4 = raw + size_t(a.M) * rst;
    float* const xsc = reinterpret_cast<float*>(E4M3 ? e4 + size_t(a.M) * est : e4);
    const bool streams = warp < active;
    if (streams && lane < stages) mbar_init_count(&bars[lane], 1);
    if (threadIdx.x == 0) mbar_init_count(x_bar, 1);
    mbar_init_fence();
    __syncthreads();

    const int first = int(blockIdx.x) + tile_warp * grid, step = kWarps * grid;
    const uint32_t fill_bytes = uint32_t(kRows * chunk);
    int f_tile = first, f_chunk = chunk0, q_fill = 0;
    auto fill = [&]() {  // this warp's next (tile, chunk) into stage q_fill % stages
        if (f_tile >= tiles) return;
        const int st = q_fill % stages;
        unsigned char* dst = ring + size_t(st) * kStageBytes;
        const uint8_t* src = a.w + int64_t(f_tile) * kRows * a.K + int64_t(f_chunk) * chunk;
        if (lane == 0) mbar_expect_tx(&bars[st], fill_bytes);
        __syncwarp();
        if (chunk == a.K) {
            if (lane == 0) copy_g2s(dst, src, fill_bytes, &bars[st]);
        } else if (lane < kRows) {
            copy_g2s(dst + lane * chunk, src + int64_t(lane) * a.K, uint32_t(chunk), &bars[st]);
        }
        ++q_fill;
        if (++f_chunk == chunk0 + part_chunks) {
            f_chunk = chunk0;
            f_tile += step;
        }
    };
    if (streams)
        for (int i = 0; i < stages; ++i) fill();  // weights only: before the wait on the previous kernel
    pdl_wait();

    // The activation rows by bulk copy, its scales by the threads meanwhile; e4m3 bytes in column order (release).
    if (threadIdx.x == 0) {
        mbar_expect_tx(x_bar, uint32_t(a.M) * uint32_t(2 * xk));
        for (int tok = 0; tok < a.M; ++tok)
            copy_g2s(raw + tok * rst, a.x + int64_t(tok) * a.x_ld, uint32_t(2 * xk), x_bar);
    }
    if constexpr (!kRaw)
        for (int e = threadIdx.x; e < a.M * x_blocks; e += blockDim.x) {
            const int tok = e / x_blocks;
            xsc[e] = __ldg(a.xs + int64_t(tok) * a.xs_ld + (e - tok * x_blocks));
        }
    mbar_wait(x_bar, 0);
    if constexpr (kRaw) {
        // The one row prepared in place as prepare_activation writes it (prepare_block's scale and values, a half
        // warp per 128-block: blockDim is a multiple of 32 and xk of 128), so from here on it is the prepared row.
        // Each thread rewrites only the 8-column pieces it read, the ones the e4m3 conversion below gives it again.
        const int lane_in_warp = threadIdx.x & 31;
        const int numerics = int(E4M3 ? ActNumerics::FP8_BLOCK128 : ActNumerics::EXACT);
        for (int i = threadIdx.x; i < xk / 8; i += blockDim.x) {
            float y[8];
            bf16x8_to_float(*reinterpret_cast<const uint4*>(raw + 16 * i), y);
            uint16_t q[8];
            const float sc = prepared_block_x8_bits<WeightKind::FP8_BLOCK128>(y, lane_in_warp, numerics, q);
            *reinterpret_cast<uint4*>(raw + 16 * i) = pack_prepared_x8(q);
            if ((lane_in_warp & 15) == 0) xsc[i / 16] = sc;
        }
    }
    if constexpr (E4M3) {
        const int groups8 = xk / 8;
        for (int e = threadIdx.x; e < a.M * groups8; e += blockDim.x) {
            const int tok = e / groups8, c8 = e - tok * groups8;
            uint32_t lo, hi;
            prepared_fp8x8_to_e4m3(*reinterpret_cast<const uint4*>(raw + tok * rst + 16 * c8), lo, hi);
            *reinterpret_cast<uint2*>(e4 + tok * est + 8 * c8) = make_uint2(lo, hi);
        }
    }
    __syncthreads();
    if (!streams) return;

    constexpr int kBytes = E4M3 ? 1 : 2;  // per staged value
    const int blocks = chunk / 128;
    const int tok_lo = 2 * t, tok_hi = 2 * t + 1;
    const float* const sc_lo = xsc + min(tok_lo, a.M - 1) * x_blocks;
    const float* const sc_hi = xsc + min(tok_hi, a.M - 1) * x_blocks;
    const float keep_lo = tok_lo < a.M ? 1.f : 0.f, keep_hi = tok_hi < a.M ? 1.f : 0.f;
    const int x_tok = min(g, a.M - 1);  // rows g >= M read token M - 1 and multiply zeros instead
    const unsigned char* const x_row = (E4M3 ? e4 + x_tok * est : raw + x_tok * rst) + 16 * kBytes * t;
    const bool no_token = g >= a.M;
    int q = 0, parity = 0;
    for (int tile = first; tile < tiles; tile += step, parity ^= 1) {
        const int64_t row0 = int64_t(tile) * kRows;
        const int64_t x_col0 = (row0 / a.rows_per_group) * a.x_group_cols;
        const int64_t s_row = (row0 / 128) * a.scale_ld;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int c = chunk0; c < chunk0 + part_chunks; ++c, ++q) {
            const int st = q % stages;
            float ws[kMaxChunk / 128];
#pragma unroll
            for (int kb = 0; kb < kMaxChunk / 128; ++kb)
                ws[kb] = kb < blocks ? stream_gemv::weight_scale(a, s_row + (int64_t(c) * chunk) / 128 + kb) : 0.f;
            mbar_wait(&bars[st], uint32_t((q / stages) & 1));
            const unsigned char* sw = ring + size_t(st) * kStageBytes + 16 * t;
            const int64_t xc = x_col0 + int64_t(c) * chunk;
#pragma unroll
            for (int kb = 0; kb < kMaxChunk / 128; ++kb) {
                if (kb >= blocks) break;
                float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int col = kb * 128 + h * 64;
                    const uint4 ra = *reinterpret_cast<const uint4*>(sw + g * chunk + col);
                    const uint4 rb = *reinterpret_cast<const uint4*>(sw + (g + 8) * chunk + col);
                    piece<E4M3>(d, ra, rb, x_row + kBytes * (xc + col), no_token);
                }
                const int blk = int(xc / 128) + kb;
                const float s_lo = ws[kb] * sc_lo[blk] * keep_lo, s_hi = ws[kb] * sc_hi[blk] * keep_hi;
                acc[0] = fmaf(d[0], s_lo, acc[0]);
                acc[1] = fmaf(d[1], s_hi, acc[1]);
                acc[2] = fmaf(d[2], s_lo, acc[2]);
                acc[3] = fmaf(d[3], s_hi, acc[3]);
            }
            __syncwarp();  // every lane has read the stage
            fence_proxy_async();
            fill();
        }
        if (parts > 1) {  // the later parts' sums, added to the first part's in part order
            float* const slots = partials + parity * kWarps * 128;
            if (part > 0)
                *reinterpret_cast<float4*>(slots + warp * 128 + lane * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            // The tile warp's parts only; the other parity's slots are rewritten after the next tile's barrier, which
            // the first part reaches after its reads here.
            asm volatile("bar.sync %0, %1;" ::"r"(1 + tile_warp), "r"(32 * parts) : "memory");
            if (part > 0) continue;
            for (int p = 1; p < parts; ++p) {
                const float4 v = *reinterpret_cast<const float4*>(slots + (warp + p) * 128 + lane * 4);
                acc[0] += v.x;
                acc[1] += v.y;
                acc[2] += v.z;
                acc[3] += v.w;
            }
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int tok = (r & 1) ? tok_hi : tok_lo;
            if (tok < a.M) stream_gemv::store(a, row0 + g + ((r & 2) ? 8 : 0), tok, acc[r]);
        }
    }
#else
    __trap();
#endif
}

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (current_arch().cc < 90 || w.kind != WeightKind::FP8_BLOCK128 || x.layout != WeightKind::FP8_BLOCK128) return false;
    if (x.raw && (x.m != 1 || x.k > kRawMaxCols)) return false;  // one raw row of at most kRawMaxCols columns
    if (x.m < 1 || x.m > kMaxTokens || chunk_of(w.in) == 0 || w.out % kRows != 0) return false;
    if (!aligned16(w.weight) || !aligned16(x.values) || x.k_pad % 8 != 0) return false;
    if (w.scale_kind != ScaleKind::E8M0 && w.scale_kind != ScaleKind::F32) return false;
    if (c.groups > 1 && (w.out % c.groups != 0 || (w.out / c.groups) % kRows != 0)) return false;
    const bool e4m3 = x.numerics == ActNumerics::FP8_BLOCK128;
    return smem_bytes(e4m3, x.m, x.k) <= size_t(current_arch().max_smem_per_block_optin);
}

// One token on >= 16 MB (wq_b, wo_b in release numerics, wo_a in exact) with K from KernelPolicy::ring_gemv_min_k up
// to ring_gemv_max_k (by default wo_a and wo_b; wq_b stays with simt_gemv: docs/perf.md, kernel choice), on Hopper,
// the only architecture where the step was measured with it (elsewhere where forced).
bool preferred(const LinearCall& c, const KernelPolicy& policy) {
    return c.x.m == 1 && current_arch().cc == 90 && policy.gemv_max_tokens >= 1 &&
           c.w.out * c.w.in >= kMinWeightBytes &&
           policy.ring_gemv_max_k > 0 && c.w.in <= policy.ring_gemv_max_k && c.w.in >= policy.ring_gemv_min_k;
}

int64_t cta_count(const DeviceLinear& w) { return std::min<int64_t>(current_arch().sm_count, w.out / kRows); }

LinearPlan plan(const LinearCall& c, const KernelPolicy& policy) {
    LinearPlan p;
    p.variant = "ring_gemv";
    p.tokens_per_pass = int(c.x.m);
    const int64_t chunk = chunk_of(c.w.in);
    p.k_splits = chunk > 0 ? k_parts(c.w.out / kRows, cta_count(c.w), c.w.in / chunk, policy.ring_gemv_k_parts) : 1;
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out, cudaStream_t stream) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    const int64_t chunk = chunk_of(w.in);
    const Args a = stream_gemv::make_args(x, w, c.groups, out.y, out.kind, out.ld, nullptr, 1, chunk);
    const int64_t ctas = cta_count(w);
    const bool e4m3 = x.numerics == ActNumerics::FP8_BLOCK128;
    const size_t smem = smem_bytes(e4m3, x.m, x.k);
    auto kernel = x.raw ? (e4m3 ? ring_gemv_kernel<true, true> : ring_gemv_kernel<false, true>)
                        : (e4m3 ? ring_gemv_kernel<true, false> : ring_gemv_kernel<false, false>);
    allow_dynamic_smem(kernel, smem);
    launch_pdl("ring_gemv_kernel", kernel, dim3(unsigned(ctas)), dim3(kWarps * 32), smem, stream, a, int(x.k),
               int(chunk), plan.k_splits);
}

}  // namespace flashseek::cuda::ring_gemv
