// Expectations for sharding tests, written from the layout's rules in words (src/model/sharding.h) and tensor names
// alone, independently of the slicing code: which fraction of each checkpoint tensor a rank holds, and how many
// ranks hold each of its bytes. Valid for configs whose every split is aligned (V4-Flash, tiny-sharding), where a
// rank's share of a split tensor is exactly 1 / parts of its bytes, scales included.
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/sharding.h"

namespace flashseek::test {

inline bool name_has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

// Attention tensors split over the tp ranks of an expert group: wq_b, wo_a, wo_b (+ scales) and attn_sink.
inline bool is_attention_split(const std::string& name) {
    return !name_has(name, "indexer") &&
           (name_has(name, "attn.wq_b.") || name_has(name, "attn.wo_a.") || name_has(name, "attn.wo_b.") ||
            name_has(name, "attn.attn_sink"));
}
// The routed expert a tensor belongs to, or -1.
inline int routed_expert_of(const std::string& name) {
    const size_t p = name.find("ffn.experts.");
    if (p == std::string::npos) return -1;
    return std::stoi(name.substr(p + std::string("ffn.experts.").size()));
}
inline bool is_shared_expert(const std::string& name) { return name_has(name, "ffn.shared_experts."); }

// Bytes of tensor `name` (`bytes` whole) that rank `rank` of layout `l` holds.
inline int64_t expected_rank_bytes(const std::string& name, int64_t bytes, const ModelConfig& c,
                                   const ParallelLayout& l, int rank) {
    const int ep_rank = rank / l.tp;
    if (is_attention_split(name)) return bytes / l.tp;
    const int e = routed_expert_of(name);
    if (e >= 0) {
        const int per_group = c.n_routed_experts / l.ep;
        return e / per_group == ep_rank ? bytes / l.tp : 0;
    }
    if (is_shared_expert(name) || name == "head.weight") return bytes / l.ranks();
    return bytes;
}

// How many ranks hold each byte of tensor `name`: the tp-split attention once per expert group, experts, the shared
// expert and the head once in all, everything else on every rank.
inline int expected_coverage(const std::string& name, const ParallelLayout& l) {
    if (is_attention_split(name)) return l.ep;
    if (routed_expert_of(name) >= 0 || is_shared_expert(name) || name == "head.weight") return 1;
    return l.ranks();
}

}  // namespace flashseek::test
