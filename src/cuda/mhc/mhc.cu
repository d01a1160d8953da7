// mHC kernels, shaped for decode latency (batch 1 to 64), where the work is tiny and every dependent step costs.
// Partial: CTA = (tile of 4 tokens, K chunk of 256 = 8 elements per lane); warp w owns mix rows w, w+8, w+16 and
// keeps the 4 tokens' x chunk in registers, so fn is read once per tile with 16-byte loads and each warp reduces
// only its 12 dot products (shuffle butterflies interleaved for ILP; warp 0 adds the 4 sums of squares).
// Finalize: one CTA per token; warps sum the K-split partials row by row, warp 0 computes pre/post and runs the
// Sinkhorn (one lane per matrix element, compile-time N) while the other warps already collapse the streams with
// pre, then the fused RMSNorm. Sums run in fixed orders, so results are deterministic.
#include <algorithm>

#include "cuda/common/attn_helpers.cuh"
#include "cuda/mhc/mhc.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kTok = 4;          // tokens per partial CTA (fn is read once per tile)
constexpr int kMixMax = 24;      // (2 + N) * N for N <= 4
constexpr int kPerLane = 8;      // K elements per lane
constexpr int kChunk = 32 * kPerLane;  // K elements per partial CTA (64 CTAs per token tile at N*D = 16384)
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kMixMax / kWarps;  // 3
constexpr int kMaxStreams = 4;

__host__ __device__ int n_mix_of(int n, bool head) { return head ? n : (2 + n) * n; }
int n_splits_of(int64_t k) { return int((k + kChunk - 1) / kChunk); }

__global__ void __launch_bounds__(kThreads) mhc_partial_kernel(const bf16* __restrict__ x, const float* __restrict__ fn,
                                                               int n_tokens, int64_t K, int n_mix, bool aligned,
                                                               float* __restrict__ ws) {
    const int t0 = blockIdx.x * kTok;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t kb = int64_t(blockIdx.y) * kChunk + lane * kPerLane;  // this lane's first element
    const bool full = aligned && kb + kPerLane <= K;                   // 16-byte aligned vector path
    float xv[kTok][kPerLane];
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
        const bool tok = t0 + tt < n_tokens;
        const bf16* src = x + int64_t(t0 + tt) * K + kb;
        if (tok && full) {
            const uint4 raw = *reinterpret_cast<const uint4*>(src);
            const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
            for (int i = 0; i < kPerLane / 2; ++i) {
                const float2 f = __bfloat1622float2(h2[i]);
                xv[tt][2 * i] = f.x;
                xv[tt][2 * i + 1] = f.y;
            }
        } else {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) xv[tt][i] = tok && kb + i < K ? __bfloat162float(src[i]) : 0.f;
        }
    }
    float dot[kRowsPerWarp + 1][kTok];  // the extra row: sums of squares (warp 0)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int o = warp + kWarps * r;
        float w[kPerLane];
        const float* src = fn + int64_t(o) * K + kb;
        if (o < n_mix && full) {
            *reinterpret_cast<float4*>(w) = __ldg(reinterpret_cast<const float4*>(src));
            *reinterpret_cast<float4*>(w + 4) = __ldg(reinterpret_cast<const float4*>(src) + 1);
        } else {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) w[i] = o < n_mix && kb + i < K ? __ldg(src + i) : 0.f;
        }
#pragma unroll
        for (int tt = 0; tt < kTok; ++tt) {
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) acc = fmaf(w[i], xv[tt][i], acc);
            dot[r][tt] = acc;
        }
    }
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc = fmaf(xv[tt][i], xv[tt][i], acc);
        dot[kRowsPerWarp][tt] = acc;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
        for (int r = 0; r <= kRowsPerWarp; ++r)
#pragma unroll
            for (int tt = 0; tt < kTok; ++tt) dot[r][tt] += __shfl_xor_sync(0xffffffffu, dot[r][tt], off);
    }
    if (lane != 0) return;
    const int n_out = n_mix + 1;
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
        if (t0 + tt >= n_tokens) continue;
        float* dst = ws + (int64_t(t0 + tt) * gridDim.y + blockIdx.y) * n_out;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
            if (warp + kWarps * r < n_mix) dst[warp + kWarps * r] = dot[r][tt];
        if (warp == 0) dst[n_mix] = dot[kRowsPerWarp][tt];
    }
}

__device__ float sigmoid_acc(float v) { return 1.f / (1.f + expf(-v)); }

// Sinkhorn-Knopp of cpu::sinkhorn on warp 0, lane j*N + k holding C[j][k]; sums in the CPU op's order.
template <int N>
__device__ float sinkhorn_lane(float c, int lane, int iters, float eps) {
    const int j = lane / N, k = lane % N;
    auto row_sum = [&](float v) {
        float t[N];
#pragma unroll
        for (int kk = 0; kk < N; ++kk) t[kk] = __shfl_sync(0xffffffffu, v, (j * N + kk) & 31);
        float s = 0.f;
#pragma unroll
        for (int kk = 0; kk < N; ++kk) s += t[kk];
        return s;
    };
    auto col_sum = [&](float v) {
        float t[N];
#pragma unroll
        for (int jj = 0; jj < N; ++jj) t[jj] = __shfl_sync(0xffffffffu, v, (jj * N + k) & 31);
        float s = 0.f;
#pragma unroll
        for (int jj = 0; jj < N; ++jj) s += t[jj];
        return s;
    };
    float m = -INFINITY;
#pragma unroll
    for (int kk = 0; kk < N; ++kk) m = fmaxf(m, __shfl_sync(0xffffffffu, c, (j * N + kk) & 31));
    const float e = expf(c - m);
    c = e / row_sum(e) + eps;  // row softmax + eps
    c = c / (col_sum(c) + eps);
    for (int it = 1; it < iters; ++it) {
        c = c / (row_sum(c) + eps);
        c = c / (col_sum(c) + eps);
    }
    return c;
}

__global__ void __launch_bounds__(kThreads) mhc_finalize_kernel(MhcPreParams p, const float* __restrict__ ws,
                                                                int n_splits) {
    extern __shared__ float ybuf[];  // [D]
    __shared__ float red[kMixMax + 1];
    __shared__ float pre[kMaxStreams];
    __shared__ float scratch[32];
    const int t = blockIdx.x;
    const int N = p.n_streams, D = p.dim;
    const int64_t K = int64_t(N) * D;
    const int n_mix = n_mix_of(N, p.head_mode), n_out = n_mix + 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = warp; o < n_out; o += kWarps) {  // split-K sums, one warp per row
        float s = 0.f;
        for (int i = lane; i < n_splits; i += 32) s += ws[(int64_t(t) * n_splits + i) * n_out + o];
        s = warp_sum(s);
        if (lane == 0) red[o] = s;
    }
    __syncthreads();
    const float rho = 1.f / sqrtf(red[n_mix] / float(K) + p.rms_eps);
    if (threadIdx.x < N) pre[threadIdx.x] = sigmoid_acc(red[threadIdx.x] * rho * p.scale[0] + p.base[threadIdx.x]) + p.hc_eps;
    __syncthreads();
    const bf16* xt = p.x + int64_t(t) * K;
    float ss = 0.f;
    if (warp == 0) {
        if (!p.head_mode) {
            if (lane < N)
                p.post[int64_t(t) * N + lane] = 2.f * sigmoid_acc(red[N + lane] * rho * p.scale[1] + p.base[N + lane]);
            const float c0 = lane < N * N ? red[2 * N + lane] * rho * p.scale[2] + p.base[2 * N + lane] : 0.f;
            float c = 0.f;
            switch (N) {
                case 1: c = sinkhorn_lane<1>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
                case 2: c = sinkhorn_lane<2>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
                case 3: c = sinkhorn_lane<3>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
                default: c = sinkhorn_lane<4>(c0, lane, p.sinkhorn_iters, p.hc_eps); break;
            }
            if (lane < N * N) p.comb[int64_t(t) * N * N + lane] = c;
        }
    } else {  // the other warps collapse the streams meanwhile
        for (int d = threadIdx.x - 32; d < D; d += kThreads - 32) {
            float s = 0.f;
            for (int j = 0; j < N; ++j) s += pre[j] * __bfloat162float(xt[int64_t(j) * D + d]);
            s = round_bf16(s);  // the reference returns y in bf16 before the norm
            ybuf[d] = s;
            ss += s * s;
        }
    }
    bf16* yt = p.y + int64_t(t) * D;
    if (!p.norm_weight) {
        __syncthreads();
        for (int d = threadIdx.x; d < D; d += blockDim.x) yt[d] = __float2bfloat16_rn(ybuf[d]);
        return;
    }
    ss = block_sum(ss, scratch);  // its barriers also publish ybuf
    const float r = 1.f / sqrtf(ss / float(D) + p.norm_eps);
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        yt[d] = __float2bfloat16_rn(__bfloat162float(p.norm_weight[d]) * (ybuf[d] * r));
}

__global__ void mhc_post_kernel(int n_tokens, int N, int D, const bf16* x, const bf16* o, const float* post,
                                const float* comb, bf16* x_out) {
    const int64_t total = int64_t(n_tokens) * D;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / D, d = i % D;
        const bf16* xt = x + t * N * D;
        float xv[kMaxStreams];
        for (int j = 0; j < N; ++j) xv[j] = __bfloat162float(xt[int64_t(j) * D + d]);
        const float ov = __bfloat162float(o[i]);
        const float* c = comb + t * N * N;
        float outv[kMaxStreams];
        for (int k = 0; k < N; ++k) {
            float s = post[t * N + k] * ov;
            for (int j = 0; j < N; ++j) s += c[j * N + k] * xv[j];
            outv[k] = s;
        }
        for (int k = 0; k < N; ++k) x_out[t * N * D + int64_t(k) * D + d] = __float2bfloat16_rn(outv[k]);
    }
}

}  // namespace

size_t mhc_pre_workspace_bytes(int max_tokens, int n_streams, int dim, bool head_mode) {
    return size_t(std::max(max_tokens, 1)) * n_splits_of(int64_t(n_streams) * dim) *
           (n_mix_of(n_streams, head_mode) + 1) * sizeof(float);
}

void mhc_pre(const MhcPreParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    FS_ATTN_REQUIRE(p.n_streams >= 1 && p.n_streams <= kMaxStreams, "mhc_pre: hc_mult must be in 1..{}, got {}", kMaxStreams,
             p.n_streams);
    FS_ATTN_REQUIRE(p.dim > 0, "mhc_pre: hidden_size must be positive, got {}", p.dim);
    FS_ATTN_REQUIRE(p.x && p.fn && p.base && p.scale && p.y, "mhc_pre: x, fn, base, scale and y are required");
    FS_ATTN_REQUIRE(p.head_mode || (p.post && p.comb), "mhc_pre: post and comb outputs are required outside head mode");
    FS_ATTN_REQUIRE(p.sinkhorn_iters >= 1, "mhc_pre: hc_sinkhorn_iters must be >= 1, got {}", p.sinkhorn_iters);
    if (p.n_tokens <= 0) return;
    const size_t need = mhc_pre_workspace_bytes(p.n_tokens, p.n_streams, p.dim, p.head_mode);
    FS_ATTN_REQUIRE(workspace && workspace_bytes >= need, "mhc_pre: workspace of {} bytes is smaller than the {} needed",
             workspace_bytes, need);
    const int64_t K = int64_t(p.n_streams) * p.dim;
    const int splits = n_splits_of(K);
    FS_ATTN_REQUIRE(splits <= 65535, "mhc_pre: hc_mult * hidden_size {} too large", K);
    float* ws = static_cast<float*>(workspace);
    const dim3 grid((p.n_tokens + kTok - 1) / kTok, splits);
    const bool aligned = K % kPerLane == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(p.fn) % 16 == 0;
    mhc_partial_kernel<<<grid, kThreads, 0, stream>>>(p.x, p.fn, p.n_tokens, K, n_mix_of(p.n_streams, p.head_mode),
                                                      aligned, ws);
    FS_ATTN_LAUNCHED();
    const size_t smem = size_t(p.dim) * sizeof(float);
    static size_t configured = 48 * 1024;
    if (smem > configured) {
        FS_ATTN_CUDA_CHECK(cudaFuncSetAttribute(mhc_finalize_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                int(smem)));
        configured = smem;
    }
    mhc_finalize_kernel<<<p.n_tokens, kThreads, smem, stream>>>(p, ws, splits);
    FS_ATTN_LAUNCHED();
}

void mhc_post(int n_tokens, int n_streams, int dim, const bf16* x, const bf16* o, const float* post, const float* comb,
              bf16* x_out, cudaStream_t stream) {
    FS_ATTN_REQUIRE(n_streams >= 1 && n_streams <= kMaxStreams, "mhc_post: hc_mult must be in 1..{}, got {}", kMaxStreams,
             n_streams);
    if (n_tokens <= 0) return;
    const int64_t total = int64_t(n_tokens) * dim;
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((total + threads - 1) / threads, 8192));
    mhc_post_kernel<<<blocks, threads, 0, stream>>>(n_tokens, n_streams, dim, x, o, post, comb, x_out);
    FS_ATTN_LAUNCHED();
}

}  // namespace flashseek::cuda
