// The reference ops of ops.h other than matrix products and quantization: norms, RoPE/YaRN, mHC with Sinkhorn,
// compressor pooling, indexer scoring and top-k, sparse attention with sink, grouped output projection, router
// and clamped SwiGLU. Everything in fp32, in the order HF transformers (the functional oracle) computes it where
// that order is visible in the result.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/ops.h"
#include "util/error.h"
#include "util/numeric.h"

namespace flashseek::cpu {

float silu(float x) { return x / (1.f + std::exp(-x)); }

float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
    float ss = 0.f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float r = 1.f / std::sqrt(ss / float(n) + eps);
    if (w) {
        for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * r);
    } else {
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r;
    }
}

void rope_interleaved(float* v, int rope_dim, const float* inv_freq, int64_t pos, bool inverse) {
    for (int i = 0; i < rope_dim / 2; ++i) {
        const float angle = float(pos) * inv_freq[i];
        const float c = float(std::cos(double(angle)));
        float s = float(std::sin(double(angle)));
        if (inverse) s = -s;
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x1 * c + x0 * s;
    }
}

void sinkhorn(float* C, int N, int iters, float eps) {
    for (int j = 0; j < N; ++j) {  // row softmax + eps
        float* row = C + j * N;
        float m = row[0];
        for (int k = 1; k < N; ++k) m = std::max(m, row[k]);
        float s = 0.f;
        for (int k = 0; k < N; ++k) s += (row[k] = std::exp(row[k] - m));
        for (int k = 0; k < N; ++k) row[k] = row[k] / s + eps;
    }
    auto col_norm = [&] {
        for (int k = 0; k < N; ++k) {
            float s = 0.f;
            for (int j = 0; j < N; ++j) s += C[j * N + k];
            for (int j = 0; j < N; ++j) C[j * N + k] /= (s + eps);
        }
    };
    auto row_norm = [&] {
        for (int j = 0; j < N; ++j) {
            float s = 0.f;
            for (int k = 0; k < N; ++k) s += C[j * N + k];
            for (int k = 0; k < N; ++k) C[j * N + k] /= (s + eps);
        }
    };
    col_norm();
    for (int t = 0; t + 1 < iters; ++t) {
        row_norm();
        col_norm();
    }
}

namespace {
// mu[r] = (fn[r] . flatten(X)) / sqrt(mean(X^2) + eps) for r < rows.
void hc_mix(const float* X, int64_t ND, const float* fn, int rows, float rms_eps, float* mu) {
    float ss = 0.f;
    for (int64_t i = 0; i < ND; ++i) ss += X[i] * X[i];
    const float rho = 1.f / std::sqrt(ss / float(ND) + rms_eps);
    for (int r = 0; r < rows; ++r) {
        const float* f = fn + int64_t(r) * ND;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= ND; i += 8)
            for (int j = 0; j < 8; ++j) acc[j] += f[i + j] * X[i + j];
        float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        for (; i < ND; ++i) s += f[i] * X[i];
        mu[r] = s * rho;
    }
}
}  // namespace

void mhc_pre(const float* X, int N, int64_t D, const float* fn, const float* base, const float* scale, float rms_eps,
             float hc_eps, int sinkhorn_iters, float* y, float* post, float* comb) {
    const int rows = (2 + N) * N;
    std::vector<float> mu(static_cast<size_t>(rows));
    hc_mix(X, int64_t(N) * D, fn, rows, rms_eps, mu.data());
    std::vector<float> pre(static_cast<size_t>(N));
    for (int j = 0; j < N; ++j) {
        pre[size_t(j)] = sigmoidf(mu[size_t(j)] * scale[0] + base[j]) + hc_eps;
        post[j] = 2.f * sigmoidf(mu[size_t(N + j)] * scale[1] + base[N + j]);
    }
    for (int i = 0; i < N * N; ++i) comb[i] = mu[size_t(2 * N + i)] * scale[2] + base[2 * N + i];
    sinkhorn(comb, N, sinkhorn_iters, hc_eps);
    for (int64_t d = 0; d < D; ++d) {
        float s = 0.f;
        for (int j = 0; j < N; ++j) s += pre[size_t(j)] * X[j * D + d];
        y[d] = s;
    }
}

void mhc_post(const float* X, const float* o, const float* post, const float* comb, int N, int64_t D, float* X_out) {
    for (int k = 0; k < N; ++k) {
        float* out = X_out + k * D;
        for (int64_t d = 0; d < D; ++d) {
            float s = post[k] * o[d];
            for (int j = 0; j < N; ++j) s += comb[j * N + k] * X[j * D + d];
            out[d] = s;
        }
    }
}

void hc_head(const float* X, int N, int64_t D, const float* fn, const float* base, const float* scale, float rms_eps,
             float hc_eps, float* y) {
    std::vector<float> mu(static_cast<size_t>(N));
    hc_mix(X, int64_t(N) * D, fn, N, rms_eps, mu.data());
    for (int j = 0; j < N; ++j) mu[size_t(j)] = sigmoidf(mu[size_t(j)] * scale[0] + base[j]) + hc_eps;
    for (int64_t d = 0; d < D; ++d) {
        float s = 0.f;
        for (int j = 0; j < N; ++j) s += mu[size_t(j)] * X[j * D + d];
        y[d] = s;
    }
}

void compressor_pool(const float* kv, const float* score, int n_slots, int dc, float* out) {
    for (int c = 0; c < dc; ++c) {
        float m = -INFINITY;
        for (int s = 0; s < n_slots; ++s) m = std::max(m, score[s * dc + c]);
        float denom = 0.f;
        for (int s = 0; s < n_slots; ++s) {
            const float z = score[s * dc + c];
            if (z != -INFINITY) denom += std::exp(z - m);
        }
        float acc = 0.f;
        for (int s = 0; s < n_slots; ++s) {
            const float z = score[s * dc + c];
            if (z != -INFINITY) acc += (std::exp(z - m) / denom) * kv[s * dc + c];
        }
        out[c] = acc;
    }
}

void compressor_finish(float* entry, int dc, const float* norm_w, float eps, int rope_dim, const float* inv_freq,
                       int64_t pos) {
    rmsnorm(entry, norm_w, dc, eps, entry);
    rope_interleaved(entry + dc - rope_dim, rope_dim, inv_freq, pos);
}

void indexer_scores(const float* q, int n_heads, int head_dim, const float* w, const float* keys, int64_t n_entries,
                    float* scores) {
    for (int64_t j = 0; j < n_entries; ++j) {
        const float* k = keys + j * head_dim;
        float total = 0.f;
        for (int h = 0; h < n_heads; ++h) {
            const float* qh = q + int64_t(h) * head_dim;
            float dot = 0.f;
            for (int c = 0; c < head_dim; ++c) dot += qh[c] * k[c];
            total += w[h] * std::max(dot, 0.f);
        }
        scores[j] = total;
    }
}

void topk_indices(const float* scores, int64_t n, int k, std::vector<int32_t>& out) {
    out.clear();
    if (n <= 0 || k <= 0) return;
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    const int64_t kk = std::min<int64_t>(k, n);
    auto better = [&](int32_t a, int32_t b) {
        if (scores[a] != scores[b]) return scores[a] > scores[b];
        return a < b;
    };
    std::partial_sort(order.begin(), order.begin() + kk, order.end(), better);
    out.assign(order.begin(), order.begin() + kk);
    std::sort(out.begin(), out.end());
}

void sparse_attention_sink(const float* q, int H, int d, const float* kv, const int32_t* idx, int n_idx,
                           const float* sink, float scale, bool round_p_bf16, float* out) {
    std::vector<float> s(size_t(std::max(n_idx, 1)));
    for (int h = 0; h < H; ++h) {
        const float* qh = q + int64_t(h) * d;
        float* oh = out + int64_t(h) * d;
        float ms = -INFINITY;  // max over the candidates (the sink excluded)
        for (int i = 0; i < n_idx; ++i) {
            if (idx[i] < 0) continue;
            const float* k = kv + int64_t(idx[i]) * d;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int c = 0;
            for (; c + 8 <= d; c += 8)
                for (int j = 0; j < 8; ++j) acc[j] += qh[c + j] * k[c + j];
            float dot = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
            for (; c < d; ++c) dot += qh[c] * k[c];
            s[size_t(i)] = dot * scale;
            ms = std::max(ms, s[size_t(i)]);
        }
        std::fill(oh, oh + d, 0.f);
        if (ms == -INFINITY) continue;  // no candidate: all weight on the sink
        if (round_p_bf16) {
            // The reference kernel's rounding point (P cast to bf16 before the PV product, the fp32 sum of the
            // unrounded exps plus the sink's dividing afterwards), per tile of kSoftmaxTile candidate slots as the
            // CUDA kernels do: P_i = bf16(e^(s_i - m_tile)), m_tile the max over the tile's valid candidates, then
            // scaled in fp32 by e^(m_tile - max_i s_i). So the rounding depends on the tile's candidates only (not on
            // how a kernel splits the list); with at most one tile it is P_i = bf16(e^(s_i - max_i s_i)).
            float l = 0.f;
            for (int t0 = 0; t0 < n_idx; t0 += kSoftmaxTile) {
                const int t1 = std::min(n_idx, t0 + kSoftmaxTile);
                float mt = -INFINITY;
                for (int i = t0; i < t1; ++i)
                    if (idx[i] >= 0) mt = std::max(mt, s[size_t(i)]);
                if (mt == -INFINITY) continue;
                const float beta = std::exp(mt - ms);
                float lt = 0.f;
                for (int i = t0; i < t1; ++i) {
                    if (idx[i] < 0) continue;
                    const float e = std::exp(s[size_t(i)] - mt);
                    lt += e;
                    const float p = round_bf16(e) * beta;
                    const float* v = kv + int64_t(idx[i]) * d;
                    for (int c = 0; c < d; ++c) oh[c] += p * v[c];
                }
                l += lt * beta;
            }
            const float M = std::max(ms, sink[h]);  // rescaled so that a large sink cannot overflow
            const float scale_acc = std::exp(ms - M);
            const float f = scale_acc / (l * scale_acc + std::exp(sink[h] - M));
            for (int c = 0; c < d; ++c) oh[c] *= f;
            continue;
        }
        const float m = std::max(ms, sink[h]);
        float denom = std::exp(sink[h] - m);
        for (int i = 0; i < n_idx; ++i) {
            if (idx[i] < 0) continue;
            s[size_t(i)] = std::exp(s[size_t(i)] - m);
            denom += s[size_t(i)];
        }
        for (int i = 0; i < n_idx; ++i) {
            if (idx[i] < 0) continue;
            const float p = s[size_t(i)] / denom;
            const float* v = kv + int64_t(idx[i]) * d;
            for (int c = 0; c < d; ++c) oh[c] += p * v[c];
        }
    }
}

void grouped_out_proj(const float* o, int64_t rows, int G, int64_t R, int64_t group_in, const float* wo_a, float* z,
                      ThreadPool* pool) {
    std::vector<float> xg(static_cast<size_t>(rows * group_in)), zg(static_cast<size_t>(rows * R));
    for (int g = 0; g < G; ++g) {
        for (int64_t r = 0; r < rows; ++r)
            std::copy_n(o + r * G * group_in + g * group_in, group_in, xg.data() + r * group_in);
        linear_f32(xg.data(), rows, wo_a + int64_t(g) * R * group_in, R, group_in, zg.data(), pool);
        for (int64_t r = 0; r < rows; ++r) std::copy_n(zg.data() + r * R, R, z + r * G * R + g * R);
    }
}

void router_select(const float* logits, int E, const float* bias, const int64_t* hash_ids, int k, float route_scale,
                   int32_t* idx, float* weight) {
    std::vector<float> s(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) s[size_t(e)] = std::sqrt(softplus(logits[e]));
    router_select_scores(s.data(), E, bias, hash_ids, k, route_scale, true, idx, weight);
}

void router_select_scores(const float* s, int E, const float* bias, const int64_t* hash_ids, int k,
                          float route_scale, bool renormalize, int32_t* idx, float* weight) {
    if (hash_ids) {
        for (int i = 0; i < k; ++i) {
            FS_CHECK(hash_ids[i] >= 0 && hash_ids[i] < E, "tid2eid: expert id {} out of range [0, {})", hash_ids[i], E);
            idx[i] = int32_t(hash_ids[i]);
        }
    } else {
        std::vector<int32_t> order(static_cast<size_t>(E));
        std::iota(order.begin(), order.end(), 0);
        auto biased = [&](int32_t e) { return s[e] + (bias ? bias[e] : 0.f); };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            const float ba = biased(a), bb = biased(b);
            if (ba != bb) return ba > bb;
            return a < b;
        });
        for (int i = 0; i < k; ++i) idx[i] = order[size_t(i)];
    }
    float sum = 0.f;
    for (int i = 0; i < k; ++i) sum += s[idx[i]];
    for (int i = 0; i < k; ++i) weight[i] = (renormalize ? s[idx[i]] / sum : s[idx[i]]) * route_scale;
}

void swiglu_clamp(const float* gate, const float* up, int64_t n, float limit, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], limit);
        const float u = std::clamp(up[i], -limit, limit);
        out[i] = silu(g) * u;
    }
}

void swiglu_expert(const float* x, int64_t rows, const float* w1, const float* w3, const float* w2, int64_t I,
                   int64_t D, float limit, const float* weight, float* y, ThreadPool* pool) {
    std::vector<float> g(static_cast<size_t>(rows * I)), u(static_cast<size_t>(rows * I));
    linear_f32(x, rows, w1, I, D, g.data(), pool);
    linear_f32(x, rows, w3, I, D, u.data(), pool);
    swiglu_clamp(g.data(), u.data(), rows * I, limit, g.data());
    linear_f32(g.data(), rows, w2, D, I, y, pool);
    if (weight)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < D; ++c) y[r * D + c] *= weight[r];
}

}  // namespace flashseek::cpu
