// Which kernel variant runs each op, and the tuning knobs of A/B runs: one plain object, read from the environment
// in exactly one place (KernelPolicy::from_env). The CUDA backend owns one and passes it to every op family's
// dispatch (gemm/linear_catalogue.h, moe/moe.cuh, attention/sparse_attention.cuh); tests build their own to force
// a variant. Host-only header (no CUDA includes).
//
// Variant names are unique across op families (docs/perf.md, "kernel choice", lists them):
//   linear: generic_linear, wgmma_gemv, wgmma_f16_gemv, bulk_gemv, ring_gemv, simt_gemv, mma_gemv, bf16_gemv,
//           fp8_gemm, fp8_gemm_splitk, fp8_gemm_mma, bf16_gemm, tile_gemm
//   experts: generic_experts, wgmma_experts, bulk_experts, simt_experts, gemv_experts, grouped_experts, tile_experts
//   attention: attn_prefill, attn_mma, attn_simt; indexer: indexer_prefill, indexer_simt
//   composition: shared_as_linears (the shared expert as w1/w3/w2 linears instead of the fused expert kernels),
//           head_rows_last_layer (the last layer's query path and MoE sub-block on the rows that need logits only),
//           shared_bf16_out (prefill: the shared expert's w2 writes its output rounded to bf16, as the combine reads it),
//           routed_bf16_out (release numerics: grouped_experts' down-projection writes bf16, as the combine reads it),
//           norm_fp8_rows (mhc_pre's norm also writes the FP8_ROWS act_quant of its output for the first FP8 GEMM),
//           wo_a_fp8_rows (prefill: the bf16 wo_a GEMM writes wo_b's act_quant rows instead of its output),
//           gemv_chain (one token: wo_a, the preparation of its output and wo_b as one persistent kernel,
//           gemm/gemv_chain.cuh, where both would run simt_gemv, the same bits; only where forced: slower inside
//           the step on the H200, docs/perf-log/2026-12-04_gemv-chain.md),
//           query_chain (one token: wq_a, q_norm and wq_b as one gemv_chain, the same bits; only where forced: the
//           one-sequence step 3.0-3.5% slower on an H100,
//           docs/perf-log/2026-12-06_query-chain-verdict-and-sanitize.md),
//           attn_prefill_cta_release (the prefill attention's stage refills after one CTA barrier per tile instead
//           of its empty mbarriers, the form racecheck follows, the same bits; only where forced until measured),
//           mhc_one_launch (one token: mhc_pre's partial sums and finalize as one launch, the last partial CTA
//           finalizing, mhc/mhc.cuh, the same bits; only where forced: the one-sequence step 1.0% slower on an
//           H100, docs/perf-log/2026-12-06_expert-half-items.md),
//           weight_prefetch (decode passes: wq_b's and wo_a's matrices requested into L2 on a side branch while the
//           latency-bound ops before them run, common/l2_prefetch.cuh; only where forced: one sequence 3.4% slower
//           on an H100 and the GEMVs no faster, docs/perf-log/2026-12-05_short-prompts-and-l2-prefetch.md),
//           norm_into_gemv (one token: q_norm inside wq_b's staging where wq_b runs simt_gemv, gemm/normed_gemv.cuh,
//           the same bits; only where forced: the one-sequence step 1.6% slower on an H100, the side branches'
//           GEMVs dispatched after wq_b, docs/perf-log/2026-12-06_norm-in-wq-b-and-gate-lanes.md),
//           prepare_in_gemv (one token: wo_a's and wo_b's bf16 inputs prepared inside simt_gemv's staging, a
//           raw_activation; the same bits; disabled: a preparation launch before each),
//           prepare_in_ring (one token: wo_b's bf16 input prepared inside ring_gemv, every CTA preparing the row;
//           the same bits; only where forced: the one-sequence step 2.9-3.6% slower on an H100, wo_b 9 us longer
//           in the graph (the preparation on 4 warps per SM ~2.6 us of it in eager events),
//           docs/perf-log/2026-12-07_early-wo-a-and-the-ring-raw-row.md),
//           early_wo_a (one token, where wo_a runs ring_gemv on a prepared input: the attention's merge and that
//           preparation let their successors launch at their entry, so that the ring's CTAs fill their first stages
//           while the attention runs; the same kernels and bits; only where forced until measured), early_wo_b (the
//           same for one token's wo_b ring: its preparation launches it at entry, while wo_a runs),
//           prepare_in_merge (decode passes whose attention merges splits: the merge, attention/sparse_attention.cu
//           combine_kernel, also writes its output prepared for wo_a where wo_a takes a prepared MMA_F16 input, so
//           no preparation launch stands between the attention and wo_a; the same bits as that launch; only where
//           forced until measured),
//           compressor_gate_lane (each compressor's gate GEMV on a side stream of its own beside its wkv GEMV,
//           the same kernels; disabled: both on the compressor's stream, one after the other)
//           moe_pack_ahead (one token: wgmma_experts' up-projection tile packed on a side stream as soon as the
//           MoE input is, beside the router and the routing, moe/moe.cuh; the same bits; disabled: packed after the
//           routing on the main stream), moe_pack_join_routing (forced only: that branch joined before the routing
//           instead of before the up-projection; an A/B of where the join's lost early start costs less),
//           route_in_router (decode passes of 1-8 tokens: the routing and grouping run in the router's bf16_gemv
//           launch, by the CTA that completes the logits last, moe/moe.cuh moe_router_route_and_group; the same bits;
//           disabled: route_group_kernel, a launch of its own after the router),
//           indexer_weights_lane (scoring layers: the indexer's weights_proj GEMV on a side stream of its own from
//           the sub-block's start, joined before the scorer; the same kernel; disabled: on the main path after the
//           head norm),
//           mhc_mix_lane (decode passes of up to mhc_mix_lane_max_rows rows, forced: any: mhc_pre's post and comb,
//           the Sinkhorn, in a launch of their own on a side stream, mhc/mhc.cuh mhc_pre_mix; the same bits;
//           disabled: in the finalize, whose successor waits for it),
//           indexer_branch (decode passes of scoring layers, forced: prefill passes too: the indexer's wq_b and q
//           preparation on a side branch beside the query's wq_b and the head norm, the same kernels; disabled: on
//           the main path after them; at context 8,192 one sequence 1.4% and 16 / 64 sequences 0.3% faster on an
//           H100, docs/perf-log/2026-12-07_ring-wo-pair-and-indexer-branch.md)
//   epilogue: gemm_tma_store (the wgmma GEMMs' bf16 output tiles written by TMA from shared memory, overlapping
//           the next tile; disabled: stored by the math warps, the same bits)
//   work split: moe_half_items (the warp-specialized wgmma_experts kernel on items of one 64-row part where a call
//           has fewer whole items than rings; disabled: whole items, forced: half items at any size; the same bits,
//           docs/perf-log/2026-12-06_expert-half-items.md)
// Environment (all optional): FLASHSEEK_DISABLE=name,name (never choose these), FLASHSEEK_FORCE=name,name (take
// these wherever they support the problem, ignoring the measured preference floors), FLASHSEEK_PDL=0,
// FLASHSEEK_BRANCHES=0, FLASHSEEK_FUSED_POST=0, and the integer knobs below (FLASHSEEK_<KNOB> in capitals).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flashseek::cuda {

struct KernelPolicy {
    std::vector<std::string> disabled;  // variants never chosen
    std::vector<std::string> forced;    // variants taken wherever they support the problem

    bool pdl = true;         // programmatic dependent launch on sm_90+ (common/pdl.cuh)
    bool branches = true;    // the side-stream branches of each sub-block (backend)
    bool fused_post = true;  // mhc_post (and the MoE combine) inside the next sub-block's mhc_pre (backend)

    int64_t gemv_max_tokens = 16;        // the small-M GEMV variants serve 1..this tokens (at most 16)
    // gemv_experts serves the routed experts of decode passes up to this many tokens (its per-expert token groups
    // read each active expert's weights once per step whatever the batch; 0: never for routed experts). Above it
    // grouped_experts takes them from its floor, tile_experts below the floor. On the H200 wgmma_experts comes
    // first; without it (other GPUs) gemv_experts measured faster than grouped_experts at 32-128 sequences and
    // slower at 256 (docs/perf-log, 2026-12-02).
    int64_t routed_gemv_max_tokens = 128;
    int64_t wgmma_gemv_min_tokens = 2;   // preference floor of wgmma_gemv (tokens)
    // Preference floor of wgmma_experts (tokens). From 1 since its stages arrive as TMA boxes: one sequence 4.14 ->
    // 4.06 ms against gemv_experts / simt_experts (run 216, docs/perf-log/2026-12-05_expert-weight-boxes.md; with
    // per-lane copies it had lost there by 2.5%, the side branches not running beside it).
    int64_t moe_wgmma_min_tokens = 1;
    int64_t moe_wgmma_max_tokens = 256;  // ... and its ceiling (its tiles hold kActTileMaxPairs pairs)
    int moe_wgmma_balance = 0;           // wgmma_experts stage assignment: 0 round robin, 1 balanced up, 2 both
    // wgmma_experts' kernel: 1 the warp-specialized one (a copy warpgroup, three math warpgroups per SM), 0 the
    // round-robin one (every warp copies and computes; moe_wgmma_balance applies to it). The same bits; 1 measured
    // 1.7-2.8% faster steps at 8-128 sequences (docs/perf-log/2026-12-04_expert-stage-scales.md, run 211).
    // 2: the warp-specialized kernel whose copy warps wait for a ring stage's release on a named barrier (the math
    // warps bar.arrive) instead of an mbarrier, a form compute-sanitizer's racecheck follows; the same bits. 0.4-0.7%
    // faster at 16 / 64 sequences (run 215, docs/perf-log/2026-12-05_transport-stalls-and-review-fixes.md), 0.5-1.4%
    // at 8-256 with the TMA stages and racecheck-clean where the mbarrier form reports its releases (run 216): the
    // default.
    int moe_wgmma_specialized = 2;
    // The warp-specialized kernel's item order: 0 SM-major (the SMs' item counts differ by at most one), 1 the
    // round-robin kernel's slot order (a CTA's three rings take consecutive items), 2 dynamic (each ring takes the
    // next item from a counter when it starts one: rings that start late or run slow take fewer); the same bits.
    // -1 (default): 2 from moe_wgmma_dynamic_min_tokens, else 0. Run 216: dynamic 1.4% faster at 64 / 128
    // sequences, equal at 16, 8% slower at 2 (early rings take the few items twice while late CTAs get none).
    int moe_wgmma_ws_order = -1;
    int64_t moe_wgmma_dynamic_min_tokens = 32;
    // The indexer's decode scorer and top-k (indexer/indexer.cuh IndexerSelectParams::form): 0 the first form, 1
    // with their staging and radix passes shortened; the same scores and selections bit for bit. 1 is the default:
    // scorer + top-k 55 -> 25 us per call at one sequence, context 8,192 TPOT 4.80 -> 4.53 ms (run 215,
    // docs/perf-log/2026-12-05_transport-stalls-and-review-fixes.md).
    int indexer_select_form = 1;
    int gemv_kw = 0;                     // warps per 16-row tile of mma_gemv: 0 (rule), 1 or 4
    // SMs a forced gemv_chain / query_chain leaves to other grids (FLASHSEEK_GEMV_CHAIN_FREE_SMS, for A/B runs): the
    // query path runs beside the step's side branches, which a chain on every SM makes wait.
    int gemv_chain_free_sms = 0;
    // The side streams at the device's greatest stream priority (FLASHSEEK_BRANCH_PRIORITY=1, for A/B runs): their
    // pending CTAs are then dispatched before the main path's.
    bool branch_priority = false;
    int moe_up_kw = 0, moe_down_kw = 0;  // the same for gemv_experts per projection
    int attn_mma_min_seqs = 1;           // attn_mma is preferred for decode passes of at least this many sequences
    // Preference floors (rows of a decode pass; prefill passes take these variants always) of the compute-bound
    // GEMMs: fp8_gemm, fp8_gemm_mma and bf16_gemm, and the grouped expert GEMMs (grouped_experts, tokens). Below
    // them tile_gemm / tile_experts (and the GEMVs up to 16). Measured on the H200 at 20 layers (docs/perf-log,
    // large batches): at 32 sequences the floors 32 / 32 give 49.8 ms per step, gemm 64 52.7 ms, grouped 64 (tile
    // experts) 54.9 ms; decode buckets are powers of two, so every bucket past the GEMVs' 16 takes them.
    int64_t gemm_min_tokens = 32;
    int64_t grouped_experts_min_tokens = 32;
    // grouped_experts' slot rows per tile on sm_90a (moe/moe_gemm.cuh): 128, 64 or 32 always, or 0 by the pass
    // (moe_gemm_slot_rows: 32 where a pass gives the experts at most 16 slots on average, i.e. prompts up to ~680
    // tokens on V4-Flash, 64 up to 64 slots, else 128). Every width computes a slot's row with the same arithmetic
    // and the same bits (the tensor core's per-element sum does not depend on the wgmma's N; MoeGemm tests). By the
    // pass since run 218 (H100, 16 layers): prefill 256 tokens 6,615 -> 9,046 tok/s, 1,024 19,477 -> 23,778, 4,096
    // unchanged; always 32 or always 64 are no better at either length.
    int grouped_slot_rows = 0;
    // Decode passes of at least this many rows (and gemm_min_tokens, from which the bf16 GEMM is preferred) run wo_a
    // as prefill does: its FP8 weights widened to bf16 once per pass (~38 us per layer, on a branch beside the query
    // path and the attention) and the bf16 GEMM over all groups in one launch, instead of wgmma_f16_gemv, which
    // widens every weight again for each 16- or 32-token tile (176 us per call at 256 rows, 98 TFLOP/s, run 216).
    // The reference's numerics (bf16 activations), another sum order than the f16 GEMV's (decode variants change
    // with the row count anyway). Run 218 (H100, 16 layers): 64 sequences 19.53 -> 19.36 ms per step, 128 24.93 ->
    // 23.91, 256 30.17 -> 28.00; run 219 (H100): 32 rows 14.05 -> 14.39 (slower), hence 64. Numerics: inside the
    // envelope of the sequences decoded alone (CudaBackendBatch.WidenedWoAInDecodeStaysInTheEnvelope).
    int64_t wo_a_widen_min_tokens = 64;
    // Decode passes of at most this many rows put mhc_pre's post and comb on a side stream (mhc_mix_lane; forced: any
    // row count). At one sequence the step was 0.4% (context 256) and 1.0% (8,192) shorter, at 16 neutral to -0.9%,
    // at 64 / 256 +0.2 / +0.3%: the lane's extra CTAs then compete with the main path (one H100, 16 layers, run 709 of
    // docs/perf-log/2026-12-07_indexer-tiles-and-mhc-mix-lane.md).
    int64_t mhc_mix_lane_max_rows = 16;
    // ring_gemv (one token, FP8 weights of >= 16 MB, Hopper): the K range it is preferred for, from ring_gemv_min_k
    // to ring_gemv_max_k (A/B knobs FLASHSEEK_RING_GEMV_MIN_K / _MAX_K; a longest K of 0: never). The default, 2,048
    // to 8,192, takes wo_a and wo_b, which run after the attention, and leaves wq_b (K 1,024) to simt_gemv: beside
    // the query path's side branches every ring form made the one-sequence step 1.2-4.0% slower (runs 241-245,
    // docs/perf-log/2026-12-06_ring-gemv.md). With wo_b's tiles in K parts (ring_gemv_k_parts) the step at one
    // sequence was 0.1-1.5% shorter in each of six alternating rounds (median -0.7%); wo_a alone +1.8%, wo_b alone
    // -0.6%, wo_b without K parts +3.8%, all three +1.2% (one H100, 16 layers, runs 802-803 of
    // docs/perf-log/2026-12-07_ring-wo-pair-and-indexer-branch.md); as the default against a longest K of 0, -1.4%
    // and -1.3% (runs 901 and 903). wo_a alone loses because simt_gemv on wo_b behind the ring's CTAs cannot start
    // its weight loads early (run 904, docs/perf-log/2026-12-07_defaults-checked-and-ring-raw-rows.md).
    int64_t ring_gemv_max_k = 8192;
    int64_t ring_gemv_min_k = 2048;
    // ring_gemv's K parts per row tile at most (1, 2 or 4; A/B knob FLASHSEEK_RING_GEMV_K_PARTS): where a shape has
    // too few tiles to give every warp of a CTA one (wo_b), the warps left over take parts of each tile's K. Two
    // parts measured no better than four (run 903).
    int ring_gemv_k_parts = 4;

    bool is_disabled(std::string_view variant) const;
    bool is_forced(std::string_view variant) const;
    // A composition taken only where forced (gemv_chain, query_chain, weight_prefetch,
    // attn_prefill_cta_release, mhc_one_launch, prepare_in_ring, early_wo_a, early_wo_b, prepare_in_merge):
    // forced, and not disabled as well.
    bool takes_forced_only(std::string_view name) const { return is_forced(name) && !is_disabled(name); }
    // A composition taken where it was measured to pay (`measured`: mhc_mix_lane's row cap, indexer_branch's decode
    // passes), anywhere where forced, never where disabled.
    bool takes(std::string_view name, bool measured) const {
        return !is_disabled(name) && (measured || is_forced(name));
    }
    // The policy a test uses to exercise exactly one variant: forced, every other variant of the lists untouched.
    static KernelPolicy only(std::string_view variant);
    // The policy of one pass of the backend: in a prefill pass the compute-bound variants (kComputeBoundVariants)
    // are forced wherever they support the problem, unless this policy disables them: a prompt token's kernels then
    // depend on its being a prompt token, not on how many rows its pass has (batch invariance: docs/perf.md). A
    // decode pass keeps this policy: the compute-bound variants run from their preference floors (gemm_min_tokens,
    // grouped_experts_min_tokens) up, the GEMV / tile kernels below them. Decode rows are batch-dependent anyway
    // (the variants change with the padded bucket), within the one-rounding envelope.
    KernelPolicy for_pass(bool prefill) const;

    // Compiled defaults overridden by the environment; throws Error naming a variable with a bad value or an
    // unknown variant name.
    static KernelPolicy from_env();
    // from_env() read once per process: what launch helpers that take no policy use (the PDL switch).
    static const KernelPolicy& process();
};

// The tensor-core GEMM variants that sum differently from the GEMV / tile kernels (FP8 block sums on the tensor
// cores, bf16 products): prefill passes take them always, decode passes from their floors (KernelPolicy::for_pass).
inline constexpr std::string_view kComputeBoundVariants[] = {"fp8_gemm", "fp8_gemm_mma", "bf16_gemm",
                                                             "grouped_experts"};

// Every variant name the catalogues declare (for validating FLASHSEEK_DISABLE / FLASHSEEK_FORCE).
const std::vector<std::string_view>& known_variants();

}  // namespace flashseek::cuda
