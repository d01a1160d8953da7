// Internal description of one dense GEMM problem D[m, n] = A[m, k] . W[n, k]^T as the kernel backends of
// dense_gemm.cu receive it (gemm_sm90.cu: wgmma + TMA; gemm_mma.cu: mma.sync), after dense_gemm.cu checked it.
// FP8: A = e4m3 codes with transposed per-(row, 128-block) scales (act_quant.cuh), W = e4m3 with 128 x 128 block
// scales; the result is the sum over 128-K blocks of sa * sw * (A_kb . W_kb), each block's partial promoted to
// fp32 in order. BF16: A and W bf16, fp32 accumulation, no scales.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"

namespace flashseek::cuda::dense_gemm {

// Rows of K per pipeline stage and scale block: 128 bytes = 128 e4m3 or 64 bf16 values.
constexpr int kStageKBytes = 128;
// Column tile of every configuration (one weight-scale block).
constexpr int kBlockN = 128;
// Tiles are walked in groups of this many M blocks (M fastest inside a group), so the CTAs in flight share their
// weight tiles and a band of activation rows in L2.
constexpr int kGroupM = 16;

struct Problem {
    bool fp8 = true;
    const void* a = nullptr;         // FP8: codes; BF16: bf16 values
    int64_t lda_bytes = 0;           // multiple of 16
    const float* a_scales = nullptr; // FP8: [ceil(k / 128), a_scales_ld]
    int64_t a_scales_ld = 0;         // multiple of 4, >= m
    const void* w = nullptr;         // [n, k] row-major, row stride k elements
    const void* w_scales = nullptr;  // FP8: [ceil(n / 128), ceil(k / 128)]
    bool w_scales_f32 = false;       // fp32 or E8M0 bytes
    int64_t m = 0, n = 0, k = 0;     // per group: A columns g * k.., W rows g * n.., D columns g * n..
    int groups = 1;                  // independent products over column slices (wo_a): FP8 n, k % 128 == 0; BF16 (sm90
                                     // kernel only) n % 128 == 0, k % 64 == 0
    void* d = nullptr;
    bool d_f32 = false;
    int64_t ldd = 0;                 // elements
    bool d_vector = false;           // two adjacent outputs stored together (ldd even, d aligned)
    // Or (sm90 kernel, block_m 128 / 256): the act_quant rows of the bf16-rounded output instead of d: codes [m,
    // q_codes_ld] and scales [.., q_scales_ld] whose column 0 / block 0 is the output's column 0 (group g's at g * n).
    uint8_t* q_codes = nullptr;
    int64_t q_codes_ld = 0;
    float* q_scales = nullptr;
    int64_t q_scales_ld = 0;
    int block_m = 128;               // 256, 128 or 64 (sm90 kernel); the mma.sync kernel always takes 128
    // sm90 kernel, bf16 output with 16-byte rows: the output tile staged whole in shared memory and written by TMA
    // while the next tile's main loop runs (gemm_sm90.cu), else stored by the math warps
    bool tma_store = true;
    // Split-K (sm90 kernel, decode): K in k_splits ranges of whole 128-blocks, one tile each; fp32 partials
    // [k_splits][m][groups * n] and one counter per output tile (zero between calls), the sum in split order by the
    // tile's last CTA. The epilogue then stores from the math warps (no TILE_STORE, no q_codes).
    int k_splits = 1;
    float* partials = nullptr;
    uint32_t* counters = nullptr;
    // The weights were written by an earlier kernel of the stream (wo_a widened to bf16 per pass): the sm90 kernel
    // then requests none of them before its PDL wait (checkpoint weights it requests early, common/pdl.cuh).
    bool weights_in_stream = false;
};

inline int64_t k_blocks(const Problem& p) { return (p.k * (p.fp8 ? 1 : 2) + kStageKBytes - 1) / kStageKBytes; }

// M block and N block of tile `tile` (see kGroupM); with groups, tile = group * (m_blocks * n_blocks) + that.
__host__ __device__ inline void tile_coords(int tile, int m_blocks, int n_blocks, int& mb, int& nb) {
    const int per_group = kGroupM * n_blocks;
    const int group = tile / per_group, in_group = tile - group * per_group;
    const int first = group * kGroupM;
    const int rows = m_blocks - first < kGroupM ? m_blocks - first : kGroupM;
    mb = first + in_group % rows;
    nb = in_group / rows;
}

// Two bf16 (round to nearest even) in one word, x in the low half (the lower column): one cvt.rn.bf16x2.f32 (the
// bit-twiddled form made the staged epilogues' conversion ~1,000 instructions per thread and 256-row tile).
__device__ __forceinline__ uint32_t bf16_pair(float x, float y) { return bf16x2_bits_rn(x, y); }

// Stores outputs (row, col) and (row, col + 1) of d, element offset `o` of the first (both kernels' epilogues):
// fp32 or bf16 (round to nearest even), as one 8- / 4-byte store when `vector` (ldd even, d aligned).
__device__ __forceinline__ void store_pair(void* d, bool f32, bool vector, int64_t o, float x, float y) {
    if (f32) {
        float* p = static_cast<float*>(d) + o;
        if (vector) {
            *reinterpret_cast<float2*>(p) = make_float2(x, y);
        } else {
            p[0] = x;
            p[1] = y;
        }
    } else {
        uint16_t* p = static_cast<uint16_t*>(d) + o;
        if (vector) {
            *reinterpret_cast<uint32_t*>(p) = bf16_pair(x, y);
        } else {
            p[0] = f32_to_bf16_bits(x);
            p[1] = f32_to_bf16_bits(y);
        }
    }
}

// Backends (dense_gemm.cu picks one).
void launch_sm90(const Problem& p, int ctas, cudaStream_t stream);
enum class MmaMode : int { FP8_NATIVE = 0, FP8_AS_F16 = 1, BF16 = 2 };
void launch_mma(const Problem& p, MmaMode mode, cudaStream_t stream);

}  // namespace flashseek::cuda::dense_gemm
