// The arithmetic of a forward pass, counted from the configuration: the numerator of prefill's ceiling fraction
// (tok/s x FLOPs per token / the measured tensor-core rate). FLOPs are 2 x multiply-adds of the matrix products
// only (linears, the attention score and value products, the indexer's scoring); norms, activations, routing,
// mHC mixing and compression arithmetic are left out (they are element-wise, a few percent at most).
//
// What one token at position p (0-based) costs in one layer (docs/model.md §2):
//  * linears: wq_a, wq_b, wkv, wo_a (grouped: o_groups blocks of H*hd/o_groups -> o_lora), wo_b; the compressors'
//    wkv and wgate (width 2*dim for ratio 4, dim for ratio 128); the indexer's wq_b, weights_proj and compressor on
//    ratio-4 layers; the router gate; the shared expert (3 x D x I x n_shared); top_k routed experts (3 x D x I
//    each, whatever their storage format); the two mHC mixing projections (hc*D -> (2+hc)*hc);
//  * attention: H heads x head_dim for the scores and again for the values, over the keys the token attends: the
//    sliding window (min(window, p+1)) plus the compressed entries (ratio 4: the indexer's top-k of (p+1)/4,
//    ratio 128: (p+1)/128);
//  * the indexer's scores: index_n_heads x index_head_dim over all (p+1)/4 entries on ratio-4 layers.
// The head (D x vocab) is counted once per sequence: prefill computes logits for the last token only.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace flashseek {

struct ForwardFlops {
    double linear = 0;     // weight products
    double attention = 0;  // scores and values over the attended keys, and the indexer's scores
    double head = 0;       // the logits projection
    double total() const { return linear + attention + head; }
};

// One token at position `position` through the first `n_layers` layers (0 = all), without the head.
ForwardFlops token_flops(const ModelConfig& cfg, int n_layers, int64_t position);

// A prefill of one sequence of `tokens` tokens (positions 0 .. tokens-1), the head once, divided by `tokens`: the
// mean FLOPs per prefilled token.
ForwardFlops prefill_flops_per_token(const ModelConfig& cfg, int n_layers, int64_t tokens);

}  // namespace flashseek
