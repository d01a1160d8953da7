// The CPU Backend: the reference forward (src/cpu) behind the engine interface, with sequences' incremental
// state accounted in blocks of 64 tokens so that the scheduler sees the same memory behaviour as on the GPU.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "cpu/forward.h"
#include "cpu/model.h"
#include "cpu/thread_pool.h"
#include "backend/backend.h"
#include "backend/options.h"

namespace flashseek {

class CpuBackend : public Backend {
public:
    CpuBackend(const std::string& model_dir, const BackendOptions& opt);

    const ModelConfig& config() const override { return model_->cfg; }
    std::string name() const override { return "cpu"; }

    StateMemoryStats memory() const override;
    int64_t blocks_for(int64_t n_tokens) const override;
    int max_sequences() const override { return max_sequences_; }

    int create_sequence() override;
    void free_sequence(int seq_id) override;
    int64_t sequence_length(int seq_id) const override;

    void forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override;

    int64_t max_context() const { return max_context_; }

    // Block accounting: a sequence of n > 0 tokens holds fixed_blocks (window rings and compressor partial
    // windows of every layer) plus ceil(n / block_tokens) blocks for its compressed entries and indexer keys.
    static constexpr int64_t kBlockTokens = 64;

private:
    const cpu::SequenceState& state(int seq_id) const;

    std::unique_ptr<cpu::ThreadPool> pool_;
    std::unique_ptr<cpu::CpuModel> model_;
    std::map<int, cpu::SequenceState> seqs_;
    int next_id_ = 0;
    int max_sequences_ = 0;
    int64_t max_context_ = 0;
    int64_t bytes_per_block_ = 0;
    int64_t fixed_blocks_ = 0;
    int64_t total_blocks_ = 0;
    int64_t used_blocks_ = 0;
};

}  // namespace flashseek
