// GPU sampler (see sample.cuh). One 1024-thread CTA per row:
//   1. max / argmax and log-sum-exp at temperature 1 (block reductions, double accumulation);
//   2. top-k threshold: radix select of the k-th largest order-preserving key (three levels of 11, 11 and 10 bits,
//      counts);
//   3. top-p threshold: the same walk over probability mass inside the top-k set (its ties at the threshold counted
//      as many times as top-k keeps them: tied logits have equal mass);
//   4. min-p: a logit threshold (max + log(min_p), the host's float), raised over the top-k / top-p one;
//   5. draw: kept set = keys above the final threshold plus the lowest-id ties at it; inverse CDF of the
//      temperature weights in token-id order.
// Steps 2, 3 and 5 run in fixed point (sample_fixed.cuh): every mass and weight an integer, every sum exact, so the
// threshold and the token depend on the row alone, not on any order of summation.
// The adjustment kernel copies each row with its mask and per-token edits applied (one CTA per row).
// With a scratch (sample_rows_scratch_bytes), step 1's two passes over the row run before the sampler, spread over
// many CTAs per row (one CTA's loads took ~25 us per pass over a 129,280-entry row, which greedy decoding pays
// every step): the max key by atomicMax of per-CTA maxima (a maximum, so the same key in any order), and each of the
// CTA's 1,024 thread positions' sum of exp(l - max) in its own order, which the sampler then reduces exactly as it
// reduces its threads' own sums; the raw rows' logprob (adjusted rows) takes the same two passes over the raw rows,
// their max skipping NaN as fmaxf did. Steps 2, 3 and 5 of the drawn rows then run spread as well
// (sample_spread.cu), and the sampler takes their token. The same bits either way.
#include <algorithm>
#include <cfloat>

#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/row_pass.cuh"
#include "cuda/sample/sample.cuh"
#include "cuda/sample/sample_fixed.cuh"
#include "cuda/sample/sample_spread.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kThreads = 1024;

using namespace sample_detail;

// Block-wide reductions over kThreads threads (scratch: 32 slots).
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = scratch[lane];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    const T r = scratch[0];
    __syncthreads();
    return r;
}

// One select phase over the whole row by this CTA (sample_fixed.cuh): three levels, each histogramming the row in
// windows of kWindow entries, then the walk. The spread passes' thresholds.
struct CtaSelectShared {
    uint32_t lo[kKeyBins], hi[kKeyBins];
    uint64_t hist[kKeyBins];
    uint64_t s64[kThreads / 32];
    uint64_t above;
};
template <bool kMass>
__device__ Threshold cta_select(const float* row, int64_t vocab, const DeviceSampleParams& p, float mx,
                                bool restrict_set, uint32_t set_key, int64_t set_ties, CtaSelectShared& sh) {
    uint32_t prefix = 0;
    uint64_t above = 0, target = 0;
    for (int level = 0; level < kLevels; ++level) {
        const int nb = level_bins(level);
        const SelectSpec spec{kMass, level, prefix, mx, restrict_set, set_key};
        for (int b = threadIdx.x; b < kKeyBins; b += kThreads) {
            sh.lo[b] = sh.hi[b] = 0;
            sh.hist[b] = 0;
        }
        __syncthreads();
        for (int64_t w0 = 0; w0 < vocab; w0 += kWindow) {
            const int64_t w1 = w0 + kWindow < vocab ? w0 + kWindow : vocab;
            for (int64_t i = w0 + threadIdx.x; i < w1; i += kThreads) bin_entry(spec, row[i], sh.lo, sh.hi);
            __syncthreads();
            for (int b = threadIdx.x; b < nb; b += kThreads) {
                sh.hist[b] += window_bin(sh.lo, sh.hi, b);
                sh.lo[b] = sh.hi[b] = 0;
            }
            __syncthreads();
        }
        const LevelEnd e = finish_level<kThreads>(sh.hist, spec, set_ties, p, target, above, sh.s64, &sh.above);
        prefix = e.key;
        above = e.above;
        target = e.target;
    }
    return {prefix, select_ties(kMass, prefix, mx, target, above)};
}

// The draw by this CTA over the whole row, with the spread draw's functions (sample_fixed.cuh): the kept weight, then
// the first kept id whose cumulative weight exceeds floor(u x total). argmax when nothing is kept with a weight.
__device__ int32_t cta_draw(const float* row, int64_t vocab, const DeviceSampleParams& p, float mx,
                            const Threshold& th, uint32_t argmax, uint64_t* s64) {
    constexpr int kPer = kWindow / kThreads;
    const float inv_t = 1.f / p.temperature;
    uint64_t above = 0, ties = 0;
    range_weight_and_ties<kThreads, kPer>(row, 0, vocab, th, mx, inv_t, s64, above, ties);
    const uint64_t kept_ties = ties < uint64_t(th.ties) ? ties : uint64_t(th.ties);
    const uint64_t total = above + kept_ties * weight_q(key_value(th.key), mx, inv_t);
    if (total == 0) return int32_t(argmax);
    const uint64_t target = draw_target(counter_uniform(p.seed, p.draw_index), total);
    const int32_t picked = find_in_range<kThreads, kPer>(row, 0, vocab, th, mx, inv_t, target, 0, 0, s64);
    return picked >= 0 ? picked : int32_t(argmax);
}

// The spread form of step 1 (see the top): per-row max keys, then per thread position the sum of exp(l - max).
constexpr int kMaxThreads = 256;
constexpr int kMaxPerThread = 8;
constexpr int kSumThreads = 64;  // CTAs of kSumThreads positions each: kThreads / kSumThreads CTAs per row

// kSkipNaN: NaN never wins (the raw rows' max, which the sampler took with fmaxf); else NaN is the largest key, as
// in the sampler's own max.
template <bool kSkipNaN>
__global__ void __launch_bounds__(kMaxThreads) row_max_kernel(const float* __restrict__ logits, int64_t vocab,
                                                              int64_t ld, int64_t slice,
                                                              unsigned long long* __restrict__ max_keys) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t r = blockIdx.y;
    const unsigned long long best = slice_max_key<kMaxThreads, kMaxPerThread>(
        logits + r * ld, vocab, slice, [](float v, uint32_t i) {
            return kSkipNaN && isnan(v) ? 0ull : value_index_key(order_key(v), i);
        });
    if (threadIdx.x == 0) atomicMax(max_keys + r, best);
}

// The row's maximum from its key; -inf when nothing could win (a raw row of NaNs, as fmaxf from -inf gives).
__device__ __forceinline__ float max_of(const float* row, unsigned long long key) {
    return key != 0 ? row[key_index(key)] : -INFINITY;
}

// Position p's sum (p = the sampler thread that would own it): exp(l - max) over entries p, p + kThreads, ... in
// that order, in double, exactly the sampler's per-thread loop.
__global__ void __launch_bounds__(kSumThreads) row_exp_sums_kernel(const float* __restrict__ logits, int64_t vocab,
                                                                   int64_t ld,
                                                                   const unsigned long long* __restrict__ max_keys,
                                                                   double* __restrict__ sums) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t r = blockIdx.y;
    const float* row = logits + r * ld;
    const float mx = max_of(row, max_keys[r]);
    const int p = int(blockIdx.x) * kSumThreads + int(threadIdx.x);
    double z = 0.0;
    constexpr int kUnroll = 8;
    for (int64_t i0 = p; i0 < vocab; i0 += int64_t(kThreads) * kUnroll) {
        float v[kUnroll];
        load_strided(row, i0, kThreads, vocab, 0.f, v);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
            if (i0 + int64_t(k) * kThreads < vocab) z += double(__expf(v[k] - mx));
    }
    sums[r * kThreads + p] = z;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int64_t vocab, int64_t ld,
                                                          const DeviceSampleParams* __restrict__ params,
                                                          int32_t* __restrict__ out_token, float* __restrict__ out_lp,
                                                          const float* __restrict__ raw_logits, int64_t raw_ld,
                                                          unsigned long long* __restrict__ max_keys,
                                                          const double* __restrict__ exp_sums,
                                                          const SpreadRow* __restrict__ spread_rows,
                                                          unsigned long long* __restrict__ raw_keys,
                                                          const double* __restrict__ raw_sums) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    __shared__ unsigned long long ullscratch[32];
    const int64_t r = blockIdx.x;
    const float* row = logits + r * ld;
    // The spread passes' max key, read by every thread and then zeroed for the next call (before any early return).
    __shared__ unsigned long long spread_key, raw_key;
    if (max_keys) {
        if (threadIdx.x == 0) {
            spread_key = max_keys[r];
            if (raw_keys) raw_key = raw_keys[r];
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            max_keys[r] = 0;
            if (raw_keys) raw_keys[r] = 0;
        }
    }
    const DeviceSampleParams p = params[r];
    if (!params_valid(p)) {
        if (threadIdx.x == 0) {
            out_token[r] = -1;
            if (out_lp) out_lp[r] = NAN;
        }
        return;
    }
    // 1. max with argmax (ties -> lower id): pack (key, ~id) into 64 bits.
    unsigned long long best = 0;
    if (max_keys) {
        best = spread_key;
    } else {
        for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
            const unsigned long long packed = value_index_key(order_key(row[i]), uint32_t(i));
            best = packed > best ? packed : best;
        }
        best = block_reduce(best, [](unsigned long long a, unsigned long long b) { return a > b ? a : b; }, ullscratch);
    }
    const int32_t argmax = int32_t(key_index(best));
    const float mx = row[argmax];
    if (mx == -INFINITY) {  // every token excluded by the adjustments
        if (threadIdx.x == 0) {
            out_token[r] = -1;
            if (out_lp) out_lp[r] = NAN;
        }
        return;
    }
    double z = 0.0;
    if (exp_sums) {
        z = exp_sums[r * kThreads + threadIdx.x];
    } else {
        for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) z += double(__expf(row[i] - mx));
    }
    z = block_reduce(z, [](double a, double b) { return a + b; }, dscratch);
    const float log_z = float(log(z)) + mx;
    int32_t token = argmax;
    if (row_drawn(p, mx)) {
        const uint32_t need =
            kDoneDraw | (needs_top_k(p, vocab) ? kDoneTopK : 0u) | (needs_top_p(p) ? kDoneTopP : 0u);
        if (spread_rows && (spread_rows[r].done & need) == need) {
            token = spread_rows[r].drawn;  // the spread passes' token (the same)
        } else {
            __shared__ CtaSelectShared sh;
            bool has = false;
            Threshold th{0u, 0};
            if (needs_top_k(p, vocab)) {
                th = cta_select<false>(row, vocab, p, mx, false, 0u, 0, sh);
                has = true;
            }
            if (needs_top_p(p))  // inside the top-k set when there is one
                raise_threshold(has, th, cta_select<true>(row, vocab, p, mx, has, th.key, th.ties, sh));
            token = cta_draw(row, vocab, p, mx, final_threshold(has, th.key, th.ties, p.min_p, mx, vocab), argmax,
                             sh.s64);
        }
    }
    float token_lp = row[token] - log_z;
    if (raw_logits && out_lp) {
        // The reported logprob is the raw row's (the model's distribution), not the adjusted one's.
        // With the spread passes over the raw rows: their NaN-skipping max (the same value as fmaxf's: a maximum)
        // and the same per-thread sums.
        const float* raw = raw_logits + r * raw_ld;
        float raw_mx = -INFINITY;
        double raw_z = 0.0;
        if (raw_keys) {
            raw_mx = max_of(raw, raw_key);
            raw_z = raw_sums[r * kThreads + threadIdx.x];
        } else {
            for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) raw_mx = fmaxf(raw_mx, raw[i]);
            raw_mx = block_reduce(raw_mx, [](float a, float b) { return fmaxf(a, b); }, fscratch);
            for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) raw_z += double(__expf(raw[i] - raw_mx));
        }
        raw_z = block_reduce(raw_z, [](double a, double b) { return a + b; }, dscratch);
        token_lp = raw[token] - (float(log(raw_z)) + raw_mx);
    }
    if (threadIdx.x == 0) {
        out_token[r] = token;
        if (out_lp) out_lp[r] = token_lp;
    }
}

__global__ void __launch_bounds__(kThreads) adjust_kernel(const float* __restrict__ logits, int64_t ld,
                                                          float* __restrict__ out, int64_t vocab,
                                                          const DeviceLogitAdjust* __restrict__ adjust,
                                                          const DeviceLogitEdit* __restrict__ edits,
                                                          const uint32_t* __restrict__ masks) {
    pdl_wait();
    pdl_trigger();
    const int64_t r = blockIdx.x;
    const float* row = logits + r * ld;
    float* dst = out + r * vocab;
    const DeviceLogitAdjust a = adjust[r];
    const uint32_t* mask = a.mask_index >= 0 ? masks + int64_t(a.mask_index) * ((vocab + 31) / 32) : nullptr;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
        dst[i] = !mask || ((mask[i >> 5] >> (i & 31)) & 1u) ? row[i] : -INFINITY;
    __syncthreads();
    // Tokens are unique within a row, so each edit owns its element. Same steps as the host (sampling.cpp).
    for (int32_t e = a.edit_begin + int32_t(threadIdx.x); e < a.edit_end; e += int32_t(blockDim.x)) {
        const DeviceLogitEdit ed = edits[e];
        float l = dst[ed.token];
        if (ed.flags & kEditBanned) l = -INFINITY;
        l = __fadd_rn(l, ed.bias);
        if ((ed.flags & kEditSeen) && a.repetition_penalty != 1.f)
            l = l > 0.f ? fminf(__fdiv_rn(l, a.repetition_penalty), FLT_MAX) : __fmul_rn(l, a.repetition_penalty);
        if (ed.output_count > 0 && (a.frequency_penalty != 0.f || a.presence_penalty != 0.f))
            l = __fsub_rn(l, __fadd_rn(__fmul_rn(a.frequency_penalty, float(ed.output_count)), a.presence_penalty));
        dst[ed.token] = l;
    }
}

}  // namespace

size_t sample_rows_scratch_bytes(int64_t rows) {
    const size_t n = size_t(std::max<int64_t>(rows, 0));
    // the max keys and per-thread sums of the rows, then of the raw rows, then the drawn rows' passes
    return 2 * n * (sizeof(unsigned long long) + size_t(kThreads) * sizeof(double)) + spread_scratch_bytes(rows);
}

namespace {

// The scratch's pieces, laid out for every row it can hold (its capacity), not for the call's row count: row r's
// slots stay where they are from call to call. The pieces that are zero between calls (max keys, tickets,
// histograms) must never lie where a call with another row count left its per-thread sums. Laid out by the call's
// rows, a one-row call after a sixteen-row one found stale sums in its tickets: no CTA of a pass was ever the last,
// and every drawn row fell back to the one-CTA sampler (run 237: 3.37 against 3.04 ms per served step); and a call
// with more rows than the last could start its max keys from stale sums.
struct ScratchLayout {
    double* exp_sums;              // [capacity][kThreads]
    unsigned long long* max_keys;  // [capacity]
    double* raw_sums;              // [capacity][kThreads]
    unsigned long long* raw_keys;  // [capacity]
    SpreadScratch spread;          // for capacity rows
};
ScratchLayout scratch_layout(void* scratch, size_t scratch_bytes) {
    const int64_t capacity = int64_t(scratch_bytes / sample_rows_scratch_bytes(1));
    ScratchLayout l;
    l.exp_sums = static_cast<double*>(scratch);
    l.max_keys = reinterpret_cast<unsigned long long*>(l.exp_sums + capacity * kThreads);
    l.raw_sums = reinterpret_cast<double*>(l.max_keys + capacity);
    l.raw_keys = reinterpret_cast<unsigned long long*>(l.raw_sums + capacity * kThreads);
    l.spread = spread_scratch_at(l.raw_keys + capacity, capacity);
    return l;
}

}  // namespace

const SpreadRow* sample_detail::sample_spread_rows(void* scratch, size_t scratch_bytes) {
    return scratch_layout(scratch, scratch_bytes).spread.rows;
}

SamplePasses sample_passes_for(const DeviceSampleParams* host_params, int64_t rows, int64_t vocab) {
    SamplePasses s{false, false, false};
    for (int64_t r = 0; r < rows; ++r) {
        const DeviceSampleParams& p = host_params[r];
        if (!(p.temperature > 0.f)) continue;  // greedy or invalid: no drawn-row pass
        s.drawn = true;
        s.top_k = s.top_k || (p.top_k > 0 && p.top_k < vocab);
        s.top_p = s.top_p || p.top_p < 1.f;
    }
    return s;
}

void sample_rows(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DeviceSampleParams* params,
                 int32_t* out_token, float* out_logprob, cudaStream_t stream, const float* raw_logits,
                 int64_t raw_ld, void* scratch, size_t scratch_bytes, SamplePasses passes) {
    FS_REQUIRE(logits && params && out_token, "sample_rows: null pointer argument");
    FS_REQUIRE(vocab > 0 && vocab < (int64_t(1) << 31), "sample_rows: vocabulary size ", vocab, " out of range");
    FS_REQUIRE(rows > 0 && rows <= 2147483647, "sample_rows: rows ", rows, " out of range");
    FS_REQUIRE(ld == 0 || ld >= vocab, "sample_rows: row stride ", ld, " < vocab ", vocab);
    FS_REQUIRE(!raw_logits || raw_ld == 0 || raw_ld >= vocab, "sample_rows: raw row stride ", raw_ld, " < vocab ",
               vocab);
    unsigned long long *max_keys = nullptr, *raw_keys = nullptr;
    double *exp_sums = nullptr, *raw_sums = nullptr;
    const SpreadRow* spread_rows = nullptr;
    if (scratch) {
        FS_REQUIRE(scratch_bytes >= sample_rows_scratch_bytes(rows), "sample_rows: scratch of ", scratch_bytes,
                   " bytes is smaller than the ", sample_rows_scratch_bytes(rows), " needed for ", rows, " rows");
        FS_REQUIRE(rows <= 65535, "sample_rows: ", rows, " rows exceed the spread passes' grid");
        const ScratchLayout layout = scratch_layout(scratch, scratch_bytes);
        exp_sums = layout.exp_sums;
        max_keys = layout.max_keys;
        const int64_t per_cta = int64_t(kMaxThreads) * kMaxPerThread;
        const int64_t ctas = std::min<int64_t>((vocab + per_cta - 1) / per_cta, 1024);
        const int64_t slice = (vocab + ctas - 1) / ctas;
        auto first_passes = [&](const float* rows_at, int64_t stride, bool skip_nan, unsigned long long* keys,
                                double* sums) {
            if (skip_nan) {
                launch_pdl("row_max_kernel<raw>", row_max_kernel<true>, dim3(unsigned(ctas), unsigned(rows)),
                           dim3(kMaxThreads), 0, stream, rows_at, vocab, stride, slice, keys);
            } else {
                launch_pdl("row_max_kernel", row_max_kernel<false>, dim3(unsigned(ctas), unsigned(rows)),
                           dim3(kMaxThreads), 0, stream, rows_at, vocab, stride, slice, keys);
            }
            CUDA_CHECK_LAUNCH("row_max_kernel");
            launch_pdl("row_exp_sums_kernel", row_exp_sums_kernel,
                       dim3(unsigned(kThreads / kSumThreads), unsigned(rows)), dim3(kSumThreads), 0, stream, rows_at,
                       vocab, stride, const_cast<const unsigned long long*>(keys), sums);
            CUDA_CHECK_LAUNCH("row_exp_sums_kernel");
        };
        first_passes(logits, ld, false, max_keys, exp_sums);
        if (raw_logits && out_logprob) {
            raw_sums = layout.raw_sums;
            raw_keys = layout.raw_keys;
            first_passes(raw_logits, raw_ld, true, raw_keys, raw_sums);
        }
        if (passes.drawn) {
            const SpreadScratch& spread = layout.spread;
            launch_spread_reset(spread, rows, stream);
            if (passes.top_k)
                launch_spread_select(logits, rows, vocab, ld, params, max_keys, spread, /*mass=*/false, stream);
            if (passes.top_p)
                launch_spread_select(logits, rows, vocab, ld, params, max_keys, spread, /*mass=*/true, stream);
            launch_spread_draw(logits, rows, vocab, ld, params, max_keys, spread, stream);
            spread_rows = spread.rows;
        }
    }
    launch_pdl("sample_kernel", sample_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, stream, logits, vocab, ld,
               params, out_token, out_logprob, raw_logits, raw_ld, max_keys, const_cast<const double*>(exp_sums),
               spread_rows, raw_keys, const_cast<const double*>(raw_sums));
    CUDA_CHECK_LAUNCH("sample_kernel");
}

void adjust_logits_rows(const float* logits, int64_t ld, float* out, int64_t rows, int64_t vocab,
                        const DeviceLogitAdjust* adjust, const DeviceLogitEdit* edits, const uint32_t* masks,
                        cudaStream_t stream) {
    FS_REQUIRE(logits && out && adjust, "adjust_logits_rows: null pointer argument");
    FS_REQUIRE(vocab > 0 && vocab < (int64_t(1) << 31), "adjust_logits_rows: vocabulary size ", vocab,
               " out of range");
    FS_REQUIRE(rows > 0 && rows <= 2147483647, "adjust_logits_rows: rows ", rows, " out of range");
    FS_REQUIRE(ld == 0 || ld >= vocab, "adjust_logits_rows: row stride ", ld, " < vocab ", vocab);
    launch_pdl("adjust_kernel", adjust_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, stream, logits, ld, out,
               vocab, adjust, edits, masks);
    CUDA_CHECK_LAUNCH("adjust_kernel");
}

}  // namespace flashseek::cuda
