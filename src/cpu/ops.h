// The CPU reference ops of the DeepSeek-V4 forward pass (docs/model.md §2), as free functions over
// raw fp32 pointers and sizes. They are the oracle every CUDA kernel is tested against, so each one is
// self-contained, documents its layout, and does its math in fp32 in a fixed order. Row-major everywhere;
// a weight matrix is [out, in] with `in` contiguous (the safetensors layout).
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/thread_pool.h"
#include "model/config.h"
#include "model/weights.h"

namespace flashseek::cpu {

// ---------------------------------------------------------------------------------------------------------------
// Scalars
inline float sigmoidf(float x) { return 1.f / (1.f + __builtin_expf(-x)); }
float silu(float x);
float softplus(float x);  // log(1 + e^x), = x beyond 20 (torch's threshold)

// ---------------------------------------------------------------------------------------------------------------
// Weights: host dequantization to fp32 (exact representation of what the checkpoint stores).

// Any float tensor (BF16, F16, F32) to fp32, element order kept. Throws Error naming the tensor otherwise.
std::vector<float> tensor_to_f32(const TensorView& t);
// One row of a 2-D float tensor (BF16/F16/F32) to fp32: out[0..cols).
void tensor_row_to_f32(const TensorView& t, int64_t row, float* out);
// A linear layer's weight [out, in] in fp32: FP8 block-128 (W = e4m3 * scale[o/128, i/128]), FP4 block-32
// (W = e2m1(nibble) * scale[o, i/32], low nibble = even element), BF16 or F32. Scales E8M0 or F32.
std::vector<float> dequantize_linear(const Linear& lin);

// ---------------------------------------------------------------------------------------------------------------
// Matrix products. y[r, o] = sum_i x[r, i] * w[o, i] for r < rows, o < out; x is [rows, in], y is [rows, out].
// Each output is the same fixed-order dot product whatever rows is, so batching never changes a result.
void linear_f32(const float* x, int64_t rows, const float* w, int64_t out, int64_t in, float* y, ThreadPool* pool);
// The same with a bf16 weight (uint16 bit patterns), for large matrices kept in their stored form (the head).
void linear_bf16w(const float* x, int64_t rows, const uint16_t* w, int64_t out, int64_t in, float* y,
                  ThreadPool* pool);

// Release numerics of one linear layer, given its dequantized fp32 weight and stored format: FP8/FP4 layers
// quantize each activation row to FP8 per 1x128 block (act_quant_fp8_block128) before the product and round the
// output to bf16; BF16 layers round the output to bf16; F32 layers are plain fp32 (the reference's fp32 paths).
void linear_release(const float* x, int64_t rows, const float* w, WeightFormat format, int64_t out, int64_t in,
                    float* y, ThreadPool* pool);

// ---------------------------------------------------------------------------------------------------------------
// Release-mode quantization simulations (the official reference's QAT emulation), in place or out of place.

// Dynamic FP8 activation quantization per 1x128 block (official kernel.py act_quant with ue8m0 scales):
// amax = max(|x_blk|, 1e-4); s = 2^ceil(log2(amax / 448)); out = e4m3(clamp(x / s, +-448)) * s.
// n need not be a multiple of 128 (the last block is shorter). scales (optional) receives ceil(n/128) values s.
void act_quant_fp8_block128(const float* x, int64_t n, float* out, float* scales = nullptr);
// FP8 simulation of KV no-rope dims, block 64: same formula as above with block 64 (v has n dims, in place).
void kv_fp8_sim_block64(float* v, int64_t n);
// Orthonormal Walsh-Hadamard transform (Sylvester order, scaled by 1/sqrt(n)) of v[0..n), n a power of two.
void hadamard_transform(float* v, int n);
inline void hadamard128(float* v) { hadamard_transform(v, 128); }
// FP4 e2m1 simulation, block 32 (official kernel.py fp4_act_quant): amax = max(|x_blk|, 6 * 2^-126);
// s = 2^ceil(log2(amax / 6)); x = e2m1(x / s) * s (round to nearest even, saturating at 6). In place.
void fp4_sim_block32(float* v, int64_t n);
// Rounds every element to bf16 (round to nearest even), in place.
void round_bf16_inplace(float* v, int64_t n);

// ---------------------------------------------------------------------------------------------------------------
// Norms

// out = w * x / sqrt(mean(x^2) + eps) over n elements; w == nullptr gives the unweighted norm. out may alias x.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);

// ---------------------------------------------------------------------------------------------------------------
// RoPE (§2.10): interleaved pairs (v[2i], v[2i+1]) of a rope_dim slice rotated by pos * inv_freq[i].

// Rotates v[0..rope_dim) in place at position pos (inverse = rotate by -pos, the conjugate). The angle is
// float(pos) * inv_freq[i] rounded to fp32, as the oracle computes it.
void rope_interleaved(float* v, int rope_dim, const float* inv_freq, int64_t pos, bool inverse = false);

// ---------------------------------------------------------------------------------------------------------------
// Manifold-constrained hyper-connections (§2.2). N streams of D, X is [N, D] (stream-major).

// Sinkhorn-Knopp on C [N, N] (row-major, C[j*N + k]) holding the logits scale*mu + base: row softmax + eps,
// column normalization, then (iters - 1) x (row, column) normalizations, eps in every denominator. In place.
void sinkhorn(float* C, int N, int iters, float eps);
// mhc_pre: mu = (fn . flatten(X)) / sqrt(mean(X^2) + rms_eps), fn [(2+N)*N, N*D];
// pre_j = sigmoid(mu_j*scale[0] + base[j]) + hc_eps, post_j = 2*sigmoid(mu_{N+j}*scale[1] + base[N+j]),
// comb = sinkhorn(mu_{2N+..}*scale[2] + base[2N+..]); y = sum_j pre_j X_j. Outputs: y [D], post [N], comb [N*N].
void mhc_pre(const float* X, int N, int64_t D, const float* fn, const float* base, const float* scale,
             float rms_eps, float hc_eps, int sinkhorn_iters, float* y, float* post, float* comb);
// mhc_post: X_out[k] = post_k * o + sum_j comb[j*N + k] * X[j]  (comb consumed transposed). X_out may not alias X.
void mhc_post(const float* X, const float* o, const float* post, const float* comb, int N, int64_t D, float* X_out);
// hc_head (§2.12): mu = (fn . flatten(X)) * rho, fn [N, N*D]; pre_j = sigmoid(mu_j*scale[0] + base[j]) + hc_eps;
// y = sum_j pre_j X_j. No Sinkhorn, no post.
void hc_head(const float* X, int N, int64_t D, const float* fn, const float* base, const float* scale,
             float rms_eps, float hc_eps, float* y);

// ---------------------------------------------------------------------------------------------------------------
// Compressor (§2.5). kv and score hold n_slots x dc values (slot-major: kv[s*dc + c]); score already includes ape.
// out[c] = sum_s softmax_s(score[., c]) * kv[s*dc + c] (per-channel softmax over the slots; slots whose score is
// -inf get weight 0).
void compressor_pool(const float* kv, const float* score, int n_slots, int dc, float* out);
// Turns a pooled vector into an entry: RMSNorm with norm_w, then RoPE on the last rope_dim dims at position pos.
void compressor_finish(float* entry, int dc, const float* norm_w, float eps, int rope_dim, const float* inv_freq,
                       int64_t pos);

// ---------------------------------------------------------------------------------------------------------------
// Lightning indexer (§2.6).

// scores[j] = sum_h w[h] * ReLU(q[h] . keys[j]) for j < n_entries. q [n_heads, head_dim], keys [n_entries, head_dim],
// w [n_heads] already scaled by head_dim^-1/2 * n_heads^-1/2.
void indexer_scores(const float* q, int n_heads, int head_dim, const float* w, const float* keys, int64_t n_entries,
                    float* scores);
// The min(k, n) largest scores; ties go to the lower index. Written to out in ascending index order.
void topk_indices(const float* scores, int64_t n, int k, std::vector<int32_t>& out);

// ---------------------------------------------------------------------------------------------------------------
// Sparse attention with sink (§2.7). q [H, d]; kv [n_kv, d] is the KV buffer (K = V); idx[0..n_idx) index into it
// (-1 = skip). For each head h: s_i = (q_h . kv_i) * scale, M = max(max_i s_i, sink[h]),
// out_h = sum_i e^(s_i - M) kv_i / (sum_i e^(s_i - M) + e^(sink[h] - M)). round_p_bf16 (release numerics): the
// reference kernel's rounding, P_i = bf16(e^(s_i - m_tile)) * e^(m_tile - max_i s_i) in the PV product, m_tile the
// max of the valid candidates among slots [32k, 32k + 32) holding i (kSoftmaxTile, as the CUDA kernels), divided
// afterwards by the fp32 sum of the unrounded exps plus the sink's. No candidate: out_h = 0. out [H, d].
inline constexpr int kSoftmaxTile = 32;
void sparse_attention_sink(const float* q, int H, int d, const float* kv, const int32_t* idx, int n_idx,
                           const float* sink, float scale, bool round_p_bf16, float* out);

// ---------------------------------------------------------------------------------------------------------------
// Output projection (§2.4 step 8). o [rows, G * group_in] (heads consecutive, group g = heads g*H/G...),
// wo_a [G * R, group_in]: z[r, g*R + i] = sum_c wo_a[g*R + i, c] * o[r, g*group_in + c]. z [rows, G * R].
void grouped_out_proj(const float* o, int64_t rows, int G, int64_t R, int64_t group_in, const float* wo_a, float* z,
                      ThreadPool* pool);

// ---------------------------------------------------------------------------------------------------------------
// MoE (§2.9)

// Router on logits [E] (= gate_weight . x in fp32): s = sqrt(softplus(logits)). Selection: hash_ids (k expert ids
// from tid2eid) when non-null, else the top-k of s + bias (bias may be null; ties to the lower index). Weights
// g_i = s_sel / sum(s_sel) * route_scale. idx [k], weight [k], in selection order (hash order, or descending).
void router_select(const float* logits, int E, const float* bias, const int64_t* hash_ids, int k, float route_scale,
                   int32_t* idx, float* weight);
// The same selection and weighting from precomputed scores s [E] (for scoring functions other than sqrt-softplus:
// softmax or sigmoid of the logits). renormalize = norm_topk_prob (false: g_i = s_sel * route_scale).
void router_select_scores(const float* s, int E, const float* bias, const int64_t* hash_ids, int k,
                          float route_scale, bool renormalize, int32_t* idx, float* weight);
// SwiGLU with clamp: out = silu(min(gate, limit)) * clamp(up, -limit, limit), n elements.
void swiglu_clamp(const float* gate, const float* up, int64_t n, float limit, float* out);

// One SwiGLU expert in fp32 (exact numerics, as HF transformers): y = (w2 . swiglu_clamp(w1 . x, w3 . x)) * weight.
// x [rows, D]; w1, w3 [I, D] (gate, up); w2 [D, I]; weight [rows] (nullptr = 1, the shared expert); y [rows, D].
void swiglu_expert(const float* x, int64_t rows, const float* w1, const float* w3, const float* w2, int64_t I,
                   int64_t D, float limit, const float* weight, float* y, ThreadPool* pool);

}  // namespace flashseek::cpu
