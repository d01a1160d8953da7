// Mixture-of-experts on the GPU (docs/model.md §2.9), experts kept in checkpoint format (FP4 e2m1 + E8M0/32 for
// routed experts, FP8 + 128x128 scales for the shared expert). Per MoE layer and step:
//   1. router logits = gate_weight . x in fp32: a BF16 linear (gemm/linear.cuh, OutKind::F32), [M, E];
//   2. moe_route: s = sqrt(softplus(logits)); experts = top-k of s + bias (ties -> lower id), or tid2eid[token]
//      on hash layers; weights g = s_sel / sum(s_sel) * route_scale, in selection order;
//   3. moe_group: (token, j) pairs grouped by expert: counts, offsets, the list of active experts, and for every
//      grouped "slot" its token and weight (slot order inside an expert does not affect any result);
//   4. moe_expert_up: for every active expert, w1 and w3 over its tokens in one pass over the weights, then
//      SwiGLU with clamp (gate <= limit, |up| <= limit), times the routing weight, rounded to bf16, and written
//      directly as the prepared activation of w2 (act_quant per 128 in release numerics) - no extra launch (the
//      small-M GEMV path writes raw bf16 rows that its down-projection prepares while staging);
//   5. moe_expert_down: w2 per active expert, fp32 rows per slot;
//   6. moe_combine: out[t] = sum_j y[slot(t, j)] (selection order) + shared[t], fp32 sum, written bf16 or fp32.
// The shared expert runs through the same up/down kernels in "dense" mode (grouping == nullptr: one expert, every
// token, weight 1). Kernel grids are sized for the worst case (min(E, M*k) experts) so a step can be captured in
// a CUDA graph; CTAs of inactive expert slots exit at once.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cuda/common/kernel_policy.h"
#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda {

// logits [M, E] fp32 (row stride ld_logits); bias [E] fp32 or null; hash routing when tid2eid (int64
// [vocab, top_k]) and token_ids [M] are given (vocab bounds the token ids; out-of-range ids select nothing).
// expert_idx [M, top_k] int32 and expert_weight [M, top_k] fp32 out. E <= 1024, top_k <= 32.
void moe_route(const float* logits, int64_t M, int E, int64_t ld_logits, const float* bias, const int64_t* tid2eid,
               const int32_t* token_ids, int64_t vocab, int top_k, float route_scale, int32_t* expert_idx,
               float* expert_weight, cudaStream_t stream);

// Grouping buffers (device, caller-owned; carve them from one allocation with moe_grouping_view).
struct MoeGrouping {
    int E = 0;                        // experts grouped: global ids [expert_begin, expert_begin + E), local 0..E-1
    int expert_begin = 0;             // expert parallel: the first expert this shard holds; pairs outside are dropped
    int experts_total = 0;            // all routed experts of the model (0: E, i.e. no expert parallelism)
    int64_t max_pairs = 0;            // capacity in (token, j) pairs
    int32_t* expert_count = nullptr;  // [E]
    int32_t* expert_offset = nullptr; // [E + 1]
    int32_t* active = nullptr;        // [E] ids of experts with tokens, ascending; first *n_active valid
    int32_t* n_active = nullptr;      // [1]
    int32_t* slot_token = nullptr;    // [max_pairs] token of grouped slot
    float* slot_weight = nullptr;     // [max_pairs] routing weight of grouped slot
    int32_t* pair_slot = nullptr;     // [max_pairs] slot of pair (t * top_k + j); -1 when the expert id was invalid
    int32_t* block_counts = nullptr;  // [moe_group_blocks(max_pairs)][E] scratch of the multi-CTA grouping
    // Optional (moe_attach_act_tiles): packed activation tiles of the sm_90 wgmma expert kernels (moe_wgmma.cu),
    // one per 16-token tile of an active expert (an expert with c tokens has ceil(c / 16) of them); without them
    // those kernels are not used. moe_group lists the tiles when they are attached: tile u holds the expert's slots
    // tile_col[u] .. + 15 of expert tile_expert[u], in ascending expert order; *n_tiles of them.
    uint8_t* act_tiles = nullptr;
    float* act_tile_scales = nullptr;
    int64_t act_tile_k = 0;  // largest K (hidden or inter) the tiles hold
    int act_tile_count = 0;  // tiles the memory holds: moe_act_tiles_needed(E, min(max_pairs, kActTileMaxPairs))
    int32_t* tile_expert = nullptr;  // [act_tile_count]
    int32_t* tile_col = nullptr;     // [act_tile_count]
    int32_t* n_tiles = nullptr;      // [1]
    // ... and the split-item scratch of those kernels (an item cut between two CTAs: both halves' sums, and a
    // counter per CTA boundary, zeroed by moe_attach_act_tiles and left zero by the kernels)
    float* split_partials = nullptr;
    uint32_t* split_counters = nullptr;
    int split_slots = 0;       // CTA boundaries the scratch holds
    // Optional (moe_attach_gemm_workspace, moe_gemm.cuh): the grouped expert GEMMs' scratch for max_pairs slots,
    // the gathered act_quant of the input and the act_quant of h (grouped_experts passes h to its down-projection
    // as an FP8_ROWS activation over gemm_h); without it grouped_experts is not used.
    Fp8Activation gemm_x, gemm_h;
};
size_t moe_grouping_bytes(int E, int64_t max_pairs);
// CTAs of the multi-CTA grouping (passes of more than kGroupOneCtaPairs pairs) for n_pairs pairs.
inline constexpr int64_t kGroupPairsPerCta = 1024, kGroupOneCtaPairs = 4096;
inline int64_t moe_group_blocks(int64_t n_pairs) { return (n_pairs + kGroupPairsPerCta - 1) / kGroupPairsPerCta; }
MoeGrouping moe_grouping_view(void* memory, int E, int64_t max_pairs);
// Device memory for the packed activation tiles of a grouping (E, max_pairs) and K up to max_k (a multiple of
// 128: max(hidden, inter)) plus the split-item scratch, and attaching it (caller-owned, 16-byte aligned; attaching
// zeroes the counters, so poison the memory before, not after).
size_t moe_act_tile_bytes(int E, int64_t max_pairs, int64_t max_k);
// The tiles are sized for passes of up to this many (token, expert) pairs (256 tokens x top-16; V4-Flash's top-6
// reaches 682 tokens); larger passes take other expert variants.
inline constexpr int64_t kActTileMaxPairs = 4096;
// 16-token tiles the worst grouping of `pairs` pairs over E experts needs: sum over experts of ceil(c_e / 16) with
// sum c_e = pairs is at most min(E, pairs) + ceil(pairs / 16) (each active expert's last tile may be partial).
inline int64_t moe_act_tiles_needed(int E, int64_t pairs) {
    return (E < pairs ? int64_t(E) : pairs) + (pairs + 15) / 16;
}
void moe_attach_act_tiles(MoeGrouping& g, void* memory, int64_t max_k);
void moe_group(const int32_t* expert_idx, const float* expert_weight, int64_t M, int top_k, const MoeGrouping& g,
               cudaStream_t stream);
// moe_route then moe_group; up to 16 tokens (decode) in one launch (one CTA routes, then groups).
void moe_route_and_group(const float* logits, int64_t M, int E, int64_t ld_logits, const float* bias,
                         const int64_t* tid2eid, const int32_t* token_ids, int64_t vocab, int top_k, float route_scale,
                         int32_t* expert_idx, float* expert_weight, const MoeGrouping& g, cudaStream_t stream);
// The router's linear (logits = x gate^T, fp32 [M, E], row stride E) and moe_route_and_group on those logits in one
// launch: the router's bf16_gemv, whose CTA that completes the logits last routes and groups (KernelPolicy switch
// "route_in_router"; the same logits, picks, weights and grouping as linear() then moe_route_and_group).
// moe_router_routes says where it applies: the switch not disabled, 1-8 tokens, E <= 256, the router on bf16_gemv
// for this call and a workspace counter to spare; elsewhere the caller runs the two (moe_router_route_and_group
// throws).
bool moe_router_routes(const PreparedActivation& x, const DeviceLinear& gate, int top_k, const MoeGrouping& g,
                       const GemmWorkspace* ws, const KernelPolicy& policy);
void moe_router_route_and_group(const PreparedActivation& x, const DeviceLinear& gate, float* logits, const float* bias,
                                const int64_t* tid2eid, const int32_t* token_ids, int64_t vocab, int top_k,
                                float route_scale, int32_t* expert_idx, float* expert_weight, const MoeGrouping& g,
                                const GemmWorkspace* ws, cudaStream_t stream, const KernelPolicy& policy);

// Per-expert weight pointers (device arrays of E pointers each, built once when weights are loaded). Every weight
// pointer must be 16-byte aligned (the kernels stream it with 16-byte loads); scale pointers need no alignment.
struct ExpertTable {
    WeightKind kind = WeightKind::FP4_BLOCK32;  // FP4_BLOCK32 or FP8_BLOCK128, same for w1, w2, w3
    ScaleKind scale_kind = ScaleKind::E8M0;
    int64_t hidden = 0, inter = 0;  // w1, w3: [inter, hidden]; w2: [hidden, inter]. Multiples of 128 take the
                                    // tensor-core kernels, others (tiny configs) an element-wise fallback;
                                    // FP4 needs multiples of 32
    const void* const* w1 = nullptr;
    const void* const* w1_scale = nullptr;
    const void* const* w3 = nullptr;
    const void* const* w3_scale = nullptr;
    const void* const* w2 = nullptr;
    const void* const* w2_scale = nullptr;
    bool scales_aligned16 = false;  // every scale pointer 16-byte aligned: enables the bulk-copy path (moe_bulk.cu)
    // FP4 with E8M0 scales: per expert e, 2 inter + hidden bytes at row_ref + e (2 inter + hidden): the largest
    // scale exponent of each row of w1, then w3, then w2 (moe_row_references, moe_gemm.cuh). The grouped GEMMs
    // need it; the other variants do not read it.
    const uint8_t* row_ref = nullptr;
    // FP4 with E8M0 scales: per expert e, three TMA tensor maps (CUtensorMap, 128 bytes each) of its packed w1,
    // w3 and w2 at w_maps + 384 e (moe_weight_maps, moe_gemm.cuh), for the sm_90a grouped GEMM's weight tiles.
    const void* w_maps = nullptr;
};

// x: [M, hidden] prepared for table.kind. grouping == nullptr: dense mode (expert 0, slot = token, weight 1).
// h: output storage (values/scales sized for rows = M*top_k (routed) or M (dense), k = inter); filled in as the
// prepared activation of w2 (layout table.kind, numerics h_numerics). The variant is the expert catalogue's
// choice (moe_catalogue.h); returns its name.
std::string_view moe_expert_up(const PreparedActivation& x, const ExpertTable& table, const MoeGrouping* grouping,
                               int64_t M, int top_k, float swiglu_limit, ActNumerics h_numerics,
                               PreparedActivation& h, cudaStream_t stream, const KernelPolicy& policy = KernelPolicy{});
// Whether the catalogue, offered this up-projection's input both as raw bf16 rows (raw_x: raw_activation) and
// prepared (prepared_x: described, not yet filled), chooses a variant that takes only the raw rows (grouped_experts
// gathers and quantizes them itself): the caller then skips preparing x. A variant that takes both (gemv_experts)
// gets the prepared input, measured faster.
bool moe_expert_up_takes_raw(const PreparedActivation& raw_x, const PreparedActivation& prepared_x,
                             const ExpertTable& table, const MoeGrouping* grouping, int64_t M, int top_k,
                             ActNumerics h_numerics, const KernelPolicy& policy = KernelPolicy{});
// One token of a routed up-projection: where the catalogue's choice for the call reads packed 16-token tiles
// (wgmma_experts), every active expert's tile is the same (the token's column, zeros beside it), so it need not
// wait for the routing. moe_expert_up_packs_ahead says whether that is so (and the policy leaves "moe_pack_ahead"
// enabled); moe_expert_up_pack_ahead then packs x's tile on `stream` (after x is written, before the routing is
// needed) and marks x (PreparedActivation::packed_tiles), and moe_expert_up given the marked x skips its own pack:
// the pack leaves the router -> routing -> up-projection chain. The same bits.
bool moe_expert_up_packs_ahead(const PreparedActivation& x, const ExpertTable& table, const MoeGrouping* grouping,
                               int64_t M, int top_k, ActNumerics h_numerics, const KernelPolicy& policy = KernelPolicy{});
void moe_expert_up_pack_ahead(PreparedActivation& x, const ExpertTable& table, const MoeGrouping* grouping, int64_t M,
                              int top_k, ActNumerics h_numerics, cudaStream_t stream,
                              const KernelPolicy& policy = KernelPolicy{});
// A dense expert run as two linears (w1 -> g, w3 -> u, bf16 [M, inter] with row stride ld): h = the prepared
// activation (layout, numerics) of round_bf16(silu(min(g, limit)) * clamp(u, +-limit)), as moe_expert_up writes it.
// h: values/scales sized for (M, inter); its other fields are filled in.
void moe_swiglu_prepare(const uint16_t* g, const uint16_t* u, int64_t ld, int64_t M, int64_t inter, float limit,
                        WeightKind layout, ActNumerics numerics, PreparedActivation& h, cudaStream_t stream);
// y: [rows, hidden] fp32, row = grouped slot (routed) or token (dense). Returns the variant's name.
// y_bf16 (optional, [rows, hidden]): where the chosen variant can write its output rounded to bf16 (the bits
// round_bf16 gives of what it writes to y; today grouped_experts), it writes y_bf16 instead of y and sets
// *wrote_bf16; else it writes y and clears it. For consumers that round every term to bf16 anyway (moe_combine's
// round_terms): half the bytes.
std::string_view moe_expert_down(const PreparedActivation& h, const ExpertTable& table, const MoeGrouping* grouping,
                                 int64_t M, int top_k, float* y, cudaStream_t stream,
                                 const KernelPolicy& policy = KernelPolicy{}, uint16_t* y_bf16 = nullptr,
                                 bool* wrote_bf16 = nullptr);
// out[t, :] = sum_j y_routed[pair_slot[t*top_k + j], :] + y_shared[t, :] (y_shared may be null). round_terms
// (release numerics): every term is rounded to bf16 first, as the reference's expert GEMMs output bf16.
// y_shared_bf16 (round_terms only, instead of y_shared): the shared term as bf16 [M, hidden], rounded already;
// y_routed_bf16 (round_terms only, instead of y_routed, which is then null): the routed terms as bf16 [slots,
// hidden], rounded already (moe_expert_down's y_bf16).
void moe_combine(const float* y_routed, const MoeGrouping& g, const float* y_shared, int64_t M, int top_k,
                 int64_t hidden, void* out, OutKind out_kind, int64_t ld_out, cudaStream_t stream,
                 bool round_terms = false, const uint16_t* y_shared_bf16 = nullptr,
                 const uint16_t* y_routed_bf16 = nullptr);

}  // namespace flashseek::cuda
