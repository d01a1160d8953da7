// CudaBackendImpl: construction (weights bound in checkpoint formats, state pool, buffers), sequence management,
// the step driver (validation, passes of at most max_rows_ rows, metadata upload, CUDA graphs for decode passes
// keyed by their shape), the embedding and the output head. Layer sub-blocks are in layer_attention.cpp and
// layer_moe.cpp; create_cuda_backend is at the end.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cuda/backend/backend_impl.h"
#include "cuda/attention/sparse_attention.cuh"
#include "cuda/backend/glue.cuh"
#include "cuda/compressor/compressor.cuh"
#include "cuda/indexer/indexer.cuh"
#include "cuda/mhc/mhc.cuh"
#include "util/env.h"
#include "loader/safetensors.h"
#include "util/error.h"

namespace flashseek::cuda {

namespace {

const bf16* bf16_ptr(const TensorView& t) { return reinterpret_cast<const bf16*>(t.data); }
const float* f32_ptr(const TensorView& t) { return reinterpret_cast<const float*>(t.data); }

CompressorLinears compressor_linears(const CompressorWeights& c) {
    CompressorLinears out;
    if (!c.present) return out;
    out.present = true;
    out.ratio = c.ratio;
    out.dim = c.dim;
    auto bf16_linear = [](const TensorView& w) {
        Linear l;
        l.format = WeightFormat::BF16;
        l.out = w.shape.at(0);
        l.in = w.shape.at(1);
        l.weight = w;
        return to_device_linear(l);
    };
    out.wkv = bf16_linear(c.wkv);
    out.wgate = bf16_linear(c.wgate);
    out.ape = f32_ptr(c.ape);
    out.norm = bf16_ptr(c.norm);
    return out;
}

}  // namespace

DeviceLinear to_device_linear(const Linear& l) {
    DeviceLinear d;
    d.out = l.out;
    d.in = l.in;
    d.weight = l.weight.data;
    switch (l.format) {
        case WeightFormat::BF16: d.kind = WeightKind::BF16; break;
        case WeightFormat::FP8_BLOCK128: d.kind = WeightKind::FP8_BLOCK128; break;
        case WeightFormat::FP4_BLOCK32: d.kind = WeightKind::FP4_BLOCK32; break;
        case WeightFormat::F32: fail("CUDA backend: F32 weight {} is not supported by the GPU linear", l.weight.name);
    }
    if (d.kind != WeightKind::BF16) {
        d.scale = l.scale.data;
        d.scale_kind = l.scale.dtype == DType::F32 ? ScaleKind::F32 : ScaleKind::E8M0;
    }
    return d;
}

void PrepBuffer::allocate(int64_t max_rows, int64_t max_k) {
    values.allocate(prepared_values_bytes(max_rows, max_k), "prepared activations");
    scales.allocate(prepared_scales_bytes(max_rows, max_k), "prepared activation scales");
    act.values = values.as<uint16_t>();
    act.scales = scales.as<float>();
}

CudaBackendImpl::CudaBackendImpl(const ModelConfig& cfg, const BackendOptions& opt, DeviceTensorStore store)
    : cfg_(cfg), opt_(opt), facts_(query_device()), store_(std::move(store)) {
    const int L = cfg_.num_hidden_layers;
    weights_ = bind_device_weights(cfg_, store_, L);
    const bool release = opt.numerics == Numerics::Release;
    act_numerics_ = release ? ActNumerics::FP8_BLOCK128 : ActNumerics::EXACT;
    kv_format_ = release ? KvFormat::FP8 : KvFormat::BF16;
    index_format_ = release ? IndexFormat::FP4 : IndexFormat::BF16;
    quant_sim_ = release;

    embed_ = bf16_ptr(weights_.embed);
    final_norm_ = bf16_ptr(weights_.norm);
    {
        Linear h;
        h.format = WeightFormat::BF16;
        h.out = weights_.head.shape.at(0);
        h.in = weights_.head.shape.at(1);
        h.weight = weights_.head;
        FS_CHECK(weights_.head.dtype == DType::BF16, "CUDA backend: head.weight must be BF16, got {}",
                 dtype_name(weights_.head.dtype));
        head_ = to_device_linear(h);
    }
    hc_head_fn_ = f32_ptr(weights_.hc_head.fn);
    hc_head_base_ = f32_ptr(weights_.hc_head.base);
    hc_head_scale_ = f32_ptr(weights_.hc_head.scale);
    layers_.resize(size_t(L));
    for (int l = 0; l < L; ++l) {
        const LayerWeights& w = weights_.layers[size_t(l)];
        LayerDev& d = layers_[size_t(l)];
        d.ratio = w.ratio;
        d.hash = cfg_.is_hash_layer(l);
        d.rope = make_rope_table(cfg_, w.ratio);
        d.attn_norm = bf16_ptr(w.attn_norm);
        d.ffn_norm = bf16_ptr(w.ffn_norm);
        d.hc_attn_fn = f32_ptr(w.hc_attn.fn);
        d.hc_attn_base = f32_ptr(w.hc_attn.base);
        d.hc_attn_scale = f32_ptr(w.hc_attn.scale);
        d.hc_ffn_fn = f32_ptr(w.hc_ffn.fn);
        d.hc_ffn_base = f32_ptr(w.hc_ffn.base);
        d.hc_ffn_scale = f32_ptr(w.hc_ffn.scale);
        d.wq_a = to_device_linear(w.attn.wq_a);
        d.wq_b = to_device_linear(w.attn.wq_b);
        d.wkv = to_device_linear(w.attn.wkv);
        d.wo_a = to_device_linear(w.attn.wo_a);
        d.wo_b = to_device_linear(w.attn.wo_b);
        d.q_norm = bf16_ptr(w.attn.q_norm);
        d.kv_norm = bf16_ptr(w.attn.kv_norm);
        d.attn_sink = f32_ptr(w.attn.attn_sink);
        d.compressor = compressor_linears(w.attn.compressor);
        if (w.attn.indexer.present) {
            d.index_compressor = compressor_linears(w.attn.indexer.compressor);
            d.index_wq_b = to_device_linear(w.attn.indexer.wq_b);
            Linear wp;
            wp.format = WeightFormat::BF16;
            wp.out = w.attn.indexer.weights_proj.shape.at(0);
            wp.in = w.attn.indexer.weights_proj.shape.at(1);
            wp.weight = w.attn.indexer.weights_proj;
            d.index_weights_proj = to_device_linear(wp);
        }
        Linear g;
        g.format = WeightFormat::BF16;
        g.out = w.ffn.gate_weight.shape.at(0);
        g.in = w.ffn.gate_weight.shape.at(1);
        g.weight = w.ffn.gate_weight;
        d.gate = to_device_linear(g);
        d.gate_bias = w.ffn.gate_bias.empty() ? nullptr : f32_ptr(w.ffn.gate_bias);
        d.tid2eid = w.ffn.tid2eid.empty() ? nullptr : reinterpret_cast<const int64_t*>(w.ffn.tid2eid.data);
        for (const ExpertWeights& e : w.ffn.experts) {
            d.w1.push_back(to_device_linear(e.w1));
            d.w2.push_back(to_device_linear(e.w2));
            d.w3.push_back(to_device_linear(e.w3));
        }
        d.shared_w1 = to_device_linear(w.ffn.shared.w1);
        d.shared_w2 = to_device_linear(w.ffn.shared.w2);
        d.shared_w3 = to_device_linear(w.ffn.shared.w3);
    }

    // State pool: window rings hold window + one prefill chunk, so a whole chunk is written before attention.
    chunk_tokens_ = 128;
    StateGeometry g;
    g.block_tokens = 256;
    g.ring_entries = cfg_.sliding_window + chunk_tokens_;
    g.kv_entry_bytes = kv_entry_bytes(kv_format_, cfg_.head_dim, cfg_.qk_rope_head_dim);
    for (int l = 0; l < L; ++l) {
        LayerStateGeometry lg;
        lg.ratio = layers_[size_t(l)].ratio;
        if (lg.ratio > 0) {
            lg.comp_entry_bytes = g.kv_entry_bytes;
            lg.compressor_state_bytes = compressor_state_bytes(lg.ratio, cfg_.head_dim);
        }
        if (lg.ratio == 4) {
            lg.index_key_bytes = index_entry_bytes(index_format_, cfg_.index_head_dim);
            lg.index_compressor_state_bytes = compressor_state_bytes(4, cfg_.index_head_dim);
        }
        g.layers.push_back(lg);
    }
    const int64_t max_ctx = opt.max_context > 0 ? opt.max_context : std::min<int64_t>(cfg_.max_position_embeddings, 1 << 20);
    size_t free_b = 0, total_b = 0;
    FS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    const int64_t pool_bytes = opt.state_memory_bytes > 0 ? opt.state_memory_bytes
                                                          : int64_t(double(free_b) * 0.5);  // half of what is left
    pool_ = std::make_unique<StatePool>(g, std::max(1, opt.max_sequences), max_ctx, pool_bytes);

    // Buffers for passes of up to max_rows_ rows (a prefill chunk or the largest decode bucket).
    FS_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ws_ = create_gemm_workspace();
    kv_side_.create();
    index_side_.create();
    aux_side_.create();
    branches_ = env_switch_on("FLASHSEEK_BRANCHES");
    int bucket = 1;
    while (bucket < pool_->max_sequences()) bucket *= 2;
    max_rows_ = std::max(chunk_tokens_, bucket);
    const int64_t T = max_rows_, D = cfg_.hidden_size, N = cfg_.hc_mult, H = cfg_.num_attention_heads,
                  hd = cfg_.head_dim, QL = cfg_.q_lora_rank, GO = int64_t(cfg_.o_groups) * cfg_.o_lora_rank,
                  V = cfg_.vocab_size, nI = cfg_.index_n_heads, dI = cfg_.index_head_dim;
    meta_.capacity = int(T);
    meta_dev_.allocate(size_t(StepMeta::kCount) * size_t(T) * sizeof(int32_t), "step metadata");
    meta_.dev = meta_dev_.as<int32_t>();
    FS_CUDA_TRY(cudaMallocHost(&meta_.host, meta_dev_.bytes()));
    std::memset(meta_.host, 0, meta_dev_.bytes());
    X_.allocate(size_t(T * N * D) * 2, "residual streams");
    Xh_.allocate(size_t(T * N * D) * 2, "head streams");
    y_.allocate(size_t(T * D) * 2, "sub-block input");
    // Zeroed once: BF16 linears read y_ in place (prep), including the rows up to the next multiple of 8 past a
    // pass's rows, whose outputs are discarded; those rows then hold zeros or earlier finite values, never garbage.
    FS_CUDA_TRY(cudaMemset(y_.get(), 0, y_.bytes()));
    {
        const std::vector<float> ones(size_t(T) * size_t((D + 127) / 128), 1.f);
        ones_.allocate(ones.size() * 4, "unit activation scales");
        FS_CUDA_TRY(cudaMemcpy(ones_.get(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    }
    post_.allocate(size_t(T * N) * 4, "mHC post");
    comb_.allocate(size_t(T * N * N) * 4, "mHC comb");
    mhc_ws_bytes_ = std::max(mhc_pre_workspace_bytes(int(T), int(N), int(D), false),
                             mhc_pre_workspace_bytes(int(T), int(N), int(D), true));
    mhc_ws_.allocate(mhc_ws_bytes_, "mHC workspace");
    qr_.allocate(size_t(T * QL) * 2, "q latent");
    q_.allocate(size_t(T * H * hd) * 2, "queries");
    kv_.allocate(size_t(T * hd) * 2, "window kv");
    o_.allocate(size_t(T * H * hd) * 2, "attention output");
    z_.allocate(size_t(T * GO) * 2, "wo_a output");
    sub_out_.allocate(size_t(T * D) * 2, "sub-block output");
    ca_.allocate(size_t(T * 2 * hd) * 4, "compressor kv");
    cz_.allocate(size_t(T * 2 * hd) * 4, "compressor gate");
    ica_.allocate(size_t(T * 2 * dI) * 4, "indexer compressor kv");
    icz_.allocate(size_t(T * 2 * dI) * 4, "indexer compressor gate");
    iq_.allocate(size_t(T * nI * dI) * 2, "indexer queries");
    iw_.allocate(size_t(T * nI) * 4, "indexer head weights");
    logits_.allocate(size_t(T * V) * 4, "logits");
    argmax_.allocate(size_t(T) * 4, "argmax");
    FS_CUDA_TRY(cudaMallocHost(&logits_host_, size_t(T * V) * 4));
    FS_CUDA_TRY(cudaMallocHost(&argmax_host_, size_t(T) * 4));
    sample_params_.allocate(size_t(T) * sizeof(DeviceSampleParams), "sampling parameters");
    sample_logprob_.allocate(size_t(T) * 4, "sampled logprobs");
    FS_CUDA_TRY(cudaMallocHost(&sample_params_host_, size_t(T) * sizeof(DeviceSampleParams)));
    FS_CUDA_TRY(cudaMallocHost(&sample_logprob_host_, size_t(T) * 4));
    prep_x_.allocate(T, D);
    prep_x_bf16_.allocate(T, D);
    prep_qr_.allocate(T, QL);
    prep_o_.allocate(T, H * hd);
    prep_z_.allocate(T, GO);
    prep_kv_.allocate(T, D);
    prep_index_x_.allocate(T, D);
    selected_.allocate(size_t(T) * size_t(cfg_.index_topk) * 4, "indexer selection");
    const int64_t max_entries_all = std::max<int64_t>(1, pool_->max_context() / 4);
    int64_t e2 = 1;
    while (e2 < max_entries_all) e2 *= 2;
    indexer_ws_.allocate(std::max<size_t>(indexer_select_workspace_bytes(int(T), int(e2)), 256), "indexer workspace");
    int64_t ctx2 = 1;
    while (ctx2 < pool_->max_context()) ctx2 *= 2;
    const int max_cand = cfg_.sliding_window + int(std::max<int64_t>(cfg_.index_topk, ctx2 / 128 + 1));
    attn_ws_bytes_ = std::max<size_t>(sparse_attention_workspace_bytes(int(T), int(H), int(hd), max_cand), 256);
    attn_ws_.allocate(attn_ws_bytes_, "attention workspace");
    init_moe_buffers();
    init_byte_counts();
}

CudaBackendImpl::~CudaBackendImpl() {
    for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g);
    destroy_gemm_workspace(gemm_ws_);
    kv_side_.destroy();
    index_side_.destroy();
    aux_side_.destroy();
    if (meta_.host) cudaFreeHost(meta_.host);
    if (logits_host_) cudaFreeHost(logits_host_);
    if (argmax_host_) cudaFreeHost(argmax_host_);
    if (sample_params_host_) cudaFreeHost(sample_params_host_);
    if (sample_logprob_host_) cudaFreeHost(sample_logprob_host_);
    if (stream_) cudaStreamDestroy(stream_);
}

int CudaBackendImpl::create_sequence() {
    const int slot = pool_->create();
    pool_->clear_slot_state(slot, stream_);
    return slot;
}

void CudaBackendImpl::free_sequence(int seq_id) { pool_->release(seq_id); }

int64_t CudaBackendImpl::sequence_length(int seq_id) const {
    FS_CHECK(pool_->live(seq_id), "sequence {} is not live", seq_id);
    return pool_->length(seq_id);
}

void CudaBackendImpl::validate(std::span<const SequenceStep> steps) const {
    std::vector<char> seen(size_t(pool_->max_sequences()), 0);
    for (size_t i = 0; i < steps.size(); ++i) {
        const SequenceStep& s = steps[i];
        FS_CHECK(pool_->live(s.seq_id), "step {}: sequence {} is not live", i, s.seq_id);
        FS_CHECK(!seen[size_t(s.seq_id)], "step {}: sequence {} appears twice in one step", i, s.seq_id);
        seen[size_t(s.seq_id)] = 1;
        FS_CHECK(s.n_tokens > 0, "step {}: n_tokens must be > 0, got {}", i, s.n_tokens);
        FS_CHECK(s.tokens != nullptr, "step {}: tokens is null", i);
        for (int t = 0; t < s.n_tokens; ++t)
            FS_CHECK(s.tokens[t] >= 0 && s.tokens[t] < cfg_.vocab_size,
                     "step {}: token id {} at index {} is outside the vocabulary [0, {})", i, s.tokens[t], t,
                     cfg_.vocab_size);
    }
}

namespace {
int64_t round_up8(int64_t v) { return (v + 7) / 8 * 8; }  // PreparedActivation::m_pad
}  // namespace

const PreparedActivation& CudaBackendImpl::prep(PrepBuffer& buf, const void* x, bool x_f32, int rows, int64_t K,
                                                int64_t ld, const DeviceLinear& w, bool force_exact, bool allow_raw,
                                                const Lane* lane) {
    const ActNumerics num = (w.kind == WeightKind::BF16 || force_exact) ? ActNumerics::EXACT : act_numerics_;
    // Small-M GEMV consumers can take the raw bf16 rows and prepare them while staging (bit-identical, no launch).
    // Off: measured slower on the H200 (docs/perf.md, run C: every 16-row CTA re-quantizes its whole K range, e.g.
    // wo_b at C=1 28 -> 84 us per call), and M = 1 linears use the SIMT GEMV, which needs a prepared activation.
    // Not for the grouped wo_a (force_exact) either: its GEMV eligibility also depends on the group size.
    constexpr bool kRawActivations = false;
    const bool raw = kRawActivations && allow_raw && !x_f32 && !force_exact && w.kind != WeightKind::BF16 && ld % 8 == 0 &&
                     (reinterpret_cast<uintptr_t>(x) & 15) == 0 && linear_takes_raw(rows, w);
    if (buf.generation == prep_generation_ && buf.src == x && buf.rows == rows && buf.act.k == K &&
        buf.layout == w.kind && buf.numerics == num && buf.act.raw == raw)
        return buf.act;  // the same input already prepared for this format in this sub-block
    if (w.kind == WeightKind::BF16 && x == y_.get() && !x_f32 && ld == K && K % 128 == 0 &&
        size_t(round_up8(rows)) * size_t(K / 128) * 4 <= ones_.bytes()) {
        // BF16 weights take bf16 rows as they are (the prepared form is the same bytes with scale 1): read y_ in
        // place instead of copying it (no launch). Its padding rows are finite (zeroed at allocation).
        uint16_t* in_place = static_cast<uint16_t*>(const_cast<void*>(x));
        adopt_prepared(buf, x, rows, K, WeightKind::BF16, ActNumerics::EXACT, in_place, ones_.as<float>());
        return buf.act;
    }
    buf.act.values = buf.values.as<uint16_t>();  // a raw descriptor may have pointed them at the input
    buf.act.scales = buf.scales.as<float>();
    buf.act.raw = false;
    if (raw) {
        buf.act = raw_activation(x, rows, K, ld, w.kind, num);
    } else {
        prof_.begin("prepare activation");
        prepare_activation(x, x_f32, rows, K, ld, w.kind, num, buf.act, lane ? lane->stream : stream_);
        prof_.end();
    }
    buf.generation = prep_generation_;
    buf.src = x;
    buf.rows = rows;
    buf.layout = w.kind;
    buf.numerics = num;
    return buf.act;
}

PrepBuffer* CudaBackendImpl::fused_prep_target(const LayerDev& L, int sub, WeightKind& kind) {
    const DeviceLinear& w = sub == 0 ? L.wq_a : L.w1[0];
    if (w.kind != WeightKind::FP8_BLOCK128 && w.kind != WeightKind::FP4_BLOCK32) return nullptr;
    kind = w.kind;
    return sub == 0 ? &prep_x_ : &prep_x_expert_;
}

void CudaBackendImpl::adopt_prepared(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind,
                                     ActNumerics numerics, uint16_t* values, float* scales) {
    describe_prepared(buf.act, kind, numerics, rows, K);
    buf.act.values = values ? values : buf.values.as<uint16_t>();
    buf.act.scales = scales ? scales : buf.scales.as<float>();
    buf.generation = prep_generation_;
    buf.src = src;
    buf.rows = rows;
    buf.layout = kind;
    buf.numerics = numerics;
}

void CudaBackendImpl::lin(const PreparedActivation& x, const DeviceLinear& w, void* y, OutKind kind, int64_t ld,
                          const Lane* lane) {
    const Lane l = lane ? *lane : main_lane();
    linear(x, w, y, kind, ld, l.ws, l.stream);
}

TokenBatch CudaBackendImpl::token_batch(const PassShape& s) const {
    TokenBatch b;
    b.n_seqs = s.n_seqs;
    b.n_tokens = s.n_rows;
    b.max_seq_tokens = s.max_seq_tokens;
    b.seq_slot = meta_.d(StepMeta::kSeqSlot);
    b.seq_first_row = meta_.d(StepMeta::kSeqFirstRow);
    b.seq_n_tokens = meta_.d(StepMeta::kSeqNTokens);
    b.seq_start_pos = meta_.d(StepMeta::kSeqStartPos);
    b.token_seq = meta_.d(StepMeta::kTokenSeq);
    b.token_pos = meta_.d(StepMeta::kTokenPos);
    return b;
}

RingView CudaBackendImpl::ring_view(int l) const {
    RingView r;
    r.base = pool_->ring(l);
    r.slot_stride = pool_->ring_slot_stride();
    r.ring_entries = pool_->geometry().ring_entries;
    r.entry_bytes = int32_t(pool_->geometry().kv_entry_bytes);
    r.format = kv_format_;
    r.fp8_sim = quant_sim_;
    return r;
}

PagedEntries CudaBackendImpl::comp_entries(int l) const {
    PagedEntries p;
    p.base = pool_->blocks();
    p.block_bytes = pool_->block_bytes();
    p.offset = pool_->comp_offset(l);
    p.entries_per_block = int32_t(pool_->entries_per_block(l));
    p.entry_bytes = int32_t(pool_->geometry().layers[size_t(l)].comp_entry_bytes);
    p.block_tables = pool_->device_block_tables();
    p.table_stride = int32_t(pool_->max_blocks_per_seq());
    p.format = int32_t(kv_format_);
    return p;
}

PagedEntries CudaBackendImpl::index_entries(int l) const {
    PagedEntries p = comp_entries(l);
    p.offset = pool_->index_offset(l);
    p.entry_bytes = int32_t(pool_->geometry().layers[size_t(l)].index_key_bytes);
    p.format = int32_t(index_format_);
    return p;
}

void CudaBackendImpl::enqueue_pass(const PassShape& s) {
    const int N = cfg_.hc_mult;
    const int64_t D = cfg_.hidden_size;
    // A pass that threw mid-branch (its capture was discarded) left them open.
    kv_side_.open = index_side_.open = aux_side_.open = false;
    {
        OpProfiler::Scope sc(prof_, "embedding");
        embed_streams(embed_, cfg_.vocab_size, meta_.d(StepMeta::kTokens), s.n_rows, N, D, X_.as<bf16>(), stream_);
    }
    // A sub-block's mhc_post runs inside the next sub-block's mhc_pre where the shapes allow (one launch fewer per
    // sub-block on the critical path); the last one, before the head's row gather, runs on its own.
    static const bool fuse_allowed = env_switch_on("FLASHSEEK_FUSED_POST");  // 0: separate mhc_post (A/B)
    const bool fuse_post = fuse_allowed && mhc_pre_fuses_post(N, int(D));
    int post_pending = -1;  // the sub-block (0 attention, 1 MoE) whose mhc_post the next mhc_pre runs, or -1
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
        const LayerDev& L = layers_[size_t(l)];
        for (int sub = 0; sub < 2; ++sub) {
            MhcPreParams p;
            p.n_tokens = s.n_rows;
            p.n_streams = N;
            p.dim = int(D);
            p.x = X_.as<bf16>();
            p.fn = sub == 0 ? L.hc_attn_fn : L.hc_ffn_fn;
            p.base = sub == 0 ? L.hc_attn_base : L.hc_ffn_base;
            p.scale = sub == 0 ? L.hc_attn_scale : L.hc_ffn_scale;
            p.rms_eps = float(cfg_.rms_norm_eps);
            p.hc_eps = float(cfg_.hc_eps);
            p.sinkhorn_iters = cfg_.hc_sinkhorn_iters;
            p.norm_weight = sub == 0 ? L.attn_norm : L.ffn_norm;
            p.norm_eps = float(cfg_.rms_norm_eps);
            p.y = y_.as<bf16>();
            p.post = post_.as<float>();
            p.comb = comb_.as<float>();
            if (post_pending >= 0) {
                if (post_pending == 1) {  // the MoE sub-block's combine runs here too
                    p.prev_y_routed = y_routed_.as<float>();
                    p.prev_pair_slot = grouping_.pair_slot;
                    p.prev_y_shared = y_shared_.as<float>();
                    p.prev_top_k = cfg_.num_experts_per_tok;
                    p.prev_round_terms = act_numerics_ == ActNumerics::FP8_BLOCK128;
                } else {
                    p.prev_o = sub_out_.as<bf16>();
                }
                p.prev_post = post_.as<float>();
                p.prev_comb = comb_.as<float>();
                post_pending = -1;
            }
            // The norm also writes y_ prepared for the sub-block's first FP8 / FP4 linear (one launch fewer).
            WeightKind kind = WeightKind::BF16;
            PrepBuffer* fused = fused_prep_target(L, sub, kind);
            if (fused) {
                p.prepared_values = fused->values.as<uint16_t>();
                p.prepared_scales = fused->scales.as<float>();
                p.prepared_layout = int(kind);
                p.prepared_numerics = int(act_numerics_);
            }
            {
                OpProfiler::Scope sc(prof_, p.prev_y_routed ? "moe.combine + mhc_post + mhc_pre + norm"
                                                : (p.prev_o ? "mhc_post + mhc_pre + norm" : "mhc_pre + norm"));
                mhc_pre(p, mhc_ws_.get(), mhc_ws_bytes_, stream_);
            }
            ++prep_generation_;  // y_ was rewritten: earlier prepared activations are stale
            if (fused) adopt_prepared(*fused, y_.get(), s.n_rows, D, kind, act_numerics_);
            const bool defer_post = fuse_post && !(l + 1 == cfg_.num_hidden_layers && sub == 1);
            if (sub == 0)
                enqueue_attention(l, s);
            else
                enqueue_moe(l, s, /*combine=*/!defer_post);
            if (defer_post) {
                post_pending = sub;
                continue;
            }
            OpProfiler::Scope sc(prof_, "mhc_post");
            mhc_post(s.n_rows, N, int(D), X_.as<bf16>(), sub_out_.as<bf16>(), post_.as<float>(), comb_.as<float>(),
                     X_.as<bf16>(), stream_);
        }
    }
    enqueue_head(s);
}

void CudaBackendImpl::enqueue_head(const PassShape& s) {
    if (s.n_head_rows == 0) return;  // a prefill chunk that is not the last one needs no logits
    const int N = cfg_.hc_mult;
    const int64_t D = cfg_.hidden_size;
    {
        OpProfiler::Scope sc(prof_, "head gather");
        gather_rows(X_.as<bf16>(), meta_.d(StepMeta::kHeadRows), s.n_head_rows, N * D, Xh_.as<bf16>(), stream_);
    }
    MhcPreParams p;
    p.n_tokens = s.n_head_rows;
    p.n_streams = N;
    p.dim = int(D);
    p.head_mode = true;
    p.x = Xh_.as<bf16>();
    p.fn = hc_head_fn_;
    p.base = hc_head_base_;
    p.scale = hc_head_scale_;
    p.rms_eps = float(cfg_.rms_norm_eps);
    p.hc_eps = float(cfg_.hc_eps);
    p.norm_weight = final_norm_;
    p.norm_eps = float(cfg_.rms_norm_eps);
    p.y = y_.as<bf16>();
    {
        OpProfiler::Scope sc(prof_, "hc_head + norm");
        mhc_pre(p, mhc_ws_.get(), mhc_ws_bytes_, stream_);
    }
    ++prep_generation_;
    const PreparedActivation& a = prep(prep_x_bf16_, y_.get(), false, s.n_head_rows, D, D, head_);
    OpProfiler::Scope sc(prof_, "head gemm");
    lin(a, head_, logits_.get(), OutKind::F32, cfg_.vocab_size);
}

void CudaBackendImpl::launch_pass(const PassShape& s, bool graph_ok) {
    FS_CUDA_TRY(cudaMemcpyAsync(meta_.dev, meta_.host, meta_dev_.bytes(), cudaMemcpyHostToDevice, stream_));
    pool_->upload_tables(stream_);
    if (!graph_ok || !use_graphs_ || profiling_) {
        enqueue_pass(s);
        return;
    }
    auto it = graphs_.find(s);
    if (it == graphs_.end()) {
        // First time this shape is seen: run eagerly (lazy initializations happen outside capture), then capture.
        if (seen_[s]++ == 0) {
            enqueue_pass(s);
            return;
        }
        if (no_graph_.count(s)) {
            enqueue_pass(s);
            return;
        }
        // A capture that fails (an op that synchronizes or allocates) leaves this shape eager, with a warning:
        // graphs are an optimization, never a reason to fail a step.
        cudaGraph_t graph = nullptr;
        FS_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
        std::string why;
        try {
            enqueue_pass(s);
        } catch (const std::exception& e) {
            why = e.what();
        }
        const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
        cudaGraphExec_t exec = nullptr;
        if (why.empty() && end == cudaSuccess && graph) {
            const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
            if (inst != cudaSuccess) why = std::string("instantiate: ") + cudaGetErrorString(inst);
        } else if (why.empty()) {
            why = std::string("end capture: ") + cudaGetErrorString(end);
        }
        if (graph) cudaGraphDestroy(graph);
        if (!why.empty()) {
            cudaGetLastError();
            no_graph_.insert(s);
            std::fprintf(stderr, "flashseek cuda: decode pass of %d rows runs without a CUDA graph (%s)\n", s.n_rows,
                         why.c_str());
            enqueue_pass(s);
            return;
        }
        it = graphs_.emplace(s, exec).first;
    }
    FS_CUDA_TRY(cudaGraphLaunch(it->second, stream_));
}

void CudaBackendImpl::run_steps(std::span<const SequenceStep> steps, Output out, std::vector<float>* logits,
                                std::vector<int32_t>* tokens, std::span<const SampleParams> sample_params,
                                std::vector<float>* logprobs) {
    validate(steps);
    // Reserve every block the step needs first: OutOfStateMemory leaves all state unchanged.
    std::vector<std::pair<int, int64_t>> req;
    for (const auto& s : steps) req.emplace_back(s.seq_id, pool_->length(s.seq_id) + s.n_tokens);
    pool_->reserve_all(req);

    const int64_t V = cfg_.vocab_size;
    int64_t total_rows = 0;
    for (const auto& s : steps) total_rows += s.all_logits ? s.n_tokens : 1;
    if (logits) logits->resize(size_t(total_rows * V));
    if (tokens) tokens->assign(steps.size(), -1);
    if (logprobs) logprobs->assign(steps.size(), 0.f);
    FS_CHECK(out != Output::Sample || (sample_params.size() == steps.size() && tokens && logprobs),
             "CUDA backend: sampling needs one parameter set per step entry ({} for {})", sample_params.size(),
             steps.size());

    // Progress per entry: tokens consumed so far in this step.
    std::vector<int> done(steps.size(), 0);
    std::vector<int64_t> out_row(steps.size());
    {
        int64_t r = 0;
        for (size_t i = 0; i < steps.size(); ++i) {
            out_row[i] = r;
            r += steps[i].all_logits ? steps[i].n_tokens : 1;
        }
    }
    size_t next = 0;
    while (true) {
        // Build one pass: entries in order, each contributing min(remaining, chunk) tokens, up to max_rows_ rows.
        struct Part { size_t entry; int first, n; };
        std::vector<Part> parts;
        int rows = 0;
        bool all_single = true;
        for (size_t k = 0; k < steps.size() && rows < max_rows_; ++k) {
            const size_t i = (next + k) % steps.size();
            const int rem = steps[i].n_tokens - done[i];
            if (rem <= 0) continue;
            const int n = std::min({rem, chunk_tokens_, max_rows_ - rows});
            parts.push_back({i, done[i], n});
            rows += n;
            if (steps[i].n_tokens != 1) all_single = false;
        }
        if (parts.empty()) break;
        next = (parts.back().entry + 1) % steps.size();
        // Decode passes are padded to a power-of-two bucket (padding rows use the padding slot) for graph reuse.
        int n_seqs = int(parts.size());
        int n_rows = rows;
        if (all_single) {
            int bucket = 1;
            while (bucket < rows) bucket *= 2;
            n_rows = n_seqs = std::min(bucket, max_rows_);
        }
        PassShape shape;
        shape.n_rows = n_rows;
        shape.n_seqs = n_seqs;
        shape.need_indexer = false;
        int row = 0, head_rows = 0, max_seq_tokens = 1;
        struct HeadDst { size_t entry; int64_t dst_row; };
        std::vector<HeadDst> head_dst;
        for (size_t pi = 0; pi < size_t(n_seqs); ++pi) {
            const bool pad = pi >= parts.size();
            const int slot = pad ? pool_->padding_slot() : steps[parts[pi].entry].seq_id;
            const int n = pad ? 1 : parts[pi].n;
            const int64_t start = pad ? 0 : pool_->length(slot);
            meta_.h(StepMeta::kSeqSlot)[pi] = slot;
            meta_.h(StepMeta::kSeqFirstRow)[pi] = row;
            meta_.h(StepMeta::kSeqNTokens)[pi] = n;
            meta_.h(StepMeta::kSeqStartPos)[pi] = int32_t(start);
            max_seq_tokens = std::max(max_seq_tokens, n);
            if ((start + n) / 4 > cfg_.index_topk) shape.need_indexer = true;
            while (shape.max_entries < (start + n) / 4) shape.max_entries *= 2;
            while (shape.max_context < start + n) shape.max_context *= 2;
            for (int t = 0; t < n; ++t) {
                meta_.h(StepMeta::kTokens)[row + t] = pad ? 0 : steps[parts[pi].entry].tokens[parts[pi].first + t];
                meta_.h(StepMeta::kTokenSeq)[row + t] = int32_t(pi);
                meta_.h(StepMeta::kTokenPos)[row + t] = int32_t(start + t);
            }
            if (!pad) {
                const SequenceStep& st = steps[parts[pi].entry];
                const bool last_chunk = parts[pi].first + n == st.n_tokens;
                if (st.all_logits) {
                    for (int t = 0; t < n; ++t) {
                        meta_.h(StepMeta::kHeadRows)[head_rows++] = row + t;
                        head_dst.push_back({parts[pi].entry, out_row[parts[pi].entry] + parts[pi].first + t});
                    }
                } else if (last_chunk) {
                    meta_.h(StepMeta::kHeadRows)[head_rows++] = row + n - 1;
                    head_dst.push_back({parts[pi].entry, out_row[parts[pi].entry]});
                }
            } else {
                meta_.h(StepMeta::kHeadRows)[head_rows++] = row;  // keeps the head's shape fixed per bucket
            }
            row += n;
        }
        shape.n_head_rows = head_rows;
        shape.max_seq_tokens = max_seq_tokens;
        launch_pass(shape, all_single);
        if (profiling_) account_bytes(shape);
        // Outputs of the rows that need them.
        if (!head_dst.empty()) {
            if (out == Output::Logits) {
                FS_CUDA_TRY(cudaMemcpyAsync(logits_host_, logits_.get(), size_t(head_rows) * size_t(V) * 4,
                                            cudaMemcpyDeviceToHost, stream_));
            } else if (out == Output::Argmax) {
                argmax_rows(logits_.as<float>(), head_rows, V, argmax_.as<int32_t>(), stream_);
                FS_CUDA_TRY(cudaMemcpyAsync(argmax_host_, argmax_.get(), size_t(head_rows) * 4, cudaMemcpyDeviceToHost,
                                            stream_));
            } else {
                // Head rows past head_dst are padding rows of a decode bucket: sampled greedily, results unused.
                std::vector<const SampleParams*> row_params(size_t(head_rows), nullptr);
                for (int h = 0; h < head_rows; ++h) {
                    DeviceSampleParams d;
                    if (size_t(h) < head_dst.size()) {
                        const SampleParams& sp = sample_params[head_dst[size_t(h)].entry];
                        row_params[size_t(h)] = &sp;
                        d.temperature = sp.temperature;
                        d.top_p = sp.top_p;
                        d.top_k = sp.top_k;
                        d.min_p = sp.min_p;
                        d.seed = sp.seed;
                        d.draw_index = sp.draw_index;
                    }
                    sample_params_host_[h] = d;
                }
                FS_CUDA_TRY(cudaMemcpyAsync(sample_params_.get(), sample_params_host_,
                                            size_t(head_rows) * sizeof(DeviceSampleParams), cudaMemcpyHostToDevice,
                                            stream_));
                // Masks and penalties: the pass above runs on the device while prepare() waits for the masks.
                const bool adjusted = sample_adjust_.prepare(row_params, V);
                const float* raw = logits_.as<float>();
                sample_rows(adjusted ? sample_adjust_.apply(raw, V, stream_) : raw, head_rows, V, V,
                            sample_params_.as<DeviceSampleParams>(), argmax_.as<int32_t>(), sample_logprob_.as<float>(),
                            stream_, adjusted ? raw : nullptr, V);
                FS_CUDA_TRY(cudaMemcpyAsync(argmax_host_, argmax_.get(), size_t(head_rows) * 4, cudaMemcpyDeviceToHost,
                                            stream_));
                FS_CUDA_TRY(cudaMemcpyAsync(sample_logprob_host_, sample_logprob_.get(), size_t(head_rows) * 4,
                                            cudaMemcpyDeviceToHost, stream_));
            }
        }
        FS_CUDA_TRY(cudaStreamSynchronize(stream_));
        for (size_t h = 0; h < head_dst.size(); ++h) {
            if (out == Output::Logits) {
                std::memcpy(logits->data() + head_dst[h].dst_row * V, logits_host_ + int64_t(h) * V, size_t(V) * 4);
            } else {
                (*tokens)[head_dst[h].entry] = argmax_host_[h];
                if (out == Output::Sample) (*logprobs)[head_dst[h].entry] = sample_logprob_host_[h];
            }
        }
        for (const Part& p : parts) {
            done[p.entry] += p.n;
            pool_->set_length(steps[p.entry].seq_id, pool_->length(steps[p.entry].seq_id) + p.n);
        }
    }
}

void CudaBackendImpl::forward(std::span<const SequenceStep> steps, std::vector<float>& logits) {
    run_steps(steps, Output::Logits, &logits, nullptr);
}

void CudaBackendImpl::forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                                    std::vector<SampleResult>& out) {
    FS_CHECK(steps.size() == params.size(), "forward_sample: {} steps but {} sample parameter sets", steps.size(),
             params.size());
    // Top logprobs and scored prompt tokens need whole rows on the host: the host sampler does everything then.
    if (std::any_of(params.begin(), params.end(),
                    [](const SampleParams& p) { return p.n_logprobs > 0 || !p.score_targets.empty(); }))
        return Backend::forward_sample(steps, params, out);
    struct WaitOnExit {  // a mask still being filled must be finished before the caller may release it
        std::span<const SampleParams> params;
        ~WaitOnExit() { wait_for_allowed_tokens(params); }
    } wait_on_exit{params};
    for (size_t i = 0; i < params.size(); ++i) {
        const SampleParams& p = params[i];
        FS_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.f,
                 "forward_sample: entry {}: temperature {} is not a finite value >= 0", i, p.temperature);
        FS_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "forward_sample: entry {}: top_p {} is outside (0, 1]", i,
                 p.top_p);
        FS_CHECK(p.top_k >= 0, "forward_sample: entry {}: top_k {} is negative", i, p.top_k);
        FS_CHECK(p.min_p >= 0.f && p.min_p <= 1.f, "forward_sample: entry {}: min_p {} is outside [0, 1]", i, p.min_p);
        FS_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.f,
                 "forward_sample: entry {}: repetition_penalty {} is not > 0", i, p.repetition_penalty);
    }
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    run_steps(steps, Output::Sample, nullptr, &tokens, params, &logprobs);
    out.assign(steps.size(), SampleResult{});
    for (size_t i = 0; i < steps.size(); ++i) {
        FS_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size,
                 "CUDA sampler returned token {} for entry {} (-1: invalid parameters, or the mask and banned tokens "
                 "exclude every token)", tokens[i], i);
        out[i].token = tokens[i];
        out[i].logprob = logprobs[i];
    }
}

void CudaBackendImpl::decode_greedy(std::span<const SequenceStep> steps, std::vector<int32_t>& next_tokens) {
    run_steps(steps, Output::Argmax, nullptr, &next_tokens);
}

StepProfile CudaBackendImpl::profile_step(std::span<const SequenceStep> steps) {
    last_profile_ = StepProfile{};
    profiling_ = true;
    prof_.enable(stream_);
    std::vector<int32_t> toks;
    try {
        run_steps(steps, Output::Argmax, nullptr, &toks);
    } catch (...) {
        profiling_ = false;
        prof_.disable();
        throw;
    }
    last_profile_.ops = prof_.collect(&last_profile_.gpu_us);
    prof_.disable();
    profiling_ = false;
    return last_profile_;
}

}  // namespace flashseek::cuda

namespace flashseek {

std::unique_ptr<Backend> create_cuda_backend(const std::string& model_dir, const BackendOptions& opt) {
    cuda::require_cuda_device();
    // model_dir is a checkpoint directory, or (with dummy weights) a directory or a config.json path.
    const bool is_json = model_dir.size() > 5 && model_dir.substr(model_dir.size() - 5) == ".json";
    const std::string config_path = is_json ? model_dir : model_dir + "/config.json";
    FS_CHECK(!is_json || opt.dummy_weights, "backend cuda: {} is a config file; real weights need a checkpoint directory",
             model_dir);
    ModelConfig cfg = load_model_config(config_path);
    validate_model_config(cfg, config_path);
    const int L = opt.layers > 0 ? std::min(opt.layers, cfg.num_hidden_layers) : cfg.num_hidden_layers;
    FS_CHECK(opt.layers >= 0, "--layers must be >= 0, got {}", opt.layers);
    cuda::DeviceTensorStore store;
    if (opt.dummy_weights) {
        store = cuda::generate_dummy_weights(cfg, L, 0x5eedull);
    } else {
        auto ckpt = Checkpoint::open(model_dir);
        bind_weights(cfg, *ckpt);  // validates the whole checkpoint, naming any bad tensor
        store = cuda::upload_checkpoint(*ckpt, L, opt.progress);
    }
    cfg.num_hidden_layers = L;
    cfg.compress_ratios.resize(size_t(L));
    return std::make_unique<cuda::CudaBackendImpl>(cfg, opt, std::move(store));
}

}  // namespace flashseek
