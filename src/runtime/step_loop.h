// The step loop: one thread that owns the Backend and the Scheduler, takes requests from front-end threads (the
// HTTP handlers) through a locked inbox, runs batched steps, turns sampled ids into text (incremental UTF-8-safe detokenization, stop
// strings) and hands per-request events back through OutputChannels. Cancellation is a flag on the channel that
// the loop checks before every step, so a disconnected client's state is freed within one step.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "scheduler/scheduler.h"
#include "runtime/metrics.h"
#include "tokenizer/tokenizer.h"

namespace flashseek::runtime {

struct TokenOut {
    int32_t id = -1;
    float logprob = 0.f;
    std::vector<std::pair<int32_t, float>> top;
};

struct OutputEvent {
    int choice = 0;
    std::vector<ScoredToken> prompt_logprobs;  // prompt tokens scored since the last event (positions 1, 2, ...)
    std::string text;              // newly final text (stop strings already applied)
    std::vector<TokenOut> tokens;  // tokens sampled since the last event
    bool finished = false;
    std::string finish_reason;     // stop | length | deadline | error | cancelled | shutdown
    std::string error;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
};

// Events of all choices of one HTTP request. Written by the step-loop thread, read by one handler thread.
class OutputChannel {
public:
    explicit OutputChannel(int choices) : open_choices_(choices) {}
    void push(OutputEvent ev);
    // Waits up to `timeout` for events and moves them into `out`. Returns false once every choice has finished
    // and everything was taken.
    bool wait_pop(std::vector<OutputEvent>& out, std::chrono::milliseconds timeout);
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<OutputEvent> events_;
    int open_choices_;
    std::atomic<bool> cancelled_{false};
};

struct GenerationRequest {
    std::vector<int32_t> prompt;
    GenerationParams params;
    std::vector<std::string> stop_strings;  // not matched before params.min_new_tokens tokens (vLLM semantics)
    bool skip_special = true;
    int choice = 0;
    Clock::time_point arrival = Clock::now();
    std::shared_ptr<OutputChannel> channel;
};

struct StepLoopOptions {
    SchedulerOptions scheduler;
    int max_waiting = 256;         // queued choices beyond the running batch before 429
    double watchdog_seconds = 60;  // /health turns 503 when one loop iteration takes longer
    // An idle engine that gets work waits for the rest of a burst before its first step: until no request has
    // arrived for a tenth of this or this many milliseconds have passed (0: steps at once). Clients whose previous
    // requests ended in the same step send their next ones within milliseconds of each other; without the wait
    // the first of them is prefilled alone and the rest wait for that step.
    double batch_wait_ms = 0;
};

struct StepLoopStatus {
    MetricsSnapshotInput metrics;
    SchedulerAudit audit;
    int64_t in_flight = 0;  // submitted choices not yet finished
};

class StepLoop {
public:
    StepLoop(std::unique_ptr<Backend> backend, const tokenizer::Tokenizer& tok, StepLoopOptions options, Metrics& metrics);
    ~StepLoop();

    // Reserves room for `choices` requests; false when the queue is full (the caller answers 429).
    bool try_reserve(int choices);
    void release_reservation(int choices);
    // Hands a reserved request to the step-loop thread. Thread-safe.
    void submit(GenerationRequest req);
    // Stops taking requests (submit fails them with "shutdown") and, with abort, ends everything in flight.
    void stop_accepting();
    void abort_all();
    bool accepting() const { return accepting_.load(); }
    bool healthy() const;
    StepLoopStatus status() const;
    int64_t max_model_len() const { return max_model_len_; }
    const ModelConfig& config() const { return backend_->config(); }
    std::string backend_name() const { return backend_->name(); }

private:
    struct Active;
    void loop();
    // With inbox_mu_ held (lock): waits while a burst of requests is still arriving (StepLoopOptions::batch_wait_ms).
    void gather_burst(std::unique_lock<std::mutex>& lock);
    void admit_inbox();
    void check_cancellations();
    void handle_event(const RequestEvent& ev);
    void end_request(uint64_t sched_id, const std::string& reason, const std::string& error);
    void publish_status();

    std::unique_ptr<Backend> backend_;
    const tokenizer::Tokenizer& tok_;
    StepLoopOptions options_;
    Metrics& metrics_;
    std::unique_ptr<Scheduler> scheduler_;
    int64_t max_model_len_ = 0;

    mutable std::mutex inbox_mu_;
    std::condition_variable inbox_cv_;
    std::vector<GenerationRequest> inbox_;
    bool stop_thread_ = false;
    bool abort_requested_ = false;

    std::atomic<bool> accepting_{true};
    std::atomic<int64_t> in_flight_{0};
    std::atomic<int64_t> heartbeat_ns_{0};
    std::atomic<bool> loop_alive_{false};

    mutable std::mutex status_mu_;
    StepLoopStatus status_;

    std::unordered_map<uint64_t, std::unique_ptr<Active>> active_;  // by scheduler id
    std::thread thread_;
};

}  // namespace flashseek::runtime
