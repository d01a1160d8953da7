// The MoE sub-block of one layer on the GPU, in the CPU forward's order (src/cpu/forward_moe.cpp): router logits
// (bf16 gate in fp32), route (sqrt-softplus + bias top-k, or the token-id hash table), grouping by expert, the
// fused w1/w3 + SwiGLU(clamp) + routing weight per active expert, w2, the shared expert in dense mode (a side
// branch beside the routing, StreamSet::fork / join), and the combine. At one token the routed experts' input tile
// is packed on another branch beside the routing (moe_expert_up_pack_ahead).
#include <algorithm>
#include <vector>

#include "cuda/backend/forward.h"
#include "cuda/gemm/act_quant.cuh"
#include "util/error.h"

namespace flashseek::cuda {

void ForwardPass::enqueue_moe(int l, const PassShape& s, bool combine) {
    const ShardLayer& L = shard_.layer(l);
    const int T = s.n_rows, E = cfg_.n_routed_experts, K = cfg_.num_experts_per_tok;
    const int64_t D = cfg_.hidden_size;
    const float limit = float(cfg_.swiglu_limit);
    const DeviceLinear& w1 = L.w1[0];
    const cudaStream_t stream = streams_.main();
    // The grouped expert GEMMs gather and quantize sub_in themselves: they take it raw.
    const bool raw = routed_experts_take_raw(L, T);
    const PreparedActivation raw_x = raw ? raw_activation(buf_.sub_in.get(), T, D, D, w1.kind, num_.act)
                                         : PreparedActivation{};
    // Otherwise they take the MMA_F16 format (not the linear catalogue's choice for a linear of w1's shape).
    const PreparedActivation& ax =
        raw ? raw_x : prepare_as(ActFormat::MMA_F16, buf_.prep_x_expert, buf_.sub_in.get(), false, T, D, D, w1, false,
                                 nullptr);
    // One token: the routed up-projection's tile does not depend on the routing either (every active expert's tile is
    // the token alone): packed on a branch of its own as soon as x is, beside the router and the routing, instead of
    // after them on the main path; joined before the up-projection (below), which reads it through routed_x's mark.
    PreparedActivation routed_x = ax;
    if (moe_expert_up_packs_ahead(ax, L.routed, &buf_.grouping, T, K, num_.act, *pol_)) {
        OpProfiler::Scope sc(prof_, "moe.routed w1+w3+swiglu");
        const Lane lane = streams_.fork(streams_.expert_pack);
        moe_expert_up_pack_ahead(routed_x, L.routed, &buf_.grouping, T, K, num_.act, lane.stream, *pol_);
    }
    // The shared expert does not depend on the routing: a side branch beside the router and the routed experts,
    // joined before the combine. A shard may hold no part of it.
    const bool shared = shard_.spec().has_shared();
    shared_out_bf16_ = false;
    if (shared) {
        const Lane lane = streams_.fork(streams_.aux);
        shared_out_bf16_ = enqueue_shared_expert(l, T, ax, lane);
    }
    const PreparedActivation& ag = prepare(buf_.prep_x_bf16, buf_.sub_in.get(), false, T, D, D, L.gate);
    // Decode: the routing and grouping run in the router's launch (moe_router_route_and_group), unless the
    // packing branch must join before the routing, which then has to be a launch of its own.
    const Lane main = streams_.main_lane();
    const bool routed = !pol_->is_forced("moe_pack_join_routing") &&
                        moe_router_routes(ag, L.gate, K, buf_.grouping, main.ws, *pol_);
    if (routed) {
        OpProfiler::Scope sc(prof_, "moe.router gemm + route + group");
        prof_.bytes(L.bytes.router + L.bytes.route);
        prof_.variant("bf16_gemv + route");
        moe_router_route_and_group(ag, L.gate, buf_.router_logits.as<float>(), L.gate_bias, L.tid2eid,
                                   buf_.meta.d(StepMeta::kTokens), cfg_.vocab_size, K,
                                   float(cfg_.routed_scaling_factor), buf_.expert_idx.as<int32_t>(),
                                   buf_.expert_weight.as<float>(), buf_.grouping, main.ws, main.stream, *pol_);
    } else {
        {
            OpProfiler::Scope sc(prof_, "moe.router gemm");
            prof_.bytes(L.bytes.router);
            lin(ag, L.gate, buf_.router_logits.get(), OutKind::F32, E);
        }
        // Where the packing branch joins: before the up-projection (default), or where forced
        // ("moe_pack_join_routing") before the routing; a kernel that waits for two branches starts only when both
        // have ended (no programmatic early start), so the join sits before whichever start costs less (A/B).
        if (pol_->is_forced("moe_pack_join_routing")) streams_.join(streams_.expert_pack);
        OpProfiler::Scope sc(prof_, "moe.route + group");
        prof_.bytes(L.bytes.route);
        moe_route_and_group(buf_.router_logits.as<float>(), T, E, E, L.gate_bias, L.tid2eid,
                            buf_.meta.d(StepMeta::kTokens), cfg_.vocab_size, K, float(cfg_.routed_scaling_factor),
                            buf_.expert_idx.as<int32_t>(), buf_.expert_weight.as<float>(), buf_.grouping, stream);
    }
    // A profiled pass counts the experts this layer routes to before their projections run (outside any graph:
    // profiling runs eagerly): each distinct expert's weights are read once.
    int32_t n_active = 0;
    if (profiling_) {
        CUDA_CHECK(cudaMemcpyAsync(&n_active, buf_.grouping.n_active, 4, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        distinct_experts_ += n_active;
    }
    streams_.join(streams_.expert_pack);
    {
        OpProfiler::Scope sc(prof_, "moe.routed w1+w3+swiglu");
        prof_.bytes(double(n_active) * L.bytes.expert_up);
        prof_.variant(moe_expert_up(routed_x, L.routed, &buf_.grouping, T, K, limit, num_.act, buf_.moe_h.act, stream,
                                    *pol_));
    }
    {
        OpProfiler::Scope sc(prof_, "moe.routed w2");
        prof_.bytes(double(n_active) * L.bytes.expert_down);
        // In release numerics the combine rounds every routed term to bf16: a variant that can write them so
        // (grouped_experts) does, half the bytes written and read. Disabling "routed_bf16_out" keeps fp32 (A/B).
        const bool offer_bf16 = num_.act == ActNumerics::FP8_BLOCK128 && !pol_->is_disabled("routed_bf16_out");
        prof_.variant(moe_expert_down(buf_.moe_h.act, L.routed, &buf_.grouping, T, K, buf_.routed_out.as<float>(), stream,
                                      *pol_, offer_bf16 ? buf_.routed_out.as<uint16_t>() : nullptr,
                                      &routed_out_bf16_));
    }
    streams_.join(streams_.aux);
    if (combine) {
        OpProfiler::Scope sc(prof_, "moe.combine");
        // A shard's combine is its partial sum (its experts, its part of the shared expert), reduced by the caller.
        moe_combine(routed_out_bf16_ ? nullptr : buf_.routed_out.as<float>(), buf_.grouping,
                    shared && !shared_out_bf16_ ? buf_.shared_out.as<float>() : nullptr, T, K, D,
                    sharded_ ? buf_.sub_out_partial.get() : buf_.sub_out.get(), sharded_ ? OutKind::F32 : OutKind::BF16,
                    D, stream, /*round_terms=*/num_.act == ActNumerics::FP8_BLOCK128,
                    shared_out_bf16_ ? buf_.shared_out.as<uint16_t>() : nullptr,
                    routed_out_bf16_ ? buf_.routed_out.as<uint16_t>() : nullptr);
    }
}

bool ForwardPass::routed_experts_take_raw(const ShardLayer& L, int rows) const {
    // Where the expert catalogue takes grouped_experts for these rows (forced in prefill passes, else from its
    // preference floor past gemv_experts' routed range) and its GEMMs serve these experts (release numerics, the
    // workspace attached, FP4 experts on the 128 grid): the catalogue itself answers, offered both inputs.
    const int64_t D = cfg_.hidden_size;
    const PreparedActivation raw_x = raw_activation(buf_.sub_in.get(), rows, D, D, L.w1[0].kind, num_.act);
    PreparedActivation prepared_x;
    describe_prepared(prepared_x, L.w1[0].kind, num_.act, rows, D);
    prepared_x.values = buf_.prep_x_expert.values.as<uint16_t>();
    prepared_x.scales = buf_.prep_x_expert.scales.as<float>();
    return moe_expert_up_takes_raw(raw_x, prepared_x, L.routed, &buf_.grouping, rows, cfg_.num_experts_per_tok,
                                   num_.act, *pol_);
}

// The shared expert on `lane` into shared_out. routed_x: the routed experts' input, shared when it is prepared in
// the format the shared expert's first linear takes (prepared on the main stream before the fork). Returns whether
// shared_out holds bf16 (else fp32): in prefill passes of a whole model with release numerics, where the combine
// rounds the shared term to bf16 anyway, its w2 GEMM writes bf16 (half the bytes, and the dense GEMM's staged
// epilogue instead of fp32 stores from registers), the same values. Disabling "shared_bf16_out" in the kernel policy
// keeps fp32 (A/B).
bool ForwardPass::enqueue_shared_expert(int l, int rows, const PreparedActivation& routed_x, const Lane& lane) {
    const ShardLayer& L = shard_.layer(l);
    const int T = rows;
    const int64_t D = cfg_.hidden_size, I = L.shared_w1.out;  // this shard's intermediate columns
    const float limit = float(cfg_.swiglu_limit);
    const bool share = L.shared_w1.kind == L.w1[0].kind && !routed_x.raw &&
                       input_format(T, L.shared_w1) == routed_x.format;
    const PreparedActivation& axs =
        share ? routed_x : prepare(buf_.prep_x, buf_.sub_in.get(), false, T, D, D, L.shared_w1, false, &lane);
    // Where the linears take the wgmma GEMV (FP8, 2-16 tokens, sm_90a), the shared expert runs as w1 and w3 linears
    // + SwiGLU-and-prepare + a w2 linear: measured faster than the fused expert kernels there (C=16 -0.35 ms; at one
    // token the SIMT-GEMV linears measured no faster: docs/perf.md). Disabling "shared_as_linears" in the kernel
    // policy keeps the fused kernels (A/B).
    // In prefill passes the linears are the FP8 GEMMs (and the h of w2 is act_quant of SwiGLU, quantize_fp8_swiglu).
    const bool shared_linear_on = !pol_->is_disabled("shared_as_linears");
    auto linear_path = [&](const DeviceLinear& w) {
        const std::string_view v = plan_linear(axs, w, 1, lane.ws, *pol_).variant;
        return v == "wgmma_gemv" || v == "fp8_gemm" || v == "fp8_gemm_splitk" || v == "fp8_gemm_mma";
    };
    // Release numerics only: there the w1 / w3 outputs are rounded to bf16 before SwiGLU (the reference's expert
    // GEMMs output bf16), which the bf16 linear outputs reproduce; exact numerics keep them in fp32.
    if (shared_linear_on && num_.act == ActNumerics::FP8_BLOCK128 && L.shared_w1.kind != WeightKind::BF16 &&
        linear_path(L.shared_w1) && linear_path(L.shared_w3)) {
        FS_CHECK(size_t(2 * T * I) * 2 <= buf_.shared_gate_up.bytes(), "CUDA backend: {} rows exceed the shared "
                 "expert's linear-path buffer", T);
        uint16_t* g = buf_.shared_gate_up.as<uint16_t>();
        uint16_t* u = g + size_t(T) * size_t(I);
        {
            OpProfiler::Scope sc(prof_, "moe.shared w1+w3+swiglu");
            prof_.bytes(L.bytes.shared_up);
            lin(axs, L.shared_w1, g, OutKind::BF16, I, &lane);
            lin(axs, L.shared_w3, u, OutKind::BF16, I, &lane);
            PreparedActivation& h = buf_.moe_h_shared.act;
            h.values = buf_.moe_h_shared.values.as<uint16_t>();
            h.scales = buf_.moe_h_shared.scales.as<float>();
            if (input_format(T, L.shared_w2) == ActFormat::FP8_ROWS) {
                describe_prepared(h, L.shared_w2.kind, num_.act, T, I);
                h.format = ActFormat::FP8_ROWS;
                h.fp8 = fp8_activation_view(h.values, h.scales, T, I);
                quantize_fp8_swiglu(g, u, I, limit, h.fp8, lane.stream);
            } else {
                moe_swiglu_prepare(g, u, I, T, I, limit, L.shared_w2.kind, num_.act, h, lane.stream);
            }
        }
        OpProfiler::Scope sc(prof_, "moe.shared w2");
        prof_.bytes(L.bytes.shared_down);
        const bool bf16_out = pol_ == &prefill_policy_ && !sharded_ && !pol_->is_disabled("shared_bf16_out");
        lin(buf_.moe_h_shared.act, L.shared_w2, buf_.shared_out.get(), bf16_out ? OutKind::BF16 : OutKind::F32, D,
            &lane);
        return bf16_out;
    }
    // The fused expert kernels take the MMA_F16 format.
    const PreparedActivation& axe =
        axs.format == ActFormat::MMA_F16
            ? axs
            : prepare_as(ActFormat::MMA_F16, buf_.prep_x, buf_.sub_in.get(), false, T, D, D, L.shared_w1, false, &lane);
    {
        OpProfiler::Scope sc(prof_, "moe.shared w1+w3+swiglu");
        prof_.bytes(L.bytes.shared_up);
        prof_.variant(
            moe_expert_up(axe, L.shared, nullptr, T, 1, limit, num_.act, buf_.moe_h_shared.act, lane.stream, *pol_));
    }
    OpProfiler::Scope sc(prof_, "moe.shared w2");
    prof_.bytes(L.bytes.shared_down);
    prof_.variant(moe_expert_down(buf_.moe_h_shared.act, L.shared, nullptr, T, 1, buf_.shared_out.as<float>(),
                                  lane.stream, *pol_));
    return false;
}

}  // namespace flashseek::cuda
