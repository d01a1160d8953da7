// ForwardPass (forward.h): the pass (embedding, per layer mHC pre -> sub-block -> mHC post, the head), the
// preparation and reuse of linear inputs, and the views of the state pool the kernels take.
#include "cuda/backend/forward.h"

#include "cuda/backend/glue.cuh"
#include "cuda/common/l2_prefetch.cuh"
#include "cuda/mhc/mhc.cuh"
#include "util/error.h"

namespace flashseek::cuda {

namespace {
int64_t round_up8(int64_t v) { return (v + 7) / 8 * 8; }  // PreparedActivation::m_pad
}  // namespace

ForwardNumerics ForwardNumerics::of(Numerics n) {
    ForwardNumerics f;
    const bool release = n == Numerics::Release;
    f.act = release ? ActNumerics::FP8_BLOCK128 : ActNumerics::EXACT;
    f.kv = release ? KvFormat::FP8 : KvFormat::BF16;
    f.index = release ? IndexFormat::FP4 : IndexFormat::BF16;
    f.quant_sim = release;
    return f;
}

ForwardPass::ForwardPass(const ModelConfig& cfg, const ShardWeights& shard, StepBuffers& buffers, StreamSet& streams,
                         StatePool& pool, const KernelPolicy& policy, ForwardNumerics numerics, OpProfiler& profiler)
    : cfg_(cfg), shard_(shard), buf_(buffers), streams_(streams), pool_(pool), policy_(policy),
      prefill_policy_(policy.for_pass(true)), decode_policy_(policy.for_pass(false)), pol_(&decode_policy_),
      num_(numerics),
      prof_(profiler), sharded_(!shard.spec().holds_whole_model(cfg)), logits_(buffers.logits.as<float>()),
      logits_ld_(shard.spec().vocab_rows()) {
    FS_CHECK(!sharded_ || buffers.sub_out_partial.get(), "CUDA backend: a sharded pass needs the partial-sum buffer");
}

void ForwardPass::enqueue(const PassShape& s) {
    FS_CHECK(!sharded_, "CUDA backend: a sharded pass is enqueued piece by piece, with its all-reduces");
    begin(s);
    for (int l = 0; l < cfg_.num_hidden_layers; ++l)
        for (int sub = 0; sub < 2; ++sub) sub_block(s, l, sub);
    end(s);
}

void ForwardPass::begin(const PassShape& s) {
    pol_ = s.prefill ? &prefill_policy_ : &decode_policy_;
    streams_.reset_branches();
    post_pending_ = -1;
    residual_ = buf_.residual.as<bf16>();
    residual_rows_ = s.n_rows;
    OpProfiler::Scope sc(prof_, "embedding");
    prof_.bytes(double(s.n_rows) * shard_.head_bytes().embed_row);
    embed_streams(shard_.embed(), cfg_.vocab_size, buf_.meta.d(StepMeta::kTokens), s.n_rows, cfg_.hc_mult,
                  cfg_.hidden_size, residual_, streams_.main());
}

void ForwardPass::sub_block(const PassShape& pass, int l, int sub) {
    pol_ = pass.prefill ? &prefill_policy_ : &decode_policy_;
    // The previous sub-block's mix branch (post, comb) before anything reads them or rewrites mhc_pre's workspace.
    streams_.join(streams_.mhc_mix);
    const int N = cfg_.hc_mult;
    const int64_t D = cfg_.hidden_size;
    const cudaStream_t stream = streams_.main();
    const ShardLayer& L = shard_.layer(l);
    // A sub-block's mhc_post runs inside the next sub-block's mhc_pre where the shapes allow (one launch fewer per
    // sub-block on the critical path); the last one, before the head's row gather, runs on its own (end()). A
    // sharded MoE sub-block combines its own terms (its partial sum is reduced before the next pre), so the next pre
    // then mixes the reduced output like an attention sub-block's.
    const bool fuse_post = pol_->fused_post && mhc_pre_fuses_post(N, int(D));
    PassShape s = pass;
    const bool head_rows = last_layer_on_head_rows(pass, l);
    if (head_rows && sub == 1) {
        if (pass.n_head_rows == 0) {  // a prefill chunk that needs no logits: nothing reads this sub-block's output
            post_pending_ = -1;
            return;
        }
        gather_head_rows(pass);
        s.n_rows = pass.n_head_rows;
    }
    if (post_pending_ >= 0 && !fuse_post) run_pending_post(s);
    MhcPreParams p;
    p.n_tokens = s.n_rows;
    p.n_streams = N;
    p.dim = int(D);
    p.x = residual_;
    p.fn = sub == 0 ? L.hc_attn_fn : L.hc_ffn_fn;
    p.base = sub == 0 ? L.hc_attn_base : L.hc_ffn_base;
    p.scale = sub == 0 ? L.hc_attn_scale : L.hc_ffn_scale;
    p.rms_eps = float(cfg_.rms_norm_eps);
    p.hc_eps = float(cfg_.hc_eps);
    p.sinkhorn_iters = cfg_.hc_sinkhorn_iters;
    p.norm_weight = sub == 0 ? L.attn_norm : L.ffn_norm;
    p.norm_eps = float(cfg_.rms_norm_eps);
    p.y = buf_.sub_in.as<bf16>();
    p.post = buf_.mhc_post.as<float>();
    p.comb = buf_.mhc_comb.as<float>();
    p.one_launch_counter = mhc_one_launch_counter();
    // Decode passes of up to KernelPolicy::mhc_mix_lane_max_rows rows: post and comb (the Sinkhorn, the finalize's
    // longest chain) on a branch beside the sub-block ("mhc_mix_lane"; forced: at any row count), joined before the
    // next sub-block reads them; the finalize's successor waits for the collapse and the norm only.
    p.mix_apart = !pass.prefill && pol_->takes("mhc_mix_lane", s.n_rows <= pol_->mhc_mix_lane_max_rows);
    if (post_pending_ >= 0) {
        if (post_pending_ == 1 && !sharded_) {  // the MoE sub-block's combine runs here too
            if (routed_out_bf16_)
                p.prev_y_routed_bf16 = buf_.routed_out.as<bf16>();
            else
                p.prev_y_routed = buf_.routed_out.as<float>();
            p.prev_pair_slot = buf_.grouping.pair_slot;
            if (shared_out_bf16_)
                p.prev_y_shared_bf16 = buf_.shared_out.as<bf16>();
            else
                p.prev_y_shared = buf_.shared_out.as<float>();
            p.prev_top_k = cfg_.num_experts_per_tok;
            p.prev_round_terms = num_.act == ActNumerics::FP8_BLOCK128;
        } else {
            p.prev_o = buf_.sub_out.as<bf16>();  // on the head rows already where the attention ran on them
        }
        const bool gathered = head_rows && sub == 1;
        p.prev_post = gathered ? buf_.head_post.as<float>() : buf_.mhc_post.as<float>();
        p.prev_comb = gathered ? buf_.head_comb.as<float>() : buf_.mhc_comb.as<float>();
        post_pending_ = -1;
    }
    // The norm also writes sub_in prepared for the sub-block's first FP8 / FP4 linear (one launch fewer, and in
    // the FP8_ROWS form one read of sub_in fewer).
    const FusedPrep fused = fused_prep_target(L, sub, s.n_rows, head_rows);
    if (fused.buf && fused.format == ActFormat::FP8_ROWS) {
        p.prepared_fp8 = fp8_activation_view(fused.buf->values.get(), fused.buf->scales.get(), s.n_rows, D);
    } else if (fused.buf) {
        p.prepared_values = fused.buf->values.as<uint16_t>();
        p.prepared_scales = fused.buf->scales.as<float>();
        p.prepared_layout = int(fused.kind);
        p.prepared_numerics = int(num_.act);
    }
    {
        OpProfiler::Scope sc(prof_, p.prev_y_routed || p.prev_y_routed_bf16 ? "moe.combine + mhc_post + mhc_pre + norm"
                                                    : (p.prev_o ? "mhc_post + mhc_pre + norm" : "mhc_pre + norm"));
        prof_.bytes(L.bytes.mhc_pre[sub]);
        mhc_pre(p, buf_.mhc_workspace.get(), buf_.mhc_workspace_bytes, stream);
    }
    if (p.mix_apart) {
        const Lane mix = streams_.fork(streams_.mhc_mix);
        OpProfiler::Scope sc(prof_, "mhc_pre post + comb");
        mhc_pre_mix(p, buf_.mhc_workspace.get(), buf_.mhc_workspace_bytes, mix.stream);
    }
    ++prep_generation_;  // sub_in was rewritten: earlier prepared activations are stale
    if (fused.buf) adopt_produced(*fused.buf, buf_.sub_in.get(), s.n_rows, D, fused.kind, fused.format);
    const bool last = l + 1 == cfg_.num_hidden_layers && sub == 1;
    // The combine is left to the next pre only there (not after the last sub-block, not on a shard: a shard's
    // partial output is reduced first).
    const bool defer_combine = fuse_post && !last && !sharded_;
    if (sub == 0)
        enqueue_attention(l, s, head_rows);
    else
        enqueue_moe(l, s, /*combine=*/!defer_combine);
    streams_.join(streams_.weight_prefetch);  // a prefetch branch the sub-block opened (prefetch_weights)
    streams_.join(streams_.wo_a_widen);       // (joined before wo_a's GEMM already where that ran)
    post_pending_ = sub;  // run by the next pre, before it (fusion off) or by end()
    if (head_rows && sub == 0 && s.n_head_rows == 0) post_pending_ = -1;  // no output: nothing to post
}

void ForwardPass::prefetch_weights(const DeviceLinear& w, const PassShape& s) {
    if (s.prefill || !pol_->takes_forced_only("weight_prefetch")) return;
    streams_.join(streams_.weight_prefetch);
    const Lane lane = streams_.fork(streams_.weight_prefetch);
    if (lane.stream == streams_.main()) return;  // branches off or one stream (a profiled step): no overlap to gain
    // The codes of w as the checkpoint stores them (linear.cuh). Not the scales: a few KB (FP8) that every CTA of
    // the GEMV reads, in L2 after the first few; their own launch would add a graph node per matrix.
    const int64_t values = w.kind == WeightKind::BF16 ? 2 * w.out * w.in
                           : w.kind == WeightKind::FP8_BLOCK128 ? w.out * w.in
                                                                 : w.out * w.in / 2;
    prefetch_to_l2(w.weight, size_t(values), lane.stream);
}

void ForwardPass::run_pending_post(const PassShape&) {
    OpProfiler::Scope sc(prof_, "mhc_post");
    mhc_post(residual_rows_, cfg_.hc_mult, int(cfg_.hidden_size), residual_, buf_.sub_out.as<bf16>(),
             buf_.mhc_post.as<float>(), buf_.mhc_comb.as<float>(), residual_, streams_.main());
    post_pending_ = -1;
}

bool ForwardPass::last_layer_on_head_rows(const PassShape& s, int l) const {
    return l + 1 == cfg_.num_hidden_layers && !sharded_ && s.n_head_rows < s.n_rows && !shard_.layer(l).tid2eid &&
           !pol_->is_disabled("head_rows_last_layer");
}

TokenBatch ForwardPass::head_batch(const PassShape& s) const {
    TokenBatch b;
    b.n_seqs = b.n_tokens = s.n_head_rows;
    b.max_seq_tokens = 1;
    b.seq_slot = buf_.meta.d(StepMeta::kHeadSlot);
    b.seq_first_row = b.token_seq = buf_.meta.d(StepMeta::kHeadIndex);
    b.seq_n_tokens = buf_.meta.d(StepMeta::kHeadOnes);
    b.seq_start_pos = b.token_pos = buf_.meta.d(StepMeta::kHeadPos);
    return b;
}

void ForwardPass::gather_head_rows(const PassShape& s) {
    FS_CHECK(post_pending_ == 0 && residual_ == buf_.residual.as<bf16>(),
             "CUDA backend: the head rows are gathered once, after the last attention sub-block");
    const int N = cfg_.hc_mult, R = s.n_head_rows;
    const int64_t D = cfg_.hidden_size;
    const cudaStream_t stream = streams_.main();
    const int32_t* rows = buf_.meta.d(StepMeta::kHeadRows);
    {
        OpProfiler::Scope sc(prof_, "head gather");
        gather_rows(buf_.residual.as<bf16>(), rows, R, N * D, buf_.head_streams.as<bf16>(), stream);
        // fp32 rows moved as bf16 pairs (a copy of their bits); the attention output is on the head rows already
        gather_rows(buf_.mhc_post.as<bf16>(), rows, R, 2 * N, buf_.head_post.as<bf16>(), stream);
        gather_rows(buf_.mhc_comb.as<bf16>(), rows, R, 2 * N * N, buf_.head_comb.as<bf16>(), stream);
    }
    residual_ = buf_.head_streams.as<bf16>();
    residual_rows_ = R;
    if (!(pol_->fused_post && mhc_pre_fuses_post(N, int(D)))) {
        OpProfiler::Scope sc(prof_, "mhc_post");
        mhc_post(R, N, int(D), residual_, buf_.sub_out.as<bf16>(), buf_.head_post.as<float>(),
                 buf_.head_comb.as<float>(), residual_, stream);
        post_pending_ = -1;
    }
}

void ForwardPass::end(const PassShape& s) {
    // The last sub-block's post and comb: its post reads them, and the head's mhc_pre rewrites the workspace.
    streams_.join(streams_.mhc_mix);
    if (post_pending_ >= 0) run_pending_post(s);
    enqueue_head(s);
}

void ForwardPass::enqueue_head(const PassShape& s) {
    if (s.n_head_rows == 0) return;  // a prefill chunk that is not the last one needs no logits
    const int N = cfg_.hc_mult;
    const int64_t D = cfg_.hidden_size;
    const cudaStream_t stream = streams_.main();
    if (residual_ != buf_.head_streams.as<bf16>()) {  // not gathered before the last MoE sub-block
        OpProfiler::Scope sc(prof_, "head gather");
        gather_rows(residual_, buf_.meta.d(StepMeta::kHeadRows), s.n_head_rows, N * D, buf_.head_streams.as<bf16>(),
                    stream);
    }
    MhcPreParams p;
    p.n_tokens = s.n_head_rows;
    p.n_streams = N;
    p.dim = int(D);
    p.head_mode = true;
    p.x = buf_.head_streams.as<bf16>();
    p.fn = shard_.hc_head_fn();
    p.base = shard_.hc_head_base();
    p.scale = shard_.hc_head_scale();
    p.rms_eps = float(cfg_.rms_norm_eps);
    p.hc_eps = float(cfg_.hc_eps);
    p.norm_weight = shard_.final_norm();
    p.norm_eps = float(cfg_.rms_norm_eps);
    p.y = buf_.sub_in.as<bf16>();
    p.one_launch_counter = mhc_one_launch_counter();
    {
        OpProfiler::Scope sc(prof_, "hc_head + norm");
        prof_.bytes(shard_.head_bytes().hc_head);
        mhc_pre(p, buf_.mhc_workspace.get(), buf_.mhc_workspace_bytes, stream);
    }
    ++prep_generation_;
    // The head runs the decode kernels in every pass: its rows are one per sequence (or the all-logits rows), and
    // a prompt's last logits then come from the same kernels as a decode token's.
    pol_ = &decode_policy_;
    const PreparedActivation& a = prepare(buf_.prep_x_bf16, buf_.sub_in.get(), false, s.n_head_rows, D, D, shard_.head());
    OpProfiler::Scope sc(prof_, "head gemm");
    prof_.bytes(shard_.head_bytes().head);
    lin(a, shard_.head(), logits_, OutKind::F32, logits_ld_);
}

ActNumerics ForwardPass::input_numerics(const DeviceLinear& w, bool force_exact) const {
    return (w.kind == WeightKind::BF16 || force_exact) ? ActNumerics::EXACT : num_.act;
}

ActFormat ForwardPass::input_format(int rows, const DeviceLinear& w, bool force_exact, int groups) const {
    return linear_input_format(rows, w, groups, input_numerics(w, force_exact), *pol_);
}

const PreparedActivation& ForwardPass::prepare(PrepBuffer& buf, const void* x, bool x_f32, int rows, int64_t K,
                                               int64_t ld, const DeviceLinear& w, bool force_exact, const Lane* lane,
                                               int groups, bool launch_next_early) {
    return prepare_as(input_format(rows, w, force_exact, groups), buf, x, x_f32, rows, K, ld, w, force_exact, lane,
                      launch_next_early);
}

const PreparedActivation& ForwardPass::prepare_as(ActFormat format, PrepBuffer& buf, const void* x, bool x_f32,
                                                  int rows, int64_t K, int64_t ld, const DeviceLinear& w,
                                                  bool force_exact, const Lane* lane, bool launch_next_early) {
    const ActNumerics num = input_numerics(w, force_exact);
    if (buf.generation == prep_generation_ && buf.src == x && buf.rows == rows && buf.act.k == K &&
        buf.layout == w.kind && buf.numerics == num && buf.format == format)
        return buf.act;  // the same input already prepared for this format in this sub-block
    // bf16 buffers whose rows past a pass's rows hold zeros or earlier finite values (zeroed at allocation).
    const DeviceBuffer* finite_rows = x == buf_.sub_in.get()      ? &buf_.sub_in
                                      : x == buf_.attn_out.get() ? &buf_.attn_out
                                                                  : nullptr;
    if (format == ActFormat::MMA_F16 && w.kind == WeightKind::BF16 && finite_rows && !x_f32 && ld == K &&
        K % 128 == 0 && size_t(round_up8(rows)) * size_t(K) * 2 <= finite_rows->bytes() &&
        size_t(round_up8(rows)) * size_t(K / 128) * 4 <= buf_.unit_scales.bytes()) {
        // BF16 weights take bf16 rows as they are (the prepared form is the same bytes with scale 1): read the
        // input in place instead of copying it (no launch): sub_in for the BF16 linears, and in prefill passes the
        // attention output for wo_a widened to bf16 (a 256 MB copy per layer at 4,096 rows).
        uint16_t* in_place = static_cast<uint16_t*>(const_cast<void*>(x));
        adopt_prepared(buf, x, rows, K, WeightKind::BF16, ActNumerics::EXACT, in_place, buf_.unit_scales.as<float>());
        return buf.act;
    }
    buf.act.values = buf.values.as<uint16_t>();  // an in-place adoption may have pointed them at the input
    buf.act.scales = buf.scales.as<float>();
    buf.act.raw = false;
    {
        OpProfiler::Scope sc(prof_, "prepare activation");
        const cudaStream_t stream = lane ? lane->stream : streams_.main();
        if (format == ActFormat::FP8_ROWS) {
            FS_CHECK(!x_f32, "CUDA backend: the FP8 GEMMs take bf16 inputs ([{}, {}] is fp32)", rows, K);
            prepare_activation_rows(static_cast<const uint16_t*>(x), rows, K, ld, num, buf.act, stream);
        } else {
            prepare_activation(x, x_f32, rows, K, ld, w.kind, num, buf.act, stream, launch_next_early);
        }
    }
    buf.generation = prep_generation_;
    buf.src = x;
    buf.rows = rows;
    buf.layout = w.kind;
    buf.numerics = num;
    buf.format = format;
    return buf.act;
}

ForwardPass::FusedPrep ForwardPass::fused_prep_target(const ShardLayer& L, int sub, int rows, bool head_rows) {
    const DeviceLinear* w = nullptr;
    PrepBuffer* buf = nullptr;
    if (sub == 0) {
        // With the query path on the head rows, wq_a reads their gathered copy: wkv is the first reader of sub_in.
        w = head_rows ? &L.wkv : &L.wq_a;
        buf = head_rows ? &buf_.prep_kv : &buf_.prep_x;
    } else if (!routed_experts_take_raw(L, rows)) {
        w = &L.w1[0];
        buf = &buf_.prep_x_expert;
    } else if (shard_.spec().has_shared()) {  // the grouped experts quantize sub_in themselves; the shared expert not
        w = &L.shared_w1;
        buf = &buf_.prep_x;
    } else {
        return {};
    }
    // The routed experts take MMA_F16 whatever the linear catalogue says for w1's shape (enqueue_moe).
    const ActFormat format = w == &L.w1[0] ? ActFormat::MMA_F16 : input_format(rows, *w);
    if (!producer_prepares(*w, format)) return {};
    return {buf, w->kind, format};
}

bool ForwardPass::producer_prepares(const DeviceLinear& w, ActFormat format) const {
    if (w.kind != WeightKind::FP8_BLOCK128 && w.kind != WeightKind::FP4_BLOCK32) return false;
    // The linear catalogue asks for FP8_ROWS only for FP8 weights in release numerics (act_quant).
    return format == ActFormat::MMA_F16 || !pol_->is_disabled("norm_fp8_rows");
}

void ForwardPass::adopt_produced(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind,
                                 ActFormat format) {
    if (format == ActFormat::FP8_ROWS)
        adopt_prepared_fp8_rows(buf, src, rows, K, kind);
    else
        adopt_prepared(buf, src, rows, K, kind, num_.act);
}

void ForwardPass::adopt_prepared_fp8_rows(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind) {
    buf.act.values = buf.values.as<uint16_t>();
    buf.act.scales = buf.scales.as<float>();
    describe_fp8_rows(buf.act, rows, K);
    buf.format = ActFormat::FP8_ROWS;
    buf.generation = prep_generation_;
    buf.src = src;
    buf.rows = rows;
    buf.layout = kind;
    buf.numerics = ActNumerics::FP8_BLOCK128;
}

void ForwardPass::adopt_prepared(PrepBuffer& buf, const void* src, int rows, int64_t K, WeightKind kind,
                                 ActNumerics numerics, uint16_t* values, float* scales) {
    describe_prepared(buf.act, kind, numerics, rows, K);
    buf.format = ActFormat::MMA_F16;
    buf.act.values = values ? values : buf.values.as<uint16_t>();
    buf.act.scales = scales ? scales : buf.scales.as<float>();
    buf.generation = prep_generation_;
    buf.src = src;
    buf.rows = rows;
    buf.layout = kind;
    buf.numerics = numerics;
}

void ForwardPass::lin(const PreparedActivation& x, const DeviceLinear& w, void* y, OutKind kind, int64_t ld,
                      const Lane* lane) {
    const Lane l = lane ? *lane : streams_.main_lane();
    prof_.variant(linear(x, w, y, kind, ld, l.ws, l.stream, *pol_));
}

TokenBatch ForwardPass::token_batch(const PassShape& s) const {
    TokenBatch b;
    b.n_seqs = s.n_seqs;
    b.n_tokens = s.n_rows;
    b.max_seq_tokens = s.max_seq_tokens;
    b.seq_slot = buf_.meta.d(StepMeta::kSeqSlot);
    b.seq_first_row = buf_.meta.d(StepMeta::kSeqFirstRow);
    b.seq_n_tokens = buf_.meta.d(StepMeta::kSeqNTokens);
    b.seq_start_pos = buf_.meta.d(StepMeta::kSeqStartPos);
    b.token_seq = buf_.meta.d(StepMeta::kTokenSeq);
    b.token_pos = buf_.meta.d(StepMeta::kTokenPos);
    return b;
}

RingView ForwardPass::ring_view(int l) const {
    RingView r;
    r.base = pool_.ring(l);
    r.slot_stride = pool_.ring_slot_stride();
    r.ring_entries = pool_.geometry().ring_entries;
    r.entry_bytes = int32_t(pool_.geometry().kv_entry_bytes);
    r.format = num_.kv;
    r.fp8_sim = num_.quant_sim;
    return r;
}

PagedEntries ForwardPass::comp_entries(int l) const {
    PagedEntries p;
    p.base = pool_.blocks();
    p.block_bytes = pool_.block_bytes();
    p.offset = pool_.comp_offset(l);
    p.entries_per_block = int32_t(pool_.entries_per_block(l));
    p.entry_bytes = int32_t(pool_.geometry().layers[size_t(l)].comp_entry_bytes);
    p.block_tables = pool_.device_block_tables();
    p.table_stride = int32_t(pool_.max_blocks_per_seq());
    p.format = int32_t(num_.kv);
    return p;
}

PagedEntries ForwardPass::index_entries(int l) const {
    PagedEntries p = comp_entries(l);
    p.offset = pool_.index_offset(l);
    p.entry_bytes = int32_t(pool_.geometry().layers[size_t(l)].index_key_bytes);
    p.format = int32_t(num_.index);
    return p;
}

}  // namespace flashseek::cuda
