// The sampler's selections and draw in fixed point, shared by its one-CTA kernel (sample.cu) and its passes spread
// over many CTAs per row (sample_spread.cu).
//
// Why fixed point: a token's measure (its temperature-1 mass exp(l - max) for top-p, its temperature weight
// exp((l - max) / T) for the draw) becomes an integer, round(measure x 2^40) (<= 2^40, the maximum's), and every sum
// of measures is an exact 64-bit integer sum. Sums then do not depend on the order of their terms, so
//  - histograms are built with integer atomics (native in shared memory; a float atomicAdd compiles to a
//    compare-and-swap loop, which spun on the few bins a row's logits share),
//  - the one-CTA form and the spread form reach the same thresholds and the same token bit for bit, and a row's token
//    does not depend on its batch-mates or on how its row was cut into slices,
//  - the inverse-CDF draw has one answer: the first kept id (in id order) whose inclusive cumulative weight exceeds
//    floor(u x total), however the cumulative sums were grouped.
// What the quantization costs: a token whose measure is below 2^-41 of the maximum's counts as 0 (never drawn, no
// top-p mass); 129,280 such tokens weigh less than 6e-8 of the maximum token alone.
//
// Thresholds come from a radix walk over order-preserving 32-bit keys in three levels (bits 31..21, 20..10, 9..0):
// each level histograms the entries whose key matches the prefix fixed so far into 2,048 (or 1,024) bins of count or
// mass and walks the bins from the top until the measure of keys >= the bin reaches the target. Shared-memory
// counters are 32-bit: a mass is split into its low 20 bits and the rest (each <= 2^20), so a window of at most
// kWindow entries cannot overflow them before it is flushed into 64-bit sums.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/row_pass.cuh"
#include "cuda/common/warp_reduce.cuh"
#include "cuda/sample/sample.cuh"

namespace flashseek::cuda::sample_detail {

constexpr int kKeyBins = 2048;   // bins of the widest level
constexpr int kLevels = 3;
constexpr int kWindow = 2048;    // entries per shared-memory histogram window (see the top)

// Parameters the sampler accepts (others give token -1).
__device__ __forceinline__ bool params_valid(const DeviceSampleParams& p) {
    return isfinite(p.temperature) && p.temperature >= 0.f && p.top_p > 0.f && p.top_p <= 1.f && p.top_k >= 0 &&
           p.min_p >= 0.f && p.min_p <= 1.f;
}
// Whether a row is drawn (not greedy): valid, a temperature, and a maximum that is a number above -inf (a row
// whose entries are all excluded gives -1; a NaN maximum gives its index, as greedy does).
__device__ __forceinline__ bool row_drawn(const DeviceSampleParams& p, float mx) {
    return params_valid(p) && p.temperature > 0.f && mx != -INFINITY && !isnan(mx);
}
__device__ __forceinline__ bool needs_top_k(const DeviceSampleParams& p, int64_t vocab) {
    return p.top_k > 0 && p.top_k < vocab;
}
__device__ __forceinline__ bool needs_top_p(const DeviceSampleParams& p) { return p.top_p < 1.f; }

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// The draw's uniform in [0, 1), the host's counter_uniform (backend/sampling.cpp).
__device__ __forceinline__ double counter_uniform(uint64_t seed, uint64_t draw_index) {
    const uint64_t h = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ (draw_index * 0xd1b54a32d192ed03ull + 1));
    return double(h >> 11) * (1.0 / 9007199254740992.0);
}

// Keys are common/warp_reduce.cuh's order_key (larger value, larger key; -0 takes +0's key, as the host compares
// values, so the two zeros are one value, tied by id); key_value is its inverse.
__device__ __forceinline__ float key_value(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// l - mx with the maximum's own difference 0 (also when mx is +inf).
__device__ __forceinline__ float below_max(float l, float mx) { return l == mx ? 0.f : l - mx; }

// Temperature-1 mass (top-p), as the one-CTA sampler's float __expf; 0 for NaN and -inf.
__device__ __forceinline__ uint64_t mass_q(float l, float mx) {
    const float m = fminf(__expf(below_max(l, mx)), 1.f);
    return m > 0.f ? __float2ull_rn(m * 0x1p40f) : 0ull;
}
// Temperature weight of the draw, exp((l - mx) / T) in double as the host computes it; 0 for NaN and -inf.
__device__ __forceinline__ uint64_t weight_q(float l, float mx, float inv_t) {
    const double w = fmin(exp(double(below_max(l, mx)) * double(inv_t)), 1.0);
    return w > 0.0 ? __double2ull_rn(w * 0x1p40) : 0ull;
}

// Level geometry: the bin is key bits [shift, shift + width); bits from shift + width up are the fixed prefix.
__device__ __forceinline__ int level_shift(int level) { return level == 0 ? 21 : level == 1 ? 10 : 0; }
__device__ __forceinline__ int level_bins(int level) { return level == 2 ? 1024 : 2048; }
__device__ __forceinline__ uint32_t level_bin(uint32_t key, int level) {
    return (key >> level_shift(level)) & uint32_t(level_bins(level) - 1);
}
__device__ __forceinline__ bool in_prefix(uint32_t key, uint32_t prefix, int level) {
    const int hi = level == 0 ? 32 : level_shift(level - 1);
    return hi == 32 || (key >> hi) == (prefix >> hi);
}

// What a selection walks: count (top-k: every entry but NaN) or mass (top-p, inside the top-k set when one is set:
// keys above set_key, plus set_ties ties at it that the walk adds itself, all of one mass).
struct SelectSpec {
    bool mass;
    int level;
    uint32_t prefix;
    float mx;
    bool restrict_set;
    uint32_t set_key;
};

// One entry into the window's counters (lo, hi: kKeyBins each, 32-bit).
__device__ __forceinline__ void bin_entry(const SelectSpec& s, float l, uint32_t* lo, uint32_t* hi) {
    const uint32_t key = order_key(l);
    if (!in_prefix(key, s.prefix, s.level)) return;
    const uint32_t bin = level_bin(key, s.level);
    if (!s.mass) {
        if (!isnan(l)) atomicAdd(lo + bin, 1u);
        return;
    }
    if (s.restrict_set && key <= s.set_key) return;
    const uint64_t q = mass_q(l, s.mx);
    if (q == 0) return;
    atomicAdd(lo + bin, uint32_t(q & 0xfffffu));
    atomicAdd(hi + bin, uint32_t(q >> 20));
}
__device__ __forceinline__ uint64_t window_bin(const uint32_t* lo, const uint32_t* hi, int b) {
    return (uint64_t(hi[b]) << 20) + lo[b];
}

// ---- CTA-wide reductions over 64-bit integers (T threads, every thread calls; s: T / 32 slots) -----------------

template <int T>
__device__ __forceinline__ uint64_t cta_sum_u64(uint64_t v, uint64_t* s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
    __syncthreads();
    uint64_t t = 0;
#pragma unroll
    for (int w = 0; w < T / 32; ++w) t += s[w];
    return t;
}
template <int T>
__device__ __forceinline__ uint64_t cta_max_u64(uint64_t v, uint64_t* s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t x = __shfl_xor_sync(0xffffffffu, v, o);
        v = x > v ? x : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
    __syncthreads();
    uint64_t t = 0;
#pragma unroll
    for (int w = 0; w < T / 32; ++w) t = s[w] > t ? s[w] : t;
    return t;
}
// Sum of v over threads below this one (prefix) or above it (suffix); *total gets the CTA's sum.
template <int T, bool kSuffix>
__device__ __forceinline__ uint64_t cta_exclusive_scan_u64(uint64_t v, uint64_t* s, uint64_t* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint64_t inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint64_t n = kSuffix ? __shfl_down_sync(0xffffffffu, inc, o) : __shfl_up_sync(0xffffffffu, inc, o);
        if (kSuffix ? lane + o < 32 : lane >= o) inc += n;
    }
    __syncthreads();
    if (lane == (kSuffix ? 0 : 31)) s[warp] = inc;
    __syncthreads();
    uint64_t other = 0, all = 0;
#pragma unroll
    for (int w = 0; w < T / 32; ++w) {
        all += s[w];
        if (kSuffix ? w > warp : w < warp) other += s[w];
    }
    *total = all;
    return other + inc - v;
}

// ---- the walk ----------------------------------------------------------------------------------------------------

// The level's bin where the measure of keys >= it, plus `above` (the measure of keys above the prefix range), first
// reaches target: walking hist[n_bins) (shared memory) from the top. Returns the bin in every thread and sets
// *above_out to the measure strictly above it. Ends at the lowest non-empty bin when target is never reached.
template <int T>
__device__ __forceinline__ int walk_bins(const uint64_t* hist, int n_bins, uint64_t above, uint64_t target,
                                         uint64_t* s, uint64_t* above_out) {
    constexpr int kPer = kKeyBins / T;
    const int b0 = int(threadIdx.x) * kPer;
    uint64_t mine = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
        if (b0 + i < n_bins) mine += hist[b0 + i];
    uint64_t total = 0;
    uint64_t acc = above + cta_exclusive_scan_u64<T, true>(mine, s, &total);
    uint64_t pick = 0, lowest = 0;  // bin + 1 of this thread's crossing / lowest non-empty bin
    uint64_t pick_above = 0, lowest_above = 0;
#pragma unroll
    for (int i = kPer - 1; i >= 0; --i) {
        const int b = b0 + i;
        const uint64_t h = b < n_bins ? hist[b] : 0;
        acc += h;
        if (pick == 0 && h > 0 && acc >= target) {
            pick = uint64_t(b) + 1;
            pick_above = acc - h;
        }
        if (h > 0) {
            lowest = uint64_t(b) + 1;
            lowest_above = acc - h;
        }
    }
    const uint64_t best = cta_max_u64<T>(pick, s);
    __syncthreads();
    if (best != 0) {
        if (pick == best) *above_out = pick_above;
        __syncthreads();
        return int(best) - 1;
    }
    // Not reached: the lowest non-empty bin (largest inverted index), or bin 0 of an empty histogram.
    const uint64_t low = cta_max_u64<T>(lowest != 0 ? uint64_t(kKeyBins) + 1 - lowest : 0, s);
    __syncthreads();
    const int bin = low != 0 ? int(uint64_t(kKeyBins) - low) : 0;
    if (low != 0 && lowest != 0 && int(lowest) - 1 == bin) *above_out = lowest_above;
    if (low == 0 && threadIdx.x == 0) *above_out = above;
    __syncthreads();
    return bin;
}

// A level's target once its first level knows the set's measure `total`: k tokens (at most the set), or the
// smallest integer >= top_p of the mass (at least one unit, at most the set).
__device__ __forceinline__ uint64_t select_target(bool mass, uint64_t total, int32_t top_k, float top_p) {
    if (!mass) return uint64_t(top_k) < total ? uint64_t(top_k) : total;
    uint64_t t = uint64_t(ceil(double(top_p) * double(total)));
    t = t < 1 ? 1 : t;
    return t < total ? t : total;
}
// How many ties at the threshold key the selection keeps (lowest ids first), at least one.
__device__ __forceinline__ int64_t select_ties(bool mass, uint32_t key, float mx, uint64_t target, uint64_t above) {
    const uint64_t need = target > above ? target - above : 1;
    if (!mass) return int64_t(need);
    const uint64_t q = mass_q(key_value(key), mx);
    const uint64_t n = q > 0 ? (need + q - 1) / q : 1;
    return int64_t(n < 1 ? 1 : n);
}

// The end of a level, once hist (shared memory, kKeyBins, zero past the level's bins) holds the level's measures of
// every entry of the row: the top-k ties a restricted mass phase keeps added to their bin (all of one mass), the
// phase's target fixed at level 0 (above is then 0), the walk. Returns the key fixed so far, the measure above it
// and the target. Every thread calls it (CTA barriers).
struct LevelEnd {
    uint32_t key;
    uint64_t above, target;
};
template <int T>
__device__ __forceinline__ LevelEnd finish_level(uint64_t* hist, const SelectSpec& s, int64_t set_ties,
                                                 const DeviceSampleParams& p, uint64_t target, uint64_t above,
                                                 uint64_t* s64, uint64_t* above_s) {
    if (s.restrict_set && in_prefix(s.set_key, s.prefix, s.level) && threadIdx.x == 0)
        hist[level_bin(s.set_key, s.level)] += uint64_t(set_ties) * mass_q(key_value(s.set_key), s.mx);
    __syncthreads();
    if (s.level == 0) {
        uint64_t mine = 0;
        for (int b = threadIdx.x; b < kKeyBins; b += T) mine += hist[b];
        target = select_target(s.mass, cta_sum_u64<T>(mine, s64), p.top_k, p.top_p);
        above = 0;
    }
    const int bin = walk_bins<T>(hist, level_bins(s.level), above, target, s64, above_s);
    return {s.prefix | uint32_t(bin) << level_shift(s.level), *above_s, target};
}

// The final threshold of a row: the select phases' (has, key, ties), raised by min-p's logit threshold (every tie
// kept). No threshold keeps every entry.
struct Threshold {
    uint32_t key;
    int64_t ties;
};
// The top-p threshold t raised over the phases' threshold so far (the top-k one, when `has`): a higher key wins; at
// the top-k key itself, fewer of its ties.
__device__ __forceinline__ void raise_threshold(bool& has, Threshold& th, const Threshold& t) {
    if (!has || t.key > th.key) th = t;
    else th.ties = t.ties < th.ties ? t.ties : th.ties;
    has = true;
}
__device__ __forceinline__ Threshold final_threshold(bool has, uint32_t key, int64_t ties, float min_p, float mx,
                                                     int64_t vocab) {
    Threshold t{has ? key : 0u, has ? ties : vocab};
    if (min_p > 0.f) {  // the host's float threshold
        const uint32_t k = order_key(float(double(mx) + log(double(min_p))));
        if (!has || k > t.key) t = {k, vocab};
    }
    return t;
}

// The draw over row[begin, end) by a CTA of T threads, in windows of T x kPer ids (kPer contiguous per thread, the
// loads in flight together). Every thread calls these (CTA barriers); s64: T / 32 slots.
//
// The weight of the entries above the threshold and the number of ties at it (every thread gets both).
template <int T, int kPer>
__device__ __forceinline__ void range_weight_and_ties(const float* row, int64_t begin, int64_t end,
                                                      const Threshold& th, float mx, float inv_t, uint64_t* s64,
                                                      uint64_t& above, uint64_t& ties) {
    above = ties = 0;
    for (int64_t i0 = begin + threadIdx.x; i0 < end; i0 += int64_t(T) * kPer) {
        float v[kPer];
        load_strided(row, i0, T, end, 0.f, v);
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            if (i0 + int64_t(k) * T >= end) continue;
            const uint32_t key = order_key(v[k]);
            if (key > th.key) above += weight_q(v[k], mx, inv_t);
            ties += key == th.key ? 1 : 0;
        }
    }
    above = cta_sum_u64<T>(above, s64);
    ties = cta_sum_u64<T>(ties, s64);
}
// The first kept id whose cumulative weight exceeds target, counting from `base` (the kept weight before `begin`)
// with `tie_base` ties at the threshold before `begin` (the lowest-id ties are kept); -1 when the range ends first.
template <int T, int kPer>
__device__ __forceinline__ int32_t find_in_range(const float* row, int64_t begin, int64_t end, const Threshold& th,
                                                 float mx, float inv_t, uint64_t target, uint64_t base,
                                                 uint64_t tie_base, uint64_t* s64) {
    __shared__ int32_t picked;
    if (threadIdx.x == 0) picked = -1;
    __syncthreads();
    const uint64_t keep_ties = uint64_t(th.ties);
    for (int64_t w0 = begin; w0 < end; w0 += int64_t(T) * kPer) {
        const int64_t i0 = w0 + int64_t(threadIdx.x) * kPer;
        float v[kPer];
        load_strided(row, i0, 1, end, 0.f, v);
        uint64_t n_ties = 0;
#pragma unroll
        for (int k = 0; k < kPer; ++k) n_ties += i0 + k < end && order_key(v[k]) == th.key ? 1 : 0;
        uint64_t window_ties = 0;
        const uint64_t rank0 = tie_base + cta_exclusive_scan_u64<T, false>(n_ties, s64, &window_ties);
        uint64_t w[kPer], local = 0;
        {
            uint64_t rank = rank0;
#pragma unroll
            for (int k = 0; k < kPer; ++k) {
                w[k] = 0;
                if (i0 + k >= end) continue;
                const uint32_t key = order_key(v[k]);
                if (key > th.key || (key == th.key && rank++ < keep_ties)) w[k] = weight_q(v[k], mx, inv_t);
                local += w[k];
            }
        }
        uint64_t window_sum = 0;
        const uint64_t mine = base + cta_exclusive_scan_u64<T, false>(local, s64, &window_sum);
        if (target >= mine && target < mine + local) {
            uint64_t acc = mine;
#pragma unroll
            for (int k = 0; k < kPer; ++k) {
                acc += w[k];
                if (w[k] > 0 && acc > target) {
                    picked = int32_t(i0 + k);
                    break;
                }
            }
        }
        __syncthreads();
        if (picked >= 0) break;
        base += window_sum;
        tie_base += window_ties;
    }
    return picked;
}

// The draw's target in [0, total): floor(u x total).
__device__ __forceinline__ uint64_t draw_target(double u, uint64_t total) {
    uint64_t t = uint64_t(u * double(total));
    return t < total ? t : total - 1;
}

}  // namespace flashseek::cuda::sample_detail
