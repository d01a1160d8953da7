// KernelPolicy (kernel_policy.h): the one place that reads the kernel-choice environment variables.
#include "cuda/common/kernel_policy.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <sstream>

#include "util/env.h"
#include "util/error.h"

namespace flashseek::cuda {

namespace {

std::vector<std::string> split_names(const char* var) {
    std::vector<std::string> out;
    const char* v = std::getenv(var);
    if (!v) return out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        const auto& known = known_variants();
        if (std::find(known.begin(), known.end(), item) == known.end()) {
            std::string list;
            for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
            fail("environment variable {}: '{}' is not a kernel variant (known: {})", var, item, list);
        }
        out.push_back(item);
    }
    return out;
}

// A knob that takes one of a few values (`allowed`, ascending; `fallback` when unset); any other is refused.
int choice_knob(const char* var, int fallback, std::initializer_list<int> allowed) {
    const int v = int(env_int(var, fallback, *allowed.begin(), *(allowed.end() - 1)));
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
        std::string list;
        for (int a : allowed) list += (list.empty() ? "" : ", ") + std::to_string(a);
        fail("environment variable {} must be one of {}, got {}", var, list, v);
    }
    return v;
}

int warps_knob(const char* var) { return choice_knob(var, 0, {0, 1, 4}); }

}  // namespace

const std::vector<std::string_view>& known_variants() {
    static const std::vector<std::string_view> names = {
        "generic_linear",  "wgmma_gemv",    "wgmma_f16_gemv",  "bulk_gemv",       "ring_gemv",       "simt_gemv",
        "mma_gemv",        "bf16_gemv",     "fp8_gemm",        "fp8_gemm_splitk", "fp8_gemm_mma",    "bf16_gemm",
        "tile_gemm",       "generic_experts", "wgmma_experts", "bulk_experts",    "simt_experts",    "gemv_experts",
        "grouped_experts", "tile_experts",  "attn_mma",        "attn_simt",       "attn_prefill",    "indexer_prefill",
        "indexer_simt",    "shared_as_linears", "head_rows_last_layer", "shared_bf16_out",
        "routed_bf16_out", "norm_fp8_rows", "wo_a_fp8_rows", "gemm_tma_store", "moe_half_items",
        "gemv_chain",      "query_chain",   "indexer_branch", "weight_prefetch", "attn_prefill_cta_release",
        "mhc_one_launch",  "norm_into_gemv", "compressor_gate_lane",
        "prepare_in_gemv", "prepare_in_ring", "moe_pack_ahead", "moe_pack_join_routing", "route_in_router",
        "indexer_weights_lane", "mhc_mix_lane", "early_wo_a", "early_wo_b",
        "prepare_in_merge"};
    return names;
}

bool KernelPolicy::is_disabled(std::string_view v) const {
    return std::find(disabled.begin(), disabled.end(), v) != disabled.end();
}

bool KernelPolicy::is_forced(std::string_view v) const {
    return std::find(forced.begin(), forced.end(), v) != forced.end();
}

KernelPolicy KernelPolicy::for_pass(bool prefill) const {
    KernelPolicy p = *this;
    if (!prefill) return p;  // decode passes: the compute-bound variants from their preference floors up
    for (std::string_view v : kComputeBoundVariants)
        if (!is_disabled(v) && !is_forced(v)) p.forced.emplace_back(v);
    return p;
}

KernelPolicy KernelPolicy::only(std::string_view variant) {
    KernelPolicy p;
    p.forced.emplace_back(variant);
    return p;
}

KernelPolicy KernelPolicy::from_env() {
    KernelPolicy p;
    p.disabled = split_names("FLASHSEEK_DISABLE");
    p.forced = split_names("FLASHSEEK_FORCE");
    p.pdl = env_switch_on("FLASHSEEK_PDL");
    p.branches = env_switch_on("FLASHSEEK_BRANCHES");
    p.fused_post = env_switch_on("FLASHSEEK_FUSED_POST");
    p.branch_priority = env_int("FLASHSEEK_BRANCH_PRIORITY", 0, 0, 1) != 0;
    p.gemv_max_tokens = env_int("FLASHSEEK_GEMV_MAX_TOKENS", p.gemv_max_tokens, 0, 16);
    p.routed_gemv_max_tokens =
        env_int("FLASHSEEK_ROUTED_GEMV_MAX_TOKENS", p.routed_gemv_max_tokens, 0, int64_t(1) << 31);
    p.wgmma_gemv_min_tokens = env_int("FLASHSEEK_WGMMA_GEMV_MIN_TOKENS", p.wgmma_gemv_min_tokens, 1, 16);
    p.moe_wgmma_min_tokens = env_int("FLASHSEEK_MOE_WGMMA_MIN_TOKENS", p.moe_wgmma_min_tokens, 1, 16);
    p.moe_wgmma_max_tokens = env_int("FLASHSEEK_MOE_WGMMA_MAX_TOKENS", p.moe_wgmma_max_tokens, 0, int64_t(1) << 31);
    p.moe_wgmma_balance = int(env_int("FLASHSEEK_MOE_WGMMA_BALANCE", p.moe_wgmma_balance, 0, 2));
    p.moe_wgmma_specialized = int(env_int("FLASHSEEK_MOE_WGMMA_SPECIALIZED", p.moe_wgmma_specialized, 0, 2));
    p.moe_wgmma_ws_order = int(env_int("FLASHSEEK_MOE_WGMMA_WS_ORDER", p.moe_wgmma_ws_order, -1, 2));
    p.moe_wgmma_dynamic_min_tokens =
        env_int("FLASHSEEK_MOE_WGMMA_DYNAMIC_MIN_TOKENS", p.moe_wgmma_dynamic_min_tokens, 1, 1 << 20);
    p.indexer_select_form = int(env_int("FLASHSEEK_INDEXER_SELECT_FORM", p.indexer_select_form, 0, 1));
    p.gemv_kw = warps_knob("FLASHSEEK_GEMV_KW");
    p.gemv_chain_free_sms = int(env_int("FLASHSEEK_GEMV_CHAIN_FREE_SMS", p.gemv_chain_free_sms, 0, 1024));
    p.moe_up_kw = warps_knob("FLASHSEEK_MOE_UP_KW");
    p.moe_down_kw = warps_knob("FLASHSEEK_MOE_DOWN_KW");
    p.attn_mma_min_seqs = int(env_int("FLASHSEEK_ATTN_MMA_MIN_SEQS", p.attn_mma_min_seqs, 1, 1 << 20));
    p.gemm_min_tokens = env_int("FLASHSEEK_GEMM_MIN_TOKENS", p.gemm_min_tokens, 1, int64_t(1) << 31);
    p.grouped_experts_min_tokens =
        env_int("FLASHSEEK_GROUPED_EXPERTS_MIN_TOKENS", p.grouped_experts_min_tokens, 1, int64_t(1) << 31);
    p.wo_a_widen_min_tokens =
        env_int("FLASHSEEK_WO_A_WIDEN_MIN_TOKENS", p.wo_a_widen_min_tokens, 1, int64_t(1) << 30);
    p.mhc_mix_lane_max_rows =
        env_int("FLASHSEEK_MHC_MIX_LANE_MAX_ROWS", p.mhc_mix_lane_max_rows, 0, int64_t(1) << 30);
    p.grouped_slot_rows = choice_knob("FLASHSEEK_GROUPED_SLOT_ROWS", p.grouped_slot_rows, {0, 32, 64, 128});
    p.ring_gemv_max_k = env_int("FLASHSEEK_RING_GEMV_MAX_K", p.ring_gemv_max_k, 0, int64_t(1) << 30);
    p.ring_gemv_min_k = env_int("FLASHSEEK_RING_GEMV_MIN_K", p.ring_gemv_min_k, 0, int64_t(1) << 30);
    p.ring_gemv_k_parts = choice_knob("FLASHSEEK_RING_GEMV_K_PARTS", p.ring_gemv_k_parts, {1, 2, 4});
    return p;
}

const KernelPolicy& KernelPolicy::process() {
    static const KernelPolicy p = from_env();
    return p;
}

}  // namespace flashseek::cuda
