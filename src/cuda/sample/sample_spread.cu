// The sampled rows' top-k / top-p selections and draw over many CTAs per row (see sample_spread.cuh).
//
// Why: one 1,024-thread CTA per row walked a 129,280-entry row for every radix level and for the draw, with float
// atomics that spun on the few histogram bins a row's logits share: a sampled request paid that on one SM every step.
// Here every pass gives each CTA a slice of the row (kWindow entries per window, 8 loads per thread in flight):
//  - a select level (three per phase, top-k's count then top-p's mass) histograms the slice into shared 32-bit
//    counters, adds the non-empty bins to the row's 64-bit histogram in global memory (integer atomics: order-free),
//    and the CTA that arrives last walks the histogram (sample_fixed.cuh) and leaves the prefix for the next level;
//  - the draw sums each slice's kept weights above the threshold and counts its ties; the last CTA gives the ties to
//    the slices in id order (the lowest ids are kept), finds the slice where floor(u x total) falls and scans it.
// Rows that are greedy, invalid, or without the phase return at once. The one-CTA sampler runs afterwards and takes
// SpreadRow::drawn for the drawn rows (its logprob and greedy paths are unchanged).
#include "cuda/sample/sample_spread.cuh"

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/row_pass.cuh"
#include "cuda/gemm/split_sum.cuh"
#include "cuda/sample/sample_fixed.cuh"

namespace flashseek::cuda::sample_detail {
namespace {

constexpr int T = kSpreadThreads;
constexpr int kPer = kWindow / T;  // entries per thread and window
static_assert(kPer * T == kWindow && kMaxSpreadCtas % T == 0, "windows and CTA partials divide over the threads");

__global__ void __launch_bounds__(T) spread_reset_kernel(SpreadRow* rows, int64_t n) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t r = int64_t(blockIdx.x) * T + threadIdx.x;
    if (r >= n) return;
    SpreadRow& s = rows[r];
    s.above = 0;
    s.target = 0;
    s.set_ties = 0;
    s.th_ties = 0;
    s.prefix = 0;
    s.set_key = 0;
    s.th_key = 0;
    s.has = 0;
    s.drawn = -1;
    s.done = 0;  // the ticket is zero between passes
}

template <bool kMass>
__global__ void __launch_bounds__(T) spread_select_kernel(const float* __restrict__ logits, int64_t vocab, int64_t ld,
                                                          const DeviceSampleParams* __restrict__ params,
                                                          const unsigned long long* __restrict__ max_keys,
                                                          SpreadScratch sc, int level, int64_t slice) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t r = blockIdx.y;
    const float* row = logits + r * ld;
    const DeviceSampleParams p = params[r];
    const float mx = row[key_index(max_keys[r])];
    if (!row_drawn(p, mx) || !(kMass ? needs_top_p(p) : needs_top_k(p, vocab))) return;
    SpreadRow* st = sc.rows + r;
    const bool restrict_set = kMass && st->set_ties > 0;
    const SelectSpec spec{kMass, level, st->prefix, mx, restrict_set, st->set_key};
    __shared__ uint32_t lo[kKeyBins], hi[kKeyBins];
    __shared__ uint64_t hist[kKeyBins];
    __shared__ uint64_t s64[T / 32];
    __shared__ uint64_t above_s;
    __shared__ uint32_t last;
    const int nb = level_bins(level);
    for (int b = threadIdx.x; b < nb; b += T) lo[b] = hi[b] = 0;
    __syncthreads();
    uint64_t* gh = sc.hist + r * kKeyBins;
    const int64_t begin = int64_t(blockIdx.x) * slice, end = std::min(begin + slice, vocab);
    for (int64_t w0 = begin; w0 < end; w0 += kWindow) {
        const int64_t w1 = std::min(w0 + kWindow, end);
        float v[kPer];
        load_strided(row, w0 + threadIdx.x, T, w1, 0.f, v);
#pragma unroll
        for (int k = 0; k < kPer; ++k)
            if (w0 + threadIdx.x + int64_t(k) * T < w1) bin_entry(spec, v[k], lo, hi);
        __syncthreads();
        for (int b = threadIdx.x; b < nb; b += T) {
            const uint64_t h = window_bin(lo, hi, b);
            if (h != 0) {
                atomicAdd(reinterpret_cast<unsigned long long*>(gh + b), static_cast<unsigned long long>(h));
                lo[b] = hi[b] = 0;
            }
        }
        __syncthreads();
    }
    if (!split_arrives_last(&st->ticket, int(gridDim.x), last, threadIdx.x == 0)) return;
    // The last CTA: the row's histogram (left zero for the next pass), the walk, the state for the next level.
    for (int b = threadIdx.x; b < kKeyBins; b += T) {
        hist[b] = b < nb ? __ldcg(gh + b) : 0;
        gh[b] = 0;
    }
    __syncthreads();
    const LevelEnd e = finish_level<T>(hist, spec, st->set_ties, p, st->target, st->above, s64, &above_s);
    if (threadIdx.x == 0) {
        if (level < kLevels - 1) {
            st->prefix = e.key;
            st->above = e.above;
            st->target = e.target;
        } else {
            const Threshold t{e.key, select_ties(kMass, e.key, mx, e.target, e.above)};
            bool has = st->has != 0;
            Threshold th{st->th_key, st->th_ties};
            if (!kMass) {
                st->set_key = t.key;
                st->set_ties = t.ties;
                th = t;
                has = true;
            } else {
                raise_threshold(has, th, t);
            }
            st->th_key = th.key;
            st->th_ties = th.ties;
            st->has = 1;
            st->done |= kMass ? kDoneTopP : kDoneTopK;
            st->prefix = 0;
            st->above = 0;
        }
        st->ticket = 0;
    }
}

__global__ void __launch_bounds__(T) spread_draw_kernel(const float* __restrict__ logits, int64_t vocab, int64_t ld,
                                                        const DeviceSampleParams* __restrict__ params,
                                                        const unsigned long long* __restrict__ max_keys,
                                                        SpreadScratch sc, int64_t slice) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t r = blockIdx.y;
    const float* row = logits + r * ld;
    const DeviceSampleParams p = params[r];
    const uint32_t argmax = key_index(max_keys[r]);
    const float mx = row[argmax];
    if (!row_drawn(p, mx)) return;
    SpreadRow* st = sc.rows + r;
    const Threshold th = final_threshold(st->has != 0, st->th_key, st->th_ties, p.min_p, mx, vocab);
    const float inv_t = 1.f / p.temperature;
    __shared__ uint64_t s64[T / 32];
    __shared__ uint32_t last;
    {  // this slice: the weight of the keys above the threshold, and its ties
        const int64_t begin = int64_t(blockIdx.x) * slice, end = std::min(begin + slice, vocab);
        uint64_t above = 0, ties = 0;
        range_weight_and_ties<T, kPer>(row, begin, end, th, mx, inv_t, s64, above, ties);
        uint64_t* part = sc.parts + (r * kMaxSpreadCtas + blockIdx.x) * 2;
        if (threadIdx.x == 0) {
            part[0] = above;
            part[1] = ties;
        }
    }
    if (!split_arrives_last(&st->ticket, int(gridDim.x), last, threadIdx.x == 0)) return;
    // The last CTA. Slices in id order: the ties before each slice, so the kept ties (the lowest ids), its weight.
    constexpr int kSlicesPer = kMaxSpreadCtas / T;
    const int n_slices = int(gridDim.x);
    const uint64_t q_t = weight_q(key_value(th.key), mx, inv_t);  // every tie's weight
    const uint64_t keep_ties = uint64_t(th.ties);
    uint64_t pa[kSlicesPer], pt[kSlicesPer], my_ties = 0;
#pragma unroll
    for (int j = 0; j < kSlicesPer; ++j) {
        const int c = int(threadIdx.x) * kSlicesPer + j;
        const uint64_t* part = sc.parts + (r * kMaxSpreadCtas + c) * 2;
        pa[j] = c < n_slices ? __ldcg(part) : 0;
        pt[j] = c < n_slices ? __ldcg(part + 1) : 0;
        my_ties += pt[j];
    }
    uint64_t all_ties = 0;
    const uint64_t tie_off = cta_exclusive_scan_u64<T, false>(my_ties, s64, &all_ties);
    uint64_t sw[kSlicesPer], my_sum = 0;
    {
        uint64_t off = tie_off;
#pragma unroll
        for (int j = 0; j < kSlicesPer; ++j) {
            const uint64_t kept = keep_ties > off ? std::min(keep_ties - off, pt[j]) : 0;
            sw[j] = pa[j] + kept * q_t;
            my_sum += sw[j];
            off += pt[j];
        }
    }
    uint64_t total = 0;
    const uint64_t before = cta_exclusive_scan_u64<T, false>(my_sum, s64, &total);
    __shared__ int64_t pick_slice;
    __shared__ uint64_t pick_before, pick_ties;
    if (threadIdx.x == 0) pick_slice = -1;
    __syncthreads();
    const uint64_t target = total > 0 ? draw_target(counter_uniform(p.seed, p.draw_index), total) : 0;
    if (total > 0 && target >= before && target < before + my_sum) {
        uint64_t acc = before, off = tie_off;
        bool found = false;
#pragma unroll
        for (int j = 0; j < kSlicesPer; ++j) {
            if (!found && target < acc + sw[j]) {
                found = true;
                pick_slice = int64_t(threadIdx.x) * kSlicesPer + j;
                pick_before = acc;
                pick_ties = off;
            }
            acc += sw[j];
            off += pt[j];
        }
    }
    __syncthreads();
    // The chosen slice: ranks of its ties, then its cumulative weights.
    const int32_t picked =
        pick_slice >= 0 ? find_in_range<T, kPer>(row, pick_slice * slice, std::min((pick_slice + 1) * slice, vocab), th,
                                                 mx, inv_t, target, pick_before, pick_ties, s64)
                        : -1;
    if (threadIdx.x == 0) {
        st->drawn = picked >= 0 ? picked : int32_t(argmax);  // argmax only if nothing had weight (not reached)
        st->done |= kDoneDraw;
        st->ticket = 0;
    }
}

}  // namespace

SpreadGrid spread_grid(int64_t vocab) {
    const int64_t windows = (vocab + kWindow - 1) / kWindow;
    const int64_t slice = (windows + kMaxSpreadCtas - 1) / kMaxSpreadCtas * kWindow;
    return {(vocab + slice - 1) / slice, slice};
}

size_t spread_scratch_bytes(int64_t rows) {
    const size_t n = size_t(std::max<int64_t>(rows, 0));
    return n * (size_t(kKeyBins) * 8 + size_t(kMaxSpreadCtas) * 16 + sizeof(SpreadRow));
}

SpreadScratch spread_scratch_at(void* base, int64_t rows) {
    auto* hist = static_cast<uint64_t*>(base);
    uint64_t* parts = hist + rows * kKeyBins;
    auto* state = reinterpret_cast<SpreadRow*>(parts + rows * kMaxSpreadCtas * 2);
    return {state, hist, parts};
}

void launch_spread_reset(const SpreadScratch& s, int64_t rows, cudaStream_t stream) {
    launch_pdl("spread_reset_kernel", spread_reset_kernel, dim3(unsigned((rows + T - 1) / T)), dim3(T), 0, stream,
               s.rows, rows);
    CUDA_CHECK_LAUNCH("spread_reset_kernel");
}

void launch_spread_select(const float* logits, int64_t rows, int64_t vocab, int64_t ld,
                          const DeviceSampleParams* params, const unsigned long long* max_keys, const SpreadScratch& s,
                          bool mass, cudaStream_t stream) {
    const SpreadGrid g = spread_grid(vocab);
    for (int level = 0; level < kLevels; ++level) {
        if (mass) {
            launch_pdl("spread_select_kernel<mass>", spread_select_kernel<true>, dim3(unsigned(g.ctas), unsigned(rows)),
                       dim3(T), 0, stream, logits, vocab, ld, params, max_keys, s, level, g.slice);
        } else {
            launch_pdl("spread_select_kernel<count>", spread_select_kernel<false>,
                       dim3(unsigned(g.ctas), unsigned(rows)), dim3(T), 0, stream, logits, vocab, ld, params, max_keys,
                       s, level, g.slice);
        }
        CUDA_CHECK_LAUNCH("spread_select_kernel");
    }
}

void launch_spread_draw(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DeviceSampleParams* params,
                        const unsigned long long* max_keys, const SpreadScratch& s, cudaStream_t stream) {
    const SpreadGrid g = spread_grid(vocab);
    launch_pdl("spread_draw_kernel", spread_draw_kernel, dim3(unsigned(g.ctas), unsigned(rows)), dim3(T), 0, stream,
               logits, vocab, ld, params, max_keys, s, g.slice);
    CUDA_CHECK_LAUNCH("spread_draw_kernel");
}

}  // namespace flashseek::cuda::sample_detail
