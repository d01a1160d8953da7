// Routed FP4 experts at decode (2-256 tokens, release numerics) on sm_90a with warpgroup tensor cores (wgmma).
// Why: the bulk-copy kernel of moe_bulk.cu streams weights at 88% of the copy bandwidth but its arithmetic caps it
// at ~55%: Hopper has no native FP8 mma.sync, ptxas lowers it to f16 HMMA plus an e4m3 -> f16 unpack of every
// operand register, and it re-converted each weight fragment once per 8-token tile. wgmma e4m3 is native: one
// instruction per 64 rows x 16 tokens x 32 k, the activation read from shared memory, no unpacks.
// Design:
//   - Activations are packed first (pack_tiles_kernel) into B tiles of 16 tokens in the wgmma K-major layout
//     (common/wgmma.cuh: 512 bytes per 32-k step, 16 token columns, e4m3 codes) plus their per-128 scales, so one
//     bulk copy per stage brings them next to the weights. Columns past the expert's token count are zero. An
//     expert with c tokens has ceil(c / 16) tiles (the grouping lists them: MoeGrouping::tile_expert), so any
//     token count fits; at 2-16 decode sequences every active expert has one. The down-projection's tiles come
//     from the up-projection's last launch (quantize_h_tiles_kernel quantizes h into the prepared activation and
//     the tiles at once, PreparedActivation::packed_tiles marking it), unless its h came from elsewhere.
//   - Persistent CTAs of one warpgroup (128 threads, three per SM). Item = (tile, 64 rows of w1 and the same 64 rows of
//     w3) for the up-projection, (tile, 128 rows of w2) for the down-projection: two 64-row "parts" either way. An
//     expert's second tile streams the same weights again; round robin hands the two tiles' items to CTAs that run at
//     about the same time, so the repeat mostly comes from L2. A stage = 128 weight rows x 128 bytes (256 FP4 weights
//     per row) + the B tile of those 256 k (4 KB) + 2 x 16 activation scales + the rows' 8 E8M0 weight scales each
//     (1 KB); one thread copies the weights as four TMA boxes (64 rows x one 128-k block each, the 64-byte swizzle;
//     the per-expert maps of ExpertTable::w_maps the grouped GEMM reads too), the B tile and the activation scales
//     (bulk copies), and each thread one row's scales (8-byte cp.async), all completing on the stage's mbarrier
//     (count 1 + threads). Three stages per CTA, refilled across items. Before the boxes the weight rows moved by
//     per-lane 16-byte cp.async (1,024 per stage through the load/store unit, ~3 TB/s at 16-128 sequences); one
//     cp.async.bulk per row before that was issued by ptxas one lane at a time (docs/perf-log).
//   - One token: every active expert's tile holds the token alone, so it is packed once, before the routing, on a
//     branch beside it (pack_ahead), and every item reads that tile (TileList::one_tile): the pack leaves the
//     router -> routing -> up-projection chain.
//   - FP4 -> e4m3 by bit moves (bulk_copy.cuh fp4x8_to_e4m3, FP4 value x 2^-6): one 32-bit word per row and
//     k-step per thread gives the even weights (a0 / a1) and the odd ones (a2 / a3), so the logical k order of a
//     step is phys {0,2,..,30} then {1,3,..,31} within each 8-weight group; pack_tiles_kernel writes the B tile in
//     that order.
//   - Two kernels (KernelPolicy::moe_wgmma_specialized), the same items per slot and the same bits: the
//     warp-specialized one (default, its stage releases through named barriers; wgmma_expert_ws_kernel: one CTA per
//     SM, a copy warpgroup feeding one ring per math warpgroup, three math warpgroups that only compute; 1.7-2.8%
//     faster steps at 8-128 sequences) and the
//     round-robin one (wgmma_expert_kernel: three one-warpgroup CTAs per SM, every warp copies and computes), below.
//   - Work assignment of the round-robin kernel, a template parameter chosen on the host
//     (FLASHSEEK_MOE_WGMMA_BALANCE):
//       round robin (default): whole items, item i on CTA i mod grid;
//       balanced: the items' stages (item-major) cut into one contiguous range per CTA, so every CTA streams the
//       same number of stages (+-1). An item cut between two CTAs is summed by both; each stores its sums in the
//       split scratch and the second to finish adds them in a fixed order (lower CTA first) and runs the epilogue.
//       CTAs are limited so that each range holds at least one whole item's stages: an item meets at most two CTAs.
//     Balanced won while the stage loop paid a 64-bit modulo per stage (C=16 16.14 vs 16.45 ms); with the chunk
//     counter round robin is faster for both projections (15.14 vs 15.60 ms balanced up, 15.79 both;
//     docs/perf-log): the split combines and the balanced kernel's extra registers cost more than the idle tail.
//   - Per 128-k block and part: four wgmma m64n16k32 (one per FP4 scale group, each its own fp32 result), then
//     per row the weight scales (x 2^6) and per column the activation scale, in fp32. Blocks are pipelined one
//     deep (convert and issue block i + 1 before waiting for block i) within a stage. Carrying a stage's last block
//     into the next stage (draining the tensor cores once per item) was measured 63% slower: ptxas keeps a wgmma in
//     flight only across straight-line code, and the items unrolled whole spilled (docs/perf-log, run 215).
// Numerics: those of moe_bulk / moe_gemv (exact e4m3 x e4m3 products, fp32 sums per 32, bf16 rounding of the
// w1 / w3 outputs before SwiGLU) up to summation order.
#include "cuda/moe/moe_wgmma.cuh"
#include "cuda/moe/moe_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/gemm/gemv_mma.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/gemm/swiglu_element.cuh"
#include "cuda/gemm/tma.cuh"

namespace flashseek::cuda::wgmma_experts {
namespace {

constexpr int kThreads = 128;
constexpr int kCtasPerSm = 3;
constexpr int kStages = 3;
constexpr int kRowBytes = 128;                          // FP4 bytes per weight row per stage: 8 k-steps of 32
constexpr int kRows = 128;                              // two 64-row parts
constexpr int kSteps = kRowBytes / 16;                  // 32-k steps per stage
constexpr int kTileBytes = kSteps * wgmma::kStepBytes;  // B tile bytes per stage
constexpr int kScaleFloats = 2 * 16;                    // 2 blocks of 128 k x 16 columns
// The weights of a stage: four TMA boxes (ExpertTable::w_maps: 64 rows x 64 bytes, one 128-k block, 64-byte
// swizzle), box 2 part + k-block; box_chunk_offset below is the swizzle.
constexpr int kBoxBytes = 64 * 64;
constexpr int kWeightBytes = 4 * kBoxBytes;
constexpr int kWeightScaleBytes = kRows * kSteps;       // the stage's E8M0 weight scales: 8 per row
// Stage layout: weight boxes, then the B tile, its activation scales and the weight rows' scales; stages 1024-byte
// aligned (the swizzle pattern is one of shared addresses, repeating every 512 bytes).
constexpr int kTileOffset = kWeightBytes, kActScaleOffset = kTileOffset + kTileBytes;
constexpr int kWeightScaleOffset = kActScaleOffset + kScaleFloats * 4;
constexpr int kStageBytes = (kWeightScaleOffset + kWeightScaleBytes + 1023) / 1024 * 1024;
constexpr uint32_t kStageBulkTx = kWeightBytes + kTileBytes + kScaleFloats * 4;  // one thread's bulk copies per stage
constexpr size_t kSmemAlign = 1024;  // dynamic shared memory is 16-byte aligned: the kernels round its base up
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + kStages * 8 + kSmemAlign;
static_assert(kBoxBytes % 512 == 0 && kStageBytes % 1024 == 0, "swizzled boxes and stages 512-byte aligned");
// The grouping's 16-token tiles: the tile list, the experts' counts and first slots, the tile memory and its scales.
// pack_tiles_kernel and quantize_h_tiles_kernel write the tiles, the expert kernels read them.
struct TileList {
    const int32_t* tile_expert;
    const int32_t* tile_col;
    const int32_t* n_tiles;
    const int32_t* count;
    const int32_t* offset;
    int max_tiles;  // the grid was sized for this many tiles
    uint8_t* tiles;     // per tile: [K / 32][512] packed activations (the wgmma B tile)
    float* tile_scales; // per tile: [K / 128][16]
    // One token packed ahead of the routing (pack_ahead): every tile's B columns and scales are tile 0's.
    bool one_tile = false;
};
TileList tile_list(const MoeGrouping& g, int max_tiles, bool one_tile = false) {
    return TileList{g.tile_expert, g.tile_col,   g.n_tiles,         g.expert_count, g.expert_offset,
                    max_tiles,     g.act_tiles, g.act_tile_scales, one_tile};
}

#if FS_WGMMA_AVAILABLE
// The tiles of the launch (n_tiles is the grouping's, written on the device: read after pdl_wait).
__device__ __forceinline__ int tile_count(const TileList& t) { return min(*t.n_tiles, t.max_tiles); }
// Tile pos's B tile and its scales, for K weights per row.
__device__ __forceinline__ uint8_t* tile_codes(const TileList& t, int pos, int K) {
    return t.tiles + int64_t(t.one_tile ? 0 : pos) * (K / 32) * wgmma::kStepBytes;
}
__device__ __forceinline__ float* tile_scale_rows(const TileList& t, int pos, int K) {
    return t.tile_scales + int64_t(t.one_tile ? 0 : pos) * (K / 128) * 16;
}
// Column c (0..15) of tile pos: whether a slot of its expert fills it (else its codes are zeros and its scale 0) and
// that slot.
struct TileColumn {
    bool valid;
    int64_t slot;
};
__device__ __forceinline__ TileColumn tile_column(const TileList& t, int pos, int c) {
    const int e = t.tile_expert[pos], col = t.tile_col[pos] + c;
    return TileColumn{col < t.count[e], int64_t(t.offset[e]) + col};
}
// The slots of tile pos: how many of its 16 columns its expert fills, and the first one's slot.
struct TileSlots {
    int count, offset;
};
__device__ __forceinline__ TileSlots tile_slots(const TileList& t, int pos) {
    const int e = t.tile_expert[pos], col0 = t.tile_col[pos];
    return TileSlots{min(16, t.count[e] - col0), t.offset[e] + col0};
}
#endif

struct Args {
    const void* const* w_a;  // up: w1, down: w2 (per expert)
    const void* const* s_a;
    const void* const* w_b;  // up: w3; down: null (part 1 = the next 64 rows of w2)
    const void* const* s_b;
    int N, K;                // rows per expert, weights per row
    TileList t;              // the grouping's tiles of packed activations (the grid was sized for t.max_tiles)
    const float* slot_weight;
    const unsigned char* maps;  // ExpertTable::w_maps: expert e's w1 / w3 / w2 TMA maps at + 384 e, + 128, + 256
    int order;               // warp-specialized kernel: item order (KernelPolicy::moe_wgmma_ws_order, first_item)
    int half_items;          // warp-specialized kernel: items of one 64-row part each (half items, below)
    float* split_partials;
    // The round-robin kernel's split counters; the warp-specialized kernel's dynamic order uses the first two as its
    // next-item and finished-ring counters. Both kernels leave them zero.
    uint32_t* split_counters;
    float limit;
    uint16_t* h;  // up: bf16 [slots, h_ld] (half items: w1's sums, rounded to bf16)
    int64_t h_ld;
    uint16_t* u;  // up with half items: w3's sums rounded to bf16, [slots, h_ld] (the grouping's split scratch)
    float* y;     // down: fp32 [slots, N]
};

struct PackArgs {
    const uint16_t* values;  // prepared FP4-layout activation (e4m3 codes as f16), row stride ld
    const float* scales;     // per-128 scales, row stride sld
    int64_t ld, sld;
    int K;
    const int32_t* slot_token;  // up: activation row of a slot; down: null (row = slot)
    TileList t;
    // One token, packed ahead of the routing (pack_ahead): tile 0 only, its column 0 = the token, the rest zeros;
    // nothing of the grouping is read (it is being written meanwhile).
    bool ahead;
};

// Logical position (in the B tile's k order) of natural position p (0..31) of a 32-weight step: even p belong to
// a0/a1 (k = 4t + j for p = 8t + 2j), odd ones to a2/a3 (k = 16 + 4t + j).
__host__ __device__ constexpr int logical_k(int p) { return (p & 1) * 16 + 4 * (p >> 3) + ((p & 7) >> 1); }

// Grid (tile, range of 32 k-steps): CTAs past the grouping's tile count return at once; 16 threads per column, each
// two 32-k steps of it (both steps' loads in flight together): the step's 32 prepared values (64 contiguous bytes)
// -> 32 e4m3 codes -> the column's two 16-byte runs of the step (logical k 0..15 and 16..31, common/wgmma.cuh
// b_offset). Columns past the expert's count become zeros (scale 0). Why this shape: a warp per (tile, column, 128-k
// block) launched 16 x K / 128 warps per tile of the worst grouping (6,528 CTAs for the up-projection at 16
// sequences: 13-19 us per call, mostly CTAs with nothing to do); one CTA per tile with eight dependent steps per
// thread still took 8.5-11.5 us (docs/perf-log/2026-12-04_expert-pack-and-descriptors.md).
constexpr int kPackThreads = 256;
constexpr int kPackStepsPerThread = 2;
constexpr int kPackStepsPerCta = 16 * kPackStepsPerThread;  // 16 threads per column
constexpr uint32_t kPackEvenSelector = 0x5140, kPackOddSelector = 0x7362;  // __byte_perm selectors below
// The selectors put natural p of each 32-k step at logical_k(p): p = 8t + q is stored at 8t + 2(q & 3) + (q >> 2)
// (prepared_pos), i.e. byte 2(q & 3) + (q >> 2) of the group's two converted words.
constexpr bool pack_order_matches_logical_k() {
    for (int p = 0; p < 32; ++p) {
        const int t = p / 8, q = p % 8, half = q & 1, j = q >> 1;
        const uint32_t sel = half ? kPackOddSelector : kPackEvenSelector;
        if (int((sel >> (4 * j)) & 0xf) != 2 * (q & 3) + (q >> 2)) return false;
        if (16 * half + 4 * t + j != logical_k(p)) return false;
    }
    return true;
}
static_assert(pack_order_matches_logical_k(), "pack_tiles_kernel's byte order is the B tile's k order");
__global__ void __launch_bounds__(kPackThreads) pack_tiles_kernel(const PackArgs a) {
#if FS_WGMMA_AVAILABLE
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int pos = int(blockIdx.x);
    if (!a.ahead && pos >= tile_count(a.t)) return;
    const int c = int(threadIdx.x) / 16, steps = a.K / 32;
    const auto [valid, slot] = a.ahead ? TileColumn{c == 0, 0} : tile_column(a.t, pos, c);
    const int64_t row = !valid ? 0 : a.slot_token ? a.slot_token[slot] : slot;
    const uint16_t* xr = a.values + row * a.ld;
    int s_of[kPackStepsPerThread];
    uint4 v[kPackStepsPerThread][4];  // stored positions 8t .. 8t + 7 (f16) of the step's 8-value groups t
#pragma unroll
    for (int i = 0; i < kPackStepsPerThread; ++i) {
        s_of[i] = int(blockIdx.y) * kPackStepsPerCta + 16 * i + int(threadIdx.x) % 16;
#pragma unroll
        for (int t = 0; t < 4; ++t)
            v[i][t] = valid && s_of[i] < steps ? reinterpret_cast<const uint4*>(xr + s_of[i] * 32)[t]
                                              : make_uint4(0, 0, 0, 0);
    }
    uint8_t* tile = tile_codes(a.t, pos, a.K) + wgmma::b_offset(0, c);
    float* tile_scales = tile_scale_rows(a.t, pos, a.K) + c;
#pragma unroll
    for (int i = 0; i < kPackStepsPerThread; ++i) {
        const int st = s_of[i];
        if (st >= steps) continue;
        // Stored order of an 8-value group of the prepared FP4 layout (mma_core.cuh prepared_pos): naturals
        // 0 4 1 5 2 6 3 7. Even naturals 2j of group t go to logical 4t + j, odd ones to 16 + 4t + j.
        uint4 lo, hi;  // logical k 0..15 / 16..31 of the step
        uint32_t* l = &lo.x;
        uint32_t* h = &hi.x;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const uint32_t w01 = bulk::f16x2_to_e4m3x2(v[i][t].x) | bulk::f16x2_to_e4m3x2(v[i][t].y) << 16;
            const uint32_t w23 = bulk::f16x2_to_e4m3x2(v[i][t].z) | bulk::f16x2_to_e4m3x2(v[i][t].w) << 16;
            l[t] = __byte_perm(w01, w23, kPackEvenSelector);  // naturals 0 2 4 6 (w01: 0 4 1 5, w23: 2 6 3 7)
            h[t] = __byte_perm(w01, w23, kPackOddSelector);   // naturals 1 3 5 7
        }
        uint8_t* dst = tile + int64_t(st) * wgmma::kStepBytes;
        *reinterpret_cast<uint4*>(dst) = lo;  // zeros for a column past the count (f16 zeros convert to 0x00)
        *reinterpret_cast<uint4*>(dst + wgmma::b_offset(16, 0)) = hi;
        if (st % 4 == 0) tile_scales[(st / 4) * 16] = valid ? a.scales[row * a.sld + st / 4] : 0.f;
    }
#else
    __trap();  // launched only beside wgmma_expert_kernel
#endif
}

// The down-projection's input in one pass after the up-projection (replacing gemv_experts::quantize_h and the
// down-projection's pack_tiles_kernel, one launch fewer per layer). A valid column's slot row of h (bf16, natural
// order) is quantized per 128-block as quantize_h_kernel does (gemm/prepare_block.cuh: the block's power-of-two
// scale from its absolute maximum, e4m3 codes) and written both ways: in place as the prepared h (FP4 layout, any
// down-projection variant reads it) and as the tile's B columns and scale, the bytes pack_tiles_kernel makes of that
// prepared h. Columns past the expert's count: zero codes and scale 0, h untouched. Rows of h no tile lists (past the
// grouped slots) are left alone, as quantize_h leaves them.
// Grid (tile, kHTileBlocks 128-blocks), a half warp per column, lane j of the half holding naturals 8j..8j+7 of each
// block (one 16-byte load and store: it reads and writes only its own bytes of h, so in place is safe): the block's
// maximum is a 4-step shuffle of the half. Why: with a thread per (column, block) looping over the block's 128
// values the kernel added ~7.6 us per layer to a one-sequence step (CUPTI timeline, charged time) where it moves
// a few KB; the values and order of every code are the same (a maximum is exact in any order).
// With half items the up-projection leaves w1's and w3's sums (bf16) in h and u instead of h: h is SwiGLU'd here
// first, the epilogue's swiglu_bf16 on the same bf16 values (its rounding of the sums is exact on them): the same bits.
struct HTileArgs {
    uint16_t* h;       // [slots, h_ld] bf16 in (half items: w1's sums), prepared values out
    float* h_scales;   // [slots, h_ld / 128]
    int64_t h_ld;
    int K;             // inter (a multiple of 256)
    TileList t;
    const uint16_t* u;          // half items: w3's sums, [slots, h_ld]; else null
    const float* slot_weight;   // half items: the slots' routing weights
    float limit;
};
constexpr int kHTileThreads = 256;  // 16 half warps: one per column of the tile
// 128-blocks per CTA (their loads in flight together): 4, or 1 after half items, whose SwiGLU (an expf and a division
// per value) then spreads over four times the CTAs instead of lengthening each thread's chain.
constexpr int kHTileBlocks = 4, kHTileBlocksSwiglu = 1;
template <int kHTileBlocks>
__global__ void __launch_bounds__(kHTileThreads) quantize_h_tiles_kernel(const HTileArgs a) {
#if FS_WGMMA_AVAILABLE
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int pos = int(blockIdx.x);
    if (pos >= tile_count(a.t)) return;
    const int lane = int(threadIdx.x) & 31, c = int(threadIdx.x) / 16, j = lane & 15, n_blk = a.K / 128;
    const int blk0 = int(blockIdx.y) * kHTileBlocks;
    const auto [valid, slot] = tile_column(a.t, pos, c);
    uint8_t* const tile = tile_codes(a.t, pos, a.K) + wgmma::b_offset(0, c);
    float* const tile_scales = tile_scale_rows(a.t, pos, a.K) + c;
    uint16_t* const row = a.h + slot * a.h_ld;
    uint4 raw[kHTileBlocks];  // naturals 8j..8j+7 of each block (all loads in flight before any use)
#pragma unroll
    for (int b = 0; b < kHTileBlocks; ++b)
        raw[b] = valid && blk0 + b < n_blk ? reinterpret_cast<const uint4*>(row + (blk0 + b) * 128)[j]
                                           : make_uint4(0, 0, 0, 0);
    if (a.u != nullptr && valid) {  // half items: raw holds w1's sums; h = SwiGLU(w1, w3) x the slot's weight
        const uint16_t* const urow = a.u + slot * a.h_ld;
        uint4 ur[kHTileBlocks];
#pragma unroll
        for (int b = 0; b < kHTileBlocks; ++b)
            ur[b] = blk0 + b < n_blk ? reinterpret_cast<const uint4*>(urow + (blk0 + b) * 128)[j]
                                     : make_uint4(0, 0, 0, 0);
        const float w = a.slot_weight[slot];
#pragma unroll
        for (int b = 0; b < kHTileBlocks; ++b) {
            uint32_t* const r = &raw[b].x;
            const uint32_t* const uu = &ur[b].x;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t lo = swiglu_bf16(bf16_bits_to_f32(uint16_t(r[i] & 0xffffu)),
                                                bf16_bits_to_f32(uint16_t(uu[i] & 0xffffu)), w, a.limit);
                const uint32_t hi = swiglu_bf16(bf16_bits_to_f32(uint16_t(r[i] >> 16)),
                                                bf16_bits_to_f32(uint16_t(uu[i] >> 16)), w, a.limit);
                r[i] = lo | hi << 16;
            }
        }
    }
#pragma unroll
    for (int b = 0; b < kHTileBlocks; ++b) {
        const int blk = blk0 + b;
        if (blk >= n_blk) break;  // uniform across the CTA
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t w = (&raw[b].x)[i / 2];
            v[i] = bf16_bits_to_f32(uint16_t(i % 2 ? w >> 16 : w & 0xffffu));
        }
        const float sc = prepared_block_scale(half_warp_amax8(v, lane), int(ActNumerics::FP8_BLOCK128)), inv = 1.f / sc;
        uint32_t code[8];
        uint16_t prepared[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const __nv_fp8_storage_t q = prepared_e4m3(v[i], inv);
            code[i] = uint32_t(q);
            prepared[mma::prepared_pos(WeightKind::FP4_BLOCK32, i)] = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3).x;
        }
        // Group j is 8-weight group j % 4 of the block's 32-k step j / 4: its even naturals are word j % 4 of the
        // step's logical k 0..15, its odd ones word j % 4 of k 16..31 (common/wgmma.cuh b_offset).
        const uint32_t lo = valid ? code[0] | code[2] << 8 | code[4] << 16 | code[6] << 24 : 0u;
        const uint32_t hi = valid ? code[1] | code[3] << 8 | code[5] << 16 | code[7] << 24 : 0u;
        uint8_t* const dst = tile + int64_t(blk * 4 + j / 4) * wgmma::kStepBytes + 4 * (j % 4);
        *reinterpret_cast<uint32_t*>(dst) = lo;
        *reinterpret_cast<uint32_t*>(dst + wgmma::b_offset(16, 0)) = hi;
        if (valid)
            reinterpret_cast<uint4*>(row + blk * 128)[j] =
                make_uint4(uint32_t(prepared[0]) | uint32_t(prepared[1]) << 16,
                           uint32_t(prepared[2]) | uint32_t(prepared[3]) << 16,
                           uint32_t(prepared[4]) | uint32_t(prepared[5]) << 16,
                           uint32_t(prepared[6]) | uint32_t(prepared[7]) << 16);
        if (j == 0) {
            tile_scales[blk * 16] = valid ? sc : 0.f;
            if (valid) a.h_scales[slot * (a.h_ld / 128) + blk] = sc;
        }
    }
#else
    __trap();  // launched only beside wgmma_expert_kernel
#endif
}

#if FS_WGMMA_AVAILABLE
using namespace bulk;

// Byte j (0..3) of w as an E8M0 scale times 2^6 (FP4 read as e4m3 is value x 2^-6).
__device__ __forceinline__ float e8m0_byte_times_64(uint32_t w, int j) {
    return __uint_as_float(__byte_perm(w, 0u, 0x4440u | uint32_t(j)) * (1u << 23) + (6u << 23));
}

// Converted A fragments and results of one 128-k block of one part (four 32-k steps), N token columns.
template <int N>
struct Block {
    uint32_t a[4][4];
    float d[4][N / 2];
};

// Byte offset of 16-byte chunk c (one 32-k step) of row r (0..63) in a weight box: the TMA's 64-byte swizzle rotates
// a row's four chunks by (r / 2) % 4, so the eight rows g = 0..7 a warp reads at once (rows 16w + g and + 8) fall on
// eight different (row parity, chunk) pairs: 32 banks.
__device__ __forceinline__ int box_chunk_offset(int r, int c) { return 64 * r + 16 * (c ^ ((r >> 1) & 3)); }

// Converts the part's rows (16w + g, + 8) of steps 4b..4b+3 from the stage and issues their four wgmmas.
template <int N>
__device__ __forceinline__ void issue_block(Block<N>& k, const unsigned char* sw, uint64_t tile_desc, int part, int b,
                                            int warp, int g, int t) {
    const unsigned char* box = sw + (2 * part + b) * kBoxBytes + 4 * t;
    const int r = 16 * warp + g;  // row r + 8 has the same rotation
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        fp4x8_to_e4m3(*reinterpret_cast<const uint32_t*>(box + box_chunk_offset(r, q)), k.a[q][0], k.a[q][2]);
        fp4x8_to_e4m3(*reinterpret_cast<const uint32_t*>(box + box_chunk_offset(r + 8, q)), k.a[q][1], k.a[q][3]);
    }
    wgmma::fence();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const uint64_t desc = wgmma::advance(tile_desc, uint32_t(4 * b + q) * wgmma::kStepBytes);
        if constexpr (N == 16)
            wgmma::mma_n16(k.d[q], k.a[q], desc);
        else
            wgmma::mma_n8(k.d[q], k.a[q], desc);
    }
    wgmma::commit();
}

// After the block's wgmmas completed: acc += (sum over steps of d x weight scale) x activation scale.
template <int N>
__device__ __forceinline__ void finish_block(Block<N>& k, float (&acc)[8], uint2 ws_lo, uint2 ws_hi, const float* ss,
                                             int b, int t) {
    constexpr int J = N / 2;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
        for (int j = 0; j < J; ++j) wgmma::fence_operand(k.d[q][j]);
#pragma unroll
        for (int j = 0; j < 4; ++j) wgmma::fence_operand(k.a[q][j]);
    }
    const uint32_t wl = b == 0 ? ws_lo.x : ws_lo.y, wh = b == 0 ? ws_hi.x : ws_hi.y;
    float part[J];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float sl = e8m0_byte_times_64(wl, q), sh = e8m0_byte_times_64(wh, q);
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const float s = (j & 2) ? sh : sl;
            part[j] = q == 0 ? k.d[q][j] * s : fmaf(k.d[q][j], s, part[j]);
        }
    }
    const float2 c0 = *reinterpret_cast<const float2*>(ss + b * 16 + 2 * t);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] = fmaf(part[j], (j & 1) ? c0.y : c0.x, acc[j]);
    if constexpr (N == 16) {
        const float2 c1 = *reinterpret_cast<const float2*>(ss + b * 16 + 8 + 2 * t);
#pragma unroll
        for (int j = 4; j < 8; ++j) acc[j] = fmaf(part[j], (j & 1) ? c1.y : c1.x, acc[j]);
    }
}

// What a landed stage gives its consumer besides the weights: the B tile's descriptor, the activation scales and this
// thread's rows' weight scales (stage rows 64p + 16 warp + g and + 8, 8 E8M0 bytes each).
struct StageView {
    uint64_t desc;     // once per stage: the 16 wgmmas add constants
    const float* ss;
    uint2 ws[2][2];    // [part][row g / g + 8]
};
__device__ __forceinline__ StageView view_stage(const unsigned char* stage, int warp, int g) {
    StageView v;
    const unsigned char* sws = stage + kWeightScaleOffset + (16 * warp + g) * 8;
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int h = 0; h < 2; ++h) v.ws[p][h] = *reinterpret_cast<const uint2*>(sws + (64 * p + 8 * h) * 8);
    v.desc = wgmma::b_descriptor(smem_u32(stage + kTileOffset));
    v.ss = reinterpret_cast<const float*>(stage + kActScaleOffset);
    return v;
}

// One stage's four blocks (part, 128-k block), one in flight while the next is converted and issued; the last waited
// for here.
template <int N>
__device__ __forceinline__ void run_stage(float (&acc)[2][8], const unsigned char* stage, const StageView& v,
                                          int warp, int g, int t) {
    Block<N> blk[2];
    issue_block<N>(blk[0], stage, v.desc, 0, 0, warp, g, t);
    issue_block<N>(blk[1], stage, v.desc, 0, 1, warp, g, t);
    wgmma::wait<1>();
    finish_block<N>(blk[0], acc[0], v.ws[0][0], v.ws[0][1], v.ss, 0, t);
    issue_block<N>(blk[0], stage, v.desc, 1, 0, warp, g, t);
    wgmma::wait<1>();
    finish_block<N>(blk[1], acc[0], v.ws[0][0], v.ws[0][1], v.ss, 1, t);
    issue_block<N>(blk[1], stage, v.desc, 1, 1, warp, g, t);
    wgmma::wait<1>();
    finish_block<N>(blk[0], acc[1], v.ws[1][0], v.ws[1][1], v.ss, 0, t);
    wgmma::wait<0>();
    finish_block<N>(blk[1], acc[1], v.ws[1][0], v.ws[1][1], v.ss, 1, t);
}

// A half item's stage (one part, in part 0's boxes and scale rows): its two blocks into acc, in run_stage's order for
// that part (block 0, then block 1), so every sum sees the same operations.
template <int N>
__device__ __forceinline__ void run_half_stage(float (&acc)[8], const unsigned char* stage, const StageView& v,
                                               int warp, int g, int t) {
    Block<N> blk[2];
    issue_block<N>(blk[0], stage, v.desc, 0, 0, warp, g, t);
    issue_block<N>(blk[1], stage, v.desc, 0, 1, warp, g, t);
    wgmma::wait<1>();
    finish_block<N>(blk[0], acc, v.ws[0][0], v.ws[0][1], v.ss, 0, t);
    wgmma::wait<0>();
    finish_block<N>(blk[1], acc, v.ws[0][0], v.ws[0][1], v.ss, 1, t);
}
// run_stage, or run_half_stage into acc[0] (HALF).
template <int N, bool HALF>
__device__ __forceinline__ void run_any_stage(float (&acc)[2][8], const unsigned char* stage, const StageView& v,
                                              int warp, int g, int t) {
    if constexpr (HALF)
        run_half_stage<N>(acc[0], stage, v, warp, g, t);
    else
        run_stage<N>(acc, stage, v, warp, g, t);
}

// Where an item's weights come from: the TMA maps of its two parts and their first rows (up: w1 and w3 at the
// item's row; down: w2 at the item's row and 64 below).
struct ItemMaps {
    const void* map[2];
    int row[2];
};
__device__ __forceinline__ ItemMaps item_maps(const unsigned char* maps, bool up, int e, int row0) {
    const unsigned char* m = maps + 384 * int64_t(e);
    ItemMaps im;
    im.map[0] = up ? m : m + 256;
    im.map[1] = up ? m + 128 : m + 256;
    im.row[0] = row0;
    im.row[1] = up ? row0 : row0 + 64;
    return im;
}

// One thread's part of filling a stage: arms its barrier for the bulk bytes and copies stage `chunk`'s weights (four
// TMA boxes), B tile and activation scales. Why TMA: with one 16-byte cp.async per row piece (1,024 per stage,
// through the load/store unit) the kernel streamed ~3 TB/s; the grouped expert GEMM measured the same path at 40% of
// its time (moe_gemm_sm90.cu).
// In two pieces for the warp-specialized kernel, which streams whole or half items: the weight boxes (with the
// barrier armed for the whole stage; half: a half item's, the part in im's entry 0 into part 0's boxes) and the
// activation part.
__device__ __forceinline__ void copy_stage_weights(unsigned char* stage, uint64_t* bar, const ItemMaps& im, int chunk,
                                                   bool half = false) {
    constexpr uint32_t kHalfStageBulkTx = kStageBulkTx - 2 * kBoxBytes;  // a half item's stage: one part's two boxes
    mbar_expect_tx(bar, half ? kHalfStageBulkTx : kStageBulkTx);
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int b = 0; b < 2; ++b)
            if (!half || p == 0)
                tma::load_2d(stage + (2 * p + b) * kBoxBytes, im.map[p], chunk * kRowBytes + 64 * b, im.row[p], bar);
}
__device__ __forceinline__ void copy_stage_activations(unsigned char* stage, uint64_t* bar, const uint8_t* tiles,
                                                       const float* scales, int chunk) {
    copy_g2s(stage + kTileOffset, tiles + int64_t(chunk) * kTileBytes, kTileBytes, bar);
    copy_g2s(stage + kActScaleOffset, scales + 2 * chunk * 16, kScaleFloats * 4, bar);
}
__device__ __forceinline__ void copy_stage_bulk(unsigned char* stage, uint64_t* bar, const ItemMaps& im,
                                                const uint8_t* tiles, const float* scales, int chunk) {
    copy_stage_weights(stage, bar, im, chunk);
    copy_stage_activations(stage, bar, tiles, scales, chunk);
}

// One landed stage into an item's sums: the stage's four blocks (HALF: a half item's two, into acc[0]) with N = 8
// token columns where the item has at most 8 tokens (most experts at decode: half the tensor work, results and scale
// arithmetic), else 16.
template <bool HALF = false>
__device__ __forceinline__ void consume_stage(float (&acc)[2][8], const unsigned char* stage, int count, int warp,
                                              int g, int t) {
    const StageView v = view_stage(stage, warp, g);
    if (count <= 8)
        run_any_stage<8, HALF>(acc, stage, v, warp, g, t);
    else
        run_any_stage<16, HALF>(acc, stage, v, warp, g, t);
}
#endif

// An item's results: this thread's rows row0 (= item row + 16 warp + g) and row0 + 8 of both parts for its token
// columns below `count` (columns 8-15 hold nothing when the N = 8 stage ran: count <= 8); up: SwiGLU(w1, w3) times
// the slot's routing weight as bf16 h, down: the two 64-row parts of y. A half item (part 0 / 1 of its whole item,
// its sums in acc[0]): up: w1's (part 0, into h) or w3's (part 1, into u) sums rounded to bf16 as swiglu_bf16 rounds
// them, SwiGLU'd by quantize_h_tiles_kernel; down: y's rows of that part.
template <bool UP>
__device__ __forceinline__ void store_item(const Args& a, const float (&acc)[2][8], int row0, int count, int offset,
                                           int t, int half_part = -1) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int c = (j >> 2) * 8 + 2 * t + (j & 1);
        if (c >= count) continue;
        const int64_t slot = offset + c;
        const int row = row0 + ((j & 2) ? 8 : 0);
        if constexpr (UP) {
            if (half_part < 0)
                a.h[slot * a.h_ld + row] = swiglu_bf16(acc[0][j], acc[1][j], a.slot_weight[slot], a.limit);
            else
                (half_part ? a.u : a.h)[slot * a.h_ld + row] = f32_to_bf16_bits_rn(acc[0][j]);
        } else if (half_part < 0) {
            a.y[slot * a.N + row] = acc[0][j];
            a.y[slot * a.N + row + 64] = acc[1][j];
        } else {
            a.y[slot * a.N + row + 64 * half_part] = acc[0][j];
        }
    }
}

// The items of a call: kItemRows weight rows (up: 64 of w1 and the same 64 of w3; down: 128 of w2) times one 16-token
// tile, each `chunks` stages of 256 k. The tile count is the grouping's: built after pdl_wait.
#if FS_WGMMA_AVAILABLE
template <bool UP>
struct ItemSpace {
    static constexpr int kItemRows = UP ? 64 : 128;
    int tiles, n_items, chunks;
    __device__ __forceinline__ explicit ItemSpace(const Args& a)
        : tiles(a.N / kItemRows), n_items(tile_count(a.t) * tiles), chunks(a.K / 256) {}
};
#endif

// BAL: balanced contiguous stage ranges (header); else whole items round robin (item i on CTA i mod grid, no split
// items).
template <bool UP, bool BAL>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) wgmma_expert_kernel(const Args a) {
#if FS_WGMMA_AVAILABLE
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* const smem = smem_raw + ((kSmemAlign - (smem_u32(smem_raw) & (kSmemAlign - 1))) & (kSmemAlign - 1));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
    pdl_trigger();
    uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * kStageBytes);
    if (tid < kStages) mbar_init_count(&bars[tid], 1 + kThreads);  // thread 0's expect_tx + one cp.async per thread
    mbar_init_fence();
    __syncthreads();
    pdl_wait();

    const ItemSpace<UP> items(a);
    // BAL: this CTA's contiguous range [q0, q0 + total) of the global stage sequence (item-major); CTAs past `used`
    // idle (each used range holds >= chunks stages, so an item meets at most two CTAs). Round robin: items
    // blockIdx.x, + gridDim.x, ... whole. Either way the CTA's items advance by `step` from first_item, whose
    // stages start at first_chunk.
    int total, first_item, first_chunk, step;
    if constexpr (BAL) {
        const int64_t all_stages = int64_t(items.n_items) * items.chunks;
        const int used = int(min(int64_t(gridDim.x), all_stages / items.chunks));
        const int64_t q0 = int(blockIdx.x) < used ? all_stages * blockIdx.x / used : 0;
        total = int(blockIdx.x) < used ? int(all_stages * (blockIdx.x + 1) / used - q0) : 0;
        first_item = int(q0 / items.chunks);
        first_chunk = int(q0 % items.chunks);
        step = 1;
    } else {
        total = int(blockIdx.x) < items.n_items
                    ? ((items.n_items - 1 - int(blockIdx.x)) / int(gridDim.x) + 1) * items.chunks
                    : 0;
        first_item = int(blockIdx.x);
        first_chunk = 0;
        step = int(gridDim.x);
    }
    const int s_ld = a.K / 32;

    // Producer cursor: thread 0 copies a stage's weight boxes, B tile and activation scales and arms the barrier;
    // thread i copies stage row i's weight scales. Pointers are looked up once per item (dependent loads of the active
    // list and the pointer tables would otherwise stall every stage).
    int f_item = first_item, f_chunk = first_chunk - 1;  // (first_item / first_chunk die here: registers)
    ItemMaps f_maps{};
    const uint8_t* f_tile = nullptr;
    const float* f_ts = nullptr;
    const uint8_t* f_scale = nullptr;  // this thread's scale row (stage row tid)
    auto f_lookup = [&]() {
        const int pos = f_item / items.tiles, e = a.t.tile_expert[pos];
        const int row0 = (f_item % items.tiles) * items.kItemRows;
        if (tid == 0) f_maps = item_maps(a.maps, UP, e, row0);
        // Scale row `tid` of the stage (part tid / 64): each stage copies 8 bytes of it; the whole row goes to L2
        // now, so the stages after the first read L2.
        const int64_t row = UP ? row0 + (tid & 63) : row0 + tid;
        f_scale = static_cast<const uint8_t*>(UP && tid >= 64 ? a.s_b[e] : a.s_a[e]) + row * s_ld;
        prefetch_l2(f_scale, uint32_t(s_ld));
        f_tile = tile_codes(a.t, pos, a.K);
        f_ts = tile_scale_rows(a.t, pos, a.K);
    };
    if (total > 0) f_lookup();
    auto fill = [&](int q) {
        if (++f_chunk >= items.chunks) {
            f_chunk = 0;
            f_item += step;
            f_lookup();
        }
        const int st = q % kStages;
        unsigned char* stage = smem + size_t(st) * kStageBytes;
        if (tid == 0) copy_stage_bulk(stage, &bars[st], f_maps, f_tile, f_ts, f_chunk);
        // Stage row tid's 8 weight scales ride with the stage (tracked by its mbarrier like the weights): the
        // consumer reads them from shared memory instead of waiting on a global load a stage is shorter than.
        cp_async_ca<8>(stage + kWeightScaleOffset + tid * 8, f_scale + f_chunk * 8);
        cp_async_mbar_arrive(&bars[st]);
    };
    for (int q = 0; q < kStages - 1 && q < total; ++q) fill(q);

    float acc[2][8];
    __shared__ int split_last;
    int item = first_item - step, count = 0, offset = 0, e_row0 = 0;
    int chunk = first_chunk - 1;  // advanced per stage without a division (this kernel is issue-bound)
    for (int q = 0; q < total; ++q) {
        if (++chunk >= items.chunks) chunk = 0;
        if (chunk == 0 || q == 0) {
            item += step;
            const TileSlots ts = tile_slots(a.t, item / items.tiles);
            count = ts.count;
            offset = ts.offset;
            e_row0 = (item % items.tiles) * items.kItemRows + 16 * warp + g;
#pragma unroll
            for (int p = 0; p < 2; ++p)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[p][j] = 0.f;
        }
        if (q + kStages - 1 < total) {
            __syncthreads();  // every thread is done with the stage refilled now (consumed at q - 1, wgmmas waited)
            fence_proxy_async();
            fill(q + kStages - 1);
        }
        const int st = q % kStages;
        const unsigned char* stage = smem + size_t(st) * kStageBytes;
        mbar_wait(&bars[st], uint32_t((q / kStages) & 1));
        consume_stage(acc, stage, count, warp, g, t);

        const bool piece_end = q == total - 1 && chunk != items.chunks - 1;  // the item goes on in the next CTA
        const bool piece_start = q - chunk < 0;                         // ... began in the previous one
        if (chunk == items.chunks - 1 || piece_end) {
            if (piece_end || piece_start) {
                // Split item: both pieces' sums meet in the scratch slot of their boundary (the higher CTA's index);
                // the second to arrive adds them, lower CTA's piece first, and runs the epilogue.
                const int side = piece_end ? 0 : 1;
                const int boundary = int(blockIdx.x) + (piece_end ? 1 : 0);
                float* slot = a.split_partials + int64_t(boundary) * kSplitFloatsPerSlot;
                float* mine = slot + (side * kThreads + tid) * 16;
#pragma unroll
                for (int p = 0; p < 2; ++p)
#pragma unroll
                    for (int j = 0; j < 8; ++j) mine[p * 8 + j] = acc[p][j];
                __threadfence();
                __syncthreads();
                if (tid == 0) {
                    const uint32_t before = atomicAdd(&a.split_counters[boundary], 1u);
                    split_last = before == 1;
                    if (before == 1) a.split_counters[boundary] = 0;  // left zero for the next launch
                }
                __syncthreads();
                if (!split_last) continue;
                __threadfence();
                const float* lo = slot + tid * 16;  // side 0 (lower CTA)
                const float* hi = slot + (kThreads + tid) * 16;
#pragma unroll
                for (int p = 0; p < 2; ++p)
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[p][j] = __ldcg(lo + p * 8 + j) + __ldcg(hi + p * 8 + j);
            }
            store_item<UP>(a, acc, e_row0, count, offset, t);
        }
    }
#else
    __trap();
#endif
}

// The warp-specialized form (KernelPolicy::moe_wgmma_specialized): one CTA per SM, warpgroup 0 copies, warpgroups
// 1..kMathGroups compute. Item orders (KernelPolicy::moe_wgmma_ws_order; by default dynamic from 32 tokens, SM-major
// below): SM-major, math warpgroup m taking items blockIdx.x + gridDim.x * (m - 1) + k * gridDim.x * kMathGroups
// (first_item), so the SMs' item counts differ by at most one; or dynamic, each ring taking the next item from a
// counter of the launch when it starts one, so a ring whose CTA started late (its SM held by a side branch's kernel)
// or runs slow takes fewer (1.4% faster steps at 64-128 sequences, 8% slower at 2, where the rings that start first
// take the few items twice). The copy warp publishes each stage's item in shared memory with the stage
// (stage_items: -1 ends the ring), so the math warpgroup follows whatever order. Slot-major (CTA b's rings taking
// items 3b, 3b + 1, 3b + 2, as the round-robin kernel's CTAs do) gave the first SMs three items more than the last
// ones at 2,528 items (16 sequences: 21 against 18). Every item is computed whole by one warpgroup with the
// round-robin kernel's arithmetic, wherever it runs: the same bits. Each math warpgroup has its own ring of kStages
// stages (the stage layout above), filled by warp m - 1 of the copy warpgroup (lane 0 the weight boxes, the B tile
// and its scales, every lane 4 scale rows) and freed through the ring's `empty` mbarrier (one arrival per math warp)
// instead of a CTA barrier. Why: in the round-robin kernel every warp both copies and computes (~110 of ~575
// instructions per stage are the copies and the loop) and the kernel is latency-bound at three warps per scheduler
// with the register file full (docs/perf-log/2026-12-04_expert-stage-scales.md); here the math warps issue only
// conversions, wgmma and scale arithmetic, and the copy warpgroup gives its registers to them (setmaxnreg).
// compute-sanitizer: memcheck clean; racecheck reports each refill of a stage after its math warps released it
// (their reads -> `empty` arrival -> the copy warp's wait -> its copies) as hazards: it does not follow mbarrier
// phases (grouped_gemm's note says the same); the round-robin kernel, whose refills follow a CTA barrier, reports
// none, and the expert family test checks the two kernels bit for bit.
// NAMED (KernelPolicy::moe_wgmma_specialized = 2, the default): the release goes through a named barrier per ring
// stage instead (release_barrier: the math warpgroup's 128 threads bar.arrive, the copy warp bar.sync, 160 in all),
// the ordering racecheck follows as it does the round-robin kernel's CTA barrier (run 216: no hazard in the
// expert family test with the racecheck restricted to this form; the mbarrier form reports its releases). 0.5-1.4%
// faster steps at 8-256 sequences. Each consumption is one barrier generation:
// the copy warp syncs once per stage it consumed-and-refills and once for each of the last kStages consumptions
// after its last fill, so every generation completes before the CTA exits. A stage's next arrival needs the stage
// refilled, i.e. the copy warp past the previous generation: generations never overlap.
// Half items (Args::half_items): where a call has fewer whole items than rings (one and two tokens at V4's shapes:
// 192 up items for 396 rings at one token), most rings idle and each busy one runs its item's 16 stages at one math
// warpgroup's pace. A half item is one 64-row part of a whole item (item 2i + p: part p of whole item i), streamed
// into part 0's boxes and scale rows of each stage (half the weight bytes per stage), so twice as many rings compute,
// each half the work per stage (one sequence: the up-projection 5.7 us shorter per layer, the step -2.6%;
// docs/perf-log/2026-12-06_expert-half-items.md). Every sum sees the same operations in the same order as in a whole
// item (run_half_stage is run_stage's part 0 / part 1 sequence), so the bits do not change. SwiGLU needs both parts
// of a row: the up-projection then stores w1's and w3's sums rounded to bf16 (swiglu_bf16 rounds them so first) into
// h and u, and quantize_h_tiles_kernel applies swiglu_bf16 to them before quantizing.
constexpr int kMathGroups = 3;
constexpr int kWsThreads = 128 * (1 + kMathGroups);
constexpr int kCopyRegs = 56, kMathRegs = 152;  // 128 x 56 + 384 x 152 = 65,536 (the math warps spill at 144)
constexpr size_t kWsRingBytes = size_t(kStages) * kStageBytes;
// What the copy warp publishes with an item's first stage: the item (-1 after a ring's last), its token count and
// first slot (looked up by the copy warp before the stage was free, not by the math warps after it landed).
struct StageItem {
    int item, count, offset, pad;
};
// After the rings: the full and empty mbarriers, then each stage's StageItem.
constexpr size_t kWsSmemBytes =
    size_t(kMathGroups) * kWsRingBytes + size_t(kMathGroups) * kStages * (2 * 8 + sizeof(StageItem)) + kSmemAlign;
static_assert(kWsSmemBytes <= 227 * 1024, "the warp-specialized kernel's shared memory fits an SM");

// Named barrier of ring `ring`'s stage `st`: 1 + ring * kStages + st (barrier 0 is __syncthreads'), 160 threads.
constexpr int kReleaseThreads = 128 + 32;
static_assert(1 + kMathGroups * kStages <= 16, "named barriers per CTA");
__device__ __forceinline__ uint32_t release_barrier(int ring, int st) { return uint32_t(1 + ring * kStages + st); }
__device__ __forceinline__ void release_arrive(uint32_t id) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "n"(kReleaseThreads) : "memory");
}
__device__ __forceinline__ void release_wait(uint32_t id) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kReleaseThreads) : "memory");
}

// Ring `ring`'s first item in the static orders (KernelPolicy::moe_wgmma_ws_order 0: SM-major; 1: the round-robin
// kernel's slot order); its next ones follow every gridDim.x * kMathGroups.
__device__ __forceinline__ int first_item(int ring, int order) {
    return order == 1 ? int(blockIdx.x) * kMathGroups + ring : int(blockIdx.x) + int(gridDim.x) * ring;
}

template <bool UP, bool NAMED>
__global__ void __launch_bounds__(kWsThreads, 1) wgmma_expert_ws_kernel(const Args a) {
#if FS_WGMMA_AVAILABLE
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* const smem = smem_raw + ((kSmemAlign - (smem_u32(smem_raw) & (kSmemAlign - 1))) & (kSmemAlign - 1));
    const int tid = threadIdx.x, group = tid / 128;
    pdl_trigger();
    uint64_t* const full = reinterpret_cast<uint64_t*>(smem + size_t(kMathGroups) * kWsRingBytes);
    uint64_t* const empty = full + kMathGroups * kStages;
    StageItem* const stage_items = reinterpret_cast<StageItem*>(empty + kMathGroups * kStages);
    if (tid < kMathGroups * kStages) {
        mbar_init_count(&full[tid], 1 + 32);  // lane 0's expect_tx + one cp.async arrival per lane of the copy warp
        if (!NAMED) mbar_init_count(&empty[tid], 4);  // one arrival per math warp (NAMED: named barriers instead)
    }
    mbar_init_fence();
    __syncthreads();
    pdl_wait();

    const ItemSpace<UP> items(a);
    const int slots = int(gridDim.x) * kMathGroups;
    const int s_ld = a.K / 32;
    const bool half = a.half_items != 0;
    const int n_ring_items = half ? 2 * items.n_items : items.n_items;  // the items the rings take (half items above)
    auto whole_of = [half](int item) { return half ? item >> 1 : item; };  // a ring item's whole item

    if (group == 0) {
        tma::release_registers<kCopyRegs>();
        const int ring = tid / 32, lane = tid & 31;
        if (ring >= kMathGroups) return;
        unsigned char* const base = smem + size_t(ring) * kWsRingBytes;
        uint64_t* const f = full + ring * kStages;
        uint64_t* const em = empty + ring * kStages;
        StageItem* const stage_item = stage_items + ring * kStages;
        // Lane 0: the weight boxes (TMA), the B tile and its scales; every lane: scale rows lane + 32j (j = 0..3,
        // part j / 2; a half item: j = 0, 1 of its part, into part 0's places). The ring's items: the static orders'
        // sequence, or (order 2) the next one from the launch's counter, each fetched one item ahead (its maps
        // prefetched meanwhile).
        int k = 0;
        auto fetch = [&]() {
            if (a.order == 2) {
                int v = 0;
                if (lane == 0) v = int(atomicAdd(a.split_counters, 1u));
                return __shfl_sync(0xffffffffu, v, 0);
            }
            return first_item(ring, a.order) + (k++) * slots;
        };
        auto wait_free = [&](int q) {  // stage q % kStages free again: its previous use released
            if (q < kStages) return;
            if constexpr (NAMED)
                release_wait(release_barrier(ring, q % kStages));
            else
                mbar_wait(&em[q % kStages], uint32_t((q / kStages - 1) & 1));
        };
        // Where an item's stages come from (looked up before its first stage is free: the lookups overlap the wait).
        struct ItemSource {
            ItemMaps im;           // a half item: its part's map and row in entry 0
            StageItem published;
            const uint8_t* sc[2];  // this lane's scale rows of the two parts (a half item: its part in entry 0)
            const uint8_t* b_tile;
            const float* b_scales;
        };
        auto source = [&](int item) {
            ItemSource s;
            const int whole = whole_of(item), part = item & 1;
            const int pos = whole / items.tiles, e = a.t.tile_expert[pos];
            const int row0 = (whole % items.tiles) * items.kItemRows;
            s.im = item_maps(a.maps, UP, e, row0);
            const TileSlots ts = tile_slots(a.t, pos);
            s.published = StageItem{item, ts.count, ts.offset, 0};
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int r = row0 + (UP ? 0 : 64 * p);
                s.sc[p] = static_cast<const uint8_t*>(UP && p ? a.s_b[e] : a.s_a[e]) + int64_t(r + lane) * s_ld;
            }
            if (half && part) {
                s.im.map[0] = s.im.map[1];
                s.im.row[0] = s.im.row[1];
                s.sc[0] = s.sc[1];
            }
            s.b_tile = tile_codes(a.t, pos, a.K);
            s.b_scales = tile_scale_rows(a.t, pos, a.K);
            return s;
        };
        // The weight part of stage `st` (chunk `chunk` of the item): lane 0 publishes the item with its first stage
        // (released by its expect_tx arrival) and requests the boxes, every lane its scale rows.
        auto copy_weights = [&](const ItemSource& s, int st, int chunk) {
            unsigned char* const stage = base + size_t(st) * kStageBytes;
            if (lane == 0 && chunk == 0) stage_item[st] = s.published;
            if (lane == 0) copy_stage_weights(stage, &f[st], s.im, chunk, half);
            unsigned char* const sdst = stage + kWeightScaleOffset + lane * 8;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (!half || j < 2)
                    cp_async_ca<8>(sdst + 32 * j * 8, s.sc[j / 2] + int64_t(32 * (j % 2)) * s_ld + chunk * 8);
            cp_async_mbar_arrive(&f[st]);
        };
        int q = 0;
        for (int item = fetch(), next = 0; item < n_ring_items; item = next) {
            // The next item's fetch and map prefetch after this item's first stage's copies are issued.
            const ItemSource s = source(item);
            for (int chunk = 0; chunk < items.chunks; ++chunk, ++q) {
                const int st = q % kStages;
                wait_free(q);
                fence_proxy_async();
                copy_weights(s, st, chunk);
                if (lane == 0)
                    copy_stage_activations(base + size_t(st) * kStageBytes, &f[st], s.b_tile, s.b_scales, chunk);
                if (chunk == 0) {
                    next = fetch();
                    if (lane == 0 && next < n_ring_items) {  // its maps into the descriptor cache meanwhile
                        const ItemMaps nm = item_maps(a.maps, UP, a.t.tile_expert[whole_of(next) / items.tiles], 0);
                        tma::prefetch_map(nm.map[0]);
                        if (UP) tma::prefetch_map(nm.map[1]);
                    }
                }
            }
        }
        {  // the end: a stage with item -1 (its 1 + 32 arrivals without copies), released like any
            wait_free(q);
            if (lane == 0) stage_item[q % kStages] = StageItem{-1, 0, 0, 0};
            mbar::mbar_arrive(&f[q % kStages]);
            if (lane == 0) mbar::mbar_arrive(&f[q % kStages]);
            ++q;
        }
        if (a.order == 2 && lane == 0) {  // the last ring to finish leaves the counters zero for the next launch
            __threadfence();
            if (atomicAdd(a.split_counters + 1, 1u) == uint32_t(slots) - 1) {
                __threadfence();
                a.split_counters[0] = 0;
                a.split_counters[1] = 0;
            }
        }
        if constexpr (NAMED)  // the releases no refill waited for: every barrier generation completes
            for (int r = max(0, q - kStages); r < q; ++r) release_wait(release_barrier(ring, r % kStages));
        cp_async_wait_all();  // no copy may land after the warp is gone
        return;
    }

    tma::claim_registers<kMathRegs>();
    const int ring = group - 1, mt = tid - 128 * group, warp = mt / 32, lane = mt & 31, g = lane >> 2, t = lane & 3;
    unsigned char* const base = smem + size_t(ring) * kWsRingBytes;
    uint64_t* const f = full + ring * kStages;
    uint64_t* const em = empty + ring * kStages;
    const StageItem* const stage_item = stage_items + ring * kStages;
    auto release_stage = [&](int st) {  // every lane's shared reads of stage st are done (its wgmmas waited)
        if constexpr (NAMED) {
            release_arrive(release_barrier(ring, st));
        } else {
            __syncwarp();
            if (lane == 0) mbar::mbar_arrive(&em[st]);
        }
    };
    for (int q = 0;;) {
        // The item of the stage the copy warp filled next (-1: none left); its first stage is waited for again
        // below (a completed phase returns at once).
        mbar_wait(&f[q % kStages], uint32_t((q / kStages) & 1));
        const StageItem si = stage_item[q % kStages];
        if (si.item < 0) {
            release_stage(q % kStages);
            break;
        }
        const int item = si.item, count = si.count, offset = si.offset;
        const int e_row0 = (whole_of(item) % items.tiles) * items.kItemRows + 16 * warp + g;
        float acc[2][8];
#pragma unroll
        for (int p = 0; p < 2; ++p)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[p][j] = 0.f;
        // The item's stage c is this ring's stage (q + c) % kStages, landed when its mbarrier reaches that use's phase;
        // released when every lane's shared reads of it are done (its wgmmas waited).
        auto wait_stage = [&](int c) {
            const int qc = q + c, st = qc % kStages;
            mbar_wait(&f[st], uint32_t((qc / kStages) & 1));
            return static_cast<const unsigned char*>(base + size_t(st) * kStageBytes);
        };
        if (half) {
            for (int c = 0; c < items.chunks; ++c) {
                consume_stage<true>(acc, wait_stage(c), count, warp, g, t);
                release_stage((q + c) % kStages);
            }
            q += items.chunks;
            store_item<UP>(a, acc, e_row0, count, offset, t, item & 1);
            continue;
        }
        for (int c = 0; c < items.chunks; ++c) {
            consume_stage(acc, wait_stage(c), count, warp, g, t);
            release_stage((q + c) % kStages);
        }
        q += items.chunks;
        store_item<UP>(a, acc, e_row0, count, offset, t);
    }
#else
    __trap();
#endif
}

// ahead: one token's tile, packed before the grouping exists (pack_ahead).
void pack(const PreparedActivation& x, const MoeGrouping& g, int max_tiles, const int32_t* slot_token,
          cudaStream_t stream, bool ahead = false) {
    PackArgs p{};
    p.ahead = ahead;
    p.values = x.values;
    p.scales = x.scales;
    p.ld = x.k_pad;
    p.sld = x.k_pad / 128;
    p.K = int(x.k);
    p.slot_token = slot_token;
    p.t = tile_list(g, max_tiles);
    const unsigned step_ranges = unsigned((x.k / 32 + kPackStepsPerCta - 1) / kPackStepsPerCta);
    launch_pdl("moe_wgmma pack_tiles_kernel", pack_tiles_kernel, dim3(unsigned(max_tiles), step_ranges),
               dim3(kPackThreads), 0, stream, p);
}

// h prepared and packed for the down-projection (quantize_h_tiles_kernel); marks h as held by the tiles.
// u (half items): w3's sums beside w1's in h, SwiGLU'd here with the slots' weights and the limit.
void quantize_h_tiles(PreparedActivation& h, const MoeGrouping& g, int max_tiles, cudaStream_t stream,
                      const uint16_t* u = nullptr, float limit = 0.f) {
    HTileArgs q{};
    q.h = h.values;
    q.h_scales = h.scales;
    q.h_ld = h.k_pad;
    q.K = int(h.k);
    q.u = u;
    q.slot_weight = g.slot_weight;
    q.limit = limit;
    q.t = tile_list(g, max_tiles);
    const int per_cta = u ? kHTileBlocksSwiglu : kHTileBlocks;
    const unsigned block_groups = unsigned((h.k / 128 + per_cta - 1) / per_cta);
    launch_pdl("moe_wgmma quantize_h_tiles_kernel",
               u ? quantize_h_tiles_kernel<kHTileBlocksSwiglu> : quantize_h_tiles_kernel<kHTileBlocks>,
               dim3(unsigned(max_tiles), block_groups), dim3(kHTileThreads), 0, stream, q);
    h.packed_tiles = g.act_tiles;
}

// Which projections take the balanced stage ranges: 0 none (default, measured fastest), 1 the up-projection, 2 both
// (KernelPolicy::moe_wgmma_balance, for A/B runs; a host-side choice between two compiled kernels, no per-stage
// cost).
bool balanced(bool up, const KernelPolicy& policy) {
    return policy.moe_wgmma_balance == 2 || (policy.moe_wgmma_balance == 1 && up);
}

// max_tiles: the worst grouping's 16-token tiles for the call (tiles_for), the grid's and the pack's size. Returns
// whether the warp-specialized kernel took half items (the up-projection then left w3's sums in a.u).
// one_tile: every tile reads tile 0 (one token packed ahead).
template <bool UP>
bool launch(Args a, const MoeGrouping& g, int max_tiles, int64_t tokens, const KernelPolicy& policy,
            cudaStream_t stream, bool one_tile = false) {
    a.t = tile_list(g, max_tiles, one_tile);
    a.slot_weight = g.slot_weight;
    a.split_partials = g.split_partials;
    a.split_counters = g.split_counters;
    const int64_t items = int64_t(a.N / (UP ? 64 : 128)) * max_tiles;
    if (policy.moe_wgmma_specialized) {
        // Half items where the whole items (of the worst grouping) are fewer than the rings, or where the policy
        // forces them ("moe_half_items"; disabling it keeps whole items): above the kernel. The up-projection needs
        // a.u for them.
        const int64_t rings = int64_t(current_arch().sm_count) * kMathGroups;
        a.half_items = !policy.is_disabled("moe_half_items") && (!UP || a.u != nullptr) &&
                       (policy.is_forced("moe_half_items") || items < rings);
        const int64_t ring_items = a.half_items ? 2 * items : items;
        // One CTA per item up to the SM count: a call of fewer items than rings spreads them over every SM (ring 0
        // of each first) instead of filling the first SMs' three rings.
        const int64_t ws_ctas = std::min<int64_t>(current_arch().sm_count, ring_items);
        a.order = policy.moe_wgmma_ws_order >= 0 ? policy.moe_wgmma_ws_order
                  : tokens >= policy.moe_wgmma_dynamic_min_tokens ? 2
                                                                  : 0;
        FS_REQUIRE(g.split_slots >= 2, "moe_wgmma: the grouping's split scratch holds ", g.split_slots,
                   " counters, the dynamic item order needs 2");
        auto kernel = policy.moe_wgmma_specialized == 2 ? wgmma_expert_ws_kernel<UP, true>
                                                         : wgmma_expert_ws_kernel<UP, false>;
        allow_dynamic_smem(kernel, kWsSmemBytes);
        launch_pdl(UP ? "moe_wgmma expert_ws_kernel<up>" : "moe_wgmma expert_ws_kernel<down>", kernel,
                   dim3(unsigned(ws_ctas)), dim3(kWsThreads), kWsSmemBytes, stream, a);
        return a.half_items != 0;
    }
    const int64_t ctas = std::min<int64_t>(max_ctas(), items);
    FS_REQUIRE(ctas + 1 <= g.split_slots, "moe_wgmma: the grouping's split scratch holds ", g.split_slots,
               " CTA boundaries, ", ctas + 1, " needed");
    auto kernel = balanced(UP, policy) ? wgmma_expert_kernel<UP, true> : wgmma_expert_kernel<UP, false>;
    allow_dynamic_smem(kernel, kSmemBytes);
    launch_pdl(UP ? "moe_wgmma expert_kernel<up>" : "moe_wgmma expert_kernel<down>", kernel, dim3(unsigned(ctas)),
               dim3(kThreads), kSmemBytes, stream, a);
    return false;
}

int tiles_for(const ExpertCall& c) { return int(moe_act_tiles_needed(c.grouping->E, c.M * c.top_k)); }

bool prepared_release(const PreparedActivation& x) {
    return !x.raw && x.numerics == ActNumerics::FP8_BLOCK128 && x.layout == WeightKind::FP4_BLOCK32 &&
           x.values != nullptr && x.scales != nullptr;
}

}  // namespace

int max_ctas() { return current_arch().sm_count * kCtasPerSm; }

// Routed (grouping with act tiles attached) FP4 experts with E8M0 scales 16-byte aligned, hidden and inter multiples
// of 256 within the tiles' K, as many tokens as the tiles hold in the worst grouping, a prepared release-numerics
// input (e4m3 codes) and (up) h written in release numerics, on a compute capability 9.0 device with the sm_90a
// build.
bool supports(const ExpertCall& c) {
    const ExpertTable& t = c.t;
    const MoeGrouping* g = c.grouping;
    if (!wgmma_usable() || g == nullptr || (c.up && c.h_numerics != ActNumerics::FP8_BLOCK128)) return false;
    return t.kind == WeightKind::FP4_BLOCK32 && t.scale_kind == ScaleKind::E8M0 && t.scales_aligned16 &&
           t.w_maps != nullptr && reinterpret_cast<uintptr_t>(t.w_maps) % 64 == 0 && c.M >= 1 &&
           c.M * c.top_k <= g->max_pairs && t.hidden % 256 == 0 && t.inter % 256 == 0 &&
           t.hidden <= g->act_tile_k && t.inter <= g->act_tile_k && g->act_tiles != nullptr &&
           g->act_tile_scales != nullptr && g->split_counters != nullptr && g->tile_expert != nullptr &&
           moe_act_tiles_needed(g->E, c.M * c.top_k) <= g->act_tile_count && prepared_release(c.x) &&
           aligned16(c.x.values);
}

// From KernelPolicy::moe_wgmma_min_tokens (2) tokens (one token: gemv_experts / simt_experts) to
// moe_wgmma_max_tokens (measured per path in docs/perf.md).
bool preferred(const ExpertCall& c, const KernelPolicy& policy) {
    return c.M >= policy.moe_wgmma_min_tokens && c.M <= policy.moe_wgmma_max_tokens;
}

// One token: every active expert has one tile whose only column is the token, so the tile does not depend on the
// routing and is packed once, into tile 0, as soon as x is (moe_expert_up_pack_ahead, which checked the call: on a
// branch beside the router and the routing instead of after them). x.packed_tiles == the grouping's tiles marks it;
// up() then reads tile 0 for every expert. The same bytes as pack() writes into each expert's tile, so the same bits.
void pack_ahead(const ExpertCall& c, cudaStream_t stream) {
    pack(c.x, *c.grouping, 1, nullptr, stream, /*ahead=*/true);
}

void up(const ExpertCall& c, const KernelPolicy& policy, float swiglu_limit, PreparedActivation& h,
        cudaStream_t stream) {
    const ExpertTable& t = c.t;
    const MoeGrouping& g = *c.grouping;
    const int max_tiles = tiles_for(c);
    const bool ahead = c.M == 1 && c.x.packed_tiles == g.act_tiles;  // pack_ahead's tile (above)
    if (!ahead) pack(c.x, g, max_tiles, g.slot_token, stream);
    Args a{};
    set_projection(a, t, true);
    a.maps = static_cast<const unsigned char*>(t.w_maps);
    a.limit = swiglu_limit;
    a.h = h.values;
    a.h_ld = h.k_pad;
    // Half items park w3's sums in the grouping's split scratch (the round-robin kernel's, unused by this one), where
    // the call's slots fit.
    const size_t u_bytes = size_t(c.M) * size_t(c.top_k) * size_t(h.k_pad) * 2;
    if (u_bytes <= size_t(g.split_slots) * kSplitFloatsPerSlot * 4) a.u = reinterpret_cast<uint16_t*>(g.split_partials);
    const bool half = launch<true>(a, g, max_tiles, c.M, policy, stream, ahead);
    quantize_h_tiles(h, g, max_tiles, stream, half ? a.u : nullptr, swiglu_limit);
}

void down(const ExpertCall& c, const KernelPolicy& policy, float* y, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    const MoeGrouping& g = *c.grouping;
    const int max_tiles = tiles_for(c);
    if (c.x.packed_tiles != g.act_tiles) pack(c.x, g, max_tiles, nullptr, stream);  // else quantize_h_tiles did
    Args a{};
    set_projection(a, t, false);
    a.maps = static_cast<const unsigned char*>(t.w_maps);
    a.y = y;
    launch<false>(a, g, max_tiles, c.M, policy, stream);
}

}  // namespace flashseek::cuda::wgmma_experts
