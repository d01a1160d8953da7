// Routed FP4 experts at prefill and large batches (issue 15): grouped, compute-bound GEMMs over the per-expert token
// groups of a MoeGrouping (moe.cuh: counts, offsets, slot -> token and routing weight), release numerics.
//   moe_gemm_up:   A = act_quant(x[slot_token[s]]) for every slot s (act_quant.cuh, gathered), then per expert
//                  g = A . w1^T, u = A . w3^T over its slots, h[s] = bf16(silu(min(bf16 g, L)) * clamp(bf16 u, +-L)
//                  * weight[s]) (the reference's bf16 expert outputs, SwiGLU clamp and routing weight), and in the
//                  same epilogue h's act_quant, the down-projection's input (h itself is never stored).
//   moe_gemm_down: y[s] = h[s] . w2^T (fp32 rows per slot, as moe_expert_down; moe_combine adds them up), or those
//                  rows rounded to bf16 (moe_gemm_down_bf16).
// The workspace's codes are in the path's order (moe_gemm_code_order; the views in MoeGemmWorkspace say NATURAL,
// the storage's order is the path's): the sm_90a kernel reads and writes them GROUP_INTERLEAVED.
// Weights stay in the checkpoint format (FP4 e2m1 packed two per byte, E8M0 scale per 32 K). e2m1 -> e4m3 is exact;
// the 32-scales are folded against a reference exponent: each group's values are rescaled by 2^(its scale -
// reference) into e4m3 (exact while the group lies within 2^14 of the reference; further below, values round as
// e4m3 does), and the reference scale becomes a per-column scale of the FP8 GEMM. The sm_90a kernel takes one
// reference per weight row (its largest scale over the whole K, ExpertTable::row_ref), so the per-column scale
// applies once in the epilogue instead of at every 128-K promotion; the mma.sync kernels one per (row, 128-K
// block). Both give the same bits wherever every group lies within 2^14 of the reference (power-of-two scalings
// commute with fp32 rounding). Empty experts cost nothing, an expert's partial last 128-row tile is masked.
// Paths (GemmPath of dense_gemm.cuh): WGMMA (sm_90a: TMA + wgmma, warp-specialized, moe_gemm_sm90.cu), MMA_NATIVE
// (mma.sync e4m3, compute capability >= 8.9) and MMA_F16 (e4m3 widened exactly to f16, >= 8.0) (moe_gemm_mma.cu);
// AUTO takes the first the device runs. Every slot row is computed in the same order whatever the grouping.
// Host entries: raw pointers and a stream, no allocation (the caller owns the workspace), no mutable state,
// graph-capturable (per-expert tile counts are read on the device).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemm/act_quant.cuh"
#include "cuda/gemm/dense_gemm.cuh"
#include "cuda/moe/moe.cuh"

namespace flashseek::cuda {

// Scratch of one MoE layer's grouped GEMMs for up to `slots` (= tokens x top_k) grouped rows.
struct MoeGemmWorkspace {
    Fp8Activation x;    // gathered act_quant of the input: [slots, hidden]
    Fp8Activation h_q;  // act_quant of h: [slots, inter]
};
size_t moe_gemm_workspace_bytes(int64_t slots, int64_t hidden, int64_t inter);
// Carves the workspace out of `memory` (moe_gemm_workspace_bytes(...) bytes, 16-byte aligned).
MoeGemmWorkspace moe_gemm_workspace_view(void* memory, int64_t slots, int64_t hidden, int64_t inter);

// Carves the workspace of the grouping's max_pairs slots out of `memory` (moe_gemm_workspace_bytes(g.max_pairs,
// hidden, inter) bytes, 16-byte aligned) and attaches it to the grouping (MoeGrouping::gemm_x / gemm_h), as the
// expert catalogue's grouped_experts variant needs it; moe_gemm_workspace_of gives it back (empty views when none
// is attached).
void moe_attach_gemm_workspace(MoeGrouping& g, void* memory, int64_t hidden, int64_t inter);
MoeGemmWorkspace moe_gemm_workspace_of(const MoeGrouping& g);

// The row references of ExpertTable::row_ref for E experts of `t` (FP4 + E8M0; hidden and inter multiples of
// 32): out[e (2 inter + hidden) + r] = the largest E8M0 byte of row r of w1 (r < inter), w3 (inter + r) or w2
// (2 inter + r). Computed once when the weights are bound; out holds moe_row_references_bytes(t, E) bytes.
size_t moe_row_references_bytes(const ExpertTable& t, int E);
void moe_row_references(const ExpertTable& t, int E, uint8_t* out, cudaStream_t stream);

// The weight maps of ExpertTable::w_maps for E experts of `t` (FP4 + E8M0): per expert the TMA tensor maps of w1,
// w3 and w2 as [rows, K / 2] bytes read in boxes of 64 rows x 64 bytes (one 128-K block) with the 64-byte swizzle.
// Reads the table's device pointer arrays, encodes on the host and writes moe_weight_maps_bytes(E) bytes to `out`
// (device memory, 64-byte aligned); synchronous. Throws Error naming the matrix if a map cannot be made.
size_t moe_weight_maps_bytes(int E);
void moe_weight_maps(const ExpertTable& t, int E, void* out);

// Everything the grouped GEMMs need beside the table: the row references and the weight maps, placed in
// `storage` (moe_grouped_extras_bytes(t, E) bytes of device memory, 64-byte aligned) and attached to `t`.
size_t moe_grouped_extras_bytes(const ExpertTable& t, int E);
void moe_attach_grouped_extras(ExpertTable& t, int E, void* storage);

// `path` (AUTO: any) can run here.
bool moe_gemm_supported(GemmPath path = GemmPath::AUTO);
// The order of the codes in the workspace's act_quant rows (x and h_q) on `path` (AUTO: the one taken here):
// GROUP_INTERLEAVED for the sm_90a kernel (act_quant.cuh), NATURAL for the mma.sync ones.
Fp8CodeOrder moe_gemm_code_order(GemmPath path = GemmPath::AUTO);
// ... and serves these experts: FP4_BLOCK32 with E8M0 scales, their row references and weight maps (the sm_90a
// kernel reads them), hidden and inter multiples of 128, E <= 1024, M * top_k slots within the grouping's capacity.
bool moe_gemm_eligible(const ExpertTable& table, const MoeGrouping& grouping, int64_t M, int top_k,
                       GemmPath path = GemmPath::AUTO);

// Slot rows per tile of the sm_90a kernel for a pass of `slots` (token, expert) pairs over the model's E routed
// experts (MoeGrouping::experts_total where a shard holds some of them): 32 while the experts average at most 16
// slots, 64 up to 64, else 128 (a tile costs about what its width does, an expert whose slots
// overflow a tile converts its weights again for the next: docs/perf.md, short prompts). Every width gives a slot
// the same arithmetic. The entries below take `slot_rows` 32, 64 or 128, or 0 for this choice (the mma.sync paths
// ignore it); anything else is an Error.
int moe_gemm_slot_rows(int64_t slots, int E);

// x: bf16 [M, hidden] with row stride ld_x elements. Fills ws.x and ws.h_q for the grouping's slots.
void moe_gemm_up(const uint16_t* x, int64_t ld_x, int64_t M, int top_k, const ExpertTable& table,
                 const MoeGrouping& grouping, float swiglu_limit, const MoeGemmWorkspace& ws, cudaStream_t stream,
                 GemmPath path = GemmPath::AUTO, int slot_rows = 0);
// y: fp32 [M * top_k, hidden] (row = slot, as moe_expert_down). Reads ws.h_q from moe_gemm_up.
void moe_gemm_down(int64_t M, int top_k, const ExpertTable& table, const MoeGrouping& grouping,
                   const MoeGemmWorkspace& ws, float* y, cudaStream_t stream, GemmPath path = GemmPath::AUTO,
                   int slot_rows = 0);
// The same with y rounded to bf16 (round to nearest even of every fp32 value moe_gemm_down writes): the form the
// combine reads in release numerics, half the bytes.
void moe_gemm_down_bf16(int64_t M, int top_k, const ExpertTable& table, const MoeGrouping& grouping,
                        const MoeGemmWorkspace& ws, uint16_t* y, cudaStream_t stream, GemmPath path = GemmPath::AUTO,
                        int slot_rows = 0);

}  // namespace flashseek::cuda
