// The sharding plan of a layout (sharding.h): per rank the weight bytes it holds, by category, replicated vs
// sharded, and the communication one decode step needs — the numbers a cost model and the fit check start from.
//
// Communication (per decode token; a prefill token costs the same per row):
//  * attention: each tp rank's wo_b gives a partial sum of the attention output; one all-reduce per layer over the
//    tp ranks of an expert group (none when tp = 1);
//  * MoE: each rank's routed-expert slices and its shared-expert slice give partial sums of the MoE output; one
//    all-reduce per layer over all ranks (none when there is one rank);
//  * head: vocabulary-parallel; greedy decoding gathers each rank's best (logit, token id): 8 bytes per rank. Top-k /
//    top-p sampling and logprobs gather more (each rank's top candidates and its log-sum-exp), still bytes, not
//    kilobytes.
// Message element: bf16 by default (the dtype of the residual streams and of every linear's output: wo_b's and the
// experts' w2 outputs are bf16, docs/model.md §2.0), so an all-reduce of one token is hidden_size x 2 bytes; an fp32
// reduction (partial sums kept in fp32 across ranks) doubles it: PlanOptions::comm_element_bytes = 4.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/sharding.h"

namespace flashseek {

struct CategoryBytes {
    std::array<int64_t, size_t(WeightCategory::kCount)> bytes{};

    int64_t& operator[](WeightCategory c) { return bytes[size_t(c)]; }
    int64_t operator[](WeightCategory c) const { return bytes[size_t(c)]; }
    int64_t total() const;
};

struct RankPlan {
    RankSlice slice;
    CategoryBytes held;            // the weight bytes the rank holds, by category
    int64_t replicated_bytes = 0;  // of those, tensors every rank of the layout holds whole
    int64_t sharded_bytes = 0;     // tensors divided among ranks (slices, and whole experts only some ranks hold)
    int64_t routed_expert_bytes = 0;  // one routed expert of one layer as this rank holds it (w1, w2, w3 + scales)
    int experts_per_layer = 0;        // routed experts held per layer

    int64_t total() const { return held.total(); }
};

struct CommunicationPlan {
    int element_bytes = 2;          // bf16 messages (see the top of this file)
    int attention_group = 1;        // ranks in one attention all-reduce (tp); 1 = no attention all-reduce
    int moe_group = 1;              // ranks in the MoE all-reduce (all ranks); 1 = none
    int64_t attention_bytes = 0;    // one token's attention all-reduce message per layer (0 when none)
    int64_t moe_bytes = 0;          // one token's MoE all-reduce message per layer (0 when none)
    int allreduces_per_step = 0;    // all-reduces of one decode step over the plan's layers
    int64_t head_gather_bytes = 0;  // greedy head: bytes gathered per token over all ranks

    // Message bytes all-reduced per decode token over the whole step (attention + MoE, every layer).
    int64_t allreduce_bytes_per_token(int n_layers) const {
        return int64_t(n_layers) * (attention_bytes + moe_bytes);
    }
};

struct PlanOptions {
    int comm_element_bytes = 2;  // 2 (bf16) or 4 (fp32)
    bool include_mtp = false;    // the MTP layers' weights too (the forward does not run them)
};

struct ShardPlan {
    ParallelLayout layout;
    ModelConfig config;
    int n_layers = 0;         // layers planned (the first n_layers)
    int64_t model_bytes = 0;  // the whole model over those layers (what TP1 holds)
    std::vector<RankPlan> ranks;
    CommunicationPlan comm;

    const RankPlan& largest_rank() const;  // the rank holding the most bytes (the first of equals)
};

// The communication of one decode step of `layout` over n_layers layers (messages of element_bytes: 2 or 4).
CommunicationPlan communication_plan(const ModelConfig& cfg, const ParallelLayout& layout, int n_layers,
                                     int element_bytes = 2);

// Plans `layout` for the first n_layers layers (0 = all) of cfg; throws Error naming the key and the numbers when
// the layout cannot split the model (validate_layout).
ShardPlan plan_layout(const ModelConfig& cfg, const ParallelLayout& layout, int n_layers,
                      const PlanOptions& opt = {});

}  // namespace flashseek
