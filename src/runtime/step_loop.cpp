// The step loop (see step_loop.h). The loop: take new requests, honour cancellations, run one
// scheduler step, detokenize and route the results, publish gauges and the audit. When idle it sleeps on the
// inbox condition variable (woken by submit/cancel) with a short timeout so the heartbeat keeps moving.
#include "runtime/step_loop.h"

#include <algorithm>

#include "backend/diagnostics.h"
#include "runtime/stop_matcher.h"
#include "util/error.h"

namespace flashseek::runtime {

namespace {
int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void OutputChannel::push(OutputEvent ev) {
    {
        std::lock_guard lock(mu_);
        if (ev.finished) --open_choices_;
        events_.push_back(std::move(ev));
    }
    cv_.notify_all();
}

bool OutputChannel::wait_pop(std::vector<OutputEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (events_.empty() && open_choices_ > 0) cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    while (!events_.empty()) {
        out.push_back(std::move(events_.front()));
        events_.pop_front();
    }
    return open_choices_ > 0 || !out.empty();
}

struct StepLoop::Active {
    std::shared_ptr<OutputChannel> channel;
    int choice = 0;
    std::unique_ptr<tokenizer::IncrementalDecoder> decoder;
    StopMatcher stop;
    std::vector<int32_t> stop_ids;
    int64_t prompt_len = 0;
    int64_t generated = 0;
    int64_t min_new_tokens = 0;
    Clock::time_point arrival, first_token, last_token;
    bool got_first = false;
    bool stop_string_hit = false;

    explicit Active(std::vector<std::string> stops) : stop(std::move(stops)) {}
};

StepLoop::StepLoop(std::unique_ptr<Backend> backend, const tokenizer::Tokenizer& tok, StepLoopOptions options,
               Metrics& metrics)
    : backend_(std::move(backend)), tok_(tok), options_(options), metrics_(metrics) {
    scheduler_ = std::make_unique<Scheduler>(*backend_, options_.scheduler);
    max_model_len_ = scheduler_->max_sequence_tokens();
    heartbeat_ns_ = now_ns();
    publish_status();
    loop_alive_ = true;
    thread_ = std::thread([this] { loop(); });
}

StepLoop::~StepLoop() {
    accepting_ = false;
    {
        std::lock_guard lock(inbox_mu_);
        stop_thread_ = true;
        abort_requested_ = true;
    }
    inbox_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

bool StepLoop::try_reserve(int choices) {
    const int64_t running_cap = options_.scheduler.max_running > 0
                                    ? std::min(options_.scheduler.max_running, backend_->max_sequences())
                                    : backend_->max_sequences();
    const int64_t cap = running_cap + options_.max_waiting;
    int64_t cur = in_flight_.load();
    while (true) {
        if (cur + choices > cap) return false;
        if (in_flight_.compare_exchange_weak(cur, cur + choices)) return true;
    }
}

void StepLoop::release_reservation(int choices) { in_flight_ -= choices; }

void StepLoop::submit(GenerationRequest req) {
    {
        std::lock_guard lock(inbox_mu_);
        inbox_.push_back(std::move(req));
    }
    inbox_cv_.notify_all();
}

void StepLoop::stop_accepting() { accepting_ = false; }

void StepLoop::abort_all() {
    {
        std::lock_guard lock(inbox_mu_);
        abort_requested_ = true;
    }
    inbox_cv_.notify_all();
}

bool StepLoop::healthy() const {
    if (!loop_alive_.load() || !accepting_.load()) return false;
    const double since = double(now_ns() - heartbeat_ns_.load()) * 1e-9;
    return since < options_.watchdog_seconds;
}

StepLoopStatus StepLoop::status() const {
    std::lock_guard lock(status_mu_);
    StepLoopStatus s = status_;
    s.metrics.seconds_since_heartbeat = double(now_ns() - heartbeat_ns_.load()) * 1e-9;
    s.metrics.healthy = healthy();
    s.in_flight = in_flight_.load();
    return s;
}

void StepLoop::publish_status() {
    StepLoopStatus s;
    const StateMemoryStats m = backend_->memory();
    s.metrics.running = scheduler_->running();
    s.metrics.waiting = scheduler_->waiting();
    s.metrics.state_used_blocks = m.used_blocks;
    s.metrics.state_total_blocks = m.total_blocks;
    s.metrics.state_bytes_per_block = m.bytes_per_block;
    s.metrics.preemptions = scheduler_->counters().preemptions;
    s.metrics.engine_steps = scheduler_->counters().steps;
    // This thread runs the backend: no race with its steps.
    if (BackendDiagnostics* d = backend_->diagnostics()) s.metrics.graph_passes = d->graph_counts();
    s.audit = scheduler_->audit();
    std::lock_guard lock(status_mu_);
    status_ = s;
}

void StepLoop::admit_inbox() {
    std::vector<GenerationRequest> batch;
    {
        std::lock_guard lock(inbox_mu_);
        batch.swap(inbox_);
    }
    for (GenerationRequest& req : batch) {
        auto fail = [&](const std::string& reason, const std::string& msg) {
            OutputEvent ev;
            ev.choice = req.choice;
            ev.finished = true;
            ev.finish_reason = reason;
            ev.error = msg;
            ev.prompt_tokens = int64_t(req.prompt.size());
            req.channel->push(std::move(ev));
            release_reservation(1);
        };
        if (!accepting_.load()) {
            fail("shutdown", "the server is shutting down");
            continue;
        }
        if (req.channel->cancelled()) {
            metrics_.on_aborted("client_disconnect");
            fail("cancelled", "the client went away");
            continue;
        }
        auto a = std::make_unique<Active>(req.stop_strings);
        a->channel = req.channel;
        a->choice = req.choice;
        a->decoder = std::make_unique<tokenizer::IncrementalDecoder>(tok_, req.skip_special);
        a->stop_ids = req.params.stop_token_ids;
        a->prompt_len = int64_t(req.prompt.size());
        a->min_new_tokens = req.params.min_new_tokens;
        a->arrival = req.arrival;
        try {
            const uint64_t id = scheduler_->submit(std::move(req.prompt), std::move(req.params), req.arrival);
            active_.emplace(id, std::move(a));
        } catch (const Error& e) {
            fail("error", e.what());
        }
    }
}

void StepLoop::end_request(uint64_t sched_id, const std::string& reason, const std::string& error) {
    auto it = active_.find(sched_id);
    if (it == active_.end()) return;
    Active& a = *it->second;
    OutputEvent ev;
    ev.choice = a.choice;
    ev.finished = true;
    ev.finish_reason = reason;
    ev.error = error;
    ev.prompt_tokens = a.prompt_len;
    ev.completion_tokens = a.generated;
    a.channel->push(std::move(ev));
    active_.erase(it);
    release_reservation(1);
}

void StepLoop::check_cancellations() {
    bool abort = false;
    {
        std::lock_guard lock(inbox_mu_);
        abort = abort_requested_;
        abort_requested_ = false;
    }
    std::vector<uint64_t> gone;
    for (const auto& [id, a] : active_)
        if (abort || a->channel->cancelled()) gone.push_back(id);
    for (uint64_t id : gone) {
        const bool client = active_.at(id)->channel->cancelled();
        scheduler_->finish(id, FinishReason::Cancelled);
        metrics_.on_aborted(client ? "client_disconnect" : "shutdown");
        end_request(id, client ? "cancelled" : "shutdown",
                    client ? "the client went away" : "the server is shutting down");
    }
}

void StepLoop::handle_event(const RequestEvent& ev) {
    auto it = active_.find(ev.id);
    if (it == active_.end()) return;
    Active& a = *it->second;
    const Clock::time_point now = Clock::now();
    OutputEvent out;
    out.choice = a.choice;
    out.prompt_logprobs = ev.prompt_logprobs;
    FinishReason finish = ev.finish;
    if (ev.has_token) {
        a.generated = ev.generated;
        if (!a.got_first) {
            a.got_first = true;
            a.first_token = now;
            metrics_.on_first_token(seconds(now - a.arrival));
            metrics_.on_tokens(a.prompt_len, 0);
        } else {
            metrics_.on_inter_token(seconds(now - a.last_token));
        }
        a.last_token = now;
        metrics_.on_tokens(0, 1);
        out.tokens.push_back(TokenOut{ev.sample.token, ev.sample.logprob, ev.sample.top_logprobs});
        const bool is_stop_token = finish == FinishReason::Stop &&
                                   std::find(a.stop_ids.begin(), a.stop_ids.end(), ev.sample.token) != a.stop_ids.end();
        if (!is_stop_token && a.generated < a.min_new_tokens) {
            out.text = a.decoder->push(ev.sample.token);  // stop strings count only after min_tokens
        } else if (!is_stop_token) {
            out.text = a.stop.push(a.decoder->push(ev.sample.token));
            if (a.stop.matched()) {
                a.stop_string_hit = true;
                if (finish == FinishReason::None) scheduler_->finish(ev.id, FinishReason::Stop);
                finish = FinishReason::Stop;
            }
        }
    }
    if (finish == FinishReason::None) {
        if (!out.text.empty() || !out.tokens.empty() || !out.prompt_logprobs.empty()) a.channel->push(std::move(out));
        return;
    }
    if (!a.stop_string_hit) {
        out.text += a.stop.push(a.decoder->flush());
        out.text += a.stop.flush();
    }
    out.finished = true;
    out.prompt_tokens = a.prompt_len;
    out.completion_tokens = a.generated;
    switch (finish) {
        case FinishReason::Stop: out.finish_reason = "stop"; break;
        case FinishReason::Length: out.finish_reason = "length"; break;
        case FinishReason::Deadline: out.finish_reason = "deadline"; out.error = "the request deadline passed"; break;
        case FinishReason::Cancelled: out.finish_reason = "cancelled"; break;
        case FinishReason::Error: out.finish_reason = "error"; out.error = ev.error; break;
        case FinishReason::None: break;
    }
    if (finish == FinishReason::Stop || finish == FinishReason::Length) {
        const double e2e = seconds(now - a.arrival);
        const double ttft = a.got_first ? seconds(a.first_token - a.arrival) : e2e;
        const double tpot = a.generated > 1 ? seconds(a.last_token - a.first_token) / double(a.generated - 1) : 0;
        const double queue = ev.first_scheduled != Clock::time_point{} ? seconds(ev.first_scheduled - a.arrival) : ttft;
        metrics_.on_request_finished(out.finish_reason, a.prompt_len, a.generated, e2e, queue, ttft, tpot);
    } else {
        metrics_.on_aborted(finish == FinishReason::Deadline ? "deadline" : "error");
    }
    a.channel->push(std::move(out));
    active_.erase(it);
    release_reservation(1);
}

void StepLoop::gather_burst(std::unique_lock<std::mutex>& lock) {
    using ms = std::chrono::duration<double, std::milli>;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(ms(options_.batch_wait_ms));
    const auto quiet = std::chrono::duration_cast<Clock::duration>(ms(options_.batch_wait_ms / 10));
    while (!stop_thread_ && !abort_requested_) {
        const size_t seen = inbox_.size();
        const auto now = Clock::now();
        if (now >= until) break;
        const bool arrived = inbox_cv_.wait_until(lock, std::min(until, now + quiet), [&] {
            return inbox_.size() != seen || stop_thread_ || abort_requested_;
        });
        if (!arrived) break;  // quiet for the whole gap (or the window is over)
    }
}

void StepLoop::loop() {
    while (true) {
        heartbeat_ns_ = now_ns();
        {
            std::unique_lock lock(inbox_mu_);
            if (stop_thread_ && inbox_.empty() && active_.empty()) break;
            if (scheduler_->idle() && inbox_.empty() && !abort_requested_ && !stop_thread_)
                inbox_cv_.wait_for(lock, std::chrono::milliseconds(100));
            if (scheduler_->idle() && !inbox_.empty() && options_.batch_wait_ms > 0) gather_burst(lock);
        }
        heartbeat_ns_ = now_ns();
        try {
            admit_inbox();
            check_cancellations();
            if (!scheduler_->idle()) {
                const std::vector<RequestEvent> events = scheduler_->step();
                metrics_.on_iteration(scheduler_->counters().last_step_tokens);
                for (const RequestEvent& ev : events) handle_event(ev);
            }
        } catch (const std::exception& e) {
            // A bookkeeping invariant broke (FS_CHECK): fail what is in flight rather than take the server down.
            std::vector<uint64_t> ids;
            for (const auto& [id, a] : active_) ids.push_back(id);
            for (uint64_t id : ids) {
                scheduler_->finish(id, FinishReason::Error);
                metrics_.on_aborted("error");
                end_request(id, "error", e.what());
            }
        }
        publish_status();
    }
    loop_alive_ = false;
}

}  // namespace flashseek::runtime
