// One generation request as the scheduler sees it: token ids in, sampled token ids out. Text, chat templates and
// stop strings live in the server; the scheduler only knows ids, limits, deadlines and state-memory blocks.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "scheduler/token_constraint.h"

namespace flashseek {

using Clock = std::chrono::steady_clock;

enum class FinishReason {
    None,       // still running
    Stop,       // a stop token was sampled (or the server matched a stop string)
    Length,     // max_new_tokens or the context limit
    Cancelled,  // the client went away or the server aborted it
    Deadline,   // the per-request deadline passed
    Error,      // it can never fit in state memory, or the backend failed while it was in the batch
};
const char* finish_reason_name(FinishReason r);

struct GenerationParams {
    // draw_index and the spans (history, bias, bans, mask, score targets) are set by the scheduler per step.
    SampleParams sample;
    int64_t max_new_tokens = 16;           // 0: only score the prompt (prompt_logprobs), generate nothing
    int64_t min_new_tokens = 0;            // stop_token_ids are banned until this many tokens were generated
    std::vector<int32_t> stop_token_ids;   // sampling one of these ends the request with Stop
    std::vector<LogitBias> logit_bias;
    // Constrained decoding: masks every sampled token; the request stops when it is complete. With a constraint,
    // min_new_tokens does not ban stop ids (the constraint decides where the output ends).
    std::shared_ptr<TokenConstraint> constraint;
    int prompt_logprobs = -1;              // >= 0: score every prompt token after the first, with this many top-N
    Clock::time_point deadline = Clock::time_point::max();
    // Test hook (server flag --enable-debug-hooks): the i-th generated token is forced_tokens[i] instead of the
    // sampled one while i < size(), so end-to-end tests can drive exact outputs (tool calls, stop strings).
    std::vector<int32_t> forced_tokens;
};

enum class RequestState { Waiting, Running, Finished };

struct Request {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // prompt + generated so far (the last generated one may not be computed yet)
    int64_t prompt_len = 0;
    int64_t generated = 0;        // sampled tokens so far
    int64_t computed = 0;         // tokens appended to the backend sequence (reset to 0 by preemption)
    GenerationParams params;
    RequestState state = RequestState::Waiting;
    int seq_id = -1;              // backend sequence while Running
    uint64_t admit_order = 0;     // larger = admitted later (preemption victims are the latest admitted)
    int preemptions = 0;
    int64_t scored_upto = 1;      // prompt positions [1, scored_upto) have had their logprob reported
    Clock::time_point arrival{};
    Clock::time_point first_scheduled{};  // first time any of its tokens ran (queue time ends here)

    int64_t pending() const { return int64_t(tokens.size()) - computed; }
};

// What one step did to one request: a sampled token and/or the end of the request.
struct RequestEvent {
    uint64_t id = 0;
    std::vector<ScoredToken> prompt_logprobs;  // prompt tokens scored in this step, in order
    bool has_token = false;
    SampleResult sample;
    FinishReason finish = FinishReason::None;
    std::string error;  // set when finish == Error
    int64_t prompt_len = 0;
    int64_t generated = 0;
    Clock::time_point first_scheduled{};  // when its first tokens ran (end of queue time)
};

}  // namespace flashseek
