// CpuBackend: sequence bookkeeping, block accounting (checked before any state changes, so a step that does not
// fit throws OutOfStateMemory and leaves every sequence as it was) and the call into the CPU forward.
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <set>

#include "util/error.h"

namespace flashseek {

CpuBackend::CpuBackend(const std::string& model_dir, const BackendOptions& opt) {
    FS_CHECK(opt.max_sequences > 0, "max_sequences must be > 0, got {}", opt.max_sequences);
    FS_CHECK(opt.max_context >= 0, "max_context must be >= 0, got {}", opt.max_context);
    FS_CHECK(opt.state_memory_bytes >= 0, "state_memory_bytes must be >= 0, got {}", opt.state_memory_bytes);
    FS_CHECK(opt.threads >= 0, "threads must be >= 0, got {}", opt.threads);
    pool_ = std::make_unique<cpu::ThreadPool>(opt.threads);
    cpu::CpuModelOptions mo;
    mo.release = opt.numerics == Numerics::Release;
    mo.layers = opt.layers;
    mo.pool = pool_.get();
    model_ = cpu::load_cpu_model(model_dir, mo);
    const ModelConfig& cfg = model_->cfg;
    max_sequences_ = opt.max_sequences;

    // State bytes (fp32): per block of 64 tokens, the compressed entries and indexer keys those tokens produce;
    // per sequence, the window ring and the compressors' partial windows.
    const int64_t d = cfg.head_dim, W = cfg.sliding_window;
    int64_t per_block = 0, fixed = 0;
    for (int l = 0; l < model_->n_layers; ++l) {
        const auto& p = model_->layers[size_t(l)];
        fixed += W * d * 4;
        for (const cpu::CompressorParams* c : {&p.compressor, &p.index_compressor}) {
            if (!c->present) continue;
            per_block += (kBlockTokens + c->ratio - 1) / c->ratio * c->dim * 4;
            fixed += int64_t(c->ratio) * c->halves * c->dim * 4 * 2 + (c->halves == 2 ? c->ratio * c->dim * 4 * 2 : 0);
        }
    }
    bytes_per_block_ = std::max<int64_t>(per_block, kBlockTokens * d * 4);
    fixed_blocks_ = (fixed + bytes_per_block_ - 1) / bytes_per_block_;
    const int64_t pool_bytes = opt.state_memory_bytes > 0 ? opt.state_memory_bytes : (int64_t(1) << 30);
    total_blocks_ = pool_bytes / bytes_per_block_;
    FS_CHECK(total_blocks_ > fixed_blocks_,
             "state_memory_bytes {} is too small: one sequence needs at least {} bytes ({} blocks of {} bytes)",
             pool_bytes, (fixed_blocks_ + 1) * bytes_per_block_, fixed_blocks_ + 1, bytes_per_block_);
    max_context_ = opt.max_context > 0 ? opt.max_context : cfg.max_position_embeddings;
    max_context_ = std::min(max_context_, (total_blocks_ - fixed_blocks_) * kBlockTokens);
}

StateMemoryStats CpuBackend::memory() const {
    StateMemoryStats s;
    s.block_tokens = kBlockTokens;
    s.total_blocks = total_blocks_;
    s.used_blocks = used_blocks_;
    s.bytes_per_block = bytes_per_block_;
    s.live_sequences = int(seqs_.size());
    return s;
}

int64_t CpuBackend::blocks_for(int64_t n_tokens) const {
    if (n_tokens <= 0) return 0;
    return fixed_blocks_ + (n_tokens + kBlockTokens - 1) / kBlockTokens;
}

int CpuBackend::create_sequence() {
    FS_CHECK(int(seqs_.size()) < max_sequences_, "cannot create a sequence: {} sequences are live (max_sequences)",
             seqs_.size());
    const int id = next_id_++;
    seqs_.emplace(id, cpu::new_sequence_state(*model_));
    return id;
}

const cpu::SequenceState& CpuBackend::state(int seq_id) const {
    auto it = seqs_.find(seq_id);
    FS_CHECK(it != seqs_.end(), "unknown sequence id {}", seq_id);
    return it->second;
}

void CpuBackend::free_sequence(int seq_id) {
    const int64_t len = state(seq_id).length;
    used_blocks_ -= blocks_for(len);
    seqs_.erase(seq_id);
}

int64_t CpuBackend::sequence_length(int seq_id) const { return state(seq_id).length; }

void CpuBackend::forward(std::span<const SequenceStep> steps, std::vector<float>& logits) {
    FS_CHECK(!steps.empty(), "forward: no steps");
    std::vector<cpu::StepInput> inputs;
    int64_t needed = 0;
    for (const SequenceStep& s : steps) {
        auto it = seqs_.find(s.seq_id);
        FS_CHECK(it != seqs_.end(), "forward: unknown sequence id {}", s.seq_id);
        cpu::StepInput in;
        in.state = &it->second;
        in.tokens = s.tokens;
        in.n_tokens = s.n_tokens;
        in.all_logits = s.all_logits;
        inputs.push_back(in);
        const int64_t len = it->second.length;
        if (s.n_tokens > 0) needed += blocks_for(len + s.n_tokens) - blocks_for(len);
    }
    cpu::validate_steps(*model_, inputs, max_context_);
    if (used_blocks_ + needed > total_blocks_)
        throw OutOfStateMemory(fmt::format("state memory: the step needs {} more blocks but only {} of {} are free",
                                           needed, total_blocks_ - used_blocks_, total_blocks_));
    cpu::forward(*model_, inputs, logits, pool_.get());
    used_blocks_ += needed;
}

}  // namespace flashseek
