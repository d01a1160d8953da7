// Compute-bound dense GEMM with mma.sync, for every architecture without wgmma (sm_80, sm_89, sm_100a, sm_120a) and
// selectable on sm_90 for tests: the same problems and numerics as gemm_sm90.cu (dense_gemm_problem.cuh).
// Three modes, one kernel:
//   FP8_NATIVE  mma.sync m16n8k32 e4m3 (sm_89 and later; on sm_90 ptxas lowers it to f16 HMMA plus unpacks),
//   FP8_AS_F16  the e4m3 fragments widened exactly to f16 (value x 2^-8, bit moves) and mma.sync m16n8k16 f16
//               (sm_80 and later; the 2^16 goes into the promotion scale),
//   BF16        mma.sync m16n8k16 bf16.
// Design: CTA tile 128 x 128, 8 warps of 64 x 32; K in stages of 128 bytes (one scale block of FP8, 64 bf16
// values), 3 stages of cp.async (16-byte chunks, zero-filled outside the matrix, so partial tiles need no other
// care) into XOR-swizzled 128-byte rows; fragments and mma per k-step from gemm/mma_tile.cuh. FP8 modes promote
// every stage's partial to fp32 with sa[row] * sw, in K order, as the wgmma kernel does. 99,840 bytes of shared
// memory: fits the 99 KB of sm_89 / sm_120 CTAs.
#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/dense_gemm_problem.cuh"
#include "cuda/gemm/mma_tile.cuh"

namespace flashseek::cuda::dense_gemm {
namespace {

using namespace mma_tile;

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
    const int per_group = p.m_blocks * p.n_blocks;
    const int grp = int(blockIdx.x) / per_group;
    int mb, nb;
    tile_coords(int(blockIdx.x) - grp * per_group, p.m_blocks, p.n_blocks, mb, nb);
    const int64_t m0 = int64_t(mb) * kBlockM, n0 = int64_t(nb) * kBlockN;
    // Group grp's slices: A columns grp * k.., W rows grp * n.., their scales, D columns grp * n.. (groups: FP8 only,
    // n and k multiples of 128).
    const unsigned char* const a_g = static_cast<const unsigned char*>(q.a) + int64_t(grp) * p.k_bytes;
    const unsigned char* const w_g = static_cast<const unsigned char*>(q.w) + int64_t(grp) * q.n * p.k_bytes;
    const float* const sa_g = q.a_scales + int64_t(grp) * p.k_blocks * q.a_scales_ld;
    const int sw_row = int(grp * q.n / kBlockN) + nb;

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
                              ok ? sa_g + int64_t(kb) * q.a_scales_ld + m0 + 4 * tid : q.a_scales, ok);
        }
    };

    float acc[4][4][4], fin[4][4][4];
    zero_tile(acc);
    zero_tile(fin);

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
                           ? __ldg(static_cast<const float*>(q.w_scales) + sw_row * w_scales_ld + kb)
                           : e8m0_to_f32(__ldg(static_cast<const uint8_t*>(q.w_scales) + sw_row * w_scales_ld + kb));
            sw *= product_unscale<MODE>();
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
                store_pair(q.d, q.d_f32, q.d_vector, row * q.ldd + int64_t(grp) * q.n + col, fin[mi][ni][2 * h],
                           fin[mi][ni][2 * h + 1]);
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
    const unsigned tiles = unsigned(q.groups) * unsigned(p.m_blocks) * unsigned(p.n_blocks);
    auto kernel = mode == MmaMode::FP8_NATIVE   ? mma_gemm_kernel<MmaMode::FP8_NATIVE>
                  : mode == MmaMode::FP8_AS_F16 ? mma_gemm_kernel<MmaMode::FP8_AS_F16>
                                                : mma_gemm_kernel<MmaMode::BF16>;
    allow_dynamic_smem(kernel, kSmemBytes);
    launch_pdl("mma_gemm_kernel", kernel, dim3(tiles), dim3(kThreads), kSmemBytes, stream, p);
}

}  // namespace flashseek::cuda::dense_gemm
