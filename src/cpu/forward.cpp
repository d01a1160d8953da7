// The CPU forward's top level: validation, the flattened batch, embedding into hc_mult identical streams, the
// two mHC-wrapped sub-blocks per layer, and the output head (hc_head -> norm -> logits in fp32).
#include "cpu/forward.h"

#include <algorithm>
#include <set>

#include "cpu/forward_internal.h"
#include "cpu/ops.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::cpu {

using detail::Batch;

SequenceState new_sequence_state(const CpuModel& m) {
    SequenceState s;
    s.layers.resize(size_t(m.n_layers));
    return s;
}

void validate_steps(const CpuModel& m, std::span<const StepInput> steps, int64_t max_context) {
    std::set<const SequenceState*> seen;
    for (size_t i = 0; i < steps.size(); ++i) {
        const StepInput& s = steps[i];
        FS_CHECK(s.state != nullptr, "step {}: no sequence state", i);
        FS_CHECK(seen.insert(s.state).second, "step {}: the same sequence appears twice in one step", i);
        FS_CHECK(s.n_tokens > 0, "step {}: n_tokens must be > 0, got {}", i, s.n_tokens);
        FS_CHECK(s.tokens != nullptr, "step {}: tokens is null", i);
        for (int t = 0; t < s.n_tokens; ++t)
            FS_CHECK(s.tokens[t] >= 0 && s.tokens[t] < m.cfg.vocab_size,
                     "step {}: token id {} at index {} is outside the vocabulary [0, {})", i, s.tokens[t], t,
                     m.cfg.vocab_size);
        if (max_context > 0)
            FS_CHECK(s.state->length + s.n_tokens <= max_context,
                     "step {}: sequence length {} + {} new tokens exceeds the context limit {}", i, s.state->length,
                     s.n_tokens, max_context);
    }
}

void forward(const CpuModel& m, std::span<const StepInput> steps, std::vector<float>& logits, ThreadPool* pool) {
    validate_steps(m, steps, m.cfg.max_position_embeddings);
    const ModelConfig& cfg = m.cfg;
    const int N = cfg.hc_mult;
    const int64_t D = cfg.hidden_size, V = cfg.vocab_size;
    const bool rel = m.release;
    const float eps = float(cfg.rms_norm_eps), hc_eps = float(cfg.hc_eps);

    Batch b;
    for (const StepInput& s : steps) {
        b.seq_first.push_back(b.rows);
        b.seq_count.push_back(s.n_tokens);
        b.states.push_back(s.state);
        for (int t = 0; t < s.n_tokens; ++t) {
            b.row_seq.push_back(int(b.states.size() - 1));
            b.row_pos.push_back(s.state->length + t);
            b.row_token.push_back(s.tokens[t]);
        }
        b.rows += s.n_tokens;
        if (s.state->layers.size() != size_t(m.n_layers)) s.state->layers.resize(size_t(m.n_layers));
    }
    const int64_t R = b.rows;

    // Streams X [R, N, D], initialized to N copies of the embedding.
    std::vector<float> X(static_cast<size_t>(R * N * D)), X2(X.size());
    parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* x = X.data() + r * N * D;
            tensor_row_to_f32(m.embed, b.row_token[size_t(r)], x);
            for (int j = 1; j < N; ++j) std::copy_n(x, D, x + j * D);
        }
    });

    std::vector<float> xn(static_cast<size_t>(R * D)), o(static_cast<size_t>(R * D)), post(static_cast<size_t>(R * N)), comb(static_cast<size_t>(R * N * N));
    auto sub_block = [&](const HcParams& hc, const std::vector<float>& norm_w, auto&& body) {
        parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                float* y = xn.data() + r * D;
                mhc_pre(X.data() + r * N * D, N, D, hc.fn.data(), hc.base.data(), hc.scale.data(), eps, hc_eps,
                        cfg.hc_sinkhorn_iters, y, post.data() + r * N, comb.data() + r * N * N);
                if (rel) round_bf16_inplace(y, D);
                rmsnorm(y, norm_w.data(), D, eps, y);
                if (rel) round_bf16_inplace(y, D);
            }
        });
        body(xn.data(), o.data());
        parallel_for(pool, R, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                mhc_post(X.data() + r * N * D, o.data() + r * D, post.data() + r * N, comb.data() + r * N * N, N, D,
                         X2.data() + r * N * D);
                if (rel) round_bf16_inplace(X2.data() + r * N * D, N * D);  // streams are bf16 in the reference
            }
        });
        X.swap(X2);
    };

    for (int l = 0; l < m.n_layers; ++l) {
        sub_block(m.layers[size_t(l)].hc_attn, m.layers[size_t(l)].attn_norm,
                  [&](const float* in, float* out) { detail::attention_block(m, l, b, in, out, pool); });
        sub_block(m.layers[size_t(l)].hc_ffn, m.layers[size_t(l)].ffn_norm,
                  [&](const float* in, float* out) { detail::moe_block(m, l, b, in, out, pool); });
    }
    for (const StepInput& s : steps) s.state->length += s.n_tokens;

    // Output head on the rows that need logits.
    std::vector<int64_t> out_rows;
    for (size_t i = 0; i < steps.size(); ++i) {
        const int64_t first = b.seq_first[i], n = b.seq_count[i];
        if (steps[i].all_logits) {
            for (int64_t r = first; r < first + n; ++r) out_rows.push_back(r);
        } else {
            out_rows.push_back(first + n - 1);
        }
    }
    const int64_t RL = int64_t(out_rows.size());
    std::vector<float> hy(static_cast<size_t>(RL * D));
    parallel_for(pool, RL, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            float* y = hy.data() + i * D;
            hc_head(X.data() + out_rows[size_t(i)] * N * D, N, D, m.hc_head.fn.data(), m.hc_head.base.data(),
                    m.hc_head.scale.data(), eps, hc_eps, y);
            if (rel) round_bf16_inplace(y, D);
            rmsnorm(y, m.norm.data(), D, eps, y);
            if (rel) round_bf16_inplace(y, D);
        }
    });
    logits.resize(size_t(RL * V));
    if (m.head_f32.empty()) {
        linear_bf16w(hy.data(), RL, reinterpret_cast<const uint16_t*>(m.head.data), V, D, logits.data(), pool);
    } else {
        linear_f32(hy.data(), RL, m.head_f32.data(), V, D, logits.data(), pool);
    }
}

}  // namespace flashseek::cpu
