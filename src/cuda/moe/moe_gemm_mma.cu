// Grouped FP4 expert GEMMs with mma.sync (moe_gemm.cuh), for every architecture without wgmma and selectable on
// sm_90 for tests: the tiles of grouped_gemm_common.cuh on the CTA structure of gemm/gemm_mma.cu (256 threads,
// 128 x 128 tile, 8 warps of 64 x 32, 3 stages of cp.async, fragments from gemm/mma_tile.cuh), the weights
// expanded to e4m3 by moe/fp4_expand.cuh.
// Per stage: the A tile (the slots' act_quant codes) and its 128 scales, and the raw FP4 rows of the 128 weight rows
// arrive by cp.async; after the stage barrier every thread expands half a weight row into the single e4m3 B tile
// (and writes the row's promotion scale), a second barrier, four k-steps, then fp32 promotion
// acc * sa[row] * sc[column]. Up-projection: a tile is one 128-column block of h in two sub-tiles of 64 columns,
// whose rows interleave w1 and w3 in groups of 8: sub-tile row r is row i0 + 8 * (r / 16) + r % 8 of w1 when
// (r / 8) is even, of w3 when odd, so every warp's n8 tiles alternate gate / up of the same h columns and the SwiGLU
// pairs stay in one thread (n8 tile 2j = gate, 2j + 1 = up); the first sub-tile's h values wait in registers, then
// each row's 128 values are quantized together (row maxima across the column warps through shared memory): the
// epilogue writes the down-projection's act_quant input (gemm/fp8_quant.cuh).
// Persistent CTAs (one per SM) walk the tile list; each tile runs its own pipeline prologue. Shared memory
// 98,308 bytes (with at most 1024 experts): fits the 99 KB of sm_89 / sm_120.
#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/mma_tile.cuh"
#include "cuda/moe/fp4_expand.cuh"
#include "cuda/moe/grouped_gemm_common.cuh"

namespace flashseek::cuda::grouped_gemm {
namespace {

using namespace mma_tile;

constexpr int kThreads = 256;
constexpr int kStages = 3;
constexpr int kATile = kBlockM * 128;
constexpr int kRawTile = kBlockN * 64;
// A stage's activation scales: 132 floats from the 4-aligned row at or below the tile's first slot (a 16-byte copy
// must start 16-byte aligned, and an expert's first slot can be any row); the tile's rows sit at offset first % 4.
constexpr int kScaleFloats = kBlockM + 4;
constexpr int kBTile = kBlockN * 128;
constexpr size_t kRawOffset = size_t(kStages) * kATile;
constexpr size_t kSaOffset = kRawOffset + size_t(kStages) * kRawTile;
constexpr size_t kBOffset = kSaOffset + size_t(kStages) * kScaleFloats * 4;
constexpr size_t kColScaleOffset = kBOffset + kBTile;
constexpr size_t kPrefixOffset = kColScaleOffset + kBlockN * 4;
constexpr size_t kRowMaxOffset = kPrefixOffset + (kMaxExperts + 1) * 4;  // up: [4 column warps][128 rows] partial amax
constexpr size_t kSmemBytes = kRowMaxOffset + 4 * kBlockM * 4;
static_assert(kSmemBytes <= 99 * 1024, "shared memory of one sm_89 / sm_120 CTA");

// Weight row (and whether of w3) behind row r of sub-tile `sub` of an up-projection tile with h-column block nb
// (h columns nb * 128 + 64 * sub ..); down: row nb * 128 + r.
__device__ __forceinline__ int weight_row(bool up, int nb, int sub, int r, bool& second) {
    second = up && ((r >> 3) & 1);
    return up ? nb * 128 + 64 * sub + (r >> 4) * 8 + (r & 7) : nb * kBlockN + r;
}

template <bool UP, MmaMode MODE>
__global__ void __launch_bounds__(kThreads, 1) grouped_mma_kernel(const Problem p) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* const a_tiles = smem;
    unsigned char* const raw_tiles = smem + kRawOffset;
    float* const a_scales = reinterpret_cast<float*>(smem + kSaOffset);
    unsigned char* const b_tile = smem + kBOffset;
    float* const csc = reinterpret_cast<float*>(smem + kColScaleOffset);
    int* const prefix = reinterpret_cast<int*>(smem + kPrefixOffset);
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract); the counts and A come from earlier kernels
    pdl_trigger();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    const int g = lane >> 2, t4 = lane & 3;
    if (tid < 32) block_prefix(p.count, p.E, kBlockM, prefix, lane);
    __syncthreads();
    const int tiles = prefix[p.E] * p.n_blocks;
    const int k_blocks = p.K / 128;
    const int x_row = tid >> 1, x_half = tid & 1;  // the weight half-row this thread expands
    const unsigned char* const a_g = p.a.codes;

    float* const row_max = reinterpret_cast<float*>(smem + kRowMaxOffset);
    constexpr int kSubTiles = UP ? 2 : 1;  // up: two 64-column halves of a 128-column block of h
    uint32_t h0[4][2][2];  // up: sub-tile 0's h ([mi][row half][j2], bf16 pairs j = 0, 1) until sub-tile 1 is done
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int e, mb, nb;
        tile_of(t, prefix, p.E, p.n_blocks, e, mb, nb);
        const int count = p.count[e], first = p.offset[e] + mb * kBlockM;
        const int rows_left = count - mb * kBlockM;  // valid slot rows of this tile (> 0)
        for (int sub = 0; sub < kSubTiles; ++sub) {
            bool x_second;
            const int x_wrow = weight_row(UP, nb, sub, x_row, x_second);
            const uint8_t* srow =
                static_cast<const uint8_t*>(x_second ? p.s_b[e] : p.s_a[e]) + int64_t(x_wrow) * (p.K / 32);

            // This thread's copy sources, computed once per pass (fewer live registers in the K loop): A rows
            // tid / 8 + 32 i (chunk tid % 8), valid while inside the activation; weight rows tid / 4 and tid / 4 + 64
            // (chunk tid % 4), which map to rows 32 apart of the same matrix (weight_row).
            const int a_row = tid >> 3, a_chunk = tid & 7;
            const int a_rows_ok = int(min(int64_t(4), (p.a.m - first - a_row + 31) / 32));  // rows i < this exist
            const unsigned char* a_src = a_g + int64_t(first + a_row) * p.a.codes_ld + a_chunk * 16;
            const int64_t a_step = 32 * p.a.codes_ld;
            bool b_second;
            const int b_row = tid >> 2, b_chunk = tid & 3;
            const int b_wrow = weight_row(UP, nb, sub, b_row, b_second);
            const unsigned char* b_src = static_cast<const unsigned char*>(b_second ? p.w_b[e] : p.w_a[e]) +
                                         int64_t(b_wrow) * (p.K / 2) + b_chunk * 16;
            const int64_t b_step = int64_t(UP ? 32 : 64) * (p.K / 2);  // tile row + 64 -> weight row + 32 (up) / + 64
            const int64_t s_first = first & ~int64_t(3);
            const bool s_ok = tid < kScaleFloats / 4 && s_first + 4 * tid < p.a.m;
            const float* s_src = p.a.scales + s_first + 4 * tid;

            auto load_stage = [&](int kb) {
                const int s = kb % kStages;
#pragma unroll
                for (int i = 0; i < 4; ++i) {  // A: 1024 chunks, 4 per thread (rows of other experts load harmlessly)
                    const bool ok = i < a_rows_ok;
                    cp_async_16_zfill(a_tiles + s * kATile + swizzled(a_row + 32 * i, a_chunk * 16),
                                      ok ? a_src + i * a_step + kb * 128 : a_g, ok);
                }
#pragma unroll
                for (int i = 0; i < 2; ++i)  // raw B: 128 rows x 64 bytes, 2 chunks per thread
                    cp_async_16_zfill(raw_tiles + s * kRawTile + (b_row + 64 * i) * 64 + b_chunk * 16,
                                      b_src + i * b_step + kb * 64, true);
                if (tid < kScaleFloats / 4)  // the stage's 132 activation scales (rows past the activation: zeros)
                    cp_async_16_zfill(a_scales + s * kScaleFloats + 4 * tid,
                                      s_ok ? s_src + int64_t(kb) * p.a.scales_ld : p.a.scales, s_ok);
            };

            float acc[4][4][4], fin[4][4][4];
            zero_tile(acc);
            zero_tile(fin);
            __syncthreads();  // the previous pass's last stage, B tile and row maxima are no longer read
#pragma unroll
            for (int s = 0; s < kStages - 1; ++s) {
                if (s < k_blocks) load_stage(s);
                cp_async_commit();
            }
            for (int kb = 0; kb < k_blocks; ++kb) {
                const uint32_t scales4 = fp4_expand::load_scales4(srow + 4 * kb);
                cp_async_wait<kStages - 2>();
                __syncthreads();  // stage kb landed for every thread; everyone is done with B and stage kb - 1
                if (kb + kStages - 1 < k_blocks) load_stage(kb + kStages - 1);
                cp_async_commit();
                const int s = kb % kStages;
                const int ref = fp4_expand::reference_exponent(scales4);
                fp4_expand::expand_half_row(raw_tiles + s * kRawTile + x_row * 64, b_tile, x_row, x_half, scales4, ref);
                if (x_half == 0) csc[x_row] = fp4_expand::column_scale(ref) * product_unscale<MODE>();
                __syncthreads();  // the expanded tile is complete
                const uint32_t a_base = smem_addr(a_tiles + s * kATile), b_base = smem_addr(b_tile);
#pragma unroll
                for (int ks = 0; ks < 4; ++ks) k_step<MODE>(acc, a_base, b_base, ks, wm, wn, lane);
                const float* ss = a_scales + s * kScaleFloats + int(first - s_first) + wm * 64 + g;
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    const float2 c = *reinterpret_cast<const float2*>(csc + wn * 32 + ni * 8 + 2 * t4);
#pragma unroll
                    for (int mi = 0; mi < 4; ++mi) {
                        const float s0 = ss[mi * 16], s1 = ss[mi * 16 + 8];
                        fin[mi][ni][0] = fmaf(acc[mi][ni][0], s0 * c.x, fin[mi][ni][0]);
                        fin[mi][ni][1] = fmaf(acc[mi][ni][1], s0 * c.y, fin[mi][ni][1]);
                        fin[mi][ni][2] = fmaf(acc[mi][ni][2], s1 * c.x, fin[mi][ni][2]);
                        fin[mi][ni][3] = fmaf(acc[mi][ni][3], s1 * c.y, fin[mi][ni][3]);
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;
                    }
                }
            }
            cp_async_wait<0>();

            if constexpr (UP) {
                // h of this sub-tile: n8 tiles 2 j2 (gate) and 2 j2 + 1 (up) hold h columns 16 wn + 8 j2 + 2 t4 + j.
                float hv[4][2][4];
#pragma unroll
                for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int local = wm * 64 + mi * 16 + g + 8 * hh;
                        const float wt = local < rows_left ? p.slot_weight[first + local] : 0.f;
#pragma unroll
                        for (int j2 = 0; j2 < 2; ++j2)
#pragma unroll
                            for (int j = 0; j < 2; ++j)
                                hv[mi][hh][2 * j2 + j] = bf16_bits_to_f32(swiglu_bf16(
                                    fin[mi][2 * j2][2 * hh + j], fin[mi][2 * j2 + 1][2 * hh + j], wt, p.limit));
                    }
                if (sub == 0) {  // h values are bf16: kept packed, lossless (fewer registers beside acc and fin)
#pragma unroll
                    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                            for (int j2 = 0; j2 < 2; ++j2)
                                h0[mi][hh][j2] = uint32_t(f32_to_bf16_bits(hv[mi][hh][2 * j2])) |
                                                 uint32_t(f32_to_bf16_bits(hv[mi][hh][2 * j2 + 1])) << 16;
                    continue;
                }
                float hp[4][2][4];  // sub-tile 0's values again
#pragma unroll
                for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
                        for (int j2 = 0; j2 < 2; ++j2) {
                            hp[mi][hh][2 * j2] = bf16_bits_to_f32(uint16_t(h0[mi][hh][j2] & 0xffffu));
                            hp[mi][hh][2 * j2 + 1] = bf16_bits_to_f32(uint16_t(h0[mi][hh][j2] >> 16));
                        }
                // Each row's 128 values are spread over the 4 column warps x the 4 lanes of a quad x both sub-tiles:
                // quad maxima, then the column warps' through shared memory.
#pragma unroll
                for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        float amax = 0.f;
#pragma unroll
                        for (int q = 0; q < 4; ++q) amax = fmaxf(amax, fmaxf(fabsf(hp[mi][hh][q]), fabsf(hv[mi][hh][q])));
                        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                        if (t4 == 0) row_max[wn * kBlockM + wm * 64 + mi * 16 + g + 8 * hh] = amax;
                    }
                __syncthreads();
#pragma unroll
                for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int local = wm * 64 + mi * 16 + g + 8 * hh;
                        if (local >= rows_left) continue;
                        const float amax = fmaxf(fmaxf(row_max[local], row_max[kBlockM + local]),
                                                 fmaxf(row_max[2 * kBlockM + local], row_max[3 * kBlockM + local]));
                        const float sc = fp8_block_scale(amax), inv = 1.f / sc;
                        const int64_t slot = first + local;
                        uint8_t* out = p.h_q.codes + slot * p.h_q.codes_ld + nb * 128 + 16 * wn + 2 * t4;
#pragma unroll
                        for (int j2 = 0; j2 < 2; ++j2) {
                            *reinterpret_cast<uint16_t*>(out + 8 * j2) = uint16_t(
                                fp8_code(hp[mi][hh][2 * j2], inv) | fp8_code(hp[mi][hh][2 * j2 + 1], inv) << 8);
                            *reinterpret_cast<uint16_t*>(out + 64 + 8 * j2) = uint16_t(
                                fp8_code(hv[mi][hh][2 * j2], inv) | fp8_code(hv[mi][hh][2 * j2 + 1], inv) << 8);
                        }
                        if (wn == 0 && t4 == 0) p.h_q.scales[int64_t(nb) * p.h_q.scales_ld + slot] = sc;
                    }
            } else {
#pragma unroll
                for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int local = wm * 64 + mi * 16 + g + 8 * hh;  // row inside the tile
                        if (local >= rows_left) continue;
                        const int64_t slot = first + local;
#pragma unroll
                        for (int ni = 0; ni < 4; ++ni) {
                            const int col = nb * kBlockN + wn * 32 + ni * 8 + 2 * t4;
                            const float y0 = fin[mi][ni][2 * hh], y1 = fin[mi][ni][2 * hh + 1];
                            if (p.y_bf16)
                                *reinterpret_cast<uint32_t*>(p.y_bf16 + slot * p.ldo + col) =
                                    uint32_t(f32_to_bf16_bits(y0)) | uint32_t(f32_to_bf16_bits(y1)) << 16;
                            else
                                *reinterpret_cast<float2*>(p.y + slot * p.ldo + col) = make_float2(y0, y1);
                        }
                    }
            }
        }
    }
}

template <bool UP>
void launch_mode(const Problem& p, MmaMode mode, cudaStream_t stream) {
    auto kernel = mode == MmaMode::FP8_NATIVE ? grouped_mma_kernel<UP, MmaMode::FP8_NATIVE>
                                              : grouped_mma_kernel<UP, MmaMode::FP8_AS_F16>;
    allow_dynamic_smem(kernel, kSmemBytes);
    launch_pdl(UP ? "grouped_mma_kernel<up>" : "grouped_mma_kernel<down>", kernel,
               dim3(unsigned(current_arch().sm_count)), dim3(kThreads), kSmemBytes, stream, p);
}

}  // namespace

void launch_mma(const Problem& p, MmaMode mode, cudaStream_t stream) {
    FS_REQUIRE(p.a.order == Fp8CodeOrder::NATURAL && (!p.up || p.h_q.order == Fp8CodeOrder::NATURAL),
               "grouped expert GEMM (mma.sync): the slot codes and h must be in natural order");
    if (p.up) launch_mode<true>(p, mode, stream);
    else launch_mode<false>(p, mode, stream);
}

}  // namespace flashseek::cuda::grouped_gemm
