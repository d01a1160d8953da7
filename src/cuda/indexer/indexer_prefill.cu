// Tensor-core indexer scores for many rows (see indexer_prefill.cuh). Scores kernel, CTA = (a block of 256 keys, a
// range of rows), 8 warps of 32 keys each:
//  * the key block of the rows' sequence is dequantized to bf16 in shared memory and each warp keeps its 32 keys
//    as mma A fragments in registers (keys in M: 2 m-tiles x head_dim/16 k-steps), reloaded only when the next row
//    belongs to another sequence;
//  * per row, q (all heads, bf16) and the head weights are copied into shared memory (double-buffered cp.async,
//    the next row's copy in flight during the current one), then each warp runs S^T = K q^T one n-tile of 8 heads at
//    a time (B fragments straight from q's rows), applies ReLU and the weights in fp32 and adds the heads: within the
//    thread n-tile by n-tile, then across the quad (xor 1, xor 2);
//  * rows with nothing to score here (n_vis <= topk: all selected; or no visible key in this block) are skipped.
// The sum order per score is fixed by the key's position in the fragment and the head index only.
#include <algorithm>
#include <sstream>
#include <string>

#include "cuda/attention/attn_tile.cuh"
#include "cuda/common/arch.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/indexer/indexer_prefill.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kKeysPerWarp = 32;
constexpr int kKeyBlock = kWarps * kKeysPerWarp;  // 256
constexpr int kPad = 8;                           // bf16 row padding (conflict-free ldmatrix)
constexpr int kMaxHeads = 128;

__host__ __device__ inline int padded_heads8(int h) { return (h + 7) / 8 * 8; }

struct ScoreSmem {
    bf16* keys;  // [kKeyBlock][D + pad]
    bf16* q;     // [stages][Hp][D + pad]
    float* w;    // [stages][Hp] head weights (scaled), 0 past n_heads
};
__host__ __device__ inline size_t score_smem_layout(int D, int Hp, int stages, ScoreSmem* s, unsigned char* raw) {
    SmemCarver c{raw};
    unsigned char* keys = c.take(size_t(kKeyBlock) * (D + kPad) * 2);
    unsigned char* q = c.take(size_t(stages) * Hp * (D + kPad) * 2);
    unsigned char* w = c.take(size_t(stages) * Hp * 4);
    if (s) {
        s->keys = reinterpret_cast<bf16*>(keys);
        s->q = reinterpret_cast<bf16*>(q);
        s->w = reinterpret_cast<float*>(w);
    }
    return c.size;
}

// %laneid through volatile asm: read where it is used, never hoisted.
__device__ __forceinline__ int lane_id() {
    int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

__device__ __forceinline__ int visible(const IndexerSelectParams& p, int t) {
    return min(int((int64_t(p.batch.token_pos[t]) + 1) / p.ratio), p.max_entries);
}

// Key block blockIdx.x, rows [row_base + blockIdx.y * rows_per_cta, ...) below row_end; scores of row t at
// scores[(t - row_base) * row_stride + j]. Key blocks vary fastest, so the CTAs of one row block run together and
// its q rows are read from HBM once (then from L2), while every sequence's keys stay in L2.
template <int D>
__global__ void __launch_bounds__(kThreads, 2)
    scores_mma_kernel(IndexerSelectParams p, int row_base, int row_end, int rows_per_cta, float* __restrict__ scores,
                      int64_t row_stride, int stages) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    constexpr int DP = D + kPad, KS = D / 16;  // k-steps
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int H = p.n_heads, Hp = padded_heads8(H), n_nt = Hp / 8;
    ScoreSmem sm;
    score_smem_layout(D, Hp, stages, &sm, smem_raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int key0 = blockIdx.x * kKeyBlock;
    const int r_begin = row_base + blockIdx.y * rows_per_cta, r_end = min(row_end, r_begin + rows_per_cta);

    // A row needs this CTA when it is scored at all and sees some key of the block (uniform over the CTA).
    auto active = [&](int t) {
        const int n = visible(p, t);
        return n > p.topk && n > key0;
    };
    auto next_active = [&](int from) {
        while (from < r_end && !active(from)) ++from;
        return from;
    };
    auto load_q = [&](int t, int buf) {
        bf16* q = sm.q + size_t(buf) * Hp * DP;
        constexpr int chunks = D / 8;
        for (int i = tid; i < Hp * chunks; i += blockDim.x) {
            const int h = i / chunks, d = (i % chunks) * 8;
            const bf16* src = h < H ? p.q + int64_t(t) * p.q_stride + int64_t(h) * D + d : p.q;
            cp_async16(smem_u32(q + h * DP + d), src, h < H ? 16 : 0);
        }
        for (int h = tid; h < Hp; h += blockDim.x)
            sm.w[buf * Hp + h] =
                h < H ? __bfloat162float(p.weights[int64_t(t) * p.weights_stride + h]) * p.weights_scale : 0.f;
    };

    uint32_t af[2][KS][4];  // this warp's 32 keys as A fragments: [m-tile][k-step]
    int loaded_slot = -1;
    int cur = next_active(r_begin), buf = 0;
    if (stages > 1 && cur < r_end) load_q(cur, 0);
    cp_async_commit();
    while (cur < r_end) {
        const int nxt = next_active(cur + 1);
        if (stages > 1) {
            if (nxt < r_end) load_q(nxt, buf ^ 1);
            cp_async_commit();
            cp_async_wait(1);
        } else {
            load_q(cur, 0);
            cp_async_commit();
            cp_async_wait(0);
        }
        __syncthreads();  // q and weights of `cur` are in shared memory; the key tile is free to rewrite
        const int seq = p.batch.token_seq[cur];
        const int slot = p.batch.seq_slot[seq];
        if (slot != loaded_slot) {
            // Keys of this sequence: entries written so far (after this step's compressor) are < (start + n) / ratio.
            const int n_keys = min((p.batch.seq_start_pos[seq] + p.batch.seq_n_tokens[seq]) / p.ratio, p.max_entries);
            const IndexFormat fmt = IndexFormat(p.keys.format);
            constexpr int chunks = D / 8;
            for (int i = tid; i < kKeyBlock * chunks; i += blockDim.x) {
                const int e = i / chunks, d = (i % chunks) * 8, j = key0 + e;
                __nv_bfloat162 v[4];
                if (j < n_keys) {
                    const uint8_t* src = paged_entry(p.keys, slot, j);
                    if (fmt == IndexFormat::BF16) {
#pragma unroll
                        for (int k = 0; k < 4; ++k) v[k] = reinterpret_cast<const __nv_bfloat162*>(src)[d / 2 + k];
                    } else {
                        const float s = e8m0_value(src[D / 2 + d / 32]);
#pragma unroll
                        for (int k = 0; k < 4; ++k) {
                            const uint8_t b = src[d / 2 + k];
                            v[k] = __floats2bfloat162_rn(from_e2m1(b & 0xf) * s, from_e2m1(b >> 4) * s);
                        }
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < 4; ++k) v[k] = __floats2bfloat162_rn(0.f, 0.f);
                }
                *reinterpret_cast<uint4*>(sm.keys + e * DP + d) = *reinterpret_cast<const uint4*>(v);
            }
            __syncthreads();
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int ks = 0; ks < KS; ++ks)
                    ldsm_x4(smem_u32(sm.keys + (warp * kKeysPerWarp + mt * 16 + lane % 16) * DP + ks * 16 +
                                     (lane / 16) * 8),
                            af[mt][ks][0], af[mt][ks][1], af[mt][ks][2], af[mt][ks][3]);
            loaded_slot = slot;
        }

        const bf16* q = sm.q + size_t(stages > 1 ? buf : 0) * Hp * DP;
        const float* w = sm.w + (stages > 1 ? buf : 0) * Hp;
        float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // [m-tile][row half]: keys lane/4 and lane/4 + 8
        for (int nt = 0; nt < n_nt; ++nt) {
            float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            const uint32_t b_base = smem_u32(q + (nt * 8 + lane % 8) * DP + (lane / 8) * 8);
#pragma unroll
            for (int ks = 0; ks < KS; ks += 2) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(b_base + ks * 32, b0, b1, b2, b3);  // k-steps ks (b0, b1) and ks + 1 (b2, b3)
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    mma_16816(c[mt], af[mt][ks][0], af[mt][ks][1], af[mt][ks][2], af[mt][ks][3], b0, b1);
                    mma_16816(c[mt], af[mt][ks + 1][0], af[mt][ks + 1][1], af[mt][ks + 1][2], af[mt][ks + 1][3], b2,
                              b3);
                }
            }
            const float w0 = w[nt * 8 + 2 * (lane % 4)], w1 = w[nt * 8 + 2 * (lane % 4) + 1];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                part[mt][0] = fmaf(w1, fmaxf(c[mt][1], 0.f), fmaf(w0, fmaxf(c[mt][0], 0.f), part[mt][0]));
                part[mt][1] = fmaf(w1, fmaxf(c[mt][3], 0.f), fmaf(w0, fmaxf(c[mt][2], 0.f), part[mt][1]));
            }
        }
        // Keys of this thread's results (lane % 4 == 0): j0 + 16 mt + 8 rh. The lane is re-read here rather than
        // kept from the kernel's start, so the index is not held in a register across the row loop (on sm_100 /
        // sm_120 that register would spill).
        const int n_vis = visible(p, cur);
        float* out = scores + int64_t(cur - row_base) * row_stride;
        const int lane_now = lane_id();
        const int j0 = key0 + warp * kKeysPerWarp + lane_now / 4;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int rh = 0; rh < 2; ++rh) {
                float v = part[mt][rh];
                v += __shfl_xor_sync(0xffffffffu, v, 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                const int j = j0 + mt * 16 + 8 * rh;
                if (lane_now % 4 == 0 && j < n_vis) out[j] = v;
            }
        __syncthreads();  // every warp is done with this q buffer before the next copy into it
        cur = nxt;
        buf ^= 1;
    }
    cp_async_wait(0);  // no copy may still target shared memory when the CTA exits
}

}  // namespace

size_t indexer_select_prefill_workspace_bytes(int max_tokens, int max_entries, size_t max_bytes) {
    const size_t row = size_t(std::max(max_entries, 1)) * sizeof(float);
    const size_t rows = std::clamp<size_t>(max_bytes / row, 1, size_t(std::max(max_tokens, 1)));
    return rows * row;
}

namespace {

// Shared-memory stages of the scores kernel: two q buffers when they fit the device, else one.
int score_stages(int D, int Hp) {
    const size_t max_smem = size_t(current_arch().max_smem_per_block_optin);
    return score_smem_layout(D, Hp, 2, nullptr, nullptr) <= max_smem ? 2 : 1;
}

// Why the scores kernel cannot serve p (empty when it can); rows with no more than topk entries need none of it.
std::string problem_of(const IndexerSelectParams& p) {
    std::ostringstream os;
    auto say = [&](const char* f, auto... args) {
        format_into(os, f, args...);
        return os.str();
    };
    const int D = p.head_dim, H = p.n_heads;
    if (D != 64 && D != 128) return say("index_head_dim must be 64 or 128, got {}", D);
    if (H < 1 || H > kMaxHeads) return say("index_n_heads must be in [1, {}], got {}", kMaxHeads, H);
    if (!p.q || !p.weights || p.q_stride % 8 != 0 || reinterpret_cast<uintptr_t>(p.q) % 16 != 0)
        return say("q (16-byte aligned, q_stride % 8 == 0) and weights are required, got q_stride {}", p.q_stride);
    if (p.keys.entry_bytes != index_entry_bytes(IndexFormat(p.keys.format), D))
        return say("key entry_bytes {} does not match the key format", p.keys.entry_bytes);
    const int Hp = padded_heads8(H);
    const size_t smem = score_smem_layout(D, Hp, score_stages(D, Hp), nullptr, nullptr);
    const int max_smem = current_arch().max_smem_per_block_optin;
    if (smem > size_t(max_smem))
        return say("{} bytes of shared memory ({} heads x {}) exceed the device's {}", smem, H, D, max_smem);
    return {};
}

}  // namespace

bool indexer_select_prefill_supports(const IndexerSelectParams& p) {
    return p.topk > 0 && p.ratio >= 1 && p.selected && (p.max_entries <= p.topk || problem_of(p).empty());
}

void indexer_select_prefill(const IndexerSelectParams& p, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
    if (!indexer_check_select(p)) return;
    const int n_tokens = p.batch.n_tokens;
    if (p.max_entries <= p.topk) {  // no row has more visible entries than index_topk: nothing to score
        indexer_topk_rows(p, nullptr, 0, n_tokens, 0, stream);
        return;
    }
    const std::string problem = problem_of(p);
    if (!problem.empty()) fail_rt("indexer_select_prefill: {}", problem);
    const int D = p.head_dim, Hp = padded_heads8(p.n_heads);
    const int64_t row_stride = p.max_entries;
    const int64_t chunk_rows =
        std::min<int64_t>(n_tokens, int64_t(workspace_bytes / (size_t(row_stride) * sizeof(float))));
    FS_ATTN_REQUIRE(workspace && chunk_rows >= 1,
                    "indexer_select_prefill: workspace of {} bytes holds no row of {} scores", workspace_bytes,
                    row_stride);
    const int key_blocks = int((row_stride + kKeyBlock - 1) / kKeyBlock);
    const int stages = score_stages(D, Hp);
    const size_t smem = score_smem_layout(D, Hp, stages, nullptr, nullptr);
    auto* kernel = D == 64 ? scores_mma_kernel<64> : scores_mma_kernel<128>;
    allow_dynamic_smem(kernel, smem);
    float* scores = static_cast<float*>(workspace);
    for (int64_t r0 = 0; r0 < n_tokens; r0 += chunk_rows) {
        const int rows = int(std::min<int64_t>(chunk_rows, n_tokens - r0));
        // Rows per CTA: enough CTAs for two waves over the SMs, each CTA amortizing its key tile over up to 64 rows
        // (decode batches get one row per CTA). Results do not depend on it.
        const int64_t want_ctas = 2 * int64_t(current_arch().sm_count);
        int rows_per_cta = int(std::clamp<int64_t>(int64_t(rows) * key_blocks / want_ctas, 1, 64));
        rows_per_cta = std::max(rows_per_cta, (rows + 65534) / 65535);  // grid.y limit
        const dim3 grid(key_blocks, (rows + rows_per_cta - 1) / rows_per_cta);
        launch_pdl("indexer_scores_mma_kernel", kernel, grid, dim3(kThreads), smem, stream, p, int(r0), int(r0) + rows,
                   rows_per_cta, scores, row_stride, stages);
        FS_ATTN_LAUNCHED();
        indexer_topk_rows(p, scores, int(r0), rows, row_stride, stream);
    }
}

}  // namespace flashseek::cuda
