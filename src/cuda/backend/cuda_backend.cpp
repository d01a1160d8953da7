// The CUDA backend: the model as one or more shards on one device behind the Backend interface. Each shard has
// its parts, each with one job: ShardWeights (its weights, shard.h), StatePool (per-sequence state,
// state_pool.h), StepBuffers (per-step buffers, step_buffers.h) and ForwardPass (what one pass enqueues,
// forward.h); the shards share the StreamSet (streams and branches, streams.h) and the GraphRunner (capture and
// replay per pass shape, graph_runner.h). One shard holds the whole model; several (a tensor / expert parallel
// layout run as virtual ranks on one GPU) run each sub-block in turn and reduce their partial outputs
// (comm/reduce.cuh) before the next: attention over the tensor-parallel shards of an expert group, the MoE over all.
// This file is the step driver: sequence management, validation, cutting a step into passes of at most max_rows
// rows (prefill chunks of chunk_tokens, decode batches padded to a power-of-two bucket for graph reuse), the
// metadata upload, the outputs (logits, argmax, device sampling) and profiling; and create_cuda_backend. No global
// state: every shard is its own instance.
#include "cuda/backend/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "backend/diagnostics.h"
#include "cuda/backend/cuda_util.h"
#include "cuda/backend/device_weights.h"
#include "cuda/backend/forward.h"
#include "cuda/backend/glue.cuh"
#include "cuda/backend/graph_runner.h"
#include "cuda/backend/kernel_trace.h"
#include "cuda/backend/op_profiler.h"
#include "cuda/backend/sample_adjust.h"
#include "cuda/backend/shard.h"
#include "cuda/backend/state_pool.h"
#include "cuda/backend/step_buffers.h"
#include "cuda/backend/streams.h"
#include "cuda/comm/communicator.h"
#include "cuda/comm/reduce.cuh"
#include "cuda/common/copy_bandwidth.h"
#include "cuda/common/kernel_policy.h"
#include "cuda/compressor/compressor.cuh"
#include "cuda/sample/sample.cuh"
#include "loader/safetensors.h"
#include "model/memory_estimate.h"
#include "model/shard_plan.h"
#include "model/sharding.h"
#include "util/error.h"

namespace flashseek::cuda {

namespace {

// Prefill tokens of one sequence per pass unless BackendOptions::prefill_chunk says otherwise
// (kDefaultPrefillChunkTokens, model/memory_estimate.h). The window rings hold window + one chunk, so a whole chunk is
// written before attention reads.

int chunk_tokens(const BackendOptions& opt) {
    FS_CHECK(opt.prefill_chunk >= 0, "prefill_chunk must be >= 0, got {}", opt.prefill_chunk);
    return opt.prefill_chunk > 0 ? opt.prefill_chunk : kDefaultPrefillChunkTokens;
}

// The state pool: window rings and compressor state per slot, compressed entries and indexer keys in blocks; half
// of the device memory left after the weights unless the options say otherwise.
std::unique_ptr<StatePool> make_state_pool(const ModelConfig& cfg, const BackendOptions& opt,
                                           const ShardWeights& shard, const ForwardNumerics& num, int chunk_tokens,
                                           int shards_to_come) {
    StateGeometry g;
    g.block_tokens = 256;
    g.ring_entries = cfg.sliding_window + chunk_tokens;
    g.kv_entry_bytes = kv_entry_bytes(num.kv, cfg.head_dim, cfg.qk_rope_head_dim);
    for (const ShardLayer& layer : shard.layers()) {
        LayerStateGeometry lg;
        lg.ratio = layer.ratio;
        if (lg.ratio > 0) {
            lg.comp_entry_bytes = g.kv_entry_bytes;
            lg.compressor_state_bytes = compressor_state_bytes(lg.ratio, cfg.head_dim);
        }
        if (lg.ratio == 4) {
            lg.index_key_bytes = index_entry_bytes(num.index, cfg.index_head_dim);
            lg.index_compressor_state_bytes = compressor_state_bytes(4, cfg.index_head_dim);
        }
        g.layers.push_back(lg);
    }
    const int64_t max_ctx =
        opt.max_context > 0 ? opt.max_context : std::min<int64_t>(cfg.max_position_embeddings, 1 << 20);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // Shards sharing the device share the default: half of what is left, divided among this and the shards still to
    // come; an explicit size is per shard.
    const int64_t pool_bytes = opt.state_memory_bytes > 0 ? opt.state_memory_bytes
                                                          : int64_t(double(free_b) * 0.5 / std::max(1, shards_to_come));
    return std::make_unique<StatePool>(g, std::max(1, opt.max_sequences), max_ctx, pool_bytes);
}

// The decode bucket of `rows` single-token rows: the smallest power of two >= rows (graphs are kept per bucket).
int decode_bucket(int rows) {
    int bucket = 1;
    while (bucket < rows) bucket *= 2;
    return bucket;
}

// The largest decode bucket: that of max sequences (every shard's pool holds max(1, max_sequences)).
int max_bucket(const BackendOptions& opt) { return decode_bucket(std::max(1, opt.max_sequences)); }

// One shard's own parts; the shards of a backend share its streams, policy and profiler.
struct Shard {
    Shard(const ModelConfig& cfg, const BackendOptions& opt, const ShardSpec& spec, DeviceTensorStore store,
          const ForwardNumerics& numerics, int chunk_tokens, int max_rows, int max_head_rows, int shards_to_come,
          StreamSet& streams, const KernelPolicy& policy, OpProfiler& profiler)
        : weights(cfg, spec, std::move(store)),
          pool(make_state_pool(cfg, opt, weights, numerics, chunk_tokens, shards_to_come)),
          buf(cfg, StepBufferSizes{max_rows, max_head_rows, pool->max_context(), spec.expert_begin, spec.experts(),
                                   spec.ranks > 1, spec.inter_end - spec.inter_begin}),
          forward(cfg, weights, buf, streams, *pool, policy, numerics, profiler) {}
    ShardWeights weights;
    std::unique_ptr<StatePool> pool;
    StepBuffers buf;
    ForwardPass forward;
};

class CudaBackend final : public Backend, public BackendDiagnostics {
public:
    // One store and spec per shard (one whole-model shard, or the ranks of a parallel layout).
    CudaBackend(const ModelConfig& cfg, const BackendOptions& opt, std::vector<ShardSpec> specs,
                std::vector<DeviceTensorStore> stores)
        : cfg_(cfg),
          policy_(KernelPolicy::from_env()),
          numerics_(ForwardNumerics::of(opt.numerics)),
          facts_(query_device()),
          chunk_tokens_(chunk_tokens(opt)) {
        FS_CHECK(!specs.empty() && specs.size() == stores.size() && int(specs.size()) <= kMaxReduceRanks,
                 "CUDA backend: {} shard specs for {} weight stores (1..{} shards)", specs.size(), stores.size(),
                 kMaxReduceRanks);
        streams_.set_branches(policy_.branches);
        if (policy_.branch_priority) streams_.set_branch_priority(true);
        max_rows_ = std::max(chunk_tokens_, max_bucket(opt));
        max_head_rows_ = std::max(kMinHeadRows, max_bucket(opt));
        for (size_t r = 0; r < specs.size(); ++r)
            shards_.push_back(std::make_unique<Shard>(cfg_, opt, specs[r], std::move(stores[r]), numerics_,
                                                      chunk_tokens_, max_rows_, max_head_rows_, int(specs.size() - r),
                                                      streams_, policy_, prof_));
        if (shards_.size() > 1) make_communicator_groups();
        // Every shard's head writes its vocabulary rows into the first shard's logits (sampled there).
        for (auto& sh : shards_)
            sh->forward.set_logits_target(lead().logits.as<float>() + sh->weights.spec().vocab_begin, cfg_.vocab_size);
    }

    // Backend
    const ModelConfig& config() const override { return cfg_; }
    std::string name() const override { return "cuda"; }
    StateMemoryStats memory() const override { return pool().stats(); }
    int64_t blocks_for(int64_t n) const override { return pool().blocks_for(n); }
    int max_sequences() const override { return pool().max_sequences(); }
    int create_sequence() override {
        const int slot = pool().create();
        for (size_t r = 1; r < shards_.size(); ++r) {
            const int same = shards_[r]->pool->create();
            FS_CHECK(same == slot, "CUDA backend: shard {} gave slot {} where shard 0 gave {}", r, same, slot);
        }
        for (auto& sh : shards_) sh->pool->clear_slot_state(slot, streams_.main());
        return slot;
    }
    void free_sequence(int seq_id) override {
        for (auto& sh : shards_) sh->pool->release(seq_id);
    }
    int64_t sequence_length(int seq_id) const override {
        FS_CHECK(pool().live(seq_id), "sequence {} is not live", seq_id);
        return pool().length(seq_id);
    }
    void forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
        run_steps(steps, Output::Logits, &logits, nullptr);
    }
    // Samples on the device (sample/sample.cuh) unless an entry asks for top logprobs (then the host sampler).
    void forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                        std::vector<SampleResult>& out) override;
    BackendDiagnostics* diagnostics() override { return this; }

    // BackendDiagnostics
    StepProfile profile_step(std::span<const SequenceStep> steps) override;
    void decode_greedy(std::span<const SequenceStep> steps, std::vector<int32_t>& next_tokens) override {
        run_steps(steps, Output::Argmax, nullptr, &next_tokens);
    }
    std::string device_name() const override { return facts_.name; }
    double weight_bytes_on_device() const override {
        double b = 0;
        for (const auto& sh : shards_) b += sh->weights.bytes_on_device();
        return b;
    }
    double measure_copy_bandwidth(size_t bytes, int reps) override { return cuda::measure_copy_bandwidth(bytes, reps); }
    double measure_gemm_rate() override { return cuda::measure_fp8_gemm_rate(); }
    double last_host_enqueue_seconds() const override { return last_enqueue_s_; }
    std::string enable_kernel_trace() override { return KernelTracer::instance().enable(); }
    void mark_kernel_trace() override {
        CUDA_CHECK(cudaDeviceSynchronize());
        KernelTracer::instance().mark();
    }
    KernelTrace take_kernel_trace() override { return KernelTracer::instance().take(); }
    void set_use_graphs(bool on) override { graphs_.set_enabled(on); }
    GraphCounts graph_counts() const override { return graphs_.counts(); }
    void set_use_branches(bool on) override {
        streams_.set_branches(on);
        graphs_.clear();  // captured with the other setting
    }

private:
    enum class Output { Logits, Argmax, Sample };
    // Where the head row h of a pass goes: its step entry, and its row in the logits output.
    struct HeadDest {
        size_t entry;
        int64_t dst_row;
    };
    StatePool& pool() const { return *shards_.front()->pool; }
    StepBuffers& lead() const { return shards_.front()->buf; }  // step metadata and outputs
    void validate(std::span<const SequenceStep> steps) const;
    void run_steps(std::span<const SequenceStep> steps, Output out, std::vector<float>* logits,
                   std::vector<int32_t>* tokens, std::span<const SampleParams> sample_params = {},
                   std::vector<float>* logprobs = nullptr);
    // Enqueues one pass on every shard: the whole forward of a single shard, or the shards' pieces in turn with the
    // reductions of their partial outputs.
    void enqueue_pass(const PassShape& shape);
    // The ranks' communicator (today every rank on this device, one stream: the same-device implementation) and its
    // groups, registered before any capture: each expert group's tp ranks (attention), and every rank (MoE).
    void make_communicator_groups();
    void reduce(const PassShape& shape, CommGroup group);
    // Writes the sampling parameters of the pass's head rows and enqueues the device sampler.
    void enqueue_sampling(int head_rows, const std::vector<HeadDest>& dests, std::span<const SampleParams> params);

    ModelConfig cfg_;
    KernelPolicy policy_;
    ForwardNumerics numerics_;
    DeviceFacts facts_;
    int chunk_tokens_;
    StreamSet streams_;
    OpProfiler prof_;
    std::vector<std::unique_ptr<Shard>> shards_;
    int max_rows_ = 0;       // rows of the largest pass: a prefill chunk or the largest decode bucket
    int max_head_rows_ = 0;  // logits rows of the largest pass
    GraphRunner graphs_;
    SampleAdjustStaging sample_adjust_;  // masks and penalties of the sampled rows
    std::unique_ptr<Communicator> comm_;
    std::vector<CommGroup> expert_groups_;  // per expert group: its tp ranks
    bool profiling_ = false;
    StepProfile last_profile_;
    double last_enqueue_s_ = 0;  // BackendDiagnostics::last_host_enqueue_seconds
};

void CudaBackend::enqueue_pass(const PassShape& shape) {
    if (shards_.size() == 1) {
        shards_.front()->forward.enqueue(shape);
        return;
    }
    for (auto& sh : shards_) sh->forward.begin(shape);
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
        for (auto& sh : shards_) sh->forward.sub_block(shape, l, 0);
        for (CommGroup g : expert_groups_) reduce(shape, g);  // attention: per expert group
        for (auto& sh : shards_) sh->forward.sub_block(shape, l, 1);
        reduce(shape, comm_->all());  // MoE: every shard
    }
    for (auto& sh : shards_) sh->forward.end(shape);
}

void CudaBackend::make_communicator_groups() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CommOptions o;
    o.max_elements = int64_t(max_rows_) * cfg_.hidden_size;
    comm_ = make_same_device_communicator(int(shards_.size()), device, o);
    const int tp = shards_.front()->weights.spec().tp;
    for (int g = 0; g < int(shards_.size()); g += tp) {
        std::vector<int> ranks;
        for (int r = g; r < g + tp; ++r) ranks.push_back(r);
        expert_groups_.push_back(comm_->group(ranks));
    }
}

void CudaBackend::reduce(const PassShape& shape, CommGroup group) {
    std::vector<ReducePart> parts;
    for (int r : comm_->group_ranks(group))
        parts.push_back({shards_[size_t(r)]->buf.sub_out_partial.as<float>(),
                         shards_[size_t(r)]->buf.sub_out.as<uint16_t>(), streams_.main()});
    OpProfiler::Scope sc(prof_, "all-reduce (ranks on one device)");
    comm_->all_reduce_bf16(group, parts, int64_t(shape.n_rows) * cfg_.hidden_size);
}

void CudaBackend::validate(std::span<const SequenceStep> steps) const {
    std::vector<char> seen(size_t(pool().max_sequences()), 0);
    for (size_t i = 0; i < steps.size(); ++i) {
        const SequenceStep& s = steps[i];
        FS_CHECK(pool().live(s.seq_id), "step {}: sequence {} is not live", i, s.seq_id);
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

void CudaBackend::enqueue_sampling(int head_rows, const std::vector<HeadDest>& dests,
                                   std::span<const SampleParams> params) {
    const cudaStream_t stream = streams_.main();
    const int64_t V = cfg_.vocab_size;
    auto* host = lead().sample_params_host.as<DeviceSampleParams>();
    // Head rows past dests are padding rows of a decode bucket: sampled greedily, results unused.
    std::vector<const SampleParams*> row_params(size_t(head_rows), nullptr);
    for (int h = 0; h < head_rows; ++h) {
        DeviceSampleParams d;
        if (size_t(h) < dests.size()) {
            const SampleParams& sp = params[dests[size_t(h)].entry];
            row_params[size_t(h)] = &sp;
            d.temperature = sp.temperature;
            d.top_p = sp.top_p;
            d.top_k = sp.top_k;
            d.min_p = sp.min_p;
            d.seed = sp.seed;
            d.draw_index = sp.draw_index;
        }
        host[h] = d;
    }
    CUDA_CHECK(cudaMemcpyAsync(lead().sample_params.get(), host, size_t(head_rows) * sizeof(DeviceSampleParams),
                                cudaMemcpyHostToDevice, stream));
    // Masks and penalties: the pass runs on the device while prepare() waits for the masks (filled on the
    // scheduler's worker); the sampler draws from the adjusted copy and reports the raw rows' logprobs.
    const float* raw = lead().logits.as<float>();
    const bool adjusted = sample_adjust_.prepare(row_params, V);
    sample_rows(adjusted ? sample_adjust_.apply(raw, V, stream) : raw, head_rows, V, V,
                lead().sample_params.as<DeviceSampleParams>(), lead().tokens.as<int32_t>(),
                lead().sample_logprob.as<float>(), stream, adjusted ? raw : nullptr, V, lead().sample_scratch.get(),
                lead().sample_scratch.bytes(), sample_passes_for(host, head_rows, V));
    CUDA_CHECK(cudaMemcpyAsync(lead().tokens_host.as<void>(), lead().tokens.get(), size_t(head_rows) * 4,
                                cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(lead().sample_logprob_host.as<void>(), lead().sample_logprob.get(), size_t(head_rows) * 4,
                                cudaMemcpyDeviceToHost, stream));
}

void CudaBackend::run_steps(std::span<const SequenceStep> steps, Output out, std::vector<float>* logits,
                            std::vector<int32_t>* tokens, std::span<const SampleParams> sample_params,
                            std::vector<float>* logprobs) {
    validate(steps);
    last_enqueue_s_ = 0;
    // Reserve every block the step needs first: OutOfStateMemory leaves all state unchanged.
    std::vector<std::pair<int, int64_t>> req;
    for (const auto& s : steps) req.emplace_back(s.seq_id, pool().length(s.seq_id) + s.n_tokens);
    for (auto& sh : shards_) sh->pool->reserve_all(req);  // same state in every shard: all fit or none

    const int64_t V = cfg_.vocab_size;
    int64_t total_rows = 0;
    for (const auto& s : steps) total_rows += s.all_logits ? s.n_tokens : 1;
    if (logits) logits->resize(size_t(total_rows * V));
    if (tokens) tokens->assign(steps.size(), -1);
    if (logprobs) logprobs->assign(steps.size(), 0.f);
    FS_CHECK(out != Output::Sample || (sample_params.size() == steps.size() && tokens && logprobs),
             "CUDA backend: sampling needs one parameter set per step entry ({} for {})", sample_params.size(),
             steps.size());
    const cudaStream_t stream = streams_.main();
    StepMeta& meta = lead().meta;

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
        // Build one pass: entries in order, each contributing min(remaining, chunk) tokens, up to max_rows_ rows and
        // max_head_rows_ logits rows (an all-logits entry contributes one per token, others one at their end).
        // A pass holds prefill entries or decode entries, never both (PassShape::prefill): the kind of the first
        // entry with tokens left.
        struct Part { size_t entry; int first, n; };
        std::vector<Part> parts;
        int rows = 0, head_budget = max_head_rows_;
        auto is_prefill = [&](size_t i) { return steps[i].prefill || steps[i].n_tokens > 1; };
        int kind = -1;
        for (size_t k = 0; k < steps.size() && kind < 0; ++k) {
            const size_t i = (next + k) % steps.size();
            if (steps[i].n_tokens > done[i]) kind = is_prefill(i) ? 1 : 0;
        }
        if (kind < 0) break;
        const bool prefill = kind == 1;
        for (size_t k = 0; k < steps.size() && rows < max_rows_; ++k) {
            const size_t i = (next + k) % steps.size();
            const int rem = steps[i].n_tokens - done[i];
            if (rem <= 0 || is_prefill(i) != prefill) continue;
            int n = std::min({rem, chunk_tokens_, max_rows_ - rows});
            if (steps[i].all_logits) n = std::min(n, head_budget);
            if (n <= 0 || head_budget <= 0) continue;
            head_budget -= steps[i].all_logits ? n : (done[i] + n == steps[i].n_tokens ? 1 : 0);
            parts.push_back({i, done[i], n});
            rows += n;
        }
        if (parts.empty()) break;
        next = (parts.back().entry + 1) % steps.size();
        // Decode passes are padded to a power-of-two bucket (padding rows use the padding slot) for graph reuse.
        const bool all_single = !prefill;
        int n_seqs = int(parts.size());
        int n_rows = rows;
        if (all_single) n_rows = n_seqs = std::min(decode_bucket(rows), max_rows_);
        PassShape shape;
        shape.n_rows = n_rows;
        shape.n_seqs = n_seqs;
        shape.prefill = prefill;
        shape.need_indexer = false;
        int row = 0, head_rows = 0, max_seq_tokens = 1;
        std::vector<HeadDest> head_dst;
        for (size_t pi = 0; pi < size_t(n_seqs); ++pi) {
            const bool pad = pi >= parts.size();
            const int slot = pad ? pool().padding_slot() : steps[parts[pi].entry].seq_id;
            const int n = pad ? 1 : parts[pi].n;
            const int64_t start = pad ? 0 : pool().length(slot);
            meta.h(StepMeta::kSeqSlot)[pi] = slot;
            meta.h(StepMeta::kSeqFirstRow)[pi] = row;
            meta.h(StepMeta::kSeqNTokens)[pi] = n;
            meta.h(StepMeta::kSeqStartPos)[pi] = int32_t(start);
            max_seq_tokens = std::max(max_seq_tokens, n);
            if ((start + n) / 4 > cfg_.index_topk) shape.need_indexer = true;
            while (shape.max_entries < (start + n) / 4) shape.max_entries *= 2;
            while (shape.max_context < start + n) shape.max_context *= 2;
            for (int t = 0; t < n; ++t) {
                meta.h(StepMeta::kTokens)[row + t] = pad ? 0 : steps[parts[pi].entry].tokens[parts[pi].first + t];
                meta.h(StepMeta::kTokenSeq)[row + t] = int32_t(pi);
                meta.h(StepMeta::kTokenPos)[row + t] = int32_t(start + t);
            }
            if (!pad) {
                const SequenceStep& st = steps[parts[pi].entry];
                const bool last_chunk = parts[pi].first + n == st.n_tokens;
                if (st.all_logits) {
                    for (int t = 0; t < n; ++t) {
                        meta.h(StepMeta::kHeadRows)[head_rows++] = row + t;
                        head_dst.push_back({parts[pi].entry, out_row[parts[pi].entry] + parts[pi].first + t});
                    }
                } else if (last_chunk) {
                    meta.h(StepMeta::kHeadRows)[head_rows++] = row + n - 1;
                    head_dst.push_back({parts[pi].entry, out_row[parts[pi].entry]});
                }
            } else {
                meta.h(StepMeta::kHeadRows)[head_rows++] = row;  // keeps the head's shape fixed per bucket
            }
            row += n;
        }
        // The indexer's entry bound follows the attention's context bound (context / 4 is a power of two at least
        // every sequence's visible entries, as long as the workspace row holds it): a sequence growing past a power
        // of two then changes the pass shape once, not at context 2^k + 1 and again three tokens later, and each
        // change costs a pass without a graph and a capture. The bound sizes grids and rows only (each row scores
        // and selects its own entries), so it changes no result.
        shape.max_entries = std::max(shape.max_entries,
                                     int(std::min<int64_t>(shape.max_context / 4, lead().index_workspace_entries)));
        shape.n_head_rows = head_rows;
        shape.max_seq_tokens = max_seq_tokens;
        for (int j = 0; j < head_rows; ++j) {  // the head rows as one-token sequences (ForwardPass::head_batch)
            const int r = meta.h(StepMeta::kHeadRows)[j];
            meta.h(StepMeta::kHeadSlot)[j] = meta.h(StepMeta::kSeqSlot)[meta.h(StepMeta::kTokenSeq)[r]];
            meta.h(StepMeta::kHeadPos)[j] = meta.h(StepMeta::kTokenPos)[r];
        }

        const auto enqueue_start = std::chrono::steady_clock::now();
        for (auto& sh : shards_) {
            if (&sh->buf.meta != &meta) sh->buf.meta.copy_host_from(meta);
            sh->buf.meta.upload(stream);
            sh->pool->upload_tables(stream);
        }
        graphs_.run(shape, all_single && !profiling_, stream, [&] { enqueue_pass(shape); });
        last_enqueue_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - enqueue_start).count();
        if (profiling_) {
            last_profile_.bytes_per_rank.resize(shards_.size(), 0.0);
            for (size_t r = 0; r < shards_.size(); ++r) {
                StepProfile rank;
                shards_[r]->forward.account_bytes(shape, rank);
                last_profile_.bytes_weights += rank.bytes_weights;
                last_profile_.bytes_state += rank.bytes_state;
                last_profile_.distinct_experts += rank.distinct_experts;
                last_profile_.bytes_per_rank[r] += rank.bytes_weights + rank.bytes_state;
            }
        }
        // Outputs of the rows that need them.
        if (!head_dst.empty()) {
            if (out == Output::Logits) {
                CUDA_CHECK(cudaMemcpyAsync(lead().logits_host.as<void>(), lead().logits.get(),
                                            size_t(head_rows) * size_t(V) * 4, cudaMemcpyDeviceToHost, stream));
            } else if (out == Output::Argmax) {
                argmax_rows(lead().logits.as<float>(), head_rows, V, lead().tokens.as<int32_t>(),
                            lead().argmax_scratch.get(), lead().argmax_scratch.bytes(), stream);
                CUDA_CHECK(cudaMemcpyAsync(lead().tokens_host.as<void>(), lead().tokens.get(), size_t(head_rows) * 4,
                                            cudaMemcpyDeviceToHost, stream));
            } else {
                enqueue_sampling(head_rows, head_dst, sample_params);
            }
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const float* logits_host = lead().logits_host.as<float>();
        const int32_t* tokens_host = lead().tokens_host.as<int32_t>();
        const float* logprob_host = lead().sample_logprob_host.as<float>();
        for (size_t h = 0; h < head_dst.size(); ++h) {
            if (out == Output::Logits) {
                std::memcpy(logits->data() + head_dst[h].dst_row * V, logits_host + int64_t(h) * V, size_t(V) * 4);
            } else {
                (*tokens)[head_dst[h].entry] = tokens_host[h];
                if (out == Output::Sample) (*logprobs)[head_dst[h].entry] = logprob_host[h];
            }
        }
        for (const Part& p : parts) {
            done[p.entry] += p.n;
            const int id = steps[p.entry].seq_id;
            const int64_t length = pool().length(id) + p.n;
            for (auto& sh : shards_) sh->pool->set_length(id, length);
        }
    }
}

void CudaBackend::forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                                 std::vector<SampleResult>& out) {
    FS_CHECK(steps.size() == params.size(), "forward_sample: {} steps but {} sample parameter sets", steps.size(),
             params.size());
    // Top logprobs and scored prompt tokens need whole rows on the host: the host sampler does everything then.
    if (std::any_of(params.begin(), params.end(),
                    [](const SampleParams& p) { return p.n_logprobs > 0 || !p.score_targets.empty(); }))
        return Backend::forward_sample(steps, params, out);
    const WaitForAllowedTokensOnExit wait_on_exit{params};
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

StepProfile CudaBackend::profile_step(std::span<const SequenceStep> steps) {
    last_profile_ = StepProfile{};
    profiling_ = true;
    for (auto& sh : shards_) sh->forward.set_profiling(true);
    streams_.set_single_stream(true);  // per-op events on one stream
    prof_.enable(streams_.main());
    auto finish = [&] {
        prof_.disable();
        streams_.set_single_stream(false);
        for (auto& sh : shards_) sh->forward.set_profiling(false);
        profiling_ = false;
    };
    std::vector<int32_t> toks;
    try {
        run_steps(steps, Output::Argmax, nullptr, &toks);
    } catch (...) {
        finish();
        throw;
    }
    last_profile_.ops = prof_.collect(&last_profile_.gpu_us);
    finish();
    return last_profile_;
}

}  // namespace
}  // namespace flashseek::cuda

namespace flashseek {

namespace {

// The shapes the CUDA kernels compute (the model accepts more: src/model/config.h). Empty when supported, else the
// first reason, naming the key.
std::string cuda_unsupported_reason(const ModelConfig& cfg) {
    for (size_t l = 0; l < cfg.compress_ratios.size(); ++l)
        if (cfg.compress_ratios[l] != 0 && cfg.compress_ratios[l] != 4 && cfg.compress_ratios[l] != 128)
            return fmt::format("compress_ratios[{}] = {} (the kernels compress by 4 or 128)", l, cfg.compress_ratios[l]);
    if (cfg.qk_rope_head_dim <= 0 || cfg.qk_rope_head_dim >= cfg.head_dim)
        return fmt::format("qk_rope_head_dim {} with head_dim {} (rotary-only heads)", cfg.qk_rope_head_dim,
                           cfg.head_dim);
    if (cfg.head_dim % 16 != 0 || (cfg.head_dim - cfg.qk_rope_head_dim) % 64 != 0)
        return fmt::format("head_dim {} (a multiple of 16 whose non-rotary part is a multiple of 64)", cfg.head_dim);
    if (cfg.index_head_dim != 32 && cfg.index_head_dim != 64 && cfg.index_head_dim != 128 && cfg.index_head_dim != 256)
        return fmt::format("index_head_dim {} (32, 64, 128 or 256)", cfg.index_head_dim);
    if (cfg.index_topk < 1) return fmt::format("index_topk {} (at least 1)", cfg.index_topk);
    if (cfg.num_attention_heads % cfg.o_groups != 0)
        return fmt::format("o_groups {} does not divide num_attention_heads {}", cfg.o_groups, cfg.num_attention_heads);
    if (cfg.hidden_size % 32 != 0) return fmt::format("hidden_size {} (a multiple of 32)", cfg.hidden_size);
    return {};
}

// Refuses, before any allocation, a layout whose ranks' weights and step buffers (plus the reserve for the CUDA
// context) do not fit this device: every rank of the layout runs here. The state pool takes what is left.
void require_layout_fits_device(const ModelConfig& cfg, const ParallelLayout& layout, int n_layers,
                                const BackendOptions& opt) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const ShardPlan plan = plan_layout(cfg, layout, n_layers);
    StateOptions so;
    so.max_sequences = std::max(1, opt.max_sequences);
    so.max_context = opt.max_context > 0 ? opt.max_context : 4096;
    so.release_numerics = opt.numerics == Numerics::Release;
    so.n_layers = n_layers;
    so.prefill_chunk_tokens = cuda::chunk_tokens(opt);
    const MemoryPlan memory = plan_memory(plan, so);
    int64_t need = 0;
    for (const RankMemory& r : memory.ranks) need += r.weights + r.buffers;
    need += kDeviceReserveBytes;
    FS_CHECK(need <= int64_t(free_b),
             "backend cuda: layout {} of {} layers needs {} for its {} rank(s)' weights and step buffers on this "
             "device, which has {} free of {}", layout.name(), n_layers, format_bytes(need), layout.ranks(),
             format_bytes(int64_t(free_b)), format_bytes(int64_t(total_b)));
}

}  // namespace

std::unique_ptr<Backend> create_cuda_backend(const std::string& model_dir, const BackendOptions& opt) {
    cuda::require_cuda_device();
    // model_dir is a checkpoint directory, or (with dummy weights) a directory or a config.json path.
    const bool is_json = model_dir.size() > 5 && model_dir.substr(model_dir.size() - 5) == ".json";
    const std::string config_path = is_json ? model_dir : model_dir + "/config.json";
    FS_CHECK(!is_json || opt.dummy_weights, "backend cuda: {} is a config file; real weights need a checkpoint directory",
             model_dir);
    ModelConfig cfg = load_model_config(config_path);
    validate_model_config(cfg, config_path);
    if (opt.numerics == Numerics::Release) check_release_numerics_supported(cfg, config_path);
    if (const std::string why = cuda_unsupported_reason(cfg); !why.empty())
        fail("backend cuda does not run the model of {}: {}", config_path, why);
    const int L = opt.layers > 0 ? std::min(opt.layers, cfg.num_hidden_layers) : cfg.num_hidden_layers;
    FS_CHECK(opt.layers >= 0, "--layers must be >= 0, got {}", opt.layers);
    const ParallelLayout layout{opt.tp, opt.ep};
    validate_layout(cfg, layout);
    FS_CHECK(layout.ranks() <= cuda::kMaxReduceRanks, "backend cuda: {} ranks ({}); at most {} on one device",
             layout.ranks(), layout.name(), cuda::kMaxReduceRanks);
    require_layout_fits_device(cfg, layout, L, opt);
    std::vector<cuda::ShardSpec> specs;
    std::vector<cuda::DeviceTensorStore> stores;
    std::unique_ptr<Checkpoint> ckpt;
    if (!opt.dummy_weights) {
        ckpt = Checkpoint::open(model_dir);
        bind_weights(cfg, *ckpt);  // validates the whole checkpoint, naming any bad tensor
    }
    for (int r = 0; r < layout.ranks(); ++r) {
        // One whole-model shard, or the ranks of the layout as virtual ranks on this device, each reading only its
        // own slices.
        const RankSlice slice = rank_slice(cfg, layout, r);
        const bool whole = layout.ranks() == 1;
        if (opt.dummy_weights)
            stores.push_back(cuda::generate_dummy_weights(cfg, L, 0x5eedull, whole ? nullptr : &slice));
        else
            stores.push_back(whole ? cuda::upload_checkpoint(*ckpt, L, opt.progress)
                                   : cuda::upload_shard(*ckpt, cfg, L, slice, opt.progress));
        specs.push_back(whole ? cuda::ShardSpec::whole(cfg) : cuda::ShardSpec::of(slice));
    }
    cfg.num_hidden_layers = L;
    cfg.compress_ratios.resize(size_t(L));
    return std::make_unique<cuda::CudaBackend>(cfg, opt, std::move(specs), std::move(stores));
}

}  // namespace flashseek
