// A test double for Backend with real block accounting and deterministic "model" output: the next token is a hash
// of every token appended to the sequence so far (plus seed and draw index when sampling), so recomputation after
// preemption must reproduce exactly the same continuation, and any bookkeeping slip changes the output. The
// sampler inputs the scheduler passes are honoured the simple way (a banned or masked token is replaced by the
// lowest allowed id) and recorded, and scored rows get a deterministic logprob per (position, target).
#pragma once
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "util/error.h"

namespace flashseek::test {

class FakeBackend : public Backend {
public:
    FakeBackend(int64_t total_blocks, int64_t block_tokens, int max_seqs, int64_t vocab = 1000,
                int64_t max_context = 1 << 20)
        : total_blocks_(total_blocks), block_tokens_(block_tokens), max_seqs_(max_seqs) {
        config_.vocab_size = vocab;
        config_.max_position_embeddings = max_context;
        config_.eos_token_id = 1;
    }
    const ModelConfig& config() const override { return config_; }
    std::string name() const override { return "fake"; }
    StateMemoryStats memory() const override {
        StateMemoryStats m;
        m.block_tokens = block_tokens_;
        m.total_blocks = total_blocks_;
        m.used_blocks = used_;
        m.bytes_per_block = 1024;
        m.live_sequences = int(seqs_.size());
        return m;
    }
    // One fixed block per sequence (like a sliding-window buffer) plus one per block_tokens of context.
    int64_t blocks_for(int64_t n) const override { return n <= 0 ? 0 : 1 + (n + block_tokens_ - 1) / block_tokens_; }
    int max_sequences() const override { return max_seqs_; }
    int create_sequence() override {
        FS_CHECK(int(seqs_.size()) < max_seqs_, "fake: max_sequences ({}) live", max_seqs_);
        const int id = next_id_++;
        seqs_[id] = Seq{};
        return id;
    }
    void free_sequence(int id) override {
        auto it = seqs_.find(id);
        FS_CHECK(it != seqs_.end(), "fake: free of unknown sequence {}", id);
        used_ -= blocks_for(it->second.len);
        seqs_.erase(it);
    }
    int64_t sequence_length(int id) const override { return seqs_.at(id).len; }
    void forward(std::span<const SequenceStep>, std::vector<float>&) override {
        throw std::logic_error("fake backend: forward() is not used by the scheduler");
    }
    void forward_sample(std::span<const SequenceStep> steps, std::span<const SampleParams> params,
                        std::vector<SampleResult>& out) override {
        if (fail_next_) {
            fail_next_ = false;
            throw std::runtime_error("fake: injected device failure");
        }
        int64_t need = 0;
        for (const auto& s : steps) {
            auto it = seqs_.find(s.seq_id);
            FS_CHECK(it != seqs_.end(), "fake: step on unknown sequence {}", s.seq_id);
            FS_CHECK(s.n_tokens >= 1, "fake: empty step");
            need += blocks_for(it->second.len + s.n_tokens) - blocks_for(it->second.len);
        }
        if (used_ + need > total_blocks_) throw OutOfStateMemory("fake: pool exhausted");
        out.resize(steps.size());
        ++calls;
        for (size_t i = 0; i < steps.size(); ++i) {
            Seq& q = seqs_.at(steps[i].seq_id);
            used_ += blocks_for(q.len + steps[i].n_tokens) - blocks_for(q.len);
            for (int t = 0; t < steps[i].n_tokens; ++t) {
                q.hash = (q.hash ^ uint64_t(steps[i].tokens[t])) * 0x100000001b3ull;
                ++q.len;
            }
            uint64_t h = q.hash;
            if (params[i].temperature > 0.f) h = (h ^ params[i].seed) * 0x9e3779b97f4a7c15ull + params[i].draw_index;
            h ^= h >> 29;
            // Never EOS (id 1) unless the test asks for it through eos_after.
            int32_t tok = int32_t(2 + h % uint64_t(config_.vocab_size - 2));
            if (eos_after > 0 && q.len >= eos_after) tok = 1;
            const SampleParams& p = params[i];
            if (p.allowed_tokens_ready.valid()) p.allowed_tokens_ready.wait();
            auto allowed = [&](int32_t t) {
                if (p.allowed_tokens && !((p.allowed_tokens[t >> 5] >> (t & 31)) & 1u)) return false;
                return std::find(p.banned_tokens.begin(), p.banned_tokens.end(), t) == p.banned_tokens.end();
            };
            if (!allowed(tok)) {
                tok = -1;
                for (int32_t t = 0; t < int32_t(config_.vocab_size) && tok < 0; ++t)
                    if (allowed(t)) tok = t;
                FS_CHECK(tok >= 0, "fake: every token excluded");
            }
            out[i] = SampleResult{tok, -0.5f, {}, {}};
            FS_CHECK(p.score_targets.empty() || steps[i].all_logits, "fake: scoring without all_logits");
            const int64_t first_pos = q.len - steps[i].n_tokens + 1;  // position of score target 0
            for (size_t j = 0; j < p.score_targets.size(); ++j)
                out[i].scored.push_back(
                    ScoredToken{p.score_targets[j], score_of(first_pos + int64_t(j), p.score_targets[j]), 1, {}});
            seen.push_back(Seen{std::vector<int32_t>(p.banned_tokens.begin(), p.banned_tokens.end()),
                                p.allowed_tokens != nullptr, p.score_targets.size(), steps[i].all_logits});
            tokens_this_call += steps[i].n_tokens;
            step_log.push_back({steps[i].seq_id, nullptr, steps[i].n_tokens, steps[i].all_logits, steps[i].prefill});
        }
    }

    void fail_next_call() { fail_next_ = true; }
    // The logprob the fake reports for `target` at prompt position `pos`.
    static float score_of(int64_t pos, int32_t target) { return -float((pos * 7 + target) % 97) / 10.f - 0.01f; }
    struct Seen {
        std::vector<int32_t> banned;
        bool masked = false;
        size_t scored = 0;
        bool all_logits = false;
    };
    std::vector<Seen> seen;  // one per entry per call, in order
    int64_t eos_after = 0;        // when > 0, sequences of at least this length sample EOS
    int calls = 0;
    int64_t tokens_this_call = 0;  // cumulative appended tokens (all calls)
    std::vector<SequenceStep> step_log;  // every entry of every call (tokens not kept)

private:
    struct Seq {
        int64_t len = 0;
        uint64_t hash = 0xcbf29ce484222325ull;
    };
    ModelConfig config_;
    int64_t total_blocks_, block_tokens_;
    int max_seqs_;
    int64_t used_ = 0;
    int next_id_ = 0;
    bool fail_next_ = false;
    std::map<int, Seq> seqs_;
};

}  // namespace flashseek::test
