// Compressor kernels. Emit: one CTA per (sequence, k-th entry completed in this step); each thread pools whole
// channels (softmax over the slots in fp32, max first), then the CTA finishes the entry in shared memory (norm,
// RoPE, Hadamard, quantization) and stores it. Save: one CTA per (sequence, ring slot) copies a token's kv and
// score (gate + ape) row. Separate launches because a chunk's new rows may overwrite ring slots whose old tokens
// the emission still reads.
#include <algorithm>

#include "cuda/attention/kv_entry.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/compressor/compressor.cuh"

namespace flashseek::cuda {

using namespace attn_detail;

namespace {

constexpr int kThreads = 512;  // one channel per thread for d_c = 512

__host__ __device__ int coff(int ratio) { return ratio == 4 ? 2 : 1; }

// Finishes an indexer key in shared memory: Hadamard (Sylvester order, scaled 1/sqrt(dim)), bf16, FP4 block 32;
// stores it in IndexFormat at dst.
__device__ void finish_index_key(float* v, int dim, IndexFormat fmt, uint8_t* dst) {
    for (int h = 1; h < dim; h *= 2) {
        for (int i = threadIdx.x; i < dim / 2; i += blockDim.x) {
            const int j = (i / h) * 2 * h + i % h;
            const float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
        }
        __syncthreads();
    }
    const float scale = 1.f / sqrtf(float(dim));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int tile = warp; tile < dim / 32; tile += n_warps) {
        const int d = tile * 32 + lane;
        const float x = round_bf16(v[d] * scale);
        const float amax = fmaxf(warp_max(fabsf(x)), 6.f * 1.17549435e-38f);  // 6 * 2^-126
        const float s = pow2_ceil(amax / 6.f);
        const uint8_t code = to_e2m1(x / s);
        if (fmt == IndexFormat::FP4) {
            const uint8_t hi = uint8_t(__shfl_down_sync(0xffffffffu, code, 1));
            if ((lane & 1) == 0) dst[d / 2] = uint8_t((code & 0xf) | (hi << 4));
            if (lane == 0) dst[dim / 2 + tile] = e8m0_byte(s);
        } else {
            reinterpret_cast<bf16*>(dst)[d] = __float2bfloat16_rn(from_e2m1(code) * s);
        }
    }
}

__global__ void __launch_bounds__(kThreads) compressor_emit_kernel(CompressorParams p) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    extern __shared__ float v[];  // [dim]
    __shared__ float scratch[32];
    const int seq = blockIdx.x;
    const int start = p.batch.seq_start_pos[seq], n = p.batch.seq_n_tokens[seq];
    const int m = p.ratio, c = coff(m), width = c * p.dim, ring = c * m;
    const int w = start / m + int(blockIdx.y);
    if (w >= (start + n) / m) return;  // fewer entries completed for this sequence
    const int slot = p.batch.seq_slot[seq];
    const int first_row = p.batch.seq_first_row[seq];
    const float* skv = reinterpret_cast<const float*>(p.state + int64_t(slot) * p.state_stride);
    const float* sscore = skv + int64_t(ring) * width;
    const bool ring_pow2 = (ring & (ring - 1)) == 0;
    // Slot (token t, column col, ape row = t % m, known by the caller): from this step's rows when t is in the
    // chunk, else from the state ring.
    auto fetch = [&](int t, int col, int ape_row, float& kv, float& score) {
        if (t >= start) {
            const int64_t row = first_row + (t - start);
            kv = p.kv[row * p.kv_stride + col];
            score = p.gate[row * p.gate_stride + col] + p.ape[int64_t(ape_row) * width + col];
        } else {
            const int64_t r = int64_t(ring_pow2 ? (t & (ring - 1)) : t % ring) * width + col;
            kv = skv[r];
            score = sscore[r];
        }
    };
    // Per channel softmax pooling over the slots. Slots are fetched kBatch at a time into registers so that their
    // loads are in flight together (the pooling is latency-bound otherwise); up to kBatch slots (ratio 4) the
    // softmax is the exact two-pass form, beyond that (ratio 128) batches merge online.
    constexpr int kBatch = 16;
    const int n_a = c == 2 ? (w > 0 ? m : 0) : 0;  // A slots: tokens (w-1)m .. wm-1 (ratio 4 only)
    const int n_slots = n_a + m;
    for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x) {
        const int b_col = c == 2 ? p.dim + ch : ch;
        float mx = -INFINITY, den = 0.f, num = 0.f;
        for (int s0 = 0; s0 < n_slots; s0 += kBatch) {
            float kvv[kBatch], sc[kBatch];
#pragma unroll
            for (int i = 0; i < kBatch; ++i) {
                const int sl = s0 + i;
                sc[i] = -INFINITY;
                kvv[i] = 0.f;
                if (sl < n_slots) {
                    if (sl < n_a) fetch((w - 1) * m + sl, ch, sl, kvv[i], sc[i]);
                    else fetch(w * m + (sl - n_a), b_col, sl - n_a, kvv[i], sc[i]);
                }
            }
            float bm = mx;
#pragma unroll
            for (int i = 0; i < kBatch; ++i) bm = fmaxf(bm, sc[i]);
            const float rescale = mx == -INFINITY ? 0.f : expf(mx - bm);
            den *= rescale;
            num *= rescale;
#pragma unroll
            for (int i = 0; i < kBatch; ++i) {
                const float e = sc[i] == -INFINITY ? 0.f : expf(sc[i] - bm);
                den += e;
                num += e * kvv[i];
            }
            mx = bm;
        }
        v[ch] = round_bf16(num / den);
    }
    // RMSNorm -> bf16
    float ss = 0.f;
    for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x) ss += v[ch] * v[ch];
    ss = block_sum(ss, scratch);  // also orders the pooled writes before the reads below
    const float r = rsqrtf(ss / float(p.dim) + p.norm_eps);
    for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x)
        v[ch] = round_bf16(__bfloat162float(p.norm_weight[ch]) * (v[ch] * r));
    __syncthreads();
    const int nope = p.dim - p.rope_dim;
    const int64_t pos = int64_t(w) * m;
    for (int i = threadIdx.x; i < p.rope_dim / 2; i += blockDim.x) {
        float cs, sn;
        rope_cos_sin(pos, p.rope.inv_freq[i], cs, sn);
        float x0 = v[nope + 2 * i], x1 = v[nope + 2 * i + 1];
        rope_rotate(x0, x1, cs, sn, false);
        v[nope + 2 * i] = round_bf16(x0);
        v[nope + 2 * i + 1] = round_bf16(x1);
    }
    __syncthreads();
    uint8_t* dst = paged_entry(p.out, slot, w);
    if (!p.quant_sim) {  // reference configuration: the bf16 entry as it is (BF16 formats, checked on the host)
        for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x) reinterpret_cast<bf16*>(dst)[ch] = __float2bfloat16_rn(v[ch]);
    } else if (p.indexer) {
        finish_index_key(v, p.dim, IndexFormat(p.out.format), dst);
    } else {
        store_kv_entry(v, p.dim, p.rope_dim, KvFormat(p.out.format), dst, false);
    }
}

__global__ void compressor_save_kernel(CompressorParams p) {
    pdl_wait();  // PDL contract (common/pdl.cuh): before any read of earlier kernels' output
    pdl_trigger();
    const int seq = blockIdx.x;
    const int start = p.batch.seq_start_pos[seq], n = p.batch.seq_n_tokens[seq];
    const int m = p.ratio, c = coff(m), width = c * p.dim, ring = c * m;
    const int kept = min(n, ring);  // the chunk's last `ring` tokens are all a later step can need
    if (int(blockIdx.y) >= kept) return;
    const int t = start + n - kept + int(blockIdx.y);
    const int64_t row = p.batch.seq_first_row[seq] + (t - start);
    float* skv = reinterpret_cast<float*>(p.state + int64_t(p.batch.seq_slot[seq]) * p.state_stride);
    float* sscore = skv + int64_t(ring) * width;
    const int64_t r = int64_t(t % ring) * width;
    for (int col = threadIdx.x; col < width; col += blockDim.x) {
        skv[r + col] = p.kv[row * p.kv_stride + col];
        sscore[r + col] = p.gate[row * p.gate_stride + col] + p.ape[int64_t(t % m) * width + col];
    }
}

}  // namespace

size_t compressor_state_bytes(int ratio, int dim) {
    const int c = coff(ratio);
    return size_t(2) * c * ratio * c * dim * sizeof(float);
}

void compressor_forward(const CompressorParams& p, cudaStream_t stream) {
    FS_ATTN_REQUIRE(p.ratio >= 1, "compressor: compress ratio must be >= 1, got {}", p.ratio);
    FS_ATTN_REQUIRE(p.rope_dim == 2 * p.rope.n_pairs && p.rope_dim < p.dim,
                    "compressor: rope_dim {} must match the RoPE table ({}) and be below dim {}", p.rope_dim,
                    2 * p.rope.n_pairs, p.dim);
    FS_ATTN_REQUIRE(p.kv && p.gate && p.ape && p.norm_weight && p.state, "compressor: kv, gate, ape, norm and state are required");
    if (p.indexer) {
        FS_ATTN_REQUIRE(p.dim >= 32 && p.dim % 32 == 0 && (p.dim & (p.dim - 1)) == 0,
                        "compressor: index_head_dim must be a power of two >= 32, got {}", p.dim);
        FS_ATTN_REQUIRE(p.out.entry_bytes == index_entry_bytes(IndexFormat(p.out.format), p.dim),
                        "compressor: indexer entry_bytes {} does not match its format", p.out.entry_bytes);
    } else {
        FS_ATTN_REQUIRE((p.dim - p.rope_dim) % 64 == 0,
                        "compressor: head_dim - qk_rope_head_dim must be a multiple of 64, got {}", p.dim - p.rope_dim);
        FS_ATTN_REQUIRE(p.out.entry_bytes == kv_entry_bytes(KvFormat(p.out.format), p.dim, p.rope_dim),
                        "compressor: kv entry_bytes {} does not match its format", p.out.entry_bytes);
    }
    FS_ATTN_REQUIRE(p.quant_sim || p.out.format == 0,  // KvFormat::BF16 == IndexFormat::BF16 == 0
                    "compressor: quantized entry formats are always simulated (quant_sim = false needs BF16 entries)");
    if (p.batch.n_seqs <= 0 || p.batch.n_tokens <= 0) return;
    const int max_emits = p.batch.max_seq_tokens / p.ratio + 1;
    FS_ATTN_REQUIRE(max_emits <= 65535,
                    "compressor: a step of {} tokens per sequence emits more than 65535 entries at ratio {}; split it",
                    p.batch.max_seq_tokens, p.ratio);
    const size_t smem = size_t(p.dim) * sizeof(float);
    launch_pdl("compressor_emit_kernel", compressor_emit_kernel, dim3(p.batch.n_seqs, max_emits), dim3(kThreads), smem,
               stream, p);
    FS_ATTN_LAUNCHED();
    const int ring = coff(p.ratio) * p.ratio;
    const int save_rows = std::max(1, std::min(ring, p.batch.max_seq_tokens));  // decode: one row per sequence
    launch_pdl("compressor_save_kernel", compressor_save_kernel, dim3(p.batch.n_seqs, save_rows), dim3(256), 0, stream,
               p);
    FS_ATTN_LAUNCHED();
}

}  // namespace flashseek::cuda
