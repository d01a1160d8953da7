// GPU sampler (see sample.cuh). One 1024-thread CTA per row:
//   1. max / argmax and log-sum-exp at temperature 1 (block reductions, double accumulation);
//   2. top-k threshold: radix select of the k-th largest order-preserving key (4 passes of 8 bits, counts);
//   3. top-p threshold: the same radix walk over probability mass inside the top-k set (ties at the top-k
//      threshold weighted by the fraction of them that top-k keeps, which is exact since tied logits have
//      equal mass);
//   4. min-p: a logit threshold (max + log(min_p), the host's float), raised over the top-k / top-p one;
//   5. draw: kept set = keys above the final threshold plus the lowest-id ties at it; inverse CDF of the
//      temperature weights in token-id order over contiguous per-thread chunks (block scan).
// The adjustment kernel copies each row with its mask and per-token edits applied (one CTA per row).
// With a scratch (sample_rows_scratch_bytes), step 1's two passes over the row run before the sampler, spread over
// many CTAs per row (one CTA's loads took ~25 us per pass over a 129,280-entry row, which greedy decoding pays
// every step): the max key by atomicMax of per-CTA maxima (a maximum, so the same key in any order), and each of the
// CTA's 1,024 thread positions' sum of exp(l - max) in its own order, which the sampler then reduces exactly as it
// reduces its threads' own sums. The same bits either way.
#include <algorithm>
#include <cfloat>

#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/row_pass.cuh"
#include "cuda/sample/sample.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint32_t order_key(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// Same as sampling.cpp counter_uniform.
__device__ __forceinline__ double counter_uniform(uint64_t seed, uint64_t draw_index) {
    const uint64_t h = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ (draw_index * 0xd1b54a32d192ed03ull + 1));
    return double(h >> 11) * (1.0 / 9007199254740992.0);
}

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

// Exclusive block scan (double), returns this thread's exclusive prefix; *total gets the sum.
__device__ double block_exclusive_scan(double v, double* scratch, double* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += n;
    }
    __syncthreads();
    if (lane == 31) scratch[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        double w = scratch[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double n = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += n;
        }
        scratch[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const double base = warp > 0 ? scratch[warp - 1] : 0.0;
    *total = scratch[31];
    __syncthreads();
    return base + inc - v;
}

struct Select {
    uint32_t key;     // threshold key
    int64_t n_ties;   // how many tokens with key == threshold are kept (lowest ids first)
};

// Radix walk from the top: finds the threshold key where the cumulative measure of keys >= it reaches target.
// measure(i) = 1 (count) or the token's mass; `in_set` restricts the walk; tie_key/tie_frac weight tokens whose key
// equals tie_key (the top-k threshold ties) by tie_frac.
template <bool MASS>
__device__ Select radix_select(const float* row, int64_t vocab, double target, float mx, bool restrict_set,
                               uint32_t set_key, double tie_frac, float* hist_f, uint32_t* hist_c, double* dscratch) {
    uint32_t prefix = 0, prefix_mask = 0;
    double above = 0.0;  // measure of keys strictly above the current prefix range
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) {
            hist_f[b] = 0.f;
            hist_c[b] = 0u;
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float l = row[i];
            const uint32_t k = order_key(l);
            if ((k & prefix_mask) != prefix) continue;
            if (restrict_set && k < set_key) continue;
            const uint32_t bin = (k >> shift) & 255u;
            if (MASS) {
                float m = __expf(l - mx);
                if (restrict_set && k == set_key) m *= float(tie_frac);
                atomicAdd(&hist_f[bin], m);
            } else {
                atomicAdd(&hist_c[bin], 1u);
            }
        }
        __syncthreads();
        // Thread 0 walks the bins from the top.
        if (threadIdx.x == 0) {
            double acc = above;
            int chosen = 0;
            for (int b = 255; b >= 0; --b) {
                const double m = MASS ? double(hist_f[b]) : double(hist_c[b]);
                if (acc + m >= target) {
                    chosen = b;
                    break;
                }
                acc += m;
                chosen = b;  // if never reached (rounding), end at the lowest non-empty bin
            }
            dscratch[0] = acc;
            dscratch[1] = double(chosen);
        }
        __syncthreads();
        above = dscratch[0];
        const uint32_t chosen = uint32_t(dscratch[1]);
        prefix |= chosen << shift;
        prefix_mask |= 255u << shift;
        __syncthreads();
    }
    // prefix is the threshold key; `above` is the measure of keys > threshold. Ties needed to reach target:
    Select s;
    s.key = prefix;
    if (MASS) {
        // every tie has the same mass
        float l_t;
        const uint32_t u = (prefix & 0x80000000u) ? (prefix & 0x7fffffffu) : ~prefix;
        l_t = __uint_as_float(u);
        const double m_t = double(__expf(l_t - mx));
        const double need = (target - above) / m_t;
        s.n_ties = int64_t(ceil(need - 1e-9));
    } else {
        s.n_ties = int64_t(target - above + 0.5);
    }
    if (s.n_ties < 1) s.n_ties = 1;
    return s;
}

// The spread form of step 1 (see the top): per-row max keys, then per thread position the sum of exp(l - max).
constexpr int kMaxThreads = 256;
constexpr int kMaxPerThread = 8;
constexpr int kSumThreads = 64;  // CTAs of kSumThreads positions each: kThreads / kSumThreads CTAs per row

__global__ void __launch_bounds__(kMaxThreads) row_max_kernel(const float* __restrict__ logits, int64_t vocab,
                                                              int64_t ld, int64_t slice,
                                                              unsigned long long* __restrict__ max_keys) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int64_t r = blockIdx.y;
    const unsigned long long best = slice_max_key<kMaxThreads, kMaxPerThread>(
        logits + r * ld, vocab, slice, [](float v, uint32_t i) { return value_index_key(order_key(v), i); });
    if (threadIdx.x == 0) atomicMax(max_keys + r, best);
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
    const float mx = row[key_index(max_keys[r])];
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
                                                          const double* __restrict__ exp_sums) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    __shared__ float hist_f[256];
    __shared__ uint32_t hist_c[256];
    __shared__ unsigned long long ullscratch[32];
    const int64_t r = blockIdx.x;
    const float* row = logits + r * ld;
    // The spread passes' max key, read by every thread and then zeroed for the next call (before any early return).
    __shared__ unsigned long long spread_key;
    if (max_keys) {
        if (threadIdx.x == 0) spread_key = max_keys[r];
        __syncthreads();
        if (threadIdx.x == 0) max_keys[r] = 0;
    }
    const DeviceSampleParams p = params[r];
    const bool valid = isfinite(p.temperature) && p.temperature >= 0.f && p.top_p > 0.f && p.top_p <= 1.f &&
                       p.top_k >= 0 && p.min_p >= 0.f && p.min_p <= 1.f;
    if (!valid) {
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
    if (p.temperature > 0.f) {
        // 2./3. thresholds
        bool have_threshold = false;
        uint32_t th_key = 0;
        int64_t th_ties = 0;
        double zk = z;
        if (p.top_k > 0 && p.top_k < vocab) {
            const Select s = radix_select<false>(row, vocab, double(p.top_k), mx, false, 0, 1.0, hist_f, hist_c, dscratch);
            have_threshold = true;
            th_key = s.key;
            th_ties = s.n_ties;
            // mass of the top-k set (ties weighted by the kept fraction)
            double m = 0.0;
            uint32_t eq = 0;
            for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
                const uint32_t k = order_key(row[i]);
                if (k > th_key) m += double(__expf(row[i] - mx));
                if (k == th_key) ++eq;
            }
            m = block_reduce(m, [](double a, double b) { return a + b; }, dscratch);
            const double eq_total = double(block_reduce(eq, [](uint32_t a, uint32_t b) { return a + b; },
                                                        reinterpret_cast<uint32_t*>(fscratch)));
            const uint32_t u = (th_key & 0x80000000u) ? (th_key & 0x7fffffffu) : ~th_key;
            const double m_t = double(__expf(__uint_as_float(u) - mx));
            if (th_ties > int64_t(eq_total)) th_ties = int64_t(eq_total);
            zk = m + double(th_ties) * m_t;
        }
        if (p.top_p < 1.f) {
            const double frac = have_threshold ? 1.0 : 1.0;
            double tie_frac = 1.0;
            if (have_threshold) {
                uint32_t eq = 0;
                for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) eq += order_key(row[i]) == th_key ? 1u : 0u;
                const double eq_total = double(block_reduce(eq, [](uint32_t a, uint32_t b) { return a + b; },
                                                            reinterpret_cast<uint32_t*>(fscratch)));
                tie_frac = eq_total > 0 ? double(th_ties) / eq_total : 1.0;
            }
            (void)frac;
            const Select s = radix_select<true>(row, vocab, double(p.top_p) * zk, mx, have_threshold, th_key, tie_frac,
                                                hist_f, hist_c, dscratch);
            if (!have_threshold || s.key > th_key) {
                th_key = s.key;
                th_ties = s.n_ties;
            } else {
                th_ties = s.n_ties < th_ties ? s.n_ties : th_ties;  // s.key == th_key: fewer ties
            }
            have_threshold = true;
        }
        if (p.min_p > 0.f) {
            // Keeps every token with logit >= threshold (all ties at it), where it is stricter than the above.
            const uint32_t min_p_key = order_key(float(double(mx) + log(double(p.min_p))));
            if (!have_threshold || min_p_key > th_key) {
                th_key = min_p_key;
                th_ties = int64_t(vocab);
            }
            have_threshold = true;
        }
        // 5. draw in id order over contiguous chunks.
        const int64_t chunk = (vocab + blockDim.x - 1) / blockDim.x;
        const int64_t c0 = int64_t(threadIdx.x) * chunk, c1 = c0 + chunk < vocab ? c0 + chunk : vocab;
        double tie_base = 0.0, dummy = 0.0;
        if (have_threshold) {
            double ties = 0.0;
            for (int64_t i = c0; i < c1; ++i) ties += order_key(row[i]) == th_key ? 1.0 : 0.0;
            tie_base = block_exclusive_scan(ties, dscratch, &dummy);
        }
        const float inv_t = 1.f / p.temperature;
        auto kept = [&](int64_t i, int64_t& tie_rank) -> bool {
            if (!have_threshold) return true;
            const uint32_t k = order_key(row[i]);
            if (k > th_key) return true;
            if (k == th_key) return tie_rank++ < th_ties;
            return false;
        };
        double local = 0.0;
        int64_t last_kept = -1;
        {
            int64_t rank = int64_t(tie_base);
            for (int64_t i = c0; i < c1; ++i)
                if (kept(i, rank)) {
                    local += exp(double(row[i] - mx) * double(inv_t));
                    last_kept = i;
                }
        }
        double total = 0.0;
        const double before = block_exclusive_scan(local, dscratch, &total);
        const unsigned long long last = block_reduce((unsigned long long)(last_kept + 1),
                                                     [](unsigned long long a, unsigned long long b) { return a > b ? a : b; },
                                                     ullscratch);
        const double target = counter_uniform(p.seed, p.draw_index) * total;
        __shared__ int32_t picked;
        if (threadIdx.x == 0) picked = int32_t(last) - 1;
        __syncthreads();
        if (local > 0.0 && target >= before && target < before + local) {
            int64_t rank = int64_t(tie_base);
            double acc = before;
            for (int64_t i = c0; i < c1; ++i)
                if (kept(i, rank)) {
                    acc += exp(double(row[i] - mx) * double(inv_t));
                    if (acc > target) {
                        picked = int32_t(i);
                        break;
                    }
                }
        }
        __syncthreads();
        token = picked;
    }
    float token_lp = row[token] - log_z;
    if (raw_logits && out_lp) {
        // The reported logprob is the raw row's (the model's distribution), not the adjusted one's.
        const float* raw = raw_logits + r * raw_ld;
        float raw_mx = -INFINITY;
        for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) raw_mx = fmaxf(raw_mx, raw[i]);
        raw_mx = block_reduce(raw_mx, [](float a, float b) { return fmaxf(a, b); }, fscratch);
        double raw_z = 0.0;
        for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) raw_z += double(__expf(raw[i] - raw_mx));
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
    return size_t(std::max<int64_t>(rows, 0)) * (sizeof(unsigned long long) + size_t(kThreads) * sizeof(double));
}

void sample_rows(const float* logits, int64_t rows, int64_t vocab, int64_t ld, const DeviceSampleParams* params,
                 int32_t* out_token, float* out_logprob, cudaStream_t stream, const float* raw_logits,
                 int64_t raw_ld, void* scratch, size_t scratch_bytes) {
    FS_REQUIRE(logits && params && out_token, "sample_rows: null pointer argument");
    FS_REQUIRE(vocab > 0 && vocab < (int64_t(1) << 31), "sample_rows: vocabulary size ", vocab, " out of range");
    FS_REQUIRE(rows > 0 && rows <= 2147483647, "sample_rows: rows ", rows, " out of range");
    FS_REQUIRE(ld == 0 || ld >= vocab, "sample_rows: row stride ", ld, " < vocab ", vocab);
    FS_REQUIRE(!raw_logits || raw_ld == 0 || raw_ld >= vocab, "sample_rows: raw row stride ", raw_ld, " < vocab ",
               vocab);
    unsigned long long* max_keys = nullptr;
    double* exp_sums = nullptr;
    if (scratch) {
        FS_REQUIRE(scratch_bytes >= sample_rows_scratch_bytes(rows), "sample_rows: scratch of ", scratch_bytes,
                   " bytes is smaller than the ", sample_rows_scratch_bytes(rows), " needed for ", rows, " rows");
        FS_REQUIRE(rows <= 65535, "sample_rows: ", rows, " rows exceed the spread passes' grid");
        exp_sums = static_cast<double*>(scratch);
        max_keys = reinterpret_cast<unsigned long long*>(exp_sums + rows * kThreads);
        const int64_t per_cta = int64_t(kMaxThreads) * kMaxPerThread;
        const int64_t ctas = std::min<int64_t>((vocab + per_cta - 1) / per_cta, 1024);
        const int64_t slice = (vocab + ctas - 1) / ctas;
        launch_pdl("row_max_kernel", row_max_kernel, dim3(unsigned(ctas), unsigned(rows)), dim3(kMaxThreads), 0,
                   stream, logits, vocab, ld, slice, max_keys);
        CUDA_CHECK_LAUNCH("row_max_kernel");
        launch_pdl("row_exp_sums_kernel", row_exp_sums_kernel, dim3(unsigned(kThreads / kSumThreads), unsigned(rows)),
                   dim3(kSumThreads), 0, stream, logits, vocab, ld, const_cast<const unsigned long long*>(max_keys),
                   exp_sums);
        CUDA_CHECK_LAUNCH("row_exp_sums_kernel");
    }
    launch_pdl("sample_kernel", sample_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, stream, logits, vocab, ld,
               params, out_token, out_logprob, raw_logits, raw_ld, max_keys, const_cast<const double*>(exp_sums));
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
