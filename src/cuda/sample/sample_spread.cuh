// The sampled rows' selections and draw spread over many CTAs per row (sample_spread.cu), behind sample_rows' scratch:
// the same fixed-point thresholds and token as the one-CTA sampler (sample_fixed.cuh), so the same bits.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/sample/sample.cuh"

namespace flashseek::cuda::sample_detail {

constexpr int kSpreadThreads = 256;
constexpr int kMaxSpreadCtas = 1024;  // per row: longer rows give each CTA more windows

// Per row, in the scratch. Written by each pass's last CTA, read by the next pass; `ticket` is zero between passes.
struct SpreadRow {
    uint64_t above;     // the measure of keys above the current prefix range
    uint64_t target;    // the phase's target measure
    int64_t set_ties;   // top-k ties kept (0: no top-k set)
    int64_t th_ties;    // the select phases' threshold: ties kept
    uint32_t prefix;    // key bits fixed so far in the phase
    uint32_t set_key;   // the top-k threshold key
    uint32_t th_key;    // the select phases' threshold key
    int32_t has;        // whether a select phase set a threshold
    uint32_t ticket;    // CTAs arrived at the current pass
    int32_t drawn;      // the drawn token
    uint32_t done;      // the passes this call completed for the row: kDoneTopK | kDoneTopP | kDoneDraw
};
constexpr uint32_t kDoneTopK = 1, kDoneTopP = 2, kDoneDraw = 4;

// Scratch pieces past the one-CTA passes' ones (sample.cu lays them out).
struct SpreadScratch {
    SpreadRow* rows;    // [rows]
    uint64_t* hist;     // [rows][kKeyBins], zero between passes
    uint64_t* parts;    // [rows][kMaxSpreadCtas][2]: the draw's per-CTA (weight above the threshold, ties)
};
size_t spread_scratch_bytes(int64_t rows);
SpreadScratch spread_scratch_at(void* base, int64_t rows);
// Where sample_rows keeps the rows' SpreadRow in a scratch of scratch_bytes (row r at index r for every call), so
// that a test can see which passes a call completed for each row (SpreadRow::done).
const SpreadRow* sample_spread_rows(void* scratch, size_t scratch_bytes);

// CTAs per row and entries per CTA (a multiple of kWindow) for a row of `vocab` entries.
struct SpreadGrid {
    int64_t ctas, slice;
};
SpreadGrid spread_grid(int64_t vocab);

// Clears the rows' state for a call (one thread per row; tickets and histograms are already zero).
void launch_spread_reset(const SpreadScratch& s, int64_t rows, cudaStream_t stream);
// Top-k (count) or top-p (mass) thresholds for the rows that need them, three radix levels, then the draw into
// SpreadRow::drawn. max_keys: the rows' max keys from row_max_kernel.
void launch_spread_select(const float* logits, int64_t rows, int64_t vocab, int64_t ld,
                          const DeviceSampleParams* params, const unsigned long long* max_keys, const SpreadScratch& s,
                          bool mass, cudaStream_t stream);
void launch_spread_draw(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DeviceSampleParams* params,
                        const unsigned long long* max_keys, const SpreadScratch& s, cudaStream_t stream);

}  // namespace flashseek::cuda::sample_detail
