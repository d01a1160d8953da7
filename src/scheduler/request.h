// One generation request as the scheduler sees it: token ids in, sampled token ids out. Text, chat templates and
// stop strings live in the server; the scheduler only knows ids, limits, deadlines and state-memory blocks.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

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
    SampleParams sample;                   // draw_index is set by the scheduler per sampled token
    int64_t max_new_tokens = 16;
    std::vector<int32_t> stop_token_ids;   // sampling one of these ends the request with Stop
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
    Clock::time_point arrival{};
    Clock::time_point first_scheduled{};  // first time any of its tokens ran (queue time ends here)

    int64_t pending() const { return int64_t(tokens.size()) - computed; }
};

// What one step did to one request: a sampled token and/or the end of the request.
struct RequestEvent {
    uint64_t id = 0;
    bool has_token = false;
    SampleResult sample;
    FinishReason finish = FinishReason::None;
    std::string error;  // set when finish == Error
    int64_t prompt_len = 0;
    int64_t generated = 0;
    Clock::time_point first_scheduled{};  // when its first tokens ran (end of queue time)
};

}  // namespace flashseek
