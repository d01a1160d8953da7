// Persistent streaming kernels for the routed FP4 experts at decode (M <= 16 tokens): moe_expert_up (w1 and w3 +
// SwiGLU) and moe_expert_down (w2), FP4 e2m1 + E8M0/32 weights, prepared activations. OPT-IN (FLASHSEEK_MOE_STREAM=1):
// measured slower than the per-tile GEMV kernels of moe_gemv.cu, which stay the default (docs/perf.md, "Persistent
// streaming kernels", runs 1-3: best variant 66.4 vs 66.7 us at M=1, 770 vs 679 us at M=16; end to end C=1 6.41 vs
// 6.26 ms, C=16 23.9 vs 22.6 ms).
// Why it was built: the per-tile kernels each load a few KB, wait one DRAM latency, compute and exit (25-35% of the
// copy bandwidth even with no arithmetic); Little's law wants ~64 KB in flight per SM continuously, across tiles.
//   - Work items: (active expert slot, 16-row tile) in slot-major order, T = n_active x N/16 (n_active read on the
//     device from the grouping: graph-capturable, no atomics). Persistent CTAs (grid = SMs x ctas_per_sm) take
//     contiguous item ranges [b*T/G, (b+1)*T/G): consecutive tiles of one expert = contiguous weight rows. An expert
//     with more than TP tokens (2 at M = 1, else 4) is walked in several passes over the same tile.
//   - Weights stream through a shared-memory ring of S stages filled with 16-byte cp.async.cg (optional L2::256B
//     prefetch hint). Stage = 16 rows x CB contiguous bytes of each row (CB clamped to one row), of w1 and w3
//     together for up, plus the 16 rows' E8M0 scales of that range; the producer walks the CTA's whole chunk
//     sequence across item boundaries. Smem layout of a stage: [mat][16 rows][CB] weights, 16-byte unit u of row r
//     stored at u ^ 4*(r & 1) (fragment loads of rows g, g+1 hit disjoint banks), then [mat][16 rows][CB/16] scales.
//   - Compute: the warps split each chunk's steps; every step is gemv_mma.cuh's compute_stage (f16 widening,
//     mma.sync m16n8k16 with the block-diagonal FP4 scale trick, fp32 per-group scaling) on fragments from shared
//     memory; fp32 accumulators in registers across the tile's chunks, summed over the quad and across warps in a
//     fixed order; epilogue as moe_gemv.cu (up: clamp + SwiGLU + routing weight + bf16 h, then moe_gemv::quantize_h;
//     down: fp32 rows per slot). Tokens and routing weights are staged when the (slot, pass) changes.
//   - Variant A (default): every warp produces and consumes, cp.async.wait_group(S-2) + one CTA barrier per stage.
//     Measured best: 1 KB chunks, 64 KB ring, 2 CTAs of 8 warps per SM, L2::256B (the defaults below).
//     Variant B (FLASHSEEK_MOE_STREAM_WS=1): one producer warp + 8/16 consumer warps, mbarrier full/empty handoff
//     (cp.async.mbarrier.arrive.noinc); 2x slower: one warp cannot keep enough cp.async in flight.
// What the probes said (H200): the achieved stream rate follows the number of warps issuing cp.async, not the ring
// depth (3 to 11 stages: same time), and reached at most 53% with no arithmetic at all (16 warps, whole-row stages);
// the arithmetic alone (no copies) takes 750-1000 us at M=16, and the two add up rather than overlap. See perf.md for
// the next steps (bulk async copies issued by one thread, fewer instructions per weight).
// Numerics: the moe_gemv/mma paths' (exact products, fp32 sums, power-of-two scales), up to fp32 summation order.
#include "cuda/moe/moe_stream.cuh"

#include <algorithm>
#include <cstdlib>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/gemm/gemv_mma.cuh"
#include "cuda/moe/moe_gemv.cuh"

namespace flashseek::cuda {
namespace {

constexpr WeightKind kWK = WeightKind::FP4_BLOCK32;
constexpr int kRows = 16;
constexpr int kMaxStages = 16;

struct StreamConfig {
    int mode = -1;            // -1: FLASHSEEK_MOE_STREAM (default off), 0 off, 1 on
    int ring_kb = 0;          // 0: FLASHSEEK_MOE_STREAM_RING or 64
    int chunk_bytes = 0;      // 0: FLASHSEEK_MOE_STREAM_CB or 1024
    int ctas_per_sm = 0;      // 0: FLASHSEEK_MOE_STREAM_CTAS or 2
    int warps = 0;            // 0: FLASHSEEK_MOE_STREAM_WARPS or 8 (8 or 16 per CTA)
    int l2 = -1;              // -1: FLASHSEEK_MOE_STREAM_L2 or 2 (cp.async L2 prefetch hint: 0, 1 = 128 B, 2 = 256 B)
    int probe = 0;            // bench only: 1 = stream without arithmetic, 2 = arithmetic without weight copies
    int ws = -1;              // -1: FLASHSEEK_MOE_STREAM_WS or 0 (1 = warp-specialized kernel, variant B)
};
StreamConfig g_config;

int env_int(const char* name, int fallback) {
    const char* e = std::getenv(name);
    return e && *e ? std::atoi(e) : fallback;
}
// The environment's settings, read once.
struct EnvConfig {
    int mode = env_int("FLASHSEEK_MOE_STREAM", 0) != 0 ? 1 : 0;
    // Defaults = the fastest variant measured (perf.md, run 3; MoeLayer passed with exactly these).
    int ring_kb = env_int("FLASHSEEK_MOE_STREAM_RING", 64);
    int chunk_bytes = env_int("FLASHSEEK_MOE_STREAM_CB", 1024);
    int ctas_per_sm = env_int("FLASHSEEK_MOE_STREAM_CTAS", 2);
    int warps = env_int("FLASHSEEK_MOE_STREAM_WARPS", 8);
    int l2 = env_int("FLASHSEEK_MOE_STREAM_L2", 2);
    int ws = env_int("FLASHSEEK_MOE_STREAM_WS", 0);
};
const EnvConfig& env_config() {
    static const EnvConfig c;
    return c;
}

struct Args {
    const void* const* w_a;  // w1 (up) or w2 (down)
    const void* const* s_a;
    const void* const* w_b;  // w3 (up only)
    const void* const* s_b;
    int64_t N, K;            // rows per expert, row length (multiples of 128)
    const uint16_t* x;       // prepared activation values (f16, FP4 order), [rows, x_ld]
    const float* xs;         // its scales [rows, xs_ld]
    int64_t x_ld, xs_ld;
    const int32_t* active;
    const int32_t* n_active;
    const int32_t* count;
    const int32_t* offset;
    const int32_t* slot_token;
    const float* slot_weight;
    int chunk_bytes;         // CB: bytes of each row per stage (multiple of 256)
    int l2;                  // cp.async L2 prefetch hint: 0 none, 1 128 B, 2 256 B
    int probe;               // bench only: 1 = no arithmetic (stream only), 2 = no weight copies (compute only)
    int stages;              // S
    int stage_bytes;
    float limit;
    int round_glu;
    uint16_t* h;             // up: bf16 [rows, h_ld], natural order
    int64_t h_ld;
    float* y;                // down: fp32 [rows, N]
};

// 16-byte cp.async bypassing L1; l2 = 1 / 2: with the L2::128B / L2::256B prefetch-size hint.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int l2) {
    const uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    if (l2 == 2)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
    else if (l2 == 1)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// wait_group takes an immediate: dispatch the run-time pending count (S - 2, CTA-uniform).
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
    switch (n) {
        case 0: cp_async_wait<0>(); break;
        case 1: cp_async_wait<1>(); break;
        case 2: cp_async_wait<2>(); break;
        case 3: cp_async_wait<3>(); break;
        case 4: cp_async_wait<4>(); break;
        case 5: cp_async_wait<5>(); break;
        case 6: cp_async_wait<6>(); break;
        case 7: cp_async_wait<7>(); break;
        case 8: cp_async_wait<8>(); break;
        case 9: cp_async_wait<9>(); break;
        case 10: cp_async_wait<10>(); break;
        case 11: cp_async_wait<11>(); break;
        case 12: cp_async_wait<12>(); break;
        case 13: cp_async_wait<13>(); break;
        default: cp_async_wait<14>(); break;
    }
}

// Position in a CTA's chunk sequence: item (slot x tile), pass over the expert's tokens, chunk of the K range.
template <int NM>
struct Cursor {
    int64_t item = 0, end = 0;
    int pass = 0, chunk = 0;
    int slot = -1, tile = 0;  // item = slot * tiles + tile, tracked without divisions
    int e = 0, count = 0, offset = 0, npass = 1;
    const uint8_t* w[NM];
    const uint8_t* s[NM];
};

template <int NM, int TP>
__device__ __forceinline__ void load_slot(Cursor<NM>& c, const Args& a, int slot) {
    c.slot = slot;
    c.e = __ldg(a.active + slot);
    c.count = __ldg(a.count + c.e);
    c.offset = __ldg(a.offset + c.e);
    c.npass = max(1, (c.count + TP - 1) / TP);
    c.w[0] = static_cast<const uint8_t*>(a.w_a[c.e]);
    c.s[0] = static_cast<const uint8_t*>(a.s_a[c.e]);
    if constexpr (NM == 2) {
        c.w[1] = static_cast<const uint8_t*>(a.w_b[c.e]);
        c.s[1] = static_cast<const uint8_t*>(a.s_b[c.e]);
    }
}

template <int NM, int TP>
__device__ __forceinline__ void advance(Cursor<NM>& c, const Args& a, int tiles, int nch) {
    if (++c.chunk < nch) return;
    c.chunk = 0;
    if (++c.pass < c.npass) return;
    c.pass = 0;
    ++c.item;
    if (++c.tile == tiles) {
        c.tile = 0;
        if (c.item < c.end) load_slot<NM, TP>(c, a, c.slot + 1);
    }
}

// Issue the copies of the cursor's chunk into ring stage `dst` (no commit). Weights: 16 rows x ns*64 bytes per
// matrix by cp.async; scales likewise when 16-byte aligned, else byte by byte (synchronous, still before the
// consumer's barrier).
template <int NM, int kThreads>
__device__ __forceinline__ void issue_chunk(const Cursor<NM>& c, const Args& a, unsigned char* dst, int64_t n_steps,
                                            int spc, int tid) {
    if (c.item >= c.end || a.probe == 2) return;
    const int CB = a.chunk_bytes;
    const int ns = int(min(int64_t(spc), n_steps - int64_t(c.chunk) * spc));
    const int64_t row0 = int64_t(c.tile) * kRows;
    const int64_t row_bytes = a.K / 2, row_scales = a.K / 32;
    const int upr = ns * 4;  // 16-byte units per row
#pragma unroll
    for (int i = 0; i < NM; ++i) {
        const uint8_t* src = c.w[i] + row0 * row_bytes + int64_t(c.chunk) * CB;
        unsigned char* d = dst + i * kRows * CB;
        if (kThreads % upr == 0) {  // full chunks of power-of-two steps: one division per chunk
            const int cu = tid % upr;
            for (int r = tid / upr; r < kRows; r += kThreads / upr)
                cp_async16(d + r * CB + 16 * (cu ^ ((r & 1) << 2)), src + r * row_bytes + 16 * cu, a.l2);
        } else {
            for (int u = tid; u < kRows * upr; u += kThreads) {
                const int r = u / upr, cu = u % upr;
                cp_async16(d + r * CB + 16 * (cu ^ ((r & 1) << 2)), src + r * row_bytes + 16 * cu, a.l2);
            }
        }
        const uint8_t* ssrc = c.s[i] + row0 * row_scales + int64_t(c.chunk) * (CB / 16);
        unsigned char* sd = dst + NM * kRows * CB + i * kRows * (CB / 16);
        const bool aligned = (reinterpret_cast<uintptr_t>(c.s[i]) & 15) == 0 && row_scales % 16 == 0 && upr % 16 == 0;
        if (aligned) {
            const int su = upr / 16;
            for (int u = tid; u < kRows * su; u += kThreads) {
                const int r = u / su, cu = u % su;
                cp_async16(sd + r * (CB / 16) + 16 * cu, ssrc + r * row_scales + 16 * cu, a.l2);
            }
        } else {
            for (int u = tid; u < kRows * upr; u += kThreads) {
                const int r = u / upr, b = u % upr;
                sd[r * (CB / 16) + b] = __ldg(ssrc + r * row_scales + b);
            }
        }
    }
}

// Shared-memory pieces of a CTA (both kernels): ring, staged activation, cross-warp partial sums, routing weights.
template <bool UP, int NG>
struct Smem {
    static constexpr int NM = UP ? 2 : 1, TP = NG * 2;
    unsigned char* ring;
    __half* xsm;  // [TP][K + 8]
    float* xss;   // [TP][K / 128]
    float* red;   // [warps][NM][16 rows][TP]
    float* wsm;   // [TP]
    int xrh;
    __device__ Smem(unsigned char* base, const Args& a, int warps) {
        ring = base;
        xrh = int(a.K) + 8;
        xsm = reinterpret_cast<__half*>(base + size_t(a.stages) * a.stage_bytes);
        xss = reinterpret_cast<float*>(xsm + TP * xrh);
        red = xss + TP * (a.K / 128);
        wsm = red + warps * NM * kRows * TP;
    }
};

// Stage the pass's tokens of the cursor's expert (threads tid < nthr of the calling group); returns their count.
template <bool UP, int NG, int NM>
__device__ __forceinline__ int stage_tokens(const Smem<UP, NG>& sm, const Cursor<NM>& cc, const Args& a, int tid,
                                            int nthr) {
    constexpr int TP = NG * 2;
    const int64_t n_steps = a.K / 128;
    const int c0 = cc.pass * TP;
    const int ntok = min(TP, cc.count - c0);
    const int per_row = int(a.K / 8);
    for (int i = tid; i < TP * per_row; i += nthr) {
        const int tk = i / per_row, col = (i % per_row) * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (tk < ntok) {
            const int64_t r = UP ? int64_t(__ldg(a.slot_token + cc.offset + c0 + tk)) : int64_t(cc.offset + c0 + tk);
            v = __ldg(reinterpret_cast<const uint4*>(a.x + r * a.x_ld + col));
        }
        *reinterpret_cast<uint4*>(sm.xsm + tk * sm.xrh + col) = v;
    }
    if (UP && tid < TP) sm.wsm[tid] = tid < ntok ? __ldg(a.slot_weight + cc.offset + c0 + tid) : 0.f;
    for (int i = tid; i < TP * n_steps; i += nthr) {
        const int tk = int(i / n_steps), b = int(i % n_steps);
        float v = 0.f;
        if (tk < ntok) {
            const int64_t r = UP ? int64_t(__ldg(a.slot_token + cc.offset + c0 + tk)) : int64_t(cc.offset + c0 + tk);
            v = __ldg(a.xs + r * a.xs_ld + b);
        }
        sm.xss[i] = v;
    }
    return ntok;
}

// acc += the chunk's steps w, w + nw, ... of this warp (fragments from ring stage st_base).
template <bool UP, int NG, int NM>
__device__ __forceinline__ void compute_chunk(float (&acc)[NM][NG][4], const Smem<UP, NG>& sm,
                                              const unsigned char* st_base, const Cursor<NM>& cc, const Args& a,
                                              int ntok, int w, int nw, int g, int t) {
    const int CB = a.chunk_bytes, spc = CB / 64;
    const int64_t n_steps = a.K / 128;
    const int ns = int(min(int64_t(spc), n_steps - int64_t(cc.chunk) * spc));
    const int ngroups = (ntok + 1) / 2;
    for (int j = w; j < ns && a.probe != 1; j += nw) {
        gmma::Stage<kWK, NM> st;
        const int sw = ((4 * j + t) ^ ((g & 1) << 2)) * 16;
#pragma unroll
        for (int i = 0; i < NM; ++i) {
            const unsigned char* wm = st_base + i * kRows * CB;
            st.lo[i].v = *reinterpret_cast<const uint4*>(wm + g * CB + sw);
            st.hi[i].v = *reinterpret_cast<const uint4*>(wm + (g + 8) * CB + sw);
            const unsigned char* sc = st_base + NM * kRows * CB + i * kRows * (CB / 16);
            st.s_lo[i] = sc[g * (CB / 16) + 4 * j + t];
            st.s_hi[i] = sc[(g + 8) * (CB / 16) + 4 * j + t];
        }
        const int64_t gs = int64_t(cc.chunk) * spc + j;
        gmma::compute_stage<kWK, NM, NG>(acc, st, int(ScaleKind::E8M0), sm.xsm + 128 * gs, sm.xrh, sm.xss + gs,
                                         int(n_steps), ngroups, g, t);
    }
}

// Quad sums into red (lanes t == 0 of warp w).
template <bool UP, int NG, int NM>
__device__ __forceinline__ void store_partials(float (&acc)[NM][NG][4], const Smem<UP, NG>& sm, int w, int g, int t) {
    constexpr int TP = NG * 2;
    gmma::finish_quad<kWK, NM, NG>(acc);
    if (t == 0) {
#pragma unroll
        for (int i = 0; i < NM; ++i)
#pragma unroll
            for (int p = 0; p < NG; ++p)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    sm.red[((w * NM + i) * kRows + gmma::acc_row(r, g)) * TP + gmma::acc_token<kWK>(p, r, t)] =
                        acc[i][p][r];
    }
}

// Sum over the nw warps' partials in a fixed order, then the epilogue (threads tid < nthr).
template <bool UP, int NG, int NM>
__device__ __forceinline__ void epilogue(const Smem<UP, NG>& sm, const Cursor<NM>& cc, const Args& a, int ntok, int nw,
                                         int tid, int nthr) {
    constexpr int TP = NG * 2;
    const int64_t row0 = int64_t(cc.tile) * kRows;
    for (int idx = tid; idx < kRows * ntok; idx += nthr) {
        const int r = idx % kRows, tok = idx / kRows;
        float s[NM];
#pragma unroll
        for (int i = 0; i < NM; ++i) {
            s[i] = 0.f;
            for (int w = 0; w < nw; ++w) s[i] += sm.red[((w * NM + i) * kRows + r) * TP + tok];
        }
        const int64_t out_row = cc.offset + cc.pass * TP + tok;
        if constexpr (UP) {
            const float wgt = sm.wsm[tok];
            const float g0 = a.round_glu ? round_bf16(s[0]) : s[0];
            const float u0 = a.round_glu ? round_bf16(s[NM - 1]) : s[NM - 1];
            const float gate = fminf(g0, a.limit);
            const float up = fminf(fmaxf(u0, -a.limit), a.limit);
            const float silu = gate / (1.f + expf(-gate));
            a.h[out_row * a.h_ld + row0 + r] = f32_to_bf16_bits(silu * up * wgt);
        } else {
            a.y[out_row * a.N + row0 + r] = s[0];
        }
    }
}

// The CTA's item range [begin, end) and the cursor at its start; false when the CTA has nothing to do.
template <int NM, int TP>
__device__ __forceinline__ bool start_cursor(Cursor<NM>& c, const Args& a) {
    const int tiles = int(a.N / kRows);
    const int64_t total = int64_t(*a.n_active) * tiles;
    const int64_t begin = total * blockIdx.x / gridDim.x, end = total * (blockIdx.x + 1) / gridDim.x;
    if (begin >= end) return false;
    c.item = begin;
    c.end = end;
    c.tile = int(begin % tiles);
    load_slot<NM, TP>(c, a, int(begin / tiles));
    return true;
}

// Variant A (default): every warp produces and consumes; one wait_group + one CTA barrier per stage.
template <bool UP, int NG, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, 16 / kWarps) stream_kernel(const Args a) {
    constexpr int kThreads = kWarps * 32;
    constexpr int NM = UP ? 2 : 1;
    constexpr int TP = NG * 2;  // tokens per pass (FP4 pairs)
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tiles = int(a.N / kRows);
    const int64_t n_steps = a.K / 128;
    const int spc = a.chunk_bytes / 64, S = a.stages;
    const int nch = int((n_steps + spc - 1) / spc);
    Cursor<NM> pc;
    if (!start_cursor<NM, TP>(pc, a)) return;
    const Smem<UP, NG> sm(smem, a, kWarps);
    Cursor<NM> cc = pc;
    for (int i = 0; i < S - 1; ++i) {
        issue_chunk<NM, kThreads>(pc, a, sm.ring + size_t(i) * a.stage_bytes, n_steps, spc, threadIdx.x);
        cp_async_commit();
        advance<NM, TP>(pc, a, tiles, nch);
    }
    int wslot = S - 1, rslot = 0;  // ring stages being written / read
    int staged_slot = -1, staged_pass = -1, ntok = 0;
    float acc[NM][NG][4];
    while (cc.item < cc.end) {
        cp_async_wait_dyn(S - 2);
        __syncthreads();  // this chunk landed for every thread; every thread is done with the previous one's stage
        issue_chunk<NM, kThreads>(pc, a, sm.ring + size_t(wslot) * a.stage_bytes, n_steps, spc, threadIdx.x);
        cp_async_commit();
        wslot = wslot + 1 == S ? 0 : wslot + 1;
        advance<NM, TP>(pc, a, tiles, nch);
        if (cc.chunk == 0) {
            if (cc.slot != staged_slot || cc.pass != staged_pass) {  // CTA-uniform
                staged_slot = cc.slot;
                staged_pass = cc.pass;
                ntok = stage_tokens<UP, NG, NM>(sm, cc, a, threadIdx.x, kThreads);
                __syncthreads();
            }
#pragma unroll
            for (int i = 0; i < NM; ++i)
#pragma unroll
                for (int p = 0; p < NG; ++p) acc[i][p][0] = acc[i][p][1] = acc[i][p][2] = acc[i][p][3] = 0.f;
        }
        compute_chunk<UP, NG, NM>(acc, sm, sm.ring + size_t(rslot) * a.stage_bytes, cc, a, ntok, warp, kWarps, g, t);
        rslot = rslot + 1 == S ? 0 : rslot + 1;
        if (cc.chunk == nch - 1) {  // end of the pass
            store_partials<UP, NG, NM>(acc, sm, warp, g, t);
            __syncthreads();
            epilogue<UP, NG, NM>(sm, cc, a, ntok, kWarps, threadIdx.x, kThreads);
            // red's reads here are ordered before the next pass's writes by the next stage barrier.
        }
        advance<NM, TP>(cc, a, tiles, nch);
    }
    cp_async_wait<0>();  // no copy may outlive the CTA's shared memory
}

// ---- variant B: warp-specialized (FLASHSEEK_MOE_STREAM_WS=1) --------------------------------------------------
// Warp 0 only streams: for stage k it waits on empty[k % S], issues the chunk's cp.async and arms full[k % S] with
// cp.async.mbarrier.arrive.noinc (fires when its copies land). Warps 1..kWarps consume independently: wait on
// full, compute, arrive on empty; they meet (named barrier 1) only to stage activations and reduce a tile. So a
// warp stalled on its arithmetic or an epilogue never delays the copies, and the consumers need no per-stage barrier.
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_on_copies(uint64_t* b) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
    } while (!done);
}
__device__ __forceinline__ void consumer_sync(int nthr) { asm volatile("bar.sync 1, %0;\n" ::"r"(nthr) : "memory"); }

constexpr int kBarBytes = 2 * kMaxStages * 8;  // full[S], empty[S] ahead of the ring

template <bool UP, int NG, int kWarps>
__global__ void __launch_bounds__((kWarps + 1) * 32, 1) stream_ws_kernel(const Args a) {
    constexpr int NM = UP ? 2 : 1;
    constexpr int TP = NG * 2;
    constexpr int kCons = kWarps * 32;
    extern __shared__ __align__(16) unsigned char smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem);
    uint64_t* empty = full + kMaxStages;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tiles = int(a.N / kRows);
    const int64_t n_steps = a.K / 128;
    const int spc = a.chunk_bytes / 64, S = a.stages;
    const int nch = int((n_steps + spc - 1) / spc);
    Cursor<NM> c;
    if (!start_cursor<NM, TP>(c, a)) return;
    const Smem<UP, NG> sm(smem + kBarBytes, a, kWarps);
    if (threadIdx.x == 0) {
        for (int i = 0; i < S; ++i) {
            mbar_init(&full[i], 32);      // the producer warp's 32 lanes, each once per fill (noinc)
            mbar_init(&empty[i], kWarps); // one lane per consumer warp, once per use
        }
    }
    __syncthreads();
    if (warp == 0) {  // producer
        int stage = 0;
        uint32_t parity = 1;  // a fresh barrier counts as released for the first round
        while (c.item < c.end) {
            mbar_wait(&empty[stage], parity);
            issue_chunk<NM, 32>(c, a, sm.ring + size_t(stage) * a.stage_bytes, n_steps, spc, lane);
            __threadfence_block();  // the unaligned-scale path's plain stores, before the arrive
            mbar_arrive_on_copies(&full[stage]);
            advance<NM, TP>(c, a, tiles, nch);
            if (++stage == S) {
                stage = 0;
                parity ^= 1u;
            }
        }
        cp_async_wait<0>();
        return;
    }
    const int cw = warp - 1, ctid = threadIdx.x - 32;
    int stage = 0;
    uint32_t parity = 0;
    int staged_slot = -1, staged_pass = -1, ntok = 0;
    float acc[NM][NG][4];
    while (c.item < c.end) {
        if (c.chunk == 0) {
            if (c.slot != staged_slot || c.pass != staged_pass) {  // uniform over the consumers
                staged_slot = c.slot;
                staged_pass = c.pass;
                consumer_sync(kCons);  // everyone is done with the previous tokens
                ntok = stage_tokens<UP, NG, NM>(sm, c, a, ctid, kCons);
                consumer_sync(kCons);
            }
#pragma unroll
            for (int i = 0; i < NM; ++i)
#pragma unroll
                for (int p = 0; p < NG; ++p) acc[i][p][0] = acc[i][p][1] = acc[i][p][2] = acc[i][p][3] = 0.f;
        }
        mbar_wait(&full[stage], parity);
        compute_chunk<UP, NG, NM>(acc, sm, sm.ring + size_t(stage) * a.stage_bytes, c, a, ntok, cw, kWarps, g, t);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[stage]);
        if (++stage == S) {
            stage = 0;
            parity ^= 1u;
        }
        if (c.chunk == nch - 1) {  // end of the pass
            store_partials<UP, NG, NM>(acc, sm, cw, g, t);
            consumer_sync(kCons);
            epilogue<UP, NG, NM>(sm, c, a, ntok, kWarps, ctid, kCons);
            consumer_sync(kCons);  // red is read before any warp writes the next pass's partials
        }
        advance<NM, TP>(c, a, tiles, nch);
    }
}

using Kernel = void (*)(Args);

int resolved_mode() {
    return g_config.mode >= 0 ? g_config.mode : env_config().mode;
}

// Launch geometry: chunk bytes, ring depth (ring budget / stage bytes, 3..16, reduced until the CTA's shared memory
// fits the device), shared memory, grid. smem == 0: does not fit (needs a device of >= ~60 KB per block).
struct Plan {
    int chunk_bytes = 512, stages = 3, stage_bytes = 0, grid = 1, warps = 8, l2 = 0, ws = 0;
    size_t smem = 0;
};
Plan plan(bool up, int64_t K, int64_t M) {
    Plan p;
    const int cb = g_config.chunk_bytes ? g_config.chunk_bytes : env_config().chunk_bytes;
    p.chunk_bytes = cb >= 256 && cb % 256 == 0 ? cb : 512;
    p.chunk_bytes = int(std::min<int64_t>(p.chunk_bytes, (K / 2 + 255) / 256 * 256));  // at most one whole row
    const int ring_kb = g_config.ring_kb ? g_config.ring_kb : env_config().ring_kb;
    const int per_sm =
        std::clamp(g_config.ctas_per_sm ? g_config.ctas_per_sm : env_config().ctas_per_sm, 1, 2);
    p.warps = (g_config.warps ? g_config.warps : env_config().warps) == 16 ? 16 : 8;
    p.l2 = std::clamp(g_config.l2 >= 0 ? g_config.l2 : env_config().l2, 0, 2);
    p.ws = (g_config.ws >= 0 ? g_config.ws : env_config().ws) != 0 ? 1 : 0;
    const int nm = up ? 2 : 1, tp = M <= 1 ? 2 : 4;
    p.stage_bytes = nm * kRows * (p.chunk_bytes + p.chunk_bytes / 16);
    const size_t fixed = size_t(tp) * size_t(K + 8) * 2 + size_t(tp) * size_t(K / 128) * 4 +
                         size_t(p.warps) * nm * kRows * tp * 4 + size_t(tp) * 4 + (p.ws ? kBarBytes : 0);
    const ArchInfo& arch = current_arch();
    // Per CTA: the device's per-block limit, or its share of the SM's when two CTAs share an SM.
    size_t limit = size_t(arch.max_smem_per_block_optin);
    if (per_sm == 2) limit = std::min(limit, size_t(arch.max_smem_per_block_optin) / 2 - 1024);
    p.stages = std::clamp(ring_kb * 1024 / p.stage_bytes, 2, kMaxStages);
    while (p.stages > 2 && fixed + size_t(p.stages) * p.stage_bytes > limit) --p.stages;
    p.smem = fixed + size_t(p.stages) * p.stage_bytes;
    if (p.smem > size_t(arch.max_smem_per_block_optin)) p.smem = 0;
    p.grid = arch.sm_count * per_sm;
    return p;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

void launch(bool up, Args a, const MoeGrouping& g, int64_t M, int top_k, cudaStream_t stream) {
    const int64_t slots = std::min<int64_t>(g.E, M * top_k);
    const Plan p = plan(up, a.K, M);
    FS_REQUIRE(p.smem > 0, "moe_stream: the ring does not fit the device's shared memory");
    a.chunk_bytes = p.chunk_bytes;
    a.stages = p.stages;
    a.stage_bytes = p.stage_bytes;
    a.l2 = p.l2;
    a.probe = g_config.probe;
    const int grid = int(std::max<int64_t>(1, std::min<int64_t>(p.grid, slots * (a.N / kRows))));
    Kernel k;
    const bool w16 = p.warps == 16;
    if (p.ws) {
        if (up)
            k = M <= 1 ? (w16 ? stream_ws_kernel<true, 1, 16> : stream_ws_kernel<true, 1, 8>)
                       : (w16 ? stream_ws_kernel<true, 2, 16> : stream_ws_kernel<true, 2, 8>);
        else
            k = M <= 1 ? (w16 ? stream_ws_kernel<false, 1, 16> : stream_ws_kernel<false, 1, 8>)
                       : (w16 ? stream_ws_kernel<false, 2, 16> : stream_ws_kernel<false, 2, 8>);
    } else if (up)
        k = M <= 1 ? (w16 ? stream_kernel<true, 1, 16> : stream_kernel<true, 1, 8>)
                   : (w16 ? stream_kernel<true, 2, 16> : stream_kernel<true, 2, 8>);
    else
        k = M <= 1 ? (w16 ? stream_kernel<false, 1, 16> : stream_kernel<false, 1, 8>)
                   : (w16 ? stream_kernel<false, 2, 16> : stream_kernel<false, 2, 8>);
    gmma::allow_smem(reinterpret_cast<const void*>(k), p.smem);
    k<<<unsigned(grid), (p.warps + p.ws) * 32, p.smem, stream>>>(a);
    CUDA_CHECK_LAUNCH(up ? "moe_stream up" : "moe_stream down");
}

Args base_args(const PreparedActivation& x, const MoeGrouping& g) {
    Args a{};
    a.x = x.values;
    a.xs = x.scales;
    a.x_ld = x.k_pad;
    a.xs_ld = x.k_pad / 128;
    a.active = g.active;
    a.n_active = g.n_active;
    a.count = g.expert_count;
    a.offset = g.expert_offset;
    a.slot_token = g.slot_token;
    a.slot_weight = g.slot_weight;
    return a;
}

}  // namespace

void set_moe_stream(int mode, int ring_kb, int chunk_bytes, int ctas_per_sm, int warps, int l2, int probe, int ws) {
    g_config.ws = ws;
    g_config.mode = mode;
    g_config.ring_kb = ring_kb;
    g_config.chunk_bytes = chunk_bytes;
    g_config.ctas_per_sm = ctas_per_sm;
    g_config.warps = warps;
    g_config.l2 = l2;
    g_config.probe = probe;
}

namespace moe_stream {

bool eligible(const ExpertTable& t, int64_t M, const PreparedActivation& x, const MoeGrouping* g) {
    if (!g || resolved_mode() == 0 || x.raw || !aligned16(x.values)) return false;
    if (M < 1 || M > small_m_gemv_max_tokens() || M > kGemvMaxTokens) return false;
    if (t.kind != WeightKind::FP4_BLOCK32 || t.scale_kind != ScaleKind::E8M0) return false;
    if (t.hidden % 128 != 0 || t.inter % 128 != 0 || x.k_pad % 8 != 0) return false;
    return plan(true, t.hidden, M).smem > 0 && plan(false, t.inter, M).smem > 0;
}

void expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping& g, int64_t M, int top_k,
               float swiglu_limit, ActNumerics h_numerics, PreparedActivation& h, cudaStream_t stream) {
    Args a = base_args(x, g);
    a.w_a = t.w1;
    a.s_a = t.w1_scale;
    a.w_b = t.w3;
    a.s_b = t.w3_scale;
    a.N = t.inter;
    a.K = t.hidden;
    a.limit = swiglu_limit;
    a.round_glu = h_numerics == ActNumerics::FP8_BLOCK128;
    a.h = h.values;
    a.h_ld = h.k_pad;
    launch(true, a, g, M, top_k, stream);
    moe_gemv::quantize_h(h, t, &g, h_numerics, stream);
}

void expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping& g, int64_t M, int top_k,
                 float* y, cudaStream_t stream) {
    Args a = base_args(h, g);
    a.w_a = t.w2;
    a.s_a = t.w2_scale;
    a.N = t.hidden;
    a.K = t.inter;
    a.y = y;
    launch(false, a, g, M, top_k, stream);
}

}  // namespace moe_stream
}  // namespace flashseek::cuda
