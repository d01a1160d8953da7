// Compute-bound dense GEMM with mma.sync, for every architecture without wgmma (sm_80, sm_89, sm_100a, sm_120a) and
// selectable on sm_90 for tests: the same problems and numerics as gemm_sm90.cu (dense_gemm_problem.cuh).
// Three modes, one kernel:
//   FP8_NATIVE  mma.sync m16n8k32 e4m3 (sm_89 and later; on sm_90 ptxas lowers it to f16 HMMA plus unpacks),
//   FP8_AS_F16  the e4m3 fragments widened exactly to f16 (value x 2^-8, bit moves) and mma.sync m16n8k16 f16
//               (sm_80 and later; the 2^16 goes into the promotion scale),
//   BF16        mma.sync m16n8k16 bf16.
// Design: CTA tile 128 x 128, 8 warps of 64 x 32; K in stages of 128 bytes (one scale block of FP8, 64 bf16
// values), 3 stages of cp.async (16-byte chunks, zero-filled outside the matrix, so partial tiles need no other
// care) into rows of 128 bytes whose 16-byte chunks are XOR-swizzled by row (ldmatrix reads 8 rows of one chunk
// column without bank conflicts). The fragment addressing is the same for all modes: a k-step is 32 bytes (k32 of
// e4m3 or k16 of bf16), and ldmatrix.x4 of 8 x 16-byte rows gives exactly the A fragment of m16n8k32 e4m3 / m16n8k16
// 16-bit and two n8 B fragments. FP8 modes promote every stage's partial to fp32 with sa[row] * sw, in K order,
// as the wgmma kernel does. 99,840 bytes of shared memory: fits the 99 KB of sm_89 / sm_120 CTAs.
#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/dense_gemm_problem.cuh"

namespace flashseek::cuda::dense_gemm {
namespace {

constexpr int kThreads = 256;
constexpr int kBlockM = 128;
constexpr int kStages = 3;
constexpr int kTileBytes = 128 * kStageKBytes;  // A or B tile of one stage
constexpr int kScaleBytes = kBlockM * 4;
constexpr size_t kSmemBytes = size_t(kStages) * (2 * kTileBytes + kScaleBytes);

struct MmaParams {
    Problem q;
    int k_blocks, m_blocks, n_blocks;
    int64_t k_bytes;  // row length of A and W in bytes
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, or zeros when !valid (src-size 0; src must still be a valid address).
__device__ __forceinline__ void cp_async_16_zfill(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Byte offset of (row, byte) in a swizzled tile: 16-byte chunk c of row r lives at chunk c ^ (r % 8).
__device__ __forceinline__ uint32_t swizzled(int row, int byte) {
    return uint32_t(row * kStageKBytes + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15));
}

__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}
__device__ __forceinline__ void mma_16bit(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1, bool bf16) {
    if (bf16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One k-step (32 bytes of K) of the warp's 64 x 32 tile: fragments from the stage, 16 mma (32 for FP8_AS_F16).
// FP8_AS_F16: a register of four e4m3 (k = 4t..4t+3) widens to lo = (k 4t, 4t+2), hi = (k 4t+1, 4t+3); the
// m16n8k16 slots (2t, 2t+1) take lo and (2t+8, 2t+9) take hi, for A and B alike, so each slot pairs the same k.
template <MmaMode MODE>
__device__ __forceinline__ void k_step(float (&acc)[4][4][4], uint32_t a_base, uint32_t b_base, int ks, int wm, int wn,
                                       int lane) {
    uint32_t a[4][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
        const int row = wm * 64 + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(a[mi], a_base + swizzled(row, ks * 32 + (lane >> 4) * 16));
    }
#pragma unroll
    for (int nj = 0; nj < 2; ++nj) {
        const int row = wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8;
        uint32_t r[4];
        ldmatrix_x4(r, b_base + swizzled(row, ks * 32 + ((lane >> 3) & 1) * 16));
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            if constexpr (MODE == MmaMode::FP8_NATIVE) {
                mma_e4m3(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
            } else if constexpr (MODE == MmaMode::BF16) {
                mma_16bit(acc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[ni][0], b[ni][1], true);
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {  // h = 0: k 0..15 of the step (a0, a1, b0); h = 1: k 16..31
                    uint32_t a_lo0, a_hi0, a_lo1, a_hi1, b_lo, b_hi;
                    e4m3x4_to_f16x2x2_scaled(a[mi][2 * h], a_lo0, a_hi0);      // row g
                    e4m3x4_to_f16x2x2_scaled(a[mi][2 * h + 1], a_lo1, a_hi1);  // row g + 8
                    e4m3x4_to_f16x2x2_scaled(b[ni][h], b_lo, b_hi);
                    mma_16bit(acc[mi][ni], a_lo0, a_lo1, a_hi0, a_hi1, b_lo, b_hi, false);
                }
            }
        }
}

template <MmaMode MODE>
__global__ void __launch_bounds__(kThreads, 1) mma_gemm_kernel(const MmaParams p) {
    constexpr bool kFp8 = MODE != MmaMode::BF16;
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* const a_tiles = smem;
    unsigned char* const b_tiles = smem + kStages * kTileBytes;
    float* const a_scales = reinterpret_cast<float*>(smem + 2 * kStages * kTileBytes);
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const Problem& q = p.q;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    const int g = lane >> 2, t = lane & 3;
    int mb, nb;
    tile_coords(blockIdx.x, p.m_blocks, p.n_blocks, mb, nb);
    const int64_t m0 = int64_t(mb) * kBlockM, n0 = int64_t(nb) * kBlockN;
    const unsigned char* const a_g = static_cast<const unsigned char*>(q.a);
    const unsigned char* const w_g = static_cast<const unsigned char*>(q.w);

    auto load_stage = [&](int kb) {
        const int s = kb % kStages;
        const int64_t kbyte0 = int64_t(kb) * kStageKBytes;
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // 1024 chunks of A and of B per stage, 4 each per thread
            const int c = tid + kThreads * i, row = c >> 3, chunk = c & 7;
            const int64_t kbyte = kbyte0 + chunk * 16;
            const bool k_ok = kbyte < p.k_bytes;
            const bool a_ok = k_ok && m0 + row < q.m, w_ok = k_ok && n0 + row < q.n;
            cp_async_16_zfill(a_tiles + s * kTileBytes + swizzled(row, chunk * 16),
                              a_ok ? a_g + (m0 + row) * q.lda_bytes + kbyte : a_g, a_ok);
            cp_async_16_zfill(b_tiles + s * kTileBytes + swizzled(row, chunk * 16),
                              w_ok ? w_g + (n0 + row) * p.k_bytes + kbyte : w_g, w_ok);
        }
        if (kFp8 && tid < kBlockM / 4) {  // the stage's 128 activation scales (rows past m: zeros)
            const bool ok = m0 + 4 * tid < q.m;
            cp_async_16_zfill(a_scales + s * kBlockM + 4 * tid,
                              ok ? q.a_scales + int64_t(kb) * q.a_scales_ld + m0 + 4 * tid : q.a_scales, ok);
        }
    };

    float acc[4][4][4], fin[4][4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int j = 0; j < 4; ++j) fin[mi][ni][j] = acc[mi][ni][j] = 0.f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < p.k_blocks) load_stage(s);
        cp_async_commit();
    }
    const int64_t w_scales_ld = (q.k + 127) / 128;
    for (int kb = 0; kb < p.k_blocks; ++kb) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // stage kb landed for every thread; every thread is done with stage kb - 1
        if (kb + kStages - 1 < p.k_blocks) load_stage(kb + kStages - 1);
        cp_async_commit();
        const int s = kb % kStages;
        const uint32_t a_base = smem_addr(a_tiles + s * kTileBytes), b_base = smem_addr(b_tiles + s * kTileBytes);
        if constexpr (kFp8) {
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) k_step<MODE>(acc, a_base, b_base, ks, wm, wn, lane);
            float sw = q.w_scales_f32
                           ? __ldg(static_cast<const float*>(q.w_scales) + nb * w_scales_ld + kb)
                           : e8m0_to_f32(__ldg(static_cast<const uint8_t*>(q.w_scales) + nb * w_scales_ld + kb));
            if constexpr (MODE == MmaMode::FP8_AS_F16) sw *= 65536.f;  // both operands were scaled by 2^-8
            const float* ss = a_scales + s * kBlockM + wm * 64 + g;
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
                const float s0 = ss[mi * 16] * sw, s1 = ss[mi * 16 + 8] * sw;
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    fin[mi][ni][0] = fmaf(acc[mi][ni][0], s0, fin[mi][ni][0]);
                    fin[mi][ni][1] = fmaf(acc[mi][ni][1], s0, fin[mi][ni][1]);
                    fin[mi][ni][2] = fmaf(acc[mi][ni][2], s1, fin[mi][ni][2]);
                    fin[mi][ni][3] = fmaf(acc[mi][ni][3], s1, fin[mi][ni][3]);
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;
                }
            }
        } else {
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) k_step<MODE>(fin, a_base, b_base, ks, wm, wn, lane);
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t row = m0 + wm * 64 + mi * 16 + g + 8 * h;
                const int64_t col = n0 + wn * 32 + ni * 8 + 2 * t;
                if (row >= q.m || col >= q.n) continue;  // n is even: col + 1 < n too
                const float x = fin[mi][ni][2 * h], y = fin[mi][ni][2 * h + 1];
                const int64_t o = row * q.ldd + col;
                if (q.d_f32) {
                    float* d = static_cast<float*>(q.d) + o;
                    if (q.d_vector) {
                        *reinterpret_cast<float2*>(d) = make_float2(x, y);
                    } else {
                        d[0] = x;
                        d[1] = y;
                    }
                } else {
                    uint16_t* d = static_cast<uint16_t*>(q.d) + o;
                    const uint16_t bx = f32_to_bf16_bits(x), by = f32_to_bf16_bits(y);
                    if (q.d_vector) {
                        *reinterpret_cast<uint32_t*>(d) = uint32_t(bx) | uint32_t(by) << 16;
                    } else {
                        d[0] = bx;
                        d[1] = by;
                    }
                }
            }
}

}  // namespace

void launch_mma(const Problem& q, MmaMode mode, cudaStream_t stream) {
    MmaParams p{};
    p.q = q;
    p.k_bytes = q.k * (q.fp8 ? 1 : 2);
    p.k_blocks = int(k_blocks(q));
    p.m_blocks = int((q.m + kBlockM - 1) / kBlockM);
    p.n_blocks = int((q.n + kBlockN - 1) / kBlockN);
    const unsigned tiles = unsigned(p.m_blocks) * unsigned(p.n_blocks);
    auto kernel = mode == MmaMode::FP8_NATIVE   ? mma_gemm_kernel<MmaMode::FP8_NATIVE>
                  : mode == MmaMode::FP8_AS_F16 ? mma_gemm_kernel<MmaMode::FP8_AS_F16>
                                                : mma_gemm_kernel<MmaMode::BF16>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    launch_pdl("mma_gemm_kernel", kernel, dim3(tiles), dim3(kThreads), kSmemBytes, stream, p);
}

}  // namespace flashseek::cuda::dense_gemm
