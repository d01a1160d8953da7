// The CPU reference forward pass over a batch of sequences (docs/model.md §2): embedding -> 4-stream mHC ->
// attention (window / CSA / HCA) and MoE per layer -> hc_head -> norm -> head. Each step appends tokens to a
// sequence's incremental state; a prompt prefilled at once, in chunks of any size or token by token gives the
// same logits (bit for bit on one machine), and batching sequences together does not change any of them.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cpu/model.h"
#include "cpu/state.h"
#include "cpu/thread_pool.h"

namespace flashseek::cpu {

struct StepInput {
    SequenceState* state = nullptr;  // one distinct state per entry
    const int32_t* tokens = nullptr;
    int n_tokens = 0;
    bool all_logits = false;  // logits for every token, else only the last
};

// Rows of logits a step entry produces.
inline int64_t logit_rows(const StepInput& s) { return s.all_logits ? s.n_tokens : 1; }

// Checks the steps (token ids in range, n_tokens > 0, distinct states, context limit) without changing anything;
// throws Error naming the problem.
void validate_steps(const CpuModel& m, std::span<const StepInput> steps, int64_t max_context);

// Runs the steps: logits receives the rows of each entry in order ([rows, vocab] fp32 each). The states advance.
void forward(const CpuModel& m, std::span<const StepInput> steps, std::vector<float>& logits, ThreadPool* pool);

// Creates the empty state of a new sequence for model m.
SequenceState new_sequence_state(const CpuModel& m);

}  // namespace flashseek::cpu
