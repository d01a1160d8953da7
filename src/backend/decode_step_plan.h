// The attention sub-block of one decode layer at one token as a persistent step's graph (step_schedule.h): from mHC
// pre to wo_b, the query path and the side branches the CUDA backend runs beside it today (the window KV, the
// compressors, on ratio-4 layers the indexer), every weight-streaming op split into 16 KB tiles, every latency-bound op
// one tile. Stage 2 of docs/decode-step-design.md deals these tiles to the same loaders; which stream's tiles come
// first in each CTA's list is its one free parameter (subblock_order), and the timing model (step_schedule_sim.h)
// is how the choice and the expected sub-block time are written down before the kernel exists.
// Weight bytes come from the checkpoint inventory of the config (model/weights.h), as the kernels read them
// (weights and block scales); the costs of the tiles' arithmetic and of the latency-bound ops are SubblockCosts.
#pragma once
#include <string>
#include <vector>

#include "backend/step_schedule.h"
#include "model/config.h"

namespace flashseek {

// Per-tile costs (µs). Defaults: the measurements named beside them (one H100 / H200, one token; the latency-bound
// ops at their charged time per call in the CUPTI timeline of run 234, docs/perf-log/2026-12-06_*).
struct SubblockCosts {
    double tile_bytes = 16384;           // weight bytes per tile (the stage-0 loader's 16 KB tiles)
    double us_per_kweight = 0.27;        // one warp's arithmetic per 1,024 weights of a tile (gemv_chain's SIMT form:
                                         // a 16 KB FP8 tile in 3.9-5.0 µs); the f16 wgmma form is ~10x less
    double mhc_finalize_us = 5.5;        // mhc_finalize (Sinkhorn, collapse, the sub-block's RMSNorm)
    double q_norm_us = 1.5;              // q_norm of the q latent (inside the query chain)
    double q_head_norm_rope_us = 2.4;    // the queries' head norm + RoPE
    double kv_store_us = 3.4;            // the KV row's norm + RoPE and the window store
    double compressor_us = 2.5;          // a compressor's pooling and emission after its two GEMVs
    double indexer_q_us = 1.5;           // the indexer's q preparation
    double indexer_select_us = 6.0;      // the indexer's scores and top-k
    double attention_us = 10.6;          // the sparse attention at one token
};

// Sets the field `name` of `c` (the names above); an Error naming the field for an unknown one or a negative value.
void set_subblock_cost(SubblockCosts& c, const std::string& name, double value);
std::vector<std::string> subblock_cost_names();

// The graph of layer `layer`'s attention sub-block (ratio 0, 4 or 128 decides which branches exist).
StepGraph attention_subblock_graph(const ModelConfig& cfg, int layer, const SubblockCosts& costs);

// A dependency order of the graph's ops: the query path's ops first and each branch's after them (query_first), or
// the branches' first. Either way every op comes after the ops it reads.
std::vector<int> subblock_order(const StepGraph& g, bool query_first);

}  // namespace flashseek
