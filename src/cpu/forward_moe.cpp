// MoE sub-block of the CPU forward (docs/model.md §2.9): sqrt-softplus router (token-id hash selection on the
// first num_hash_layers layers, biased top-k elsewhere), routed SwiGLU experts with clamp, and the shared expert.
// Rows are grouped by expert so each expert runs one batched product; every row still accumulates its experts in
// ascending expert order, so a row's result does not depend on the rest of the batch.
#include <algorithm>
#include <cmath>

#include "cpu/forward_internal.h"
#include "cpu/ops.h"

namespace flashseek::cpu::detail {

namespace {

// y [n, D] = expert(x [n, D]); rows scaled by weight (release: before w2, in bf16, as the reference; exact: after).
void run_expert(const ExpertParams& e, const float* x, int64_t n, const float* weight, float limit, bool rel,
                float* y, ThreadPool* pool) {
    if (!rel) {  // exact: HF transformers' order (routing weight applied after w2)
        swiglu_expert(x, n, e.w1.w.data(), e.w3.w.data(), e.w2.w.data(), e.w1.out, e.w1.in, limit, weight, y, pool);
        return;
    }
    // release: the reference scales the intermediate by the routing weight and rounds it to bf16 before w2
    const int64_t I = e.w1.out;
    std::vector<float> g(static_cast<size_t>(n * I)), u(static_cast<size_t>(n * I));
    apply_linear(e.w1, x, n, g.data(), rel, pool);
    apply_linear(e.w3, x, n, u.data(), rel, pool);
    swiglu_clamp(g.data(), u.data(), n * I, limit, g.data());
    if (weight)
        for (int64_t r = 0; r < n; ++r)
            for (int64_t i = 0; i < I; ++i) g[size_t(r * I + i)] *= weight[r];
    round_bf16_inplace(g.data(), n * I);
    apply_linear(e.w2, g.data(), n, y, rel, pool);
}

}  // namespace

void moe_block(const CpuModel& m, int l, const Batch& b, const float* x, float* out, ThreadPool* pool) {
    const ModelConfig& cfg = m.cfg;
    const LayerParams& p = m.layers[size_t(l)];
    const int64_t R = b.rows, D = cfg.hidden_size;
    const int E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;
    const float limit = float(cfg.swiglu_limit);
    const bool rel = m.release;

    std::vector<float> logits(static_cast<size_t>(R * E));
    apply_linear(p.gate, x, R, logits.data(), false, pool);  // router math is fp32
    std::vector<int32_t> sel(static_cast<size_t>(R * K));
    std::vector<float> wsel(static_cast<size_t>(R * K));
    const bool hash = !p.tid2eid.empty();
    const bool sqrt_softplus = cfg.scoring_func == "sqrtsoftplus", softmax = cfg.scoring_func == "softmax";
    parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
        std::vector<int64_t> ids(static_cast<size_t>(K));
        std::vector<float> sc(static_cast<size_t>(E));
        for (int64_t r = r0; r < r1; ++r) {
            if (hash)
                for (int k = 0; k < K; ++k)
                    ids[size_t(k)] = p.tid2eid[size_t(int64_t(b.row_token[size_t(r)]) * K + k)];
            const float* lg = logits.data() + r * E;
            const float* bias = p.gate_bias.empty() ? nullptr : p.gate_bias.data();
            if (sqrt_softplus && cfg.norm_topk_prob) {
                router_select(lg, E, bias, hash ? ids.data() : nullptr, K, float(cfg.routed_scaling_factor),
                              sel.data() + r * K, wsel.data() + r * K);
                continue;
            }
            if (sqrt_softplus) {
                for (int e = 0; e < E; ++e) sc[size_t(e)] = std::sqrt(softplus(lg[e]));
            } else if (softmax) {
                const float mx = *std::max_element(lg, lg + E);
                float z = 0.f;
                for (int e = 0; e < E; ++e) z += (sc[size_t(e)] = std::exp(lg[e] - mx));
                for (int e = 0; e < E; ++e) sc[size_t(e)] /= z;
            } else {  // sigmoid
                for (int e = 0; e < E; ++e) sc[size_t(e)] = sigmoidf(lg[e]);
            }
            router_select_scores(sc.data(), E, bias, hash ? ids.data() : nullptr, K, float(cfg.routed_scaling_factor),
                                 cfg.norm_topk_prob, sel.data() + r * K, wsel.data() + r * K);
        }
    });

    // Rows per expert, in row order.
    std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(E));
    for (int64_t r = 0; r < R; ++r)
        for (int k = 0; k < K; ++k) by_expert[size_t(sel[size_t(r * K + k)])].push_back({r, wsel[size_t(r * K + k)]});

    std::fill(out, out + R * D, 0.f);
    std::vector<float> xe, ye, we;
    for (int e = 0; e < E; ++e) {
        const auto& rows = by_expert[size_t(e)];
        if (rows.empty()) continue;
        const int64_t n = int64_t(rows.size());
        xe.resize(size_t(n * D));
        ye.resize(size_t(n * D));
        we.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) {
            std::copy_n(x + rows[size_t(i)].first * D, D, xe.data() + i * D);
            we[size_t(i)] = rows[size_t(i)].second;
        }
        run_expert(p.experts[size_t(e)], xe.data(), n, we.data(), limit, rel, ye.data(), pool);
        for (int64_t i = 0; i < n; ++i) {
            float* o = out + rows[size_t(i)].first * D;
            for (int64_t c = 0; c < D; ++c) o[c] += ye[size_t(i * D + c)];
        }
    }
    std::vector<float> ys(static_cast<size_t>(R * D));
    run_expert(p.shared, x, R, nullptr, limit, rel, ys.data(), pool);
    for (int64_t i = 0; i < R * D; ++i) out[i] += ys[size_t(i)];
    if (rel) round_bf16_inplace(out, R * D);
}

}  // namespace flashseek::cpu::detail
