// mHC kernels. Partial: CTA (token tile of 4, K chunk of 512) accumulates fn . x for every mix row and the sum of
// squares, in registers, then reduces across the CTA (warp shuffles + shared memory) into a workspace slot; a fixed
// reduction order keeps results deterministic. Finalize: one CTA per token sums the K-split partials in order,
// runs the 4x4 Sinkhorn on one thread (a few hundred flops), collapses the streams and applies the fused RMSNorm.
#include <algorithm>

#include "cuda/common/attn_helpers.cuh"
#include "cuda/mhc/mhc.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kTok = 4;         // tokens per partial CTA (fn is read once per tile)
constexpr int kMixMax = 24;     // (2 + N) * N for N <= 4
constexpr int kChunk = 256;     // K elements per partial CTA (64 CTAs per token tile at N*D = 16384)
constexpr int kThreads = 256;
constexpr int kMaxStreams = 4;

__host__ __device__ int n_mix_of(int n, bool head) { return head ? n : (2 + n) * n; }
int n_splits_of(int64_t k) { return int((k + kChunk - 1) / kChunk); }

__global__ void __launch_bounds__(kThreads) mhc_partial_kernel(const bf16* __restrict__ x, const float* __restrict__ fn,
                                                               int n_tokens, int64_t K, int n_mix,
                                                               float* __restrict__ ws) {
    const int t0 = blockIdx.x * kTok;
    const int64_t k0 = int64_t(blockIdx.y) * kChunk;
    const int64_t k1 = min(K, k0 + kChunk);
    float acc[kTok][kMixMax];
    float ss[kTok];
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
        ss[tt] = 0.f;
#pragma unroll
        for (int o = 0; o < kMixMax; ++o) acc[tt][o] = 0.f;
    }
    for (int64_t k = k0 + threadIdx.x; k < k1; k += kThreads) {
        float xv[kTok];
#pragma unroll
        for (int tt = 0; tt < kTok; ++tt)
            xv[tt] = t0 + tt < n_tokens ? __bfloat162float(x[int64_t(t0 + tt) * K + k]) : 0.f;
#pragma unroll
        for (int o = 0; o < kMixMax; ++o) {
            if (o < n_mix) {
                const float w = __ldg(fn + int64_t(o) * K + k);
#pragma unroll
                for (int tt = 0; tt < kTok; ++tt) acc[tt][o] = fmaf(w, xv[tt], acc[tt][o]);
            }
        }
#pragma unroll
        for (int tt = 0; tt < kTok; ++tt) ss[tt] = fmaf(xv[tt], xv[tt], ss[tt]);
    }
    __shared__ float red[kThreads / 32][kTok][kMixMax + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
#pragma unroll
        for (int o = 0; o < kMixMax; ++o) {
            if (o < n_mix) {
                const float v = warp_sum(acc[tt][o]);
                if (lane == 0) red[warp][tt][o] = v;
            }
        }
        const float v = warp_sum(ss[tt]);
        if (lane == 0) red[warp][tt][kMixMax] = v;
    }
    __syncthreads();
    const int n_out = n_mix + 1;
    for (int i = threadIdx.x; i < kTok * n_out; i += kThreads) {
        const int tt = i / n_out, o = i % n_out;
        if (t0 + tt >= n_tokens) continue;
        const int src = o == n_mix ? kMixMax : o;
        float s = 0.f;
        for (int w = 0; w < kThreads / 32; ++w) s += red[w][tt][src];
        ws[(int64_t(t0 + tt) * gridDim.y + blockIdx.y) * n_out + o] = s;
    }
}

__device__ float sigmoid_acc(float v) { return 1.f / (1.f + expf(-v)); }

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
    if (threadIdx.x < n_out) {
        float s = 0.f;
        for (int i = 0; i < n_splits; ++i) s += ws[(int64_t(t) * n_splits + i) * n_out + threadIdx.x];
        red[threadIdx.x] = s;
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // warp 0: pre/post on lanes < N, the N x N Sinkhorn with one lane per element
        const int lane = threadIdx.x;
        const float rho = 1.f / sqrtf(red[n_mix] / float(K) + p.rms_eps);
        if (lane < N) pre[lane] = sigmoid_acc(red[lane] * rho * p.scale[0] + p.base[lane]) + p.hc_eps;
        if (!p.head_mode) {
            if (lane < N)
                p.post[int64_t(t) * N + lane] = 2.f * sigmoid_acc(red[N + lane] * rho * p.scale[1] + p.base[N + lane]);
            const bool mine = lane < N * N;
            const int j = lane / N, k = lane % N;
            const float eps = p.hc_eps;
            float c = mine ? red[2 * N + lane] * rho * p.scale[2] + p.base[2 * N + lane] : 0.f;
            // sums in the CPU op's order (k = 0..N-1 along a row, j = 0..N-1 down a column)
            auto row_sum = [&](float v) {
                float s = 0.f;
                for (int kk = 0; kk < N; ++kk) s += __shfl_sync(0xffffffffu, v, (j * N + kk) & 31);
                return s;
            };
            auto col_sum = [&](float v) {
                float s = 0.f;
                for (int jj = 0; jj < N; ++jj) s += __shfl_sync(0xffffffffu, v, (jj * N + k) & 31);
                return s;
            };
            float m = -INFINITY;
            for (int kk = 0; kk < N; ++kk) m = fmaxf(m, __shfl_sync(0xffffffffu, c, (j * N + kk) & 31));
            const float e = expf(c - m);
            c = e / row_sum(e) + eps;  // row softmax + eps
            c = c / (col_sum(c) + eps);
            for (int it = 1; it < p.sinkhorn_iters; ++it) {
                c = c / (row_sum(c) + eps);
                c = c / (col_sum(c) + eps);
            }
            if (mine) p.comb[int64_t(t) * N * N + lane] = c;
        }
    }
    __syncthreads();
    const bf16* xt = p.x + int64_t(t) * K;
    float ss = 0.f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float s = 0.f;
        for (int j = 0; j < N; ++j) s += pre[j] * __bfloat162float(xt[int64_t(j) * D + d]);
        s = round_bf16(s);  // the reference returns y in bf16 before the norm
        ybuf[d] = s;
        ss += s * s;
    }
    bf16* yt = p.y + int64_t(t) * D;
    if (!p.norm_weight) {
        for (int d = threadIdx.x; d < D; d += blockDim.x) yt[d] = __float2bfloat16_rn(ybuf[d]);
        return;
    }
    ss = block_sum(ss, scratch);
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
    mhc_partial_kernel<<<grid, kThreads, 0, stream>>>(p.x, p.fn, p.n_tokens, K, n_mix_of(p.n_streams, p.head_mode),
                                                      ws);
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
