// Shared pieces of the grouped expert GEMMs (moe_gemm.cuh): the host-side problem handed to a kernel backend
// (moe_gemm_sm90.cu: wgmma + TMA; moe_gemm_mma.cu: mma.sync) and the device-side tile list derived from the
// per-expert counts (the up-projection's SwiGLU element: gemm/swiglu_element.cuh).
// Tiles: (expert e, a block of slot rows of e, 128 weight rows); tile t is expert-major with the slot block fastest
// inside an expert (the CTAs in flight share the expert's weight tiles in L2). Slot blocks are 128 rows, or on the
// sm_90a kernel 32 / 64 (Problem::slot_rows) where a pass gives each expert few slots. Every CTA derives the list
// from the device counts (prefix over experts of their slot blocks in shared memory), so launches are sized by the
// SM count alone and stay graph-capturable.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/act_quant.cuh"
#include "cuda/gemm/dense_gemm_problem.cuh"
#include "cuda/gemm/swiglu_element.cuh"

namespace flashseek::cuda::grouped_gemm {

constexpr int kBlockM = 128;       // slot rows per tile (the mma.sync kernels; the sm_90a kernel: Problem::slot_rows)
constexpr int kBlockN = 128;       // weight rows per tile (up: 64 of w1 and the same 64 of w3)
constexpr int kMaxExperts = 1024;  // the prefix lives in shared memory

struct Problem {
    bool up = true;
    Fp8Activation a;                     // the slots' act_quant rows ([slots, K])
    const void* const* w_a = nullptr;    // up: w1, down: w2 (per expert, FP4 packed [rows, K / 2])
    const void* const* s_a = nullptr;    // their E8M0 scales [rows, K / 32]
    const void* const* w_b = nullptr;    // up: w3
    const void* const* s_b = nullptr;
    const uint8_t* ref_a = nullptr;      // row references (ExpertTable::row_ref) of w_a's / w_b's rows: expert e's
    const uint8_t* ref_b = nullptr;      // row r at ref + e * ref_stride + r
    int64_t ref_stride = 0;
    const unsigned char* maps_a = nullptr;  // TMA maps of w_a's / w_b's packed weights: expert e's at + 384 e
    const unsigned char* maps_b = nullptr;
    const int32_t* count = nullptr;      // grouping: slots per expert, first slot per expert
    const int32_t* offset = nullptr;
    int E = 0;
    int K = 0;         // weights per row: hidden (up) or inter (down)
    int n_blocks = 0;  // up: inter / 128 h-column blocks (each two sub-tiles of 64 columns); down: hidden / 128
    const float* slot_weight = nullptr;
    float limit = 0.f;
    Fp8Activation h_q;   // up: act_quant of h ([slots, inter]), written by the epilogue
    float* y = nullptr;         // down: fp32 [slots, ldo]
    uint16_t* y_bf16 = nullptr; // ... or, instead, those values rounded to bf16
    int64_t ldo = 0;            // up: h_q.codes_ld; down: hidden
    // Slot rows per tile of the sm_90a kernel: 32, 64 or 128 (moe_gemm_slot_rows), the same per-slot arithmetic;
    // the mma.sync kernels take kBlockM always.
    int slot_rows = kBlockM;
};

void launch_sm90(const Problem& p, cudaStream_t stream);
void launch_mma(const Problem& p, dense_gemm::MmaMode mode, cudaStream_t stream);

// prefix[e] = `rows`-row slot blocks of the experts before e, prefix[E] = all of them. Called by one whole warp (each
// lane sums a contiguous chunk of experts, then a warp scan); the caller synchronizes the CTA afterwards.
__device__ __forceinline__ void block_prefix(const int32_t* count, int E, int rows, int* prefix, int lane) {
    const int per = (E + 31) / 32, e0 = lane * per, e1 = min(E, e0 + per);
    int sum = 0;
    for (int e = e0; e < e1; ++e) sum += (count[e] + rows - 1) / rows;
    int incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
    }
    int run = incl - sum;
    for (int e = e0; e < e1; ++e) {
        prefix[e] = run;
        run += (count[e] + rows - 1) / rows;
    }
    if (lane == 31) prefix[E] = incl;
}

// Expert, slot block and weight-row block of tile t. The search takes the last expert whose first tile is <= t:
// an empty expert shares its prefix with the next one, so the last such expert is never empty.
__device__ __forceinline__ void tile_of(int t, const int* prefix, int E, int n_blocks, int& e, int& mb, int& nb) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (prefix[mid] * n_blocks <= t) lo = mid;
        else hi = mid - 1;
    }
    e = lo;
    const int blocks = prefix[e + 1] - prefix[e];
    const int local = t - prefix[e] * n_blocks;
    mb = local % blocks;
    nb = local / blocks;
}

}  // namespace flashseek::cuda::grouped_gemm
