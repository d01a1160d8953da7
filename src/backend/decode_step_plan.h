// The one-token decode step as a persistent step's graph (step_schedule.h): one layer's attention sub-block (mHC pre
// to wo_b: the query path and the side branches the CUDA backend runs beside it today, the window KV, the
// compressors, on ratio-4 layers the indexer), or the whole step (both sub-blocks of every layer, then the head). Every
// weight-streaming op is split into 16 KB tiles, every latency-bound op is one tile. The stages of
// docs/decode-step-design.md deal these tiles to the same loaders; which stream's tiles come first in each CTA's list
// is a free parameter (subblock_order), and the timing model (step_schedule_sim.h) is how the choice and the expected
// time are written down before the kernel exists (docs/perf-log/2026-12-06_step-planner.md).
// Weight bytes come from the checkpoint inventory of the config (model/weights.h), as the kernels read them
// (weights and block scales; the indexer's query projections included, as at contexts where it scores); the costs
// of the tiles' arithmetic and of the latency-bound ops are SubblockCosts.
#pragma once
#include <string>
#include <vector>

#include "backend/step_schedule.h"
#include "model/config.h"

namespace flashseek {

// Per-tile costs (µs). Defaults: the measurements named beside them (one token; the latency-bound ops at their charged
// time per call in the CUPTI timeline of run 234 on an H100, docs/perf-log/2026-12-06_query-chain-verdict-and-sanitize.md).
struct SubblockCosts {
    double tile_bytes = 16384;           // weight bytes per tile (the stage-0 loader's 16 KB tiles)
    double us_per_kweight = 0.27;        // one warp's arithmetic per 1,024 weights of a tile (gemv_chain's SIMT form:
                                         // a 16 KB FP8 tile in 3.9-5.0 µs); the f16 wgmma form is ~10x less
    double us_per_kweight_fp4 = 0.27;    // the same for the routed experts' FP4 weights (the stage-0 probe's SIMT
                                         // widening: 45% of the copy rate, about the FP8 cost per weight)
    double mhc_finalize_us = 5.5;        // mhc_finalize (Sinkhorn, collapse, the sub-block's RMSNorm)
    double q_norm_us = 1.5;              // q_norm of the q latent (inside the query chain)
    double q_head_norm_rope_us = 2.4;    // the queries' head norm + RoPE
    double kv_store_us = 3.4;            // the KV row's norm + RoPE and the window store
    double compressor_us = 2.5;          // a compressor's pooling and emission after its two GEMVs
    double indexer_q_us = 1.5;           // the indexer's q preparation
    double indexer_select_us = 6.0;      // the indexer's scores and top-k
    double attention_us = 10.6;          // the sparse attention at one token
    double route_group_us = 11.2;        // route + group and the experts' tile packing (7.5 + 3.7)
    double quantize_h_us = 4.5;          // the routed experts' h quantized for the down-projection
    double combine_us = 4.3;             // the experts' outputs combined (the mHC post rides in the next mHC pre)
    double sample_us = 31.0;             // the greedy sampling over the vocabulary: argmax_rows at one row in one
                                         // CTA (run 605); spread over 64 CTAs since, not yet timed alone (run 606
                                         // measured it with the merge's change: -44 us per step together)
};

// An op's kind: its name without a whole step's layer label ("L3 wq_b" -> "wq_b").
std::string op_kind(const std::string& name);

// Sets the field `name` of `c` (the names above); an Error naming the field for an unknown one or a negative value.
void set_subblock_cost(SubblockCosts& c, const std::string& name, double value);
std::vector<std::string> subblock_cost_names();

// The graph of layer `layer`'s attention sub-block (ratio 0, 4 or 128 decides which branches exist).
StepGraph attention_subblock_graph(const ModelConfig& cfg, int layer, const SubblockCosts& costs);

// The whole one-token decode step of the first `layers` layers (op names labelled "L{layer} "): per layer the
// attention sub-block, then the MoE sub-block (mHC pre, router, route + group, the routed experts, whose bytes wait
// for the routing, the shared expert beside them, the combine), then the head (its mHC and norm, the head GEMV, the
// sampling). One schedule for the step is the persistent design's last stage: each CTA's loader runs into the next
// layer's weights while this layer's latency-bound ops run, as far as its ring allows.
StepGraph decode_step_graph(const ModelConfig& cfg, int layers, const SubblockCosts& costs);

// A dependency order of the graph's ops: the main path's ops first and each side branch's after them (query_first),
// or the branches' first (the window KV, compressors and indexer inputs; in the MoE sub-block the shared expert).
// Either way every op comes after the ops it waits for.
std::vector<int> subblock_order(const StepGraph& g, bool query_first);

}  // namespace flashseek
