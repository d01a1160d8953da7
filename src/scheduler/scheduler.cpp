// Continuous batching step loop (see scheduler.h). Policy, in order of priority:
//  1. requests past their deadline end first, so a stalled queue cannot hold them forever;
//  2. every running request that is decoding gets its one token (keeps inter-token latency flat);
//  3. running prefills get chunks of the remaining token budget, oldest first;
//  4. state memory is reserved oldest-first; when it runs short the latest-admitted request is preempted
//     (recompute: its blocks are freed at once and it returns to the front of the queue);
//  5. waiting requests are admitted FIFO while their whole pending prefill fits in the free blocks (no skipping,
//     so a large request at the head cannot starve); with prefill_hold_ms, not while others decode and no prompt
//     piece runs, until the oldest has waited that long or the waiting prompts fill the step or the batch.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <stdexcept>

#include "util/error.h"

namespace flashseek {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::None: return "none";
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::Deadline: return "deadline";
        case FinishReason::Error: return "error";
    }
    return "unknown";
}

Scheduler::Scheduler(Backend& backend, SchedulerOptions options) : backend_(backend), options_(options) {
    FS_CHECK(options_.max_batch_tokens >= 1, "scheduler: max_batch_tokens must be >= 1 (got {})",
             options_.max_batch_tokens);
    FS_CHECK(options_.prefill_chunk >= 1, "scheduler: prefill_chunk must be >= 1 (got {})", options_.prefill_chunk);
    FS_CHECK(options_.prefill_hold_ms >= 0 && options_.prefill_hold_ms <= 10000,
             "scheduler: prefill_hold_ms must be in [0, 10000] (got {})", options_.prefill_hold_ms);
    max_running_ = backend_.max_sequences();
    if (options_.max_running > 0) max_running_ = std::min(max_running_, options_.max_running);
    FS_CHECK(max_running_ >= 1, "scheduler: the backend allows no sequences (max_sequences = {})",
             backend_.max_sequences());
    max_context_ = backend_.config().max_position_embeddings;
    if (options_.max_context > 0) max_context_ = std::min(max_context_, options_.max_context);
    FS_CHECK(max_context_ >= 2, "scheduler: max_context must be >= 2 (got {})", max_context_);
    // The largest sequence the whole pool can hold (blocks_for is monotonic): binary search.
    const int64_t total = backend_.memory().total_blocks;
    int64_t lo = 0, hi = max_context_;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (backend_.blocks_for(mid) <= total) lo = mid; else hi = mid - 1;
    }
    max_sequence_tokens_ = lo;
    FS_CHECK(max_sequence_tokens_ >= 2, "scheduler: the state-memory pool ({} blocks) cannot hold even 2 tokens",
             total);
}

uint64_t Scheduler::submit(std::vector<int32_t> prompt, GenerationParams params, Clock::time_point now) {
    FS_CHECK(!prompt.empty(), "prompt: must contain at least one token");
    const int64_t vocab = backend_.config().vocab_size;
    for (size_t i = 0; i < prompt.size(); ++i)
        FS_CHECK(prompt[i] >= 0 && prompt[i] < vocab, "prompt: token {} at position {} is outside the vocabulary [0, {})",
                 prompt[i], i, vocab);
    for (size_t i = 0; i < params.forced_tokens.size(); ++i)
        FS_CHECK(params.forced_tokens[i] >= 0 && params.forced_tokens[i] < vocab,
                 "debug_forced_tokens: token {} at position {} is outside the vocabulary [0, {})",
                 params.forced_tokens[i], i, vocab);
    FS_CHECK(params.max_new_tokens >= 1 || (params.max_new_tokens == 0 && params.prompt_logprobs >= 0),
             "max_tokens: must be >= 1, or 0 when only the prompt is scored (got {})", params.max_new_tokens);
    FS_CHECK(params.min_new_tokens >= 0, "min_tokens: must be >= 0 (got {})", params.min_new_tokens);
    for (const LogitBias& b : params.logit_bias)
        FS_CHECK(b.token >= 0 && b.token < vocab, "logit_bias: token {} is outside the vocabulary [0, {})", b.token,
                 vocab);
    const int64_t n = int64_t(prompt.size());
    FS_CHECK(n + params.max_new_tokens <= max_sequence_tokens_,
             "max_tokens: prompt ({} tokens) + max_tokens ({}) = {} exceeds the maximum context of {} tokens", n,
             params.max_new_tokens, n + params.max_new_tokens, max_sequence_tokens_);
    auto req = std::make_unique<Request>();
    req->id = next_id_++;
    req->prompt_len = n;
    req->tokens = std::move(prompt);
    req->params = std::move(params);
    req->arrival = now;
    Request* r = req.get();
    requests_.emplace(r->id, std::move(req));
    waiting_.push_back(r);
    return r->id;
}

const Request* Scheduler::find(uint64_t id) const {
    auto it = requests_.find(id);
    return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::release(Request& r) {
    if (r.seq_id >= 0) {
        backend_.free_sequence(r.seq_id);
        r.seq_id = -1;
    }
    std::erase(running_, &r);
}

void Scheduler::preempt(Request& r) {
    release(r);
    r.computed = 0;
    r.state = RequestState::Waiting;
    ++r.preemptions;
    ++counters_.preemptions;
    waiting_.push_front(&r);
}

void Scheduler::finish_request(Request& r, FinishReason reason, std::vector<RequestEvent>& events, std::string error) {
    release(r);
    std::erase(waiting_, &r);
    r.state = RequestState::Finished;
    RequestEvent ev;
    ev.id = r.id;
    ev.finish = reason;
    ev.error = std::move(error);
    ev.prompt_len = r.prompt_len;
    ev.generated = r.generated;
    ev.first_scheduled = r.first_scheduled;
    events.push_back(std::move(ev));
    if (reason == FinishReason::Deadline) ++counters_.deadline_expired;
    if (reason == FinishReason::Error) ++counters_.errors;
    if (reason == FinishReason::Cancelled) ++counters_.cancelled;
    requests_.erase(r.id);  // r is gone after this line
}

bool Scheduler::finish(uint64_t id, FinishReason reason) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return false;
    std::vector<RequestEvent> ignored;
    finish_request(*it->second, reason, ignored);
    return true;
}

void Scheduler::expire_deadlines(Clock::time_point now, std::vector<RequestEvent>& events) {
    std::vector<Request*> expired;
    for (auto& [id, r] : requests_)
        if (r->params.deadline <= now) expired.push_back(r.get());
    for (Request* r : expired) finish_request(*r, FinishReason::Deadline, events);
}

int64_t Scheduler::blocks_to_grow(const Request& r, int n_tokens) const {
    return backend_.blocks_for(r.computed + n_tokens) - backend_.blocks_for(r.computed);
}

std::shared_future<void> Scheduler::start_masks(const std::vector<Planned>& plan,
                                                const std::vector<size_t>& constrained) {
    if (constrained.empty()) return {};
    if (!mask_worker_) mask_worker_ = std::make_unique<BackgroundWorker>();
    const int64_t vocab = backend_.config().vocab_size;
    masks_.resize(std::max(masks_.size(), constrained.size()));
    mask_errors_.assign(constrained.size(), {});
    std::vector<std::pair<TokenConstraint*, uint32_t*>> jobs;
    for (size_t k = 0; k < constrained.size(); ++k) {
        masks_[k].resize(size_t(token_mask_words(vocab)));
        jobs.emplace_back(plan[constrained[k]].req->params.constraint.get(), masks_[k].data());
    }
    std::shared_future<void> ready = mask_worker_->submit([this, jobs = std::move(jobs), vocab] {
        for (size_t k = 0; k < jobs.size(); ++k) {
            try {
                jobs[k].first->fill_allowed(jobs[k].second, vocab);
                // An empty mask would make the sampler fail the whole step, every batch-mate with it.
                const uint32_t* words = jobs[k].second;
                if (std::all_of(words, words + token_mask_words(vocab), [](uint32_t w) { return w == 0; }))
                    throw std::runtime_error(kConstraintDeadEnd);
            } catch (const std::exception& e) {
                // This request ends with the error after the step; sample it unconstrained meanwhile.
                mask_errors_[k] = e.what();
                std::fill(jobs[k].second, jobs[k].second + token_mask_words(vocab), ~0u);
            }
        }
    });
    for (size_t k = 0; k < constrained.size(); ++k) {
        sample_params_[constrained[k]].allowed_tokens = masks_[k].data();
        sample_params_[constrained[k]].allowed_tokens_ready = ready;
    }
    return ready;
}

namespace {
// Whether n tokens of r in a step are a prompt piece (or a recomputation after preemption) rather than a decode.
bool is_prompt_piece(const Request& r, int n) { return r.computed < r.prompt_len || n > 1; }
}  // namespace

bool Scheduler::holds_admission(const std::vector<Planned>& plan, int budget, Clock::time_point now) const {
    if (options_.prefill_hold_ms <= 0 || waiting_.empty()) return false;
    if (plan.empty()) return false;  // nothing to stall
    for (const Planned& p : plan)
        if (is_prompt_piece(*p.req, p.n_tokens)) return false;  // a prefill pass runs anyway: arrivals join it
    // The oldest waiting request (preempted ones return to the front with their first arrival: never held long).
    Clock::time_point oldest = waiting_.front()->arrival;
    int64_t waiting_tokens = 0;
    for (const Request* w : waiting_) {
        oldest = std::min(oldest, w->arrival);
        waiting_tokens += w->pending();
    }
    const auto hold = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(options_.prefill_hold_ms));
    if (now - oldest >= hold) return false;
    if (waiting_tokens >= budget) return false;                                   // the step's budget is full
    if (int(running_.size() + waiting_.size()) >= max_running_) return false;  // so is the batch
    return true;
}

std::vector<RequestEvent> Scheduler::step(Clock::time_point now) {
    std::vector<RequestEvent> events;
    expire_deadlines(now, events);
    if (idle()) return events;

    // Token budget: decodes first, then running prefills in admission order.
    int budget = options_.max_batch_tokens;
    std::vector<Planned> plan;
    for (Request* r : running_)
        if (r->pending() == 1 && budget > 0) { plan.push_back({r, 1}); --budget; }
    for (Request* r : running_) {
        if (r->pending() <= 1 || budget <= 0) continue;
        const int n = int(std::min<int64_t>({r->pending(), options_.prefill_chunk, budget}));
        plan.push_back({r, n});
        budget -= n;
    }

    // Memory: reserve oldest-first; preempt the latest admitted until the plan fits.
    auto free_blocks = [&] {
        const StateMemoryStats m = backend_.memory();
        return m.total_blocks - m.used_blocks;
    };
    auto plan_need = [&] {
        int64_t need = 0;
        for (const Planned& p : plan) need += blocks_to_grow(*p.req, p.n_tokens);
        return need;
    };
    while (!plan.empty() && plan_need() > free_blocks()) {
        Request* victim = *std::max_element(running_.begin(), running_.end(), [](const Request* a, const Request* b) {
            return a->admit_order < b->admit_order;
        });
        std::erase_if(plan, [&](const Planned& p) { return p.req == victim; });
        if (running_.size() == 1) {
            // Alone and still short: submit() guarantees prompt + max_tokens fits an empty pool, so only a backend
            // whose blocks_for disagrees with its own pool gets here. End it rather than spin.
            finish_request(*victim, FinishReason::Error, events,
                           "state memory exhausted: the request does not fit in the pool even alone");
        } else {
            preempt(*victim);
        }
    }

    // Admission: FIFO while the whole pending prefill of the head fits in what the plan leaves free; held back
    // while others decode and no prompt piece runs in this step, to coalesce arrivals (prefill_hold_ms).
    const bool hold = holds_admission(plan, budget, now);
    int64_t free_after = free_blocks() - plan_need();
    while (!hold && budget > 0 && !waiting_.empty() && int(running_.size()) < max_running_) {
        Request* r = waiting_.front();
        const int64_t full = backend_.blocks_for(int64_t(r->tokens.size()));
        if (full > free_after) {
            if (running_.empty() && plan.empty() && full > backend_.memory().total_blocks - backend_.memory().used_blocks) {
                // Nothing runs and it still does not fit: it never will (only reachable if blocks_for disagrees
                // with submit()'s check at a different length). Fail it rather than stall the queue.
                waiting_.pop_front();
                finish_request(*r, FinishReason::Error, events,
                               "state memory exhausted: the request does not fit in the empty pool");
                continue;
            }
            break;
        }
        waiting_.pop_front();
        r->seq_id = backend_.create_sequence();
        r->state = RequestState::Running;
        r->computed = 0;
        r->admit_order = next_admit_order_++;
        running_.push_back(r);
        const int n = int(std::min<int64_t>({r->pending(), options_.prefill_chunk, budget}));
        plan.push_back({r, n});
        budget -= n;
        free_after -= full;
    }
    if (plan.empty()) return events;

    steps_.clear();
    sample_params_.clear();
    std::vector<size_t> constrained;  // plan entries whose sampled token is masked by their constraint
    for (size_t i = 0; i < plan.size(); ++i) {
        Request& r = *plan[i].req;
        const int n = plan[i].n_tokens;
        if (r.first_scheduled == Clock::time_point{}) r.first_scheduled = now;
        const bool prefill = is_prompt_piece(r, n);
        SequenceStep st{r.seq_id, r.tokens.data() + r.computed, n, false, prefill};
        SampleParams sp = r.params.sample;
        sp.draw_index = uint64_t(r.generated);
        sp.prompt_tokens = std::span<const int32_t>(r.tokens.data(), size_t(r.prompt_len));
        sp.output_tokens = std::span<const int32_t>(r.tokens.data() + r.prompt_len, size_t(r.generated));
        sp.logit_bias = r.params.logit_bias;
        if (r.generated < r.params.min_new_tokens && !r.params.constraint) sp.banned_tokens = r.params.stop_token_ids;
        if (r.params.prompt_logprobs >= 0) {
            // Row j predicts the token at position computed + j + 1; prompt positions up to prompt_len - 1 count.
            const int64_t n_score = std::clamp<int64_t>(r.prompt_len - 1 - r.computed, 0, n);
            if (n_score > 0) {
                st.all_logits = true;
                sp.score_targets = std::span<const int32_t>(r.tokens.data() + r.computed + 1, size_t(n_score));
                sp.score_top_n = r.params.prompt_logprobs;
            }
        }
        const bool samples = r.computed + n == int64_t(r.tokens.size()) && r.params.max_new_tokens > 0;
        if (samples && r.params.constraint) constrained.push_back(i);
        steps_.push_back(st);
        sample_params_.push_back(std::move(sp));
    }
    // Masks are filled on the worker while the backend runs the forward pass; the backend waits before sampling.
    const std::shared_future<void> masks_ready = start_masks(plan, constrained);
    // The masks (and the requests that own the constraints) must outlive the worker's job on every path out.
    struct WaitForMasks {
        const std::shared_future<void>& ready;
        ~WaitForMasks() { if (ready.valid()) ready.wait(); }
    } wait_for_masks{masks_ready};
    try {
        backend_.forward_sample(steps_, sample_params_, results_);
    } catch (const OutOfStateMemory& e) {
        // The backend's pool disagrees with blocks_for (its state is unchanged by contract): shed the latest
        // admitted request and try again next step.
        if (masks_ready.valid()) masks_ready.wait();
        if (running_.size() > 1) {
            preempt(**std::max_element(running_.begin(), running_.end(), [](const Request* a, const Request* b) {
                return a->admit_order < b->admit_order;
            }));
        } else {
            finish_request(*running_.front(), FinishReason::Error, events, e.what());
        }
        return events;
    } catch (const std::exception& e) {
        // The backend failed mid-step; the sequences in this batch are in an unknown state, so end them.
        if (masks_ready.valid()) masks_ready.wait();
        for (const Planned& p : plan) finish_request(*p.req, FinishReason::Error, events, e.what());
        return events;
    }
    if (masks_ready.valid()) masks_ready.wait();
    FS_CHECK(results_.size() == plan.size(), "backend {}: forward_sample returned {} results for {} entries",
             backend_.name(), results_.size(), plan.size());

    ++counters_.steps;
    counters_.last_step_tokens = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
        Request& r = *plan[i].req;
        const int n = plan[i].n_tokens;
        counters_.last_step_tokens += n;
        if (is_prompt_piece(r, n)) counters_.prompt_tokens_computed += uint64_t(n);
        RequestEvent ev;
        ev.id = r.id;
        ev.prompt_len = r.prompt_len;
        ev.first_scheduled = r.first_scheduled;
        // Scores of prompt positions not reported before (a preempted request recomputes its prompt).
        std::vector<ScoredToken>& scored = results_[i].scored;
        for (size_t j = 0; j < scored.size(); ++j)
            if (r.computed + 1 + int64_t(j) >= r.scored_upto) ev.prompt_logprobs.push_back(std::move(scored[j]));
        r.scored_upto = std::max(r.scored_upto, r.computed + 1 + int64_t(scored.size()));
        r.computed += n;
        if (r.computed < int64_t(r.tokens.size())) {  // a prefill chunk that is not the last one
            ev.generated = r.generated;
            if (!ev.prompt_logprobs.empty()) events.push_back(std::move(ev));
            continue;
        }
        if (r.params.max_new_tokens == 0) {  // scoring only: the prompt is done
            ev.generated = 0;
            ev.finish = FinishReason::Length;
            events.push_back(std::move(ev));
            std::vector<RequestEvent> ignored;
            finish_request(r, FinishReason::Length, ignored);
            continue;
        }
        SampleResult s = std::move(results_[i]);
        s.scored.clear();
        if (r.generated < int64_t(r.params.forced_tokens.size())) {
            s.token = r.params.forced_tokens[size_t(r.generated)];
            s.top_logprobs.clear();
        }
        FS_CHECK(s.token >= 0 && s.token < backend_.config().vocab_size,
                 "backend {}: sampled token {} outside the vocabulary", backend_.name(), s.token);
        std::string constraint_error;
        bool constraint_complete = false;
        if (TokenConstraint* c = r.params.constraint.get()) {
            const auto k = size_t(std::find(constrained.begin(), constrained.end(), i) - constrained.begin());
            if (k < constrained.size() && !mask_errors_[k].empty()) {
                constraint_error = "constrained decoding: " + mask_errors_[k];
            } else if (!c->accept(s.token)) {
                constraint_error = "constrained decoding: " + c->error();
            }
            constraint_complete = constraint_error.empty() && c->complete();
        }
        r.tokens.push_back(s.token);
        ++r.generated;
        ++counters_.generated_tokens;
        ev.has_token = true;
        ev.sample = std::move(s);
        ev.generated = r.generated;
        const auto& stops = r.params.stop_token_ids;
        FinishReason reason = FinishReason::None;
        if (!constraint_error.empty()) reason = FinishReason::Error;
        else if (std::find(stops.begin(), stops.end(), ev.sample.token) != stops.end()) reason = FinishReason::Stop;
        else if (constraint_complete) reason = FinishReason::Stop;
        else if (r.generated >= r.params.max_new_tokens) reason = FinishReason::Length;
        else if (int64_t(r.tokens.size()) >= max_sequence_tokens_) reason = FinishReason::Length;
        if (reason != FinishReason::None) {
            ev.finish = reason;
            ev.error = constraint_error;
            events.push_back(std::move(ev));
            std::vector<RequestEvent> ignored;
            finish_request(r, reason, ignored);
        } else {
            events.push_back(std::move(ev));
        }
    }
    return events;
}

SchedulerAudit Scheduler::audit() const {
    SchedulerAudit a;
    const StateMemoryStats m = backend_.memory();
    a.used_blocks = m.used_blocks;
    a.total_blocks = m.total_blocks;
    a.live_sequences = m.live_sequences;
    a.running = int(running_.size());
    a.waiting = int(waiting_.size());
    for (const Request* r : running_) {
        a.expected_used_blocks += backend_.blocks_for(r->computed);
        if (r->seq_id < 0) {
            a.ok = false;
            a.detail += fmt::format("running request {} has no sequence; ", r->id);
        }
    }
    for (const Request* r : waiting_)
        if (r->seq_id >= 0) {
            a.ok = false;
            a.detail += fmt::format("waiting request {} still holds sequence {}; ", r->id, r->seq_id);
        }
    if (a.expected_used_blocks != a.used_blocks) {
        a.ok = false;
        a.detail += fmt::format("pool has {} used blocks, running requests account for {}; ", a.used_blocks,
                                a.expected_used_blocks);
    }
    if (a.live_sequences != a.running) {
        a.ok = false;
        a.detail += fmt::format("backend has {} live sequences, scheduler runs {}; ", a.live_sequences, a.running);
    }
    if (requests_.size() != running_.size() + waiting_.size()) {
        a.ok = false;
        a.detail += fmt::format("{} live requests but {} running + {} waiting; ", requests_.size(), running_.size(),
                                waiting_.size());
    }
    return a;
}

}  // namespace flashseek
