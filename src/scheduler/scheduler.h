// Continuous batching over one Backend: requests join and leave between steps; each step mixes one decode token
// per running request with chunked prefill of others under a token budget; admission is checked against the
// state-memory block pool, and when decodes outgrow the pool the latest-admitted request is preempted (its state
// dropped and recomputed later from prompt + generated tokens). Not thread-safe: one engine thread owns it.
// No CUDA here, so it is unit-tested on the CPU with a fake backend.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "scheduler/background_worker.h"
#include "scheduler/request.h"

namespace flashseek {

struct SchedulerOptions {
    int max_batch_tokens = 512;  // tokens appended per step, decode and prefill together
    int prefill_chunk = 256;     // the largest prefill piece of one request in one step
    int max_running = 0;         // 0 = backend.max_sequences()
    int64_t max_context = 0;     // tokens per sequence; 0 = the model's max_position_embeddings
    // Prefill coalescing (0 = off): while requests are decoding and no prompt piece runs in the step, a new request
    // waits until the oldest waiting one has waited this long, or until the waiting prompts fill the step's token
    // budget or the batch. Where prompt pieces run as a pass of their own with a cost fixed per pass (the CUDA
    // backend), requests arriving one by one then share one prefill pass instead of each stalling every decoding
    // request once; the price is up to this much more time to first token for requests arriving while others decode.
    double prefill_hold_ms = 0;
};

// Exact state-memory audit: what the scheduler believes each running sequence holds versus the pool's numbers.
struct SchedulerAudit {
    bool ok = true;
    std::string detail;          // what disagrees, when !ok
    int64_t expected_used_blocks = 0;
    int64_t used_blocks = 0;
    int64_t total_blocks = 0;
    int running = 0;
    int waiting = 0;
    int live_sequences = 0;
};

struct SchedulerCounters {
    uint64_t steps = 0;
    uint64_t preemptions = 0;
    uint64_t prompt_tokens_computed = 0;  // prefill tokens appended (including recomputation)
    uint64_t generated_tokens = 0;
    uint64_t cancelled = 0;
    uint64_t deadline_expired = 0;
    uint64_t errors = 0;
    int last_step_tokens = 0;
};

class Scheduler {
public:
    Scheduler(Backend& backend, SchedulerOptions options);

    // Queues a request and returns its id. Throws Error naming the field when it is empty, its tokens are out of
    // the vocabulary, it exceeds the context, or prompt + max_new_tokens can never fit in the state-memory pool.
    uint64_t submit(std::vector<int32_t> prompt, GenerationParams params, Clock::time_point now = Clock::now());

    // Ends a request now (client disconnect, stop string matched by the server, shutdown) and frees its state
    // before returning. Unknown or finished ids are ignored. Returns whether the id was live.
    bool finish(uint64_t id, FinishReason reason);

    // Runs one step: deadlines, preemption, admission, one backend call, token bookkeeping. Returns what happened
    // to each request touched (sampled tokens and terminations). A step with nothing to do returns no events.
    std::vector<RequestEvent> step(Clock::time_point now = Clock::now());

    bool idle() const { return running_.empty() && waiting_.empty(); }
    int running() const { return int(running_.size()); }
    int waiting() const { return int(waiting_.size()); }
    int64_t max_context() const { return max_context_; }
    // The most tokens one sequence can ever hold: the context limit, further limited by the whole block pool.
    int64_t max_sequence_tokens() const { return max_sequence_tokens_; }
    const SchedulerCounters& counters() const { return counters_; }
    const Request* find(uint64_t id) const;
    SchedulerAudit audit() const;
    Backend& backend() { return backend_; }

private:
    struct Planned {
        Request* req;
        int n_tokens;
    };
    void release(Request& r);
    void preempt(Request& r);
    void finish_request(Request& r, FinishReason reason, std::vector<RequestEvent>& events, std::string error = {});
    void expire_deadlines(Clock::time_point now, std::vector<RequestEvent>& events);
    int64_t blocks_to_grow(const Request& r, int n_tokens) const;
    // Whether admission waits in this step (SchedulerOptions::prefill_hold_ms), given the decode and prompt entries
    // already planned and the token budget they leave.
    bool holds_admission(const std::vector<Planned>& plan, int budget, Clock::time_point now) const;
    // Queues the allowed-token masks of the plan entries in `constrained` on mask_worker_ and points their
    // sample_params_ at them; returns the future the backend waits on (invalid when nothing is constrained).
    std::shared_future<void> start_masks(const std::vector<Planned>& plan, const std::vector<size_t>& constrained);

    Backend& backend_;
    SchedulerOptions options_;
    int max_running_ = 0;
    int64_t max_context_ = 0;
    int64_t max_sequence_tokens_ = 0;
    uint64_t next_id_ = 1;
    uint64_t next_admit_order_ = 1;
    std::map<uint64_t, std::unique_ptr<Request>> requests_;  // live (waiting or running) requests
    std::deque<Request*> waiting_;                           // FIFO; preempted requests go to the front
    std::vector<Request*> running_;                          // admission order
    SchedulerCounters counters_;
    std::vector<SequenceStep> steps_;
    std::vector<SampleParams> sample_params_;
    std::vector<SampleResult> results_;
    // Constrained decoding: one allowed-token mask per constrained entry of the step, filled on mask_worker_
    // while the backend runs the forward pass; mask_errors_[k] is set when constraint k failed to produce one.
    std::vector<std::vector<uint32_t>> masks_;
    std::vector<std::string> mask_errors_;
    std::unique_ptr<BackgroundWorker> mask_worker_;  // started with the first constrained request
};

}  // namespace flashseek
