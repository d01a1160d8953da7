// The attention sub-block of one layer on the GPU, in the CPU forward's order (src/cpu/forward_attention.cpp):
// q latent (wq_a, q_norm) -> queries (wq_b, per-head RMS + RoPE) -> window KV (wkv, kv_norm, RoPE, FP8
// simulation, ring store) -> indexer compressor and indexer top-k (ratio 4) -> attention compressor -> sparse
// attention with sink over window + compressed entries -> inverse RoPE -> grouped wo_a -> wo_b. The window KV and
// the compressors run as side branches beside the query path (CudaBackendImpl::fork / join); each kernel computes
// what it did in sequence, so the results are the same bit for bit.
// The indexer's scoring is skipped when no sequence of the pass has more than index_topk entries
// (indexer_select then selects every visible entry); its compressor always runs. In the exact (reference)
// configuration the FP8 KV and Hadamard + FP4 indexer simulations are off (quant_sim_), as in the CPU exact numerics.
#include <algorithm>
#include <cmath>

#include "cuda/attention/kv_store.cuh"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/backend/backend_impl.h"
#include "cuda/compressor/compressor.cuh"
#include "cuda/indexer/indexer.cuh"
#include "cuda/norm/rmsnorm.cuh"
#include "util/error.h"

namespace flashseek::cuda {

void CudaBackendImpl::enqueue_attention(int l, const PassShape& s) {
    const LayerDev& L = layers_[size_t(l)];
    const int T = s.n_rows;
    const int64_t D = cfg_.hidden_size, QL = cfg_.q_lora_rank;
    const int H = cfg_.num_attention_heads, hd = cfg_.head_dim, rd = cfg_.qk_rope_head_dim;
    const float eps = float(cfg_.rms_norm_eps);
    const TokenBatch batch = token_batch(s);
    const int32_t* pos = batch.token_pos;

    // The window KV and the compressors do not depend on the queries: side branches (their own streams), joined
    // before the indexer and the attention. They are latency-bound small kernels and overlap the query path's.
    const PreparedActivation& ax = prep(prep_x_, y_.get(), false, T, D, D, L.wq_a);
    {
        // Window KV into the ring (wkv shares wq_a's prepared input when both have the same format).
        const Lane kv = fork(kv_side_);
        const PreparedActivation& akv =
            L.wkv.kind == L.wq_a.kind ? ax : prep(prep_kv_, y_.get(), false, T, D, D, L.wkv, false, true, &kv);
        {
            OpProfiler::Scope sc(prof_, "attn.wkv gemm");
            lin(akv, L.wkv, kv_.get(), OutKind::BF16, hd, &kv);
        }
        OpProfiler::Scope sc(prof_, "attn.kv norm + rope + store");
        kv_store_window(kv_.as<bf16>(), hd, hd, rd, L.kv_norm, eps, L.rope, batch, ring_view(l), nullptr, kv.stream);
    }

    // Compressors: the bf16 projections in fp32, then pooling/emission into the paged entries.
    // Each branch prepares its own copy of the input (the two may run at once).
    auto run_compressor = [&](const CompressorLinears& c, bool indexer, DeviceBuffer& a, DeviceBuffer& z,
                              const Lane& lane) {
        PrepBuffer& buf = indexer ? prep_index_x_ : prep_x_bf16_;
        const PreparedActivation& ab = prep(buf, y_.get(), false, T, D, D, c.wkv, false, true, &lane);
        const int64_t width = c.wkv.out;
        {
            OpProfiler::Scope sc(prof_, indexer ? "indexer.compressor gemm" : "attn.compressor gemm");
            lin(ab, c.wkv, a.get(), OutKind::F32, width, &lane);
            lin(ab, c.wgate, z.get(), OutKind::F32, width, &lane);
        }
        CompressorParams p;
        p.batch = batch;
        p.ratio = c.ratio;
        p.dim = c.dim;
        p.rope_dim = rd;
        p.indexer = indexer;
        p.quant_sim = quant_sim_;
        p.kv = a.as<float>();
        p.kv_stride = width;
        p.gate = z.as<float>();
        p.gate_stride = width;
        p.ape = c.ape;
        p.norm_weight = c.norm;
        p.norm_eps = eps;
        p.rope = L.rope;
        p.state = pool_->compressor_state(l, indexer);
        p.state_stride = pool_->compressor_state_stride(l, indexer);
        p.out = indexer ? index_entries(l) : comp_entries(l);
        OpProfiler::Scope sc(prof_, indexer ? "indexer.compressor" : "attn.compressor");
        compressor_forward(p, lane.stream);
    };
    if (L.ratio == 4) {  // the indexer's compressor on a third stream: two compressors in one branch were longer
                         // than the query path
        const Lane ic = fork(index_side_);
        run_compressor(L.index_compressor, true, ica_, icz_, ic);
    }
    if (L.ratio > 0) run_compressor(L.compressor, false, ca_, cz_, fork(aux_side_));

    // Query latent and queries (main stream).
    {
        OpProfiler::Scope sc(prof_, "attn.wq_a gemm");
        lin(ax, L.wq_a, qr_.get(), OutKind::BF16, QL);
    }
    {
        // The norm also writes its output prepared for wq_b (FP8 / FP4 weights): no preparation launch.
        OpProfiler::Scope sc(prof_, "attn.q_norm");
        const bool fuse = L.wq_b.kind == WeightKind::FP8_BLOCK128 || L.wq_b.kind == WeightKind::FP4_BLOCK32;
        PreparedActivation* out = nullptr;
        if (fuse) {
            prep_qr_.act.values = prep_qr_.values.as<uint16_t>();
            prep_qr_.act.scales = prep_qr_.scales.as<float>();
            prep_qr_.act.layout = L.wq_b.kind;
            prep_qr_.act.numerics = act_numerics_;
            out = &prep_qr_.act;
        }
        rmsnorm(qr_.as<bf16>(), QL, qr_.as<bf16>(), QL, L.q_norm, T, int(QL), eps, stream_, out);
        if (fuse) adopt_prepared(prep_qr_, qr_.get(), T, QL, L.wq_b.kind, act_numerics_);
    }
    const PreparedActivation& aq = prep(prep_qr_, qr_.get(), false, T, QL, QL, L.wq_b);
    {
        OpProfiler::Scope sc(prof_, "attn.wq_b gemm");
        lin(aq, L.wq_b, q_.get(), OutKind::BF16, int64_t(H) * hd);
    }
    {
        OpProfiler::Scope sc(prof_, "attn.q head norm + rope");
        head_rmsnorm_rope(q_.as<bf16>(), int64_t(H) * hd, T, H, hd, nullptr, eps, pos, L.rope, stream_);
    }
    join(kv_side_);
    join(index_side_);
    join(aux_side_);

    // Indexer top-k over the index compressor's entries (ratio 4, when some sequence needs scoring).
    if (L.ratio == 4 && s.need_indexer) {
        const int nI = cfg_.index_n_heads, dI = cfg_.index_head_dim;
        const PreparedActivation& aiq = prep(prep_qr_, qr_.get(), false, T, QL, QL, L.index_wq_b);
        {
            OpProfiler::Scope sc(prof_, "indexer.wq_b gemm");
            lin(aiq, L.index_wq_b, iq_.get(), OutKind::BF16, int64_t(nI) * dI);
        }
        {
            OpProfiler::Scope sc(prof_, "indexer.q prepare");
            indexer_prepare_q(iq_.as<bf16>(), int64_t(nI) * dI, T, nI, dI, pos, L.rope, stream_, quant_sim_);
        }
        const PreparedActivation& aw = prep(prep_x_bf16_, y_.get(), false, T, D, D, L.index_weights_proj);
        {
            OpProfiler::Scope sc(prof_, "indexer.weights_proj gemm");
            lin(aw, L.index_weights_proj, iw_.get(), OutKind::BF16, nI);
        }
        IndexerSelectParams ip;
        ip.batch = batch;
        ip.n_heads = nI;
        ip.head_dim = dI;
        ip.ratio = 4;
        ip.topk = cfg_.index_topk;
        ip.q = iq_.as<bf16>();
        ip.q_stride = int64_t(nI) * dI;
        ip.weights = iw_.as<bf16>();
        ip.weights_stride = nI;
        ip.weights_scale = float(1.0 / std::sqrt(double(dI)) / std::sqrt(double(nI)));
        ip.keys = index_entries(l);
        ip.max_entries = s.max_entries;
        ip.selected = selected_.as<int32_t>();
        OpProfiler::Scope sc2(prof_, "indexer.score + top-k");
        indexer_select(ip, indexer_ws_.get(), indexer_ws_.bytes(), stream_);
    }

    // Sparse attention over window + compressed entries, then the output projection.
    enqueue_sparse_attention(l, s);
    const int G = cfg_.o_groups;
    const int64_t GO = int64_t(G) * cfg_.o_lora_rank;
    const PreparedActivation& ao =
        prep(prep_o_, o_.get(), false, T, int64_t(H) * hd, int64_t(H) * hd, L.wo_a, /*force_exact=*/true);
    {
        OpProfiler::Scope sc(prof_, "attn.wo_a grouped gemm");
        grouped_linear(ao, L.wo_a, G, z_.get(), OutKind::BF16, GO, &gemm_ws_, stream_);
    }
    const PreparedActivation& az = prep(prep_z_, z_.get(), false, T, GO, GO, L.wo_b);
    OpProfiler::Scope sc(prof_, "attn.wo_b gemm");
    lin(az, L.wo_b, sub_out_.get(), OutKind::BF16, D);
}

// Window + compressed candidates; the indexer's selection in CSA layers when some sequence needed scoring, else
// every visible entry (no more than index_topk of them). The inverse RoPE of the output is fused in the kernel.
void CudaBackendImpl::enqueue_sparse_attention(int l, const PassShape& s) {
    const LayerDev& L = layers_[size_t(l)];
    const int H = cfg_.num_attention_heads, hd = cfg_.head_dim;
    SparseAttentionParams p;
    p.batch = token_batch(s);
    p.n_heads = H;
    p.head_dim = hd;
    p.rope_dim = cfg_.qk_rope_head_dim;
    p.softmax_scale = float(1.0 / std::sqrt(double(hd)));
    p.q = q_.as<bf16>();
    p.q_stride = int64_t(H) * hd;
    p.out = o_.as<bf16>();
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
            p.topk = selected_.as<int32_t>();
            p.topk_stride = cfg_.index_topk;
            p.topk_width = cfg_.index_topk;
            compressed = cfg_.index_topk;
        }
    }
    p.max_candidates = cfg_.sliding_window + compressed;
    OpProfiler::Scope sc(prof_, "attn.sparse attention + inverse rope");
    sparse_attention(p, attn_ws_.get(), attn_ws_bytes_, stream_);
}

}  // namespace flashseek::cuda
