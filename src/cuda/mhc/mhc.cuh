// Manifold-constrained hyper-connections on the GPU (docs/model.md §2.2, §2.12).
//
// mhc_pre (per token, streams X [N, D] bf16): mu = (fn . flatten(X)) / sqrt(mean(X^2) + rms_eps) with fn
// [n_mix, N*D] fp32; pre/post/comb from mu (sigmoid + hc_eps, 2*sigmoid, Sinkhorn with hc_eps, exact order of
// §2.2); y = sum_j pre_j X_j rounded to bf16; then, fused, the sub-block's RMSNorm (attn_norm / ffn_norm) of y.
// Head mode (hc_head, §2.12): n_mix = N, only pre (scale[0]), no Sinkhorn, no post/comb; the fused norm is the
// final `norm`.
// Two launches: a split-K partial kernel (decode: fn read once per 8 tokens, the 16384-long reduction spread over
// many CTAs so that batch 1 still fills the GPU; prefill: the tiled kernel, 64 tokens per CTA, same bits) and a
// per-token finalize (reduce, Sinkhorn, collapse, norm); at one token optionally one launch of both
// (MhcPreParams::one_launch_counter); optionally post and comb (the Sinkhorn) in a third launch the caller may put
// on a side stream (MhcPreParams::mix_apart, mhc_pre_mix).
//
// mhc_post: X'_k = post_k * o + sum_j comb[j, k] X_j (comb consumed transposed), rounded to bf16. In place allowed.
// Between two sub-blocks it can run inside the next mhc_pre (prev_o below): one launch fewer on the critical path.
// Limits: N = hc_mult in 1..4.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemm/act_quant.cuh"

namespace flashseek::cuda {

// Which kernel computes mhc_pre's split-K partial sums. Both write the same bits (mhc_chunk.cuh), so the choice is
// by speed alone: AUTO takes the tiled kernel from mhc_tiled_min_tokens() tokens on.
enum class MhcPartialKernel { AUTO, SPLIT, TILED };

struct MhcPreParams {
    int n_tokens = 0;
    int n_streams = 4;  // N
    int dim = 0;        // D
    bool head_mode = false;
    const __nv_bfloat16* x = nullptr;  // [n_tokens, N, D]
    const float* fn = nullptr;         // [n_mix, N*D], n_mix = head_mode ? N : (2+N)*N
    const float* base = nullptr;       // [n_mix]
    const float* scale = nullptr;      // [3] ([1] in head mode)
    float rms_eps = 1e-6f;             // rms_norm_eps (flattened-stream RMS)
    float hc_eps = 1e-6f;
    int sinkhorn_iters = 20;
    const __nv_bfloat16* norm_weight = nullptr;  // [D] RMSNorm weight of the collapsed vector; nullptr = no norm
    float norm_eps = 1e-6f;
    __nv_bfloat16* y = nullptr;        // [n_tokens, D] (normed when norm_weight is given)
    float* post = nullptr;             // [n_tokens, N]     (not in head mode)
    float* comb = nullptr;             // [n_tokens, N, N]  comb[t][j][k] (not in head mode)
    // Optional: y also written as a prepared activation (gemm/linear.cuh PreparedActivation, bit for bit what
    // prepare_activation(y) gives) for the sub-block's FP8 / FP4 linears, which saves their preparation launch:
    // values [round_up(n_tokens, 8), dim] f16 bits, scales [.., dim / 128]; padding rows are zeros. Layout and
    // numerics are WeightKind::FP8_BLOCK128 / FP4_BLOCK32 and ActNumerics values.
    uint16_t* prepared_values = nullptr;
    float* prepared_scales = nullptr;
    int prepared_layout = 0;
    int prepared_numerics = 0;
    // Or (not both): y's act_quant in the FP8_ROWS form the compute-bound FP8 GEMMs of prefill passes take
    // (gemm/act_quant.cuh, NATURAL order; m = n_tokens, k = dim): bit for bit what quantize_fp8_activation(y) gives,
    // which saves that launch and its read of y. codes null: none.
    Fp8Activation prepared_fp8;
    // Optional (mhc_pre_fuses_post): the previous sub-block's mhc_post fused in front. x is then first replaced
    // in place by mhc_post(x, prev_o, prev_post, prev_comb), bit for bit what the separate launch writes; prev_post /
    // prev_comb may be the buffers post / comb (they are read before this call overwrites them).
    const __nv_bfloat16* prev_o = nullptr;  // [n_tokens, D]
    const float* prev_post = nullptr;       // [n_tokens, N]
    const float* prev_comb = nullptr;       // [n_tokens, N, N]
    // Instead of prev_o: the MoE sub-block's o computed here as moe_combine (moe.cuh) of these would write it (bit for
    // bit; no combine launch): routed outputs [slots, D] fp32 by pair_slot [n_tokens, top_k] (< 0: none), plus the
    // shared expert's [n_tokens, D] fp32 (may be null), terms rounded to bf16 when prev_round_terms.
    const float* prev_y_routed = nullptr;
    const int32_t* prev_pair_slot = nullptr;
    const float* prev_y_shared = nullptr;
    // Instead of prev_y_shared (prev_round_terms only): the shared expert's output as bf16, the term already rounded.
    const __nv_bfloat16* prev_y_shared_bf16 = nullptr;
    // Instead of prev_y_routed (prev_round_terms only): the routed outputs as bf16 [slots, D], the terms already
    // rounded (the grouped expert GEMM writes them so: moe_expert_down's y_bf16).
    const __nv_bfloat16* prev_y_routed_bf16 = nullptr;
    int prev_top_k = 0;
    bool prev_round_terms = false;
    MhcPartialKernel partial_kernel = MhcPartialKernel::AUTO;  // tests and benchmarks pin one
    // Optional: a zeroed device word (left zeroed) with which a one-token call on the vector paths runs as one
    // launch (the partial CTA that finishes last runs the finalize): the same bits, one dependency wait fewer.
    // Calls that share the word must run in stream order. Null: two launches.
    uint32_t* one_launch_counter = nullptr;
    // Optional (not in head mode): post and comb are left to mhc_pre_mix below, which the caller launches after this
    // call, on another stream if it likes (forked after it): the Sinkhorn, the finalize's longest chain, then no
    // longer holds the finalize, and with it the next kernel, which reads only y. Same bits.
    bool mix_apart = false;
};

// Pass size from which MhcPartialKernel::AUTO takes the tiled kernel.
int mhc_tiled_min_tokens();

// Whether mhc_pre can fuse the previous mhc_post (MhcPreParams::prev_o) for these shapes: hc_mult 1, 2 or 4 and
// hidden_size a multiple of 128 / hc_mult (each split-K chunk then holds every stream of its features).
bool mhc_pre_fuses_post(int n_streams, int dim);

// Device scratch mhc_pre needs for up to max_tokens tokens (fp32 partial sums).
size_t mhc_pre_workspace_bytes(int max_tokens, int n_streams, int dim, bool head_mode);
void mhc_pre(const MhcPreParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);
// After mhc_pre(p) with p.mix_apart (stream-ordered after it, and before anything rewrites the workspace or reads
// post / comb): post and comb from that call's partial sums, bit for bit what the finalize writes without
// mix_apart. One CTA per token.
void mhc_pre_mix(const MhcPreParams& p, const void* workspace, size_t workspace_bytes, cudaStream_t stream);

// x, x_out [n_tokens, N, D] bf16 (x_out may equal x); o [n_tokens, D] bf16; post [n_tokens, N];
// comb [n_tokens, N, N].
void mhc_post(int n_tokens, int n_streams, int dim, const __nv_bfloat16* x, const __nv_bfloat16* o, const float* post,
              const float* comb, __nv_bfloat16* x_out, cudaStream_t stream);

}  // namespace flashseek::cuda
