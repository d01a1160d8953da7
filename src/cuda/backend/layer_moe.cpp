// The MoE sub-block of one layer on the GPU, in the CPU forward's order (src/cpu/forward_moe.cpp): router logits
// (bf16 gate in fp32), route (sqrt-softplus + bias top-k, or the token-id hash table), grouping by expert, the
// fused w1/w3 + SwiGLU(clamp) + routing weight per active expert, w2, the shared expert in dense mode (a side
// branch beside the routing, CudaBackendImpl::fork / join), and the combine. Also builds the per-layer expert
// pointer tables the kernels index (once, at start-up).
#include <algorithm>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "util/env.h"
#include "util/error.h"

namespace flashseek::cuda {

void CudaBackendImpl::init_moe_buffers() {
    const int L = cfg_.num_hidden_layers, E = cfg_.n_routed_experts, K = cfg_.num_experts_per_tok;
    const int64_t T = max_rows_, D = cfg_.hidden_size, I = cfg_.moe_intermediate_size;
    // Pointer tables: per layer 6 arrays of E (routed) + 6 arrays of 1 (shared).
    const size_t per_layer = size_t(6 * E + 6);
    std::vector<const void*> host(size_t(L) * per_layer);
    for (int l = 0; l < L; ++l) {
        LayerDev& d = layers_[size_t(l)];
        const void** base = host.data() + size_t(l) * per_layer;
        for (int e = 0; e < E; ++e) {
            base[0 * E + e] = d.w1[size_t(e)].weight;
            base[1 * E + e] = d.w1[size_t(e)].scale;
            base[2 * E + e] = d.w3[size_t(e)].weight;
            base[3 * E + e] = d.w3[size_t(e)].scale;
            base[4 * E + e] = d.w2[size_t(e)].weight;
            base[5 * E + e] = d.w2[size_t(e)].scale;
        }
        const void** sb = base + 6 * E;
        sb[0] = d.shared_w1.weight;
        sb[1] = d.shared_w1.scale;
        sb[2] = d.shared_w3.weight;
        sb[3] = d.shared_w3.scale;
        sb[4] = d.shared_w2.weight;
        sb[5] = d.shared_w2.scale;
        for (int e = 0; e < E; ++e) {
            const DeviceLinear& w = d.w1[size_t(e)];
            FS_CHECK(w.kind == d.w1[0].kind && d.w2[size_t(e)].kind == w.kind && d.w3[size_t(e)].kind == w.kind,
                     "CUDA backend: layer {} expert {} mixes weight formats", l, e);
        }
    }
    expert_ptrs_.allocate(host.size() * sizeof(void*), "expert pointer tables");
    FS_CUDA_TRY(cudaMemcpy(expert_ptrs_.get(), host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice));
    auto* dev = expert_ptrs_.as<const void*>();
    for (int l = 0; l < L; ++l) {
        LayerDev& d = layers_[size_t(l)];
        const void* const* base = dev + size_t(l) * per_layer;
        auto table = [&](const void* const* b, int n, const DeviceLinear& w1) {
            ExpertTable t;
            t.kind = w1.kind;
            t.scale_kind = w1.scale_kind;
            t.hidden = w1.in;
            t.inter = w1.out;
            t.w1 = b + 0 * n;
            t.w1_scale = b + 1 * n;
            t.w3 = b + 2 * n;
            t.w3_scale = b + 3 * n;
            t.w2 = b + 4 * n;
            t.w2_scale = b + 5 * n;
            t.scales_aligned16 = true;  // device_weights places every tensor on a 256-byte boundary
            return t;
        };
        d.routed = table(base, E, d.w1[0]);
        d.shared = table(base + 6 * E, 1, d.shared_w1);
    }
    router_logits_.allocate(size_t(T * E) * 4, "router logits");
    expert_idx_.allocate(size_t(T * K) * 4, "expert ids");
    expert_weight_.allocate(size_t(T * K) * 4, "expert weights");
    grouping_mem_.allocate(moe_grouping_bytes(E, T * K), "expert grouping");
    grouping_ = moe_grouping_view(grouping_mem_.get(), E, T * K);
    const int64_t tile_k = (std::max(D, I) + 127) / 128 * 128;
    act_tiles_mem_.allocate(moe_act_tile_bytes(E, T * K, tile_k), "expert activation tiles");
    moe_attach_act_tiles(grouping_, act_tiles_mem_.get(), tile_k);
    y_routed_.allocate(size_t(T * K * D) * 4, "routed expert outputs");
    y_shared_.allocate(size_t(T * D) * 4, "shared expert output");
    moe_h_.allocate(T * K, I);
    moe_h_shared_.allocate(T, I);
    // Only the shared expert's linear path uses it, and that path needs the wgmma GEMV: at most kGemvMaxTokens rows.
    shared_gu_.allocate(size_t(2 * std::min<int64_t>(T, kGemvMaxTokens) * I) * 2, "shared expert w1 / w3 outputs");
    prep_x_expert_.allocate(T, D);
}

void CudaBackendImpl::enqueue_moe(int l, const PassShape& s, bool combine) {
    const LayerDev& L = layers_[size_t(l)];
    const int T = s.n_rows, E = cfg_.n_routed_experts, K = cfg_.num_experts_per_tok;
    const int64_t D = cfg_.hidden_size;
    const float limit = float(cfg_.swiglu_limit);
    const DeviceLinear& w1 = L.w1[0];
    // Raw input (prepared inside the GEMV expert kernels) only when every consumer of ax takes it.
    const bool raw_ok = moe_expert_takes_raw(L.routed, T, &grouping_, act_numerics_) &&
                        (L.shared_w1.kind != w1.kind || moe_expert_takes_raw(L.shared, T));
    const PreparedActivation& ax = prep(prep_x_expert_, y_.get(), false, T, D, D, w1, false, raw_ok);
    // The shared expert does not depend on the routing: a side branch beside the router and the routed experts,
    // joined before the combine.
    {
        const Lane shared = fork(aux_side_);
        enqueue_shared_expert(l, T, ax, shared);
    }
    {
        const PreparedActivation& ag = prep(prep_x_bf16_, y_.get(), false, T, D, D, L.gate);
        OpProfiler::Scope sc(prof_, "moe.router gemm");
        lin(ag, L.gate, router_logits_.get(), OutKind::F32, E);
    }
    {
        OpProfiler::Scope sc(prof_, "moe.route + group");
        moe_route_and_group(router_logits_.as<float>(), T, E, E, L.gate_bias, L.tid2eid, meta_.d(StepMeta::kTokens),
                            cfg_.vocab_size, K, float(cfg_.routed_scaling_factor), expert_idx_.as<int32_t>(),
                            expert_weight_.as<float>(), grouping_, stream_);
    }
    {
        OpProfiler::Scope sc(prof_, "moe.routed w1+w3+swiglu");
        moe_expert_up(ax, L.routed, &grouping_, T, K, limit, act_numerics_, moe_h_.act, stream_);
    }
    {
        OpProfiler::Scope sc(prof_, "moe.routed w2");
        moe_expert_down(moe_h_.act, L.routed, &grouping_, T, K, y_routed_.as<float>(), stream_);
    }
    join(aux_side_);
    if (combine) {
        OpProfiler::Scope sc(prof_, "moe.combine");
        moe_combine(y_routed_.as<float>(), grouping_, y_shared_.as<float>(), T, K, D, sub_out_.get(), OutKind::BF16, D,
                    stream_, /*round_terms=*/act_numerics_ == ActNumerics::FP8_BLOCK128);
    }
    if (profiling_) {  // count the experts this layer touched (outside any graph: profiling runs eagerly)
        int32_t n_active = 0;
        FS_CUDA_TRY(cudaMemcpyAsync(&n_active, grouping_.n_active, 4, cudaMemcpyDeviceToHost, stream_));
        FS_CUDA_TRY(cudaStreamSynchronize(stream_));
        distinct_experts_ += n_active;
    }
}

// The shared expert on `lane` into y_shared_. routed_x: the routed experts' prepared input, shared when the formats
// match (prepared on the main stream before the fork).
void CudaBackendImpl::enqueue_shared_expert(int l, int rows, const PreparedActivation& routed_x, const Lane& lane) {
    const LayerDev& L = layers_[size_t(l)];
    const int T = rows;
    const int64_t D = cfg_.hidden_size, I = cfg_.moe_intermediate_size;
    const float limit = float(cfg_.swiglu_limit);
    const PreparedActivation& axs =
        L.shared_w1.kind == L.w1[0].kind ? routed_x
                                         : prep(prep_x_, y_.get(), false, T, D, D, L.shared_w1, false,
                                                moe_expert_takes_raw(L.shared, T), &lane);
    // Where the linears take the wgmma GEMV (FP8, 2-16 tokens, sm_90a), the shared expert runs as w1 and w3 linears
    // + SwiGLU-and-prepare + a w2 linear: measured faster than the fused expert kernels there (C=16 -0.35 ms; at one
    // token the SIMT-GEMV linears measured no faster: docs/perf.md). FLASHSEEK_SHARED_LINEAR=0 keeps the fused
    // kernels (A/B).
    static const bool shared_linear_on = env_switch_on("FLASHSEEK_SHARED_LINEAR");
    auto linear_path = [&](const DeviceLinear& w) { return plan_linear(axs, w, 1, lane.ws).wgmma; };
    // Release numerics only: there the w1 / w3 outputs are rounded to bf16 before SwiGLU (the reference's expert
    // GEMMs output bf16), which the bf16 linear outputs reproduce; exact numerics keep them in fp32.
    if (shared_linear_on && act_numerics_ == ActNumerics::FP8_BLOCK128 && L.shared_w1.kind != WeightKind::BF16 &&
        linear_path(L.shared_w1) && linear_path(L.shared_w3)) {
        FS_CHECK(size_t(2 * T * I) * 2 <= shared_gu_.bytes(), "CUDA backend: {} rows exceed the shared expert's "
                 "linear-path buffer", T);
        uint16_t* g = shared_gu_.as<uint16_t>();
        uint16_t* u = g + size_t(T) * size_t(I);
        {
            OpProfiler::Scope sc(prof_, "moe.shared w1+w3+swiglu");
            lin(axs, L.shared_w1, g, OutKind::BF16, I, &lane);
            lin(axs, L.shared_w3, u, OutKind::BF16, I, &lane);
            moe_swiglu_prepare(g, u, I, T, I, limit, L.shared_w2.kind, act_numerics_, moe_h_shared_.act, lane.stream);
        }
        OpProfiler::Scope sc(prof_, "moe.shared w2");
        lin(moe_h_shared_.act, L.shared_w2, y_shared_.get(), OutKind::F32, D, &lane);
        return;
    }
    {
        OpProfiler::Scope sc(prof_, "moe.shared w1+w3+swiglu");
        moe_expert_up(axs, L.shared, nullptr, T, 1, limit, act_numerics_, moe_h_shared_.act, lane.stream);
    }
    OpProfiler::Scope sc(prof_, "moe.shared w2");
    moe_expert_down(moe_h_shared_.act, L.shared, nullptr, T, 1, y_shared_.as<float>(), lane.stream);
}

}  // namespace flashseek::cuda
