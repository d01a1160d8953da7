// The attention sub-block of one layer on the GPU, in the CPU forward's order (src/cpu/forward_attention.cpp):
// q latent (wq_a, q_norm) -> queries (wq_b, per-head RMS + RoPE) -> window KV (wkv, kv_norm, RoPE, FP8
// simulation, ring store) -> indexer compressor and indexer top-k (ratio 4) -> attention compressor -> sparse
// attention with sink over window + compressed entries -> inverse RoPE -> grouped wo_a -> wo_b. The window KV and
// the compressors run as side branches beside the query path (StreamSet::fork / join); each kernel computes
// what it did in sequence, so the results are the same bit for bit.
// In the last layer of a pass with fewer rows that need logits than rows (ForwardPass::last_layer_on_head_rows) the
// query path runs on those head rows only, gathered, as one-token sequences at their positions; the window KV and
// the compressors still take every row.
// The indexer's scoring is skipped when no sequence of the pass has more than index_topk entries
// (indexer_select then selects every visible entry); its compressor always runs. In the exact (reference)
// configuration the FP8 KV and Hadamard + FP4 indexer simulations are off (ForwardNumerics), as in the CPU exact
// numerics.
#include <algorithm>
#include <cmath>

#include "cuda/attention/kv_store.cuh"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/attention/sparse_attention_prefill.cuh"
#include "cuda/backend/forward.h"
#include "cuda/backend/glue.cuh"
#include "cuda/compressor/compressor.cuh"
#include "cuda/gemm/gemv_chain.cuh"
#include "cuda/gemm/normed_gemv.cuh"
#include "cuda/gemm/weight_dequant.cuh"
#include "cuda/indexer/indexer.cuh"
#include "cuda/indexer/indexer_prefill.cuh"
#include "cuda/norm/rmsnorm.cuh"
#include "util/error.h"

namespace flashseek::cuda {

void ForwardPass::enqueue_attention(int l, const PassShape& s, bool head_queries) {
    const ShardLayer& L = shard_.layer(l);
    const int T = s.n_rows;
    const int64_t D = cfg_.hidden_size, QL = cfg_.q_lora_rank;
    const int H = shard_.spec().heads(), hd = cfg_.head_dim, rd = cfg_.qk_rope_head_dim;
    const float eps = float(cfg_.rms_norm_eps);
    const TokenBatch batch = token_batch(s);
    const cudaStream_t stream = streams_.main();
    // The query path's rows: every row, or (head_queries) the head rows only, gathered from sub_in into head_in, as
    // one-token "sequences" at their positions (head_batch): the window KV and the compressors still run on every
    // row, so the attention sees the same entries as in a pass of all rows.
    const int Tq = head_queries ? s.n_head_rows : T;
    const TokenBatch qbatch = head_queries ? head_batch(s) : batch;
    const int32_t* pos = qbatch.token_pos;
    const void* q_in = head_queries ? buf_.head_in.get() : buf_.sub_in.get();
    if (head_queries && Tq > 0) {
        OpProfiler::Scope sc(prof_, "head gather");
        gather_rows(buf_.sub_in.as<bf16>(), buf_.meta.d(StepMeta::kHeadRows), Tq, D, buf_.head_in.as<bf16>(), stream);
    }

    // The window KV and the compressors do not depend on the queries: side branches (their own streams), joined
    // before the indexer and the attention. They are latency-bound small kernels and overlap the query path's.
    const PreparedActivation* ax = Tq > 0 ? &prepare(buf_.prep_x, q_in, false, Tq, D, D, L.wq_a) : nullptr;
    {
        // Window KV into the ring (wkv shares wq_a's prepared input when both have the same format and rows).
        const Lane kv = streams_.fork(streams_.window_kv);
        const bool share = ax && !head_queries && L.wkv.kind == L.wq_a.kind && input_format(T, L.wkv) == ax->format;
        const PreparedActivation& akv =
            share ? *ax : prepare(buf_.prep_kv, buf_.sub_in.get(), false, T, D, D, L.wkv, false, &kv);
        {
            OpProfiler::Scope sc(prof_, "attn.wkv gemm");
            prof_.bytes(L.bytes.wkv);
            lin(akv, L.wkv, buf_.window_kv.get(), OutKind::BF16, hd, &kv);
        }
        OpProfiler::Scope sc(prof_, "attn.kv norm + rope + store");
        prof_.bytes(L.bytes.kv_norm);
        kv_store_window(buf_.window_kv.as<bf16>(), hd, hd, rd, L.kv_norm, eps, L.rope, batch, ring_view(l), nullptr,
                        kv.stream);
    }

    // Compressors: the bf16 projections in fp32, then pooling/emission into the paged entries.
    // Each branch prepares its own copy of the input (the two may run at once). The gate projection runs on a lane
    // of its own beside wkv's (KernelPolicy "compressor_gate_lane"), joined into the compressor's lane before the
    // emission: launched one after the other on one lane, the second GEMV was launched after the query path's wq_b
    // and waited for wq_b's last CTAs to be dispatched (14 us at one sequence in the ratio-4 layers, where the
    // indexer compressor's chain then ended after the query path's head norm and delayed the attention).
    const bool gate_lanes = !pol_->is_disabled("compressor_gate_lane");
    auto run_compressor = [&](const CompressorLinears& c, bool indexer, DeviceBuffer& a, DeviceBuffer& z,
                              const Lane& lane, SideStream& gate_side) {
        PrepBuffer& in = indexer ? buf_.prep_index_x : buf_.prep_x_bf16;
        const PreparedActivation& ab = prepare(in, buf_.sub_in.get(), false, T, D, D, c.wkv, false, &lane);
        const int64_t width = c.wkv.out;
        {
            OpProfiler::Scope sc(prof_, indexer ? "indexer.compressor gemm" : "attn.compressor gemm");
            prof_.bytes(indexer ? L.bytes.index_compressor_gemm : L.bytes.compressor_gemm);
            // The gate lane forks from the main stream like the compressor's own: ab reads sub_in in place (BF16
            // weights) or was prepared on `lane`, in which case the gate stays on `lane`.
            const bool in_place = ab.values == buf_.sub_in.get();
            const Lane gate = gate_lanes && in_place ? streams_.fork(gate_side) : lane;
            lin(ab, c.wkv, a.get(), OutKind::F32, width, &lane);
            lin(ab, c.wgate, z.get(), OutKind::F32, width, &gate);
            streams_.join_into(gate_side, lane);
        }
        CompressorParams p;
        p.batch = batch;
        p.ratio = c.ratio;
        p.dim = c.dim;
        p.rope_dim = rd;
        p.indexer = indexer;
        p.quant_sim = num_.quant_sim;
        p.kv = a.as<float>();
        p.kv_stride = width;
        p.gate = z.as<float>();
        p.gate_stride = width;
        p.ape = c.ape;
        p.norm_weight = c.norm;
        p.norm_eps = eps;
        p.rope = L.rope;
        p.state = pool_.compressor_state(l, indexer);
        p.state_stride = pool_.compressor_state_stride(l, indexer);
        p.out = indexer ? index_entries(l) : comp_entries(l);
        OpProfiler::Scope sc(prof_, indexer ? "indexer.compressor" : "attn.compressor");
        prof_.bytes(indexer ? L.bytes.index_compressor : L.bytes.compressor);
        compressor_forward(p, lane.stream);
    };
    if (L.ratio == 4) {  // the indexer's compressor on a third stream: two compressors in one branch were longer
                         // than the query path
        const Lane ic = streams_.fork(streams_.index_compressor);
        run_compressor(L.index_compressor, true, buf_.index_comp_kv, buf_.index_comp_gate, ic,
                       streams_.index_compressor_gate);
    }
    if (L.ratio > 0)
        run_compressor(L.compressor, false, buf_.comp_kv, buf_.comp_gate, streams_.fork(streams_.aux),
                       streams_.compressor_gate);
    if (Tq == 0) {  // no row needs the queries (a chunk without logits, head_queries): the state is written
        streams_.join(streams_.window_kv);
        streams_.join(streams_.index_compressor);
        streams_.join(streams_.aux);
        return;
    }

    // The indexer's head weights (weights_proj) read only the query rows' input: on a lane of their own from the
    // start of the sub-block, joined before the scoring, instead of on the main path between the head norm and the
    // scorer (KernelPolicy "indexer_weights_lane"; disabled, the main path as before). The lane prepares into a
    // buffer of its own: the compressors' branches prepare theirs meanwhile.
    const bool index_scoring = L.ratio == 4 && s.need_indexer;
    const bool index_weights_lane = index_scoring && !pol_->is_disabled("indexer_weights_lane");
    auto enqueue_index_weights = [&](const Lane& lane, PrepBuffer& prep) {
        const PreparedActivation& aw = prepare(prep, q_in, false, Tq, D, D, L.index_weights_proj, false, &lane);
        OpProfiler::Scope sc(prof_, "indexer.weights_proj gemm");
        prof_.bytes(L.bytes.index_weights_proj);
        lin(aw, L.index_weights_proj, buf_.index_weights.get(), OutKind::BF16, cfg_.index_n_heads, &lane);
    };
    if (index_weights_lane) enqueue_index_weights(streams_.fork(streams_.index_weights), buf_.prep_index_weights);

    // The reference runs wo_a as a bf16 einsum over the dequantized weights: prefill passes do the same on the bf16
    // tensor-core GEMM from a copy widened once per pass, and so do decode passes from
    // KernelPolicy::wo_a_widen_min_tokens rows where the bf16 GEMM is preferred (gemm_min_tokens); other decode
    // passes stream the FP8 weights, half the bytes. The widening reads only the checkpoint's wo_a: it runs on its
    // own branch beside the query path and the attention, joined before wo_a's GEMM (a full dependency: the GEMM
    // reads the copy only after the widening completed, whatever PDL lets it request early).
    const bool widen_wo_a =
        (s.prefill || Tq >= std::max(pol_->wo_a_widen_min_tokens, pol_->gemm_min_tokens)) &&
        L.wo_a.kind != WeightKind::BF16 && size_t(L.wo_a.out) * size_t(L.wo_a.in) * 2 <= buf_.wo_a_bf16.bytes();
    if (widen_wo_a) {
        const Lane wl = streams_.fork(streams_.wo_a_widen);
        OpProfiler::Scope sc(prof_, "attn.wo_a widen to bf16");
        prof_.bytes(L.bytes.wo_a);
        dequantize_weight_bf16(L.wo_a, buf_.wo_a_bf16.as<uint16_t>(), wl.stream);
    }

    // Query latent and queries (main stream). wq_b's matrix can stream into L2 meanwhile (prefetch_weights). Where
    // the policy forces "query_chain", one token runs wq_a, q_norm and wq_b as one persistent kernel instead.
    const int nI = cfg_.index_n_heads, dI = cfg_.index_head_dim;
    // Decode passes put the indexer's query path on a side branch (prefill passes where forced: not measured there).
    const bool index_branch = index_scoring && pol_->takes("indexer_branch", !s.prefill);
    const bool query_chained = ax && run_query_chain(L, *ax, Tq, s.prefill);
    // One token: q_norm inside wq_b's staging (no launch of its own); wq_a then writes the raw latent apart.
    const bool norm_in_wq_b = !query_chained && q_norm_into_wq_b(L, Tq, s.prefill, index_branch);
    if (!query_chained) {
        prefetch_weights(L.wq_b, s);
        {
            OpProfiler::Scope sc(prof_, "attn.wq_a gemm");
            prof_.bytes(L.bytes.wq_a);
            lin(*ax, L.wq_a, norm_in_wq_b ? buf_.q_latent_raw.get() : buf_.q_latent.get(), OutKind::BF16, QL);
        }
    }
    if (!query_chained && norm_in_wq_b) {
        run_q_norm_in_wq_b(L, Tq);
    } else if (!query_chained) {
        // The norm also writes its output prepared for wq_b (FP8 / FP4 weights; in prefill passes the FP8 GEMM's
        // act_quant rows): no preparation launch.
        OpProfiler::Scope sc(prof_, "attn.q_norm");
        prof_.bytes(L.bytes.q_norm);
        const ActFormat fmt = input_format(Tq, L.wq_b);
        const bool fuse = producer_prepares(L.wq_b, fmt);
        PreparedActivation* out = nullptr;
        if (fuse) {
            buf_.prep_q_latent.act = q_latent_prepared_for(L.wq_b, fmt);
            out = &buf_.prep_q_latent.act;
        }
        rmsnorm(buf_.q_latent.as<bf16>(), QL, buf_.q_latent.as<bf16>(), QL, L.q_norm, Tq, int(QL), eps, stream, out);
        if (fuse) adopt_produced(buf_.prep_q_latent, buf_.q_latent.get(), Tq, QL, L.wq_b.kind, fmt);
    }
    const PreparedActivation& aq = prepare(buf_.prep_q_latent, buf_.q_latent.get(), false, Tq, QL, QL, L.wq_b);

    // The indexer's query path (its wq_b and q preparation) reads only the normed q latent. On the main path it runs
    // after the query's wq_b and head norm; with "indexer_branch" (decode passes) it runs on a side branch beside
    // them (the scoring needs the indexer compressor's entries and stays after the joins). On the branch the main
    // path's prepared q latent is shared where it has the indexer wq_b's format (reads only), else the branch
    // prepares its own copy: the main path's wq_b reads prep_q_latent meanwhile.
    auto enqueue_indexer_query = [&](const Lane& lane, bool branch) {
        const PrepBuffer& main_q = buf_.prep_q_latent;  // prepared for wq_b just above
        const bool reuse = branch && main_q.format == input_format(Tq, L.index_wq_b) &&
                           main_q.layout == L.index_wq_b.kind && main_q.numerics == input_numerics(L.index_wq_b);
        const PreparedActivation& aiq =
            reuse ? aq
                  : prepare(branch ? buf_.prep_index_q : buf_.prep_q_latent, buf_.q_latent.get(), false, Tq, QL, QL,
                            L.index_wq_b, false, &lane);
        {
            OpProfiler::Scope sc(prof_, "indexer.wq_b gemm");
            prof_.bytes(L.bytes.index_wq_b);
            lin(aiq, L.index_wq_b, buf_.index_q.get(), OutKind::BF16, int64_t(nI) * dI, &lane);
        }
        OpProfiler::Scope sc(prof_, "indexer.q prepare");
        indexer_prepare_q(buf_.index_q.as<bf16>(), int64_t(nI) * dI, Tq, nI, dI, pos, L.rope, lane.stream,
                          num_.quant_sim);
    };
    if (index_branch) enqueue_indexer_query(streams_.fork(streams_.index_query), true);
    if (!query_chained && !norm_in_wq_b) {
        OpProfiler::Scope sc(prof_, "attn.wq_b gemm");
        prof_.bytes(L.bytes.wq_b);
        lin(aq, L.wq_b, buf_.queries.get(), OutKind::BF16, int64_t(H) * hd);
    }
    if (!widen_wo_a) prefetch_weights(L.wo_a, s);  // during the head norm, the indexer and the attention
    {
        OpProfiler::Scope sc(prof_, "attn.q head norm + rope");
        head_rmsnorm_rope(buf_.queries.as<bf16>(), int64_t(H) * hd, Tq, H, hd, nullptr, eps, pos, L.rope, stream);
    }
    streams_.join(streams_.window_kv);
    streams_.join(streams_.index_compressor);
    streams_.join(streams_.aux);
    streams_.join(streams_.index_query);
    streams_.join(streams_.index_weights);

    // Indexer top-k over the index compressor's entries (ratio 4, when some sequence needs scoring).
    if (index_scoring) {
        if (!index_branch) enqueue_indexer_query(streams_.main_lane(), false);
        if (!index_weights_lane) enqueue_index_weights(streams_.main_lane(), buf_.prep_x_bf16);
        IndexerSelectParams ip;
        ip.batch = qbatch;
        ip.n_heads = nI;
        ip.head_dim = dI;
        ip.ratio = 4;
        ip.topk = cfg_.index_topk;
        ip.q = buf_.index_q.as<bf16>();
        ip.q_stride = int64_t(nI) * dI;
        ip.weights = buf_.index_weights.as<bf16>();
        ip.weights_stride = nI;
        ip.weights_scale = float(1.0 / std::sqrt(double(dI)) / std::sqrt(double(nI)));
        ip.keys = index_entries(l);
        ip.max_entries = s.max_entries;
        ip.selected = buf_.index_selected.as<int32_t>();
        ip.form = pol_->indexer_select_form;
        OpProfiler::Scope sc2(prof_, "indexer.score + top-k");
        // Prefill passes score on tensor cores (indexer_prefill); decode passes keep the SIMT scorer. The two sum
        // in different orders: a near-tie at the k-th score can select differently between them.
        const bool prefill = s.prefill || pol_->is_forced("indexer_prefill");
        if (prefill && !pol_->is_disabled("indexer_prefill") && indexer_select_prefill_supports(ip)) {
            prof_.variant("indexer_prefill");
            indexer_select_prefill(ip, buf_.index_workspace.get(), buf_.index_workspace.bytes(), stream);
        } else {
            prof_.variant("indexer_simt");
            indexer_select(ip, buf_.index_workspace.get(), buf_.index_workspace.bytes(), stream);
        }
    }

    // Sparse attention over window + compressed entries, then the output projection.
    const int G = shard_.spec().groups();
    const bool early_wo_a = !widen_wo_a && ring_launched_early("early_wo_a", L.wo_a, true, Tq, s.prefill, G);
    // One token: wo_a's and wo_b's inputs prepared inside their GEMVs' staging (raw_activation), no preparation
    // launch between the kernels, where the preparation and the GEMV would be simt_gemv's (or ring_gemv's where
    // forced: raw_input; the same bits). Never for the widened wo_a (bf16 weights).
    const PreparedActivation ao_raw = widen_wo_a ? PreparedActivation{}
                                                 : raw_input(Tq, buf_.attn_out.get(), int64_t(H) * hd, L.wo_a, true, G,
                                                             s.prefill);
    const MergePrep merge_prep = merge_prep_target(L, Tq, s.prefill, widen_wo_a || ao_raw.raw, G);
    if (enqueue_sparse_attention(l, s, qbatch, early_wo_a, merge_prep))  // prepare() below finds it done
        adopt_prepared(*merge_prep.buf, buf_.attn_out.get(), Tq, int64_t(H) * hd, merge_prep.kind, merge_prep.numerics);
    const int64_t GO = int64_t(G) * cfg_.o_lora_rank;
    // wo_a widened above (widen_wo_a): the checkpoint's wo_a bytes were read by the widening, else the grouped GEMM
    // reads them.
    DeviceLinear wo_a = L.wo_a;
    if (widen_wo_a) {
        streams_.join(streams_.wo_a_widen);
        wo_a = DeviceLinear{WeightKind::BF16, ScaleKind::NONE, L.wo_a.out, L.wo_a.in, buf_.wo_a_bf16.get(), nullptr,
                            /*written_in_stream=*/true};
    }
    const PreparedActivation& ao = ao_raw.raw ? ao_raw
                                              : prepare(buf_.prep_attn_out, buf_.attn_out.get(), false, Tq,
                                                        int64_t(H) * hd, int64_t(H) * hd, wo_a, /*force_exact=*/true,
                                                        nullptr, G, early_wo_a);
    if (!ao.raw && run_out_proj_chain(L, ao, wo_a, G, Tq, s.prefill)) return;
    {
        OpProfiler::Scope sc(prof_, "attn.wo_a grouped gemm");
        if (wo_a.weight == L.wo_a.weight) prof_.bytes(L.bytes.wo_a);
        const Lane main = streams_.main_lane();
        // wo_a's output only feeds wo_b: where wo_b takes act_quant rows, the GEMM writes them instead of its bf16
        // output (the same bits as preparing that output; wo_a_out itself is then not written, and the prepared
        // buffer records it as its source, so wo_b's prepare below finds it done). Disabling "wo_a_fp8_rows" keeps
        // the bf16 output and the separate preparation (A/B).
        // (The linear catalogue asks for FP8_ROWS only for FP8 weights in release numerics.)
        std::string_view ran;
        if (input_format(Tq, L.wo_b) == ActFormat::FP8_ROWS && !pol_->is_disabled("wo_a_fp8_rows")) {
            PrepBuffer& pb = buf_.prep_wo_a_out;
            const Fp8Activation rows = fp8_activation_view(pb.values.get(), pb.scales.get(), Tq, GO);
            ran = grouped_linear_to_fp8_rows(ao, wo_a, G, rows, main.ws, main.stream, *pol_);
            if (!ran.empty()) adopt_prepared_fp8_rows(pb, buf_.wo_a_out.get(), Tq, GO, L.wo_b.kind);
        }
        if (ran.empty())
            ran = grouped_linear(ao, wo_a, G, buf_.wo_a_out.get(), OutKind::BF16, GO, main.ws, main.stream, *pol_);
        prof_.variant(ran);
    }
    const PreparedActivation az_raw = raw_input(Tq, buf_.wo_a_out.get(), GO, L.wo_b, false, 1, s.prefill);
    const bool early_wo_b = ring_launched_early("early_wo_b", L.wo_b, false, Tq, s.prefill, 1);
    const PreparedActivation& az =
        az_raw.raw ? az_raw
                   : prepare(buf_.prep_wo_a_out, buf_.wo_a_out.get(), false, Tq, GO, GO, L.wo_b, false, nullptr, 1,
                             early_wo_b);
    OpProfiler::Scope sc(prof_, "attn.wo_b gemm");
    prof_.bytes(L.bytes.wo_b);
    if (sharded_)  // this shard's heads' share of the output, summed over the shards in fp32 by the caller
        lin(az, L.wo_b, buf_.sub_out_partial.get(), OutKind::F32, D);
    else
        lin(az, L.wo_b, buf_.sub_out.get(), OutKind::BF16, D);
}

// The rest of a chain's description from the per-kernel path it replaces: the K splits simt_gemv would use on each
// op (the chain keeps them, so its bits are theirs), B's prepared input storage (bx: as B's producer would leave
// it) and the workspace's counters. False where either linear would not run simt_gemv or the chain refuses.
bool ForwardPass::plan_gemv_chain(GemvChain& c, const PreparedActivation& bx, const Lane& main) {
    const LinearPlan plan_a = plan_linear(*c.x, c.a, c.groups, main.ws, *pol_);
    const LinearPlan plan_b = plan_linear(bx, c.b, 1, main.ws, *pol_);
    if (plan_a.variant != "simt_gemv" || plan_b.variant != "simt_gemv") return false;
    c.splits_a = plan_a.k_splits;
    c.splits_b = plan_b.k_splits;
    c.mid_values = bx.values;
    c.mid_scales = bx.scales;
    c.counters = main.ws->counters;
    c.n_counters = main.ws->n_counters;
    c.free_sms = pol_->gemv_chain_free_sms;
    return gemv_chain_supports(c);
}

void ForwardPass::launch_gemv_chain(const GemvChain& c, const char* op, double bytes, const Lane& main) {
    OpProfiler::Scope sc(prof_, op);
    prof_.bytes(bytes);
    gemv_chain(c, main.stream);
    prof_.variant("gemv_chain");
}

// One token: wq_a, q_norm (with the preparation of its output for wq_b) and wq_b as one persistent kernel
// (gemm/gemv_chain.cuh with its norm) where both linears would run simt_gemv: the same bits as the three launches.
// Taken only where the policy forces "query_chain" (A/B against the launches). Returns false (nothing run) elsewhere.
bool ForwardPass::run_query_chain(const ShardLayer& L, const PreparedActivation& ax, int Tq, bool prefill) {
    if (Tq != 1 || prefill || !pol_->takes_forced_only("query_chain")) return false;
    const Lane main = streams_.main_lane();
    if (!main.ws) return false;
    const int64_t QL = cfg_.q_lora_rank;
    const ActFormat fmt = input_format(Tq, L.wq_b);
    if (fmt != ActFormat::MMA_F16 || !producer_prepares(L.wq_b, fmt)) return false;
    PrepBuffer& pq = buf_.prep_q_latent;
    PreparedActivation aq;  // what q_norm leaves prepared for wq_b: the plan of wq_b is read from it
    describe_prepared(aq, L.wq_b.kind, num_.act, Tq, QL);
    aq.values = pq.values.as<uint16_t>();
    aq.scales = pq.scales.as<float>();
    GemvChain c;
    c.x = &ax;
    c.a = L.wq_a;
    c.b = L.wq_b;
    c.numerics_b = num_.act;  // as q_norm prepares its output (adopt_produced)
    c.mid = buf_.q_latent_raw.as<uint16_t>();
    c.norm_weight = reinterpret_cast<const uint16_t*>(L.q_norm);
    c.norm_eps = float(cfg_.rms_norm_eps);
    c.mid_normed = buf_.q_latent.as<uint16_t>();
    c.y = buf_.queries.get();
    c.y_kind = OutKind::BF16;
    if (!plan_gemv_chain(c, aq, main)) return false;
    launch_gemv_chain(c, "attn.wq_a + q_norm + wq_b chain", L.bytes.wq_a + L.bytes.q_norm + L.bytes.wq_b, main);
    adopt_prepared(pq, buf_.q_latent.get(), Tq, QL, L.wq_b.kind, num_.act);  // written by the chain, as q_norm would
    return true;
}

// One token's bf16 row x of K columns as a raw_activation for w (prepared inside the GEMV's staging), where the raw
// row and the prepared one would run simt_gemv, or ring_gemv where the policy forces "prepare_in_ring" (wo_b's input;
// wo_a's row is longer than ring_gemv prepares in every CTA): the same bits as the preparation launch and the GEMV.
// The default for simt_gemv ("prepare_in_gemv"; FLASHSEEK_DISABLE=prepare_in_gemv keeps the launch). ring_gemv only
// where forced: with wo_b's row prepared inside the ring the one-sequence step was 2.9% slower on an H100 (run 905,
// docs/perf-log/2026-12-07_defaults-checked-and-ring-raw-rows.md). Else an activation with raw false (the caller
// prepares). Not while a forced gemv_chain would take the prepared input.
PreparedActivation ForwardPass::raw_input(int Tq, const void* x, int64_t K, const DeviceLinear& w, bool force_exact,
                                          int groups, bool prefill) const {
    if (Tq != 1 || prefill || w.kind == WeightKind::BF16 || pol_->is_disabled("prepare_in_gemv") ||
        pol_->takes_forced_only("gemv_chain"))
        return {};
    const ActNumerics num = input_numerics(w, force_exact);
    const std::string_view prepared_choice = linear_choice(Tq, w, groups, num, *pol_);
    const bool in_ring = prepared_choice == "ring_gemv" && pol_->takes_forced_only("prepare_in_ring");
    if ((prepared_choice != "simt_gemv" && !in_ring) ||
        linear_choice(Tq, w, groups, num, *pol_, /*raw=*/true) != prepared_choice)
        return {};
    return raw_activation(x, Tq, K, K, w.kind, num);
}

// prep_q_latent's storage as the copy q_norm's producer writes for wq_b in format `fmt` (the shape fields are filled
// in by the producer).
PreparedActivation ForwardPass::q_latent_prepared_for(const DeviceLinear& wq_b, ActFormat fmt) const {
    PreparedActivation p;
    p.values = buf_.prep_q_latent.values.as<uint16_t>();
    p.scales = buf_.prep_q_latent.scales.as<float>();
    p.layout = wq_b.kind;
    p.numerics = num_.act;
    p.format = fmt;
    return p;
}

// normed_gemv's input for q_norm before wq_b: wq_a's raw output, the norm, the normed latent and `prepared`.
NormedInput ForwardPass::q_norm_input(const ShardLayer& L, PreparedActivation* prepared) const {
    NormedInput in;
    in.x = buf_.q_latent_raw.as<bf16>();
    in.weight = L.q_norm;
    in.eps = float(cfg_.rms_norm_eps);
    in.numerics = num_.act;
    in.normed_out = buf_.q_latent.as<bf16>();
    in.prepared_out = prepared;
    return in;
}

// One token, where wq_b would run simt_gemv on q_norm's prepared output: q_norm inside wq_b's staging
// (gemm/normed_gemv.cuh), the same bits as the norm's launch and the GEMV's. Taken only where the policy forces
// "norm_into_gemv": the one-sequence step is 1.6% slower with it on an H100 (run 402,
// docs/perf-log/2026-12-06_norm-in-wq-b-and-gate-lanes.md): wq_b, launched at wq_a's trigger instead of q_norm's,
// is dispatched before the side branches' GEMVs, whose chains then end after it. Not beside the forced indexer
// branch, which reads the normed latent while wq_b runs.
bool ForwardPass::q_norm_into_wq_b(const ShardLayer& L, int Tq, bool prefill, bool index_branch) const {
    if (Tq != 1 || prefill || index_branch || !pol_->takes_forced_only("norm_into_gemv")) return false;
    if (linear_choice(Tq, L.wq_b, 1, num_.act, *pol_) != "simt_gemv" ||
        !producer_prepares(L.wq_b, ActFormat::MMA_F16))
        return false;
    PreparedActivation aq = q_latent_prepared_for(L.wq_b, ActFormat::MMA_F16);
    return *normed_gemv_unsupported(q_norm_input(L, &aq), L.wq_b) == 0;
}

void ForwardPass::run_q_norm_in_wq_b(const ShardLayer& L, int Tq) {
    const Lane main = streams_.main_lane();
    PrepBuffer& pq = buf_.prep_q_latent;
    pq.act = q_latent_prepared_for(L.wq_b, ActFormat::MMA_F16);
    {
        OpProfiler::Scope sc(prof_, "attn.q_norm + wq_b gemm");
        prof_.bytes(L.bytes.q_norm + L.bytes.wq_b);
        normed_gemv(q_norm_input(L, &pq.act), L.wq_b, buf_.queries.get(), OutKind::BF16,
                    int64_t(shard_.spec().heads()) * cfg_.head_dim, main.ws, main.stream);
        prof_.variant("simt_gemv (q_norm in its staging)");
    }
    adopt_produced(pq, buf_.q_latent.get(), Tq, cfg_.q_lora_rank, L.wq_b.kind, ActFormat::MMA_F16);
}

// One token: wo_a, the preparation of its output for wo_b and wo_b as one persistent kernel (gemm/gemv_chain.cuh)
// where both linears would run simt_gemv: the same bits as the two launches (the chain keeps their K splits), with
// the weight stream running across the boundary. Taken only where the policy forces "gemv_chain": on the H200 it is
// 1.15x faster than the two launches on its own but slower inside the step (docs/perf-log/2026-12-04_gemv-chain.md).
// Returns false (nothing run) elsewhere.
bool ForwardPass::run_out_proj_chain(const ShardLayer& L, const PreparedActivation& ao, const DeviceLinear& wo_a,
                                     int G, int Tq, bool prefill) {
    if (Tq != 1 || prefill || !pol_->takes_forced_only("gemv_chain") || wo_a.weight != L.wo_a.weight) return false;
    const Lane main = streams_.main_lane();
    if (!main.ws) return false;
    const int64_t GO = int64_t(G) * cfg_.o_lora_rank;
    if (input_format(Tq, L.wo_b) != ActFormat::MMA_F16) return false;
    PrepBuffer& pb = buf_.prep_wo_a_out;
    const ActNumerics nb = input_numerics(L.wo_b, false);
    PreparedActivation az;  // what prepare() would make of wo_a's output: the plan of wo_b is read from it
    describe_prepared(az, L.wo_b.kind, nb, Tq, GO);
    az.values = pb.values.as<uint16_t>();
    az.scales = pb.scales.as<float>();
    GemvChain c;
    c.x = &ao;
    c.a = wo_a;
    c.groups = G;
    c.b = L.wo_b;
    c.numerics_b = nb;
    c.mid = buf_.wo_a_out.as<uint16_t>();
    c.y = sharded_ ? buf_.sub_out_partial.get() : buf_.sub_out.get();  // as the wo_b launch below writes
    c.y_kind = sharded_ ? OutKind::F32 : OutKind::BF16;
    if (!plan_gemv_chain(c, az, main)) return false;
    launch_gemv_chain(c, "attn.wo_a + wo_b chain", L.bytes.wo_a + L.bytes.wo_b, main);
    adopt_prepared(pb, buf_.wo_a_out.get(), Tq, GO, L.wo_b.kind, nb);  // written by the chain, as prepare() would
    return true;
}

// Window + compressed candidates; the indexer's selection in CSA layers when some sequence needed scoring, else
// every visible entry (no more than index_topk of them). The inverse RoPE of the output is fused in the kernel.
// The ring's CTAs request their first stages (128 KB per SM: half of wo_a's matrix over the grid) before their
// wait, but a launch reaches them only one kernel ahead. wo_a's ring is launched after the merge's and the
// preparation's waits, once the attention has ended, so its stages fill while nothing else streams; triggering at
// those two kernels' entry launches it while the attention runs, and its CTAs take SMs as the attention's leave.
// wo_b's ring is launched after its preparation's wait, when wo_a has ended; triggered at the preparation's entry it
// is launched while wo_a runs and its CTAs start filling as wo_a's leave. Where the ring takes the raw row instead
// (prepare_in_ring) there is no preparation launch and the merge launches the ring itself. Forced only until
// measured (docs/perf-log/2026-12-07_early-wo-a-and-the-ring-raw-row.md).
bool ForwardPass::ring_launched_early(std::string_view name, const DeviceLinear& w, bool force_exact, int Tq,
                                      bool prefill, int groups) const {
    if (Tq != 1 || prefill || !pol_->takes_forced_only(name) || pol_->takes_forced_only("gemv_chain")) return false;
    return linear_choice(Tq, w, groups, input_numerics(w, force_exact), *pol_) == "ring_gemv";
}

ForwardPass::MergePrep ForwardPass::merge_prep_target(const ShardLayer& L, int Tq, bool prefill,
                                                      bool wo_a_unprepared, int groups) {
    if (prefill || wo_a_unprepared || !pol_->takes_forced_only("prepare_in_merge") || cfg_.head_dim % 128 != 0 ||
        input_format(Tq, L.wo_a, /*force_exact=*/true, groups) != ActFormat::MMA_F16 ||
        !producer_prepares(L.wo_a, ActFormat::MMA_F16))
        return {};
    return {&buf_.prep_attn_out, L.wo_a.kind, input_numerics(L.wo_a, /*force_exact=*/true)};
}

bool ForwardPass::enqueue_sparse_attention(int l, const PassShape& s, const TokenBatch& qbatch,
                                           bool merge_launches_next_early, const MergePrep& merge_prep) {
    const ShardLayer& L = shard_.layer(l);
    const int H = shard_.spec().heads(), hd = cfg_.head_dim;
    SparseAttentionParams p;
    p.batch = qbatch;
    p.n_heads = H;
    p.head_dim = hd;
    p.rope_dim = cfg_.qk_rope_head_dim;
    p.softmax_scale = float(1.0 / std::sqrt(double(hd)));
    p.q = buf_.queries.as<bf16>();
    p.q_stride = int64_t(H) * hd;
    p.out = buf_.attn_out.as<bf16>();
    p.out_stride = int64_t(H) * hd;
    p.sink = L.attn_sink;
    p.rope = L.rope;
    p.window = cfg_.sliding_window;
    p.ring = ring_view(l);
    p.ratio = L.ratio;
    int compressed = 0;
    if (L.ratio > 0) {
        p.comp = comp_entries(l);
        compressed = std::max(1, s.max_context / L.ratio);
        // Without scoring every sequence has at most index_topk visible entries (PassShape::need_indexer).
        if (L.ratio == 4) compressed = std::min(compressed, cfg_.index_topk);
        if (L.ratio == 4 && s.need_indexer) {
            p.topk = buf_.index_selected.as<int32_t>();
            p.topk_stride = cfg_.index_topk;
            p.topk_width = cfg_.index_topk;
            compressed = cfg_.index_topk;
        }
    }
    p.max_candidates = cfg_.sliding_window + compressed;
    p.merge_launches_next_early = merge_launches_next_early;
    OpProfiler::Scope sc(prof_, "attn.sparse attention + inverse rope");
    prof_.bytes(L.bytes.attn_sink);  // the weights only; the KV it reads is in the step's state bytes
    // Prefill passes (several rows of a sequence) take the gathering tensor-core kernel (attn_prefill) where its
    // workspace holds the pass: a query's result is then that of attn_mma with one split, whatever the chunking.
    const int max_entries = L.ratio > 0 ? std::max(1, s.max_context / L.ratio) : 0;
    const bool prefill = s.prefill || pol_->is_forced("attn_prefill");
    if (prefill && !pol_->is_disabled("attn_prefill") && sparse_attention_prefill_supports(p, max_entries) &&
        sparse_attention_prefill_workspace_bytes(qbatch.n_tokens, qbatch.n_seqs, cfg_.sliding_window, max_entries,
                                                 hd) <=
            buf_.attn_workspace_bytes) {
        prof_.variant("attn_prefill");
        PrefillAttentionTuning tuning;  // the stage releases racecheck follows, where forced (same bits)
        tuning.cta_release = pol_->takes_forced_only("attn_prefill_cta_release");
        sparse_attention_prefill(p, max_entries, buf_.attn_workspace.get(), buf_.attn_workspace_bytes, streams_.main(),
                                 tuning);
        return false;
    }
    const bool prepared = merge_prep.buf && sparse_attention_merges(p, *pol_);
    if (prepared) {
        p.prepared_values = merge_prep.buf->values.as<uint16_t>();
        p.prepared_scales = merge_prep.buf->scales.as<float>();
        p.prepared_layout = int(merge_prep.kind);
        p.prepared_numerics = int(merge_prep.numerics);
    }
    prof_.variant(
        sparse_attention(p, buf_.attn_workspace.get(), buf_.attn_workspace_bytes, streams_.main(), *pol_));
    return prepared;
}

}  // namespace flashseek::cuda
