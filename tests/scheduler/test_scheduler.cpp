// Scheduler unit tests on a fake backend with real block accounting: continuous batching, chunked prefill under a
// token budget, admission against the pool, preemption by recompute (outputs identical to unpreempted runs),
// cancellation and deadlines freeing state at once, backend failures, and a randomized churn test that audits the
// pool exactly after every step. Seeds are fresh per run and printed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "fake_backend.h"
#include "scheduler/scheduler.h"
#include "util/error.h"

using namespace flashseek;
using flashseek::test::FakeBackend;

namespace {

uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

std::vector<int32_t> random_prompt(std::mt19937_64& rng, int n, int vocab = 1000) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = int32_t(2 + rng() % uint64_t(vocab - 2));
    return p;
}

GenerationParams params(int64_t max_new, float temperature = 0.f, uint64_t seed = 0) {
    GenerationParams g;
    g.max_new_tokens = max_new;
    g.sample.temperature = temperature;
    g.sample.seed = seed;
    g.stop_token_ids = {1};
    return g;
}

// What the steps reported per request: tokens, finish reasons, prompt scores and errors.
struct Outcome {
    std::map<uint64_t, std::vector<int32_t>> tokens;
    std::map<uint64_t, FinishReason> finish;
    std::map<uint64_t, std::vector<ScoredToken>> prompt_scores;
    std::map<uint64_t, std::string> error;  // the last non-empty one
    void record(const RequestEvent& ev) {
        if (ev.has_token) tokens[ev.id].push_back(ev.sample.token);
        if (ev.finish != FinishReason::None) finish[ev.id] = ev.finish;
        auto& scores = prompt_scores[ev.id];
        scores.insert(scores.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
        if (!ev.error.empty()) error[ev.id] = ev.error;
    }
};
// Runs the scheduler until idle, recording its events; checks the audit after every step.
void drain(Scheduler& s, Outcome& out, int max_steps = 100000) {
    for (int i = 0; i < max_steps && !s.idle(); ++i) {
        for (const auto& ev : s.step()) out.record(ev);
        const SchedulerAudit a = s.audit();
        ASSERT_TRUE(a.ok) << a.detail;
    }
    ASSERT_TRUE(s.idle()) << "scheduler did not drain";
}

// The continuation a prompt gets when it runs alone in a roomy pool.
std::vector<int32_t> reference(const std::vector<int32_t>& prompt, const GenerationParams& g) {
    FakeBackend b(100000, 16, 4);
    Scheduler s(b, {});
    const uint64_t id = s.submit(prompt, g);
    Outcome o;
    drain(s, o);
    return o.tokens[id];
}

// The oversubscribed workload of the preemption tests, on a pool of 60 blocks of 8 tokens: 12 requests that each
// grow to ~100 tokens (14 blocks), about 10x the pool; `adjust` may change each request's parameters (drawing from
// rng after them). Returns id -> (prompt, parameters).
template <class Adjust>
std::map<uint64_t, std::pair<std::vector<int32_t>, GenerationParams>> submit_oversubscribing(Scheduler& s,
                                                                                               std::mt19937_64& rng,
                                                                                               Adjust adjust) {
    std::map<uint64_t, std::pair<std::vector<int32_t>, GenerationParams>> submitted;
    for (int i = 0; i < 12; ++i) {
        auto p = random_prompt(rng, 20 + int(rng() % 20));
        auto g = params(60 + int64_t(rng() % 20), (i % 2) ? 0.9f : 0.f, rng());
        adjust(g);
        submitted[s.submit(p, g)] = {p, g};
    }
    return submitted;
}

void expect_empty_pool(const Scheduler& s, const FakeBackend& b) {
    const SchedulerAudit a = s.audit();
    EXPECT_TRUE(a.ok) << a.detail;
    EXPECT_EQ(b.memory().used_blocks, 0);
    EXPECT_EQ(b.memory().live_sequences, 0);
    EXPECT_EQ(a.running + a.waiting, 0);
}

}  // namespace

TEST(Scheduler, SingleRequestRunsToMaxTokens) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FakeBackend b(1000, 16, 8);
    Scheduler s(b, {});
    const int n_new = 5 + int(rng() % 20);
    const uint64_t id = s.submit(random_prompt(rng, 30), params(n_new));
    Outcome o;
    drain(s, o);
    EXPECT_EQ(int(o.tokens[id].size()), n_new);
    EXPECT_EQ(o.finish[id], FinishReason::Length);
    expect_empty_pool(s, b);
    EXPECT_EQ(s.counters().generated_tokens, uint64_t(n_new));
}

TEST(Scheduler, StopTokenEndsRequest) {
    FakeBackend b(1000, 16, 8);
    b.eos_after = 12;  // the sequence samples EOS once it holds 12 tokens
    Scheduler s(b, {});
    std::mt19937_64 rng(fresh_seed());
    const uint64_t id = s.submit(random_prompt(rng, 10), params(100));
    Outcome o;
    drain(s, o);
    // computed lengths 10 (prefill) -> token, 11 -> token, 12 -> EOS: three tokens, the last is EOS.
    ASSERT_EQ(o.tokens[id].size(), 3u);
    EXPECT_EQ(o.tokens[id].back(), 1);
    EXPECT_EQ(o.finish[id], FinishReason::Stop);
    expect_empty_pool(s, b);
}

TEST(Scheduler, ContinuousBatchingMatchesSoloRuns) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FakeBackend b(100000, 16, 16);
    SchedulerOptions opt;
    opt.max_batch_tokens = 64;
    opt.prefill_chunk = 24;
    Scheduler s(b, opt);
    std::map<uint64_t, std::pair<std::vector<int32_t>, GenerationParams>> submitted;
    Outcome o;
    // Requests arrive while others are decoding: join between steps.
    for (int wave = 0; wave < 5; ++wave) {
        for (int i = 0; i < 4; ++i) {
            auto p = random_prompt(rng, 1 + int(rng() % 90));
            auto g = params(1 + int64_t(rng() % 30), (rng() % 2) ? 0.7f : 0.f, rng());
            submitted[s.submit(p, g)] = {p, g};
        }
        for (int k = 0; k < 3; ++k)
            for (const auto& ev : s.step()) {
                if (ev.has_token) o.tokens[ev.id].push_back(ev.sample.token);
                EXPECT_LE(b.tokens_this_call, int64_t(1) << 40);
            }
        EXPECT_LE(s.counters().last_step_tokens, opt.max_batch_tokens);
    }
    drain(s, o);
    for (const auto& [id, pg] : submitted) EXPECT_EQ(o.tokens[id], reference(pg.first, pg.second)) << "request " << id;
    expect_empty_pool(s, b);
}

// Prompt pieces are flagged as prefill (the CUDA backend computes them with the prefill kernels whatever their size,
// SequenceStep::prefill), including a one-token last piece; generated tokens are not.
TEST(Scheduler, PromptPiecesAreFlaggedPrefill) {
    FakeBackend b(100000, 16, 4);
    SchedulerOptions opt;
    opt.max_batch_tokens = 64;
    opt.prefill_chunk = 32;
    Scheduler s(b, opt);
    std::mt19937_64 rng(fresh_seed());
    const auto id = s.submit(random_prompt(rng, 33), params(5, 0.f, 1));
    Outcome o;
    drain(s, o);
    EXPECT_EQ(o.tokens[id].size(), 5u);
    std::vector<std::pair<int, bool>> pieces;
    for (const SequenceStep& st : b.step_log) pieces.push_back({st.n_tokens, st.prefill});
    const std::vector<std::pair<int, bool>> want = {{32, true}, {1, true}, {1, false}, {1, false}, {1, false},
                                                    {1, false}};
    EXPECT_EQ(pieces, want);
}

TEST(Scheduler, ChunkedPrefillKeepsDecodesFlowing) {
    FakeBackend b(100000, 16, 8);
    SchedulerOptions opt;
    opt.max_batch_tokens = 40;
    opt.prefill_chunk = 32;
    Scheduler s(b, opt);
    std::mt19937_64 rng(fresh_seed());
    const uint64_t decoder = s.submit(random_prompt(rng, 8), params(200));
    s.step();  // prefill of the short one; it is decoding from now on
    const uint64_t longp = s.submit(random_prompt(rng, 2000), params(4));
    int decoder_tokens = 0, steps = 0;
    bool long_started_decoding = false;
    while (!long_started_decoding && steps < 1000) {
        bool decoder_got = false;
        for (const auto& ev : s.step()) {
            if (ev.id == decoder && ev.has_token) decoder_got = true;
            if (ev.id == longp && ev.has_token) long_started_decoding = true;
        }
        ++steps;
        EXPECT_TRUE(decoder_got) << "decode starved at step " << steps;
        EXPECT_LE(s.counters().last_step_tokens, opt.max_batch_tokens);
        decoder_tokens += decoder_got;
    }
    // 2000 prompt tokens with 39 tokens of budget left per step (chunk cap 32) take ceil(2000/32) = 63 steps.
    EXPECT_EQ(steps, 63);
    EXPECT_EQ(decoder_tokens, steps);
    Outcome o;
    drain(s, o);
    expect_empty_pool(s, b);
}

// Prefill coalescing (SchedulerOptions::prefill_hold_ms): while others decode and no prompt piece runs, arrivals
// wait for the oldest to have waited the hold, then share one step's prompt pieces; they join at once a step that
// runs a prompt piece anyway, when their prompts fill the step's budget, and when nothing decodes. The hold changes
// when requests run, not what they generate.
TEST(Scheduler, PrefillHoldCoalescesArrivalsWhileOthersDecode) {
    using std::chrono::milliseconds;
    FakeBackend b(100000, 16, 8);
    SchedulerOptions opt;
    opt.max_batch_tokens = 300;
    opt.prefill_chunk = 256;
    opt.prefill_hold_ms = 50;
    Scheduler s(b, opt);
    std::mt19937_64 rng(fresh_seed());
    const Clock::time_point t0 = Clock::now();
    Outcome o;
    // Runs a step at t0 + ms; returns its entries as (n_tokens, prefill), from the fake's log.
    auto step_at = [&](int ms) {
        const size_t before = b.step_log.size();
        for (const auto& ev : s.step(t0 + milliseconds(ms))) o.record(ev);
        std::vector<std::pair<int, bool>> entries;
        for (size_t i = before; i < b.step_log.size(); ++i)
            entries.push_back({b.step_log[i].n_tokens, b.step_log[i].prefill});
        return entries;
    };
    using Entries = std::vector<std::pair<int, bool>>;

    // Nothing decodes: a request is admitted at once.
    s.submit(random_prompt(rng, 8), params(400), t0);
    EXPECT_EQ(step_at(0), (Entries{{8, true}}));
    EXPECT_EQ(step_at(1), (Entries{{1, false}}));  // decoding from now on

    // Arrivals while it decodes wait until the oldest has waited 50 ms, then share one step.
    const auto pa = random_prompt(rng, 20), pb = random_prompt(rng, 30);
    const uint64_t a = s.submit(pa, params(6), t0 + milliseconds(2));
    EXPECT_EQ(step_at(3), (Entries{{1, false}}));
    const uint64_t bb = s.submit(pb, params(6), t0 + milliseconds(20));
    EXPECT_EQ(step_at(30), (Entries{{1, false}}));
    EXPECT_EQ(step_at(51), (Entries{{1, false}}));  // a has waited 49 ms
    EXPECT_EQ(s.waiting(), 2);
    EXPECT_EQ(step_at(52), (Entries{{1, false}, {20, true}, {30, true}}));
    EXPECT_EQ(s.waiting(), 0);

    // A step that runs a prompt piece anyway takes an arrival at once: c's 280 tokens (held: fewer than the 297 the
    // three decodes leave) take two steps, 256 (prefill_chunk) + 24; d arrives between them and joins the second.
    s.submit(random_prompt(rng, 280), params(4), t0 + milliseconds(60));
    EXPECT_EQ(step_at(60), (Entries{{1, false}, {1, false}, {1, false}}));
    const Entries c_first = step_at(111);
    ASSERT_EQ(c_first.size(), 4u);
    EXPECT_EQ(c_first.back(), (std::pair<int, bool>{256, true}));
    s.submit(random_prompt(rng, 10), params(4), t0 + milliseconds(112));
    const Entries joined = step_at(113);
    EXPECT_EQ(std::count(joined.begin(), joined.end(), std::pair<int, bool>{10, true}), 1) << "d did not join";

    // Prompts that fill the step's budget are admitted at once. (drain's steps run at the real clock, before these
    // arrivals: nothing is waiting when it runs.)
    drain(s, o);
    s.submit(random_prompt(rng, 8), params(50), t0 + milliseconds(200));
    step_at(200);
    step_at(201);  // decoding
    s.submit(random_prompt(rng, 150), params(2), t0 + milliseconds(202));
    EXPECT_EQ(step_at(203), (Entries{{1, false}}));  // 150 < the 299 left
    s.submit(random_prompt(rng, 160), params(2), t0 + milliseconds(204));
    EXPECT_EQ(step_at(205), (Entries{{1, false}, {150, true}, {149, true}}));  // 310 >= 299: admitted, budget-cut

    drain(s, o);
    EXPECT_EQ(o.tokens[a], reference(pa, params(6)));
    EXPECT_EQ(o.tokens[bb], reference(pb, params(6)));
    expect_empty_pool(s, b);
}

TEST(Scheduler, PreemptionByRecomputeReproducesOutputs) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FakeBackend b(60, 8, 32);  // submit_oversubscribing's pool
    SchedulerOptions opt;
    opt.max_batch_tokens = 64;
    opt.prefill_chunk = 16;
    Scheduler s(b, opt);
    const auto submitted = submit_oversubscribing(s, rng, [](GenerationParams&) {});
    Outcome o;
    drain(s, o);
    EXPECT_GT(s.counters().preemptions, 0u);
    for (const auto& [id, pg] : submitted) {
        EXPECT_EQ(o.tokens[id], reference(pg.first, pg.second)) << "request " << id;
        EXPECT_EQ(o.finish[id], FinishReason::Length);
    }
    expect_empty_pool(s, b);
}

TEST(Scheduler, RequestLargerThanPoolIsRejectedAndOthersRun) {
    FakeBackend b(20, 8, 8);  // holds at most 19 * 8 = 152 tokens in one sequence
    Scheduler s(b, {});
    EXPECT_EQ(s.max_sequence_tokens(), 152);
    std::mt19937_64 rng(fresh_seed());
    try {
        s.submit(random_prompt(rng, 100), params(53));
        FAIL() << "expected an Error";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("max_tokens"), std::string::npos) << m;
        EXPECT_NE(m.find("100"), std::string::npos) << m;
        EXPECT_NE(m.find("152"), std::string::npos) << m;
    }
    const uint64_t ok = s.submit(random_prompt(rng, 100), params(52));  // exactly at the limit
    Outcome o;
    drain(s, o);
    EXPECT_EQ(o.tokens[ok].size(), 52u);
    expect_empty_pool(s, b);
}

TEST(Scheduler, InvalidSubmissionsNameTheField) {
    FakeBackend b(100, 8, 8, 500);
    Scheduler s(b, {});
    auto expect_error = [&](std::vector<int32_t> p, int64_t max_new, const char* field) {
        try {
            s.submit(std::move(p), params(max_new));
            ADD_FAILURE() << "expected an Error about " << field;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    };
    expect_error({}, 4, "prompt");
    expect_error({5, -1}, 4, "prompt");
    expect_error({5, 500}, 4, "prompt");
    expect_error({5}, 0, "max_tokens");  // 0 only when the prompt is scored
    expect_error({5}, -3, "max_tokens");
    EXPECT_TRUE(s.idle());
}

TEST(Scheduler, CancelFreesStateImmediatelyAndIsolatesOthers) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FakeBackend b(100000, 16, 1);  // one running slot: the rest queue
    Scheduler s(b, {});
    auto p = random_prompt(rng, 40);
    const GenerationParams g = params(30);
    const uint64_t runner = s.submit(p, g);
    std::vector<uint64_t> queued;
    for (int i = 0; i < 8; ++i) queued.push_back(s.submit(random_prompt(rng, 30), params(30)));
    Outcome o;
    for (int k = 0; k < 5; ++k)
        for (const auto& ev : s.step())
            if (ev.has_token) o.tokens[ev.id].push_back(ev.sample.token);
    for (uint64_t q : queued) EXPECT_TRUE(s.finish(q, FinishReason::Cancelled));
    EXPECT_FALSE(s.finish(queued[0], FinishReason::Cancelled));  // already gone
    EXPECT_EQ(s.waiting(), 0);
    drain(s, o);
    EXPECT_EQ(o.tokens[runner], reference(p, g));
    for (uint64_t q : queued) EXPECT_EQ(o.tokens.count(q), 0u);
    expect_empty_pool(s, b);

    // Cancelling a running request releases its blocks before finish() returns.
    const uint64_t r2 = s.submit(random_prompt(rng, 50), params(30));
    s.step();
    EXPECT_GT(b.memory().used_blocks, 0);
    EXPECT_TRUE(s.finish(r2, FinishReason::Cancelled));
    expect_empty_pool(s, b);
    EXPECT_EQ(s.counters().cancelled, 9u);
}

TEST(Scheduler, DeadlinesExpireWaitingAndRunning) {
    FakeBackend b(100000, 16, 1);
    Scheduler s(b, {});
    std::mt19937_64 rng(fresh_seed());
    const auto t0 = Clock::now();
    GenerationParams g1 = params(1000);
    g1.deadline = t0 + std::chrono::milliseconds(50);
    GenerationParams g2 = params(1000);
    g2.deadline = t0 + std::chrono::milliseconds(30);
    const uint64_t running = s.submit(random_prompt(rng, 10), g1, t0);
    const uint64_t waiting = s.submit(random_prompt(rng, 10), g2, t0);
    s.step(t0);
    s.step(t0 + std::chrono::milliseconds(10));
    EXPECT_EQ(s.running(), 1);
    EXPECT_EQ(s.waiting(), 1);
    auto ev = s.step(t0 + std::chrono::milliseconds(40));
    bool waiting_expired = false;
    for (const auto& e : ev) waiting_expired |= e.id == waiting && e.finish == FinishReason::Deadline;
    EXPECT_TRUE(waiting_expired);
    ev = s.step(t0 + std::chrono::milliseconds(60));
    bool running_expired = false;
    for (const auto& e : ev) running_expired |= e.id == running && e.finish == FinishReason::Deadline;
    EXPECT_TRUE(running_expired);
    expect_empty_pool(s, b);
    EXPECT_EQ(s.counters().deadline_expired, 2u);
}

TEST(Scheduler, BackendFailureEndsBatchAndServerRecovers) {
    FakeBackend b(100000, 16, 8);
    Scheduler s(b, {});
    std::mt19937_64 rng(fresh_seed());
    const uint64_t a = s.submit(random_prompt(rng, 10), params(10));
    const uint64_t c = s.submit(random_prompt(rng, 10), params(10));
    b.fail_next_call();
    auto ev = s.step();
    ASSERT_EQ(ev.size(), 2u);
    for (const auto& e : ev) {
        EXPECT_EQ(e.finish, FinishReason::Error);
        EXPECT_NE(e.error.find("injected"), std::string::npos);
        EXPECT_TRUE(e.id == a || e.id == c);
    }
    expect_empty_pool(s, b);
    const uint64_t d = s.submit(random_prompt(rng, 10), params(7));
    Outcome o;
    drain(s, o);
    EXPECT_EQ(o.tokens[d].size(), 7u);
    expect_empty_pool(s, b);
}

TEST(Scheduler, SeedsMakeSamplingReproducible) {
    std::mt19937_64 rng(fresh_seed());
    auto p = random_prompt(rng, 12);
    const auto a = reference(p, params(20, 0.8f, 42));
    const auto a2 = reference(p, params(20, 0.8f, 42));
    const auto c = reference(p, params(20, 0.8f, 43));
    EXPECT_EQ(a, a2);
    EXPECT_NE(a, c);
}

TEST(Scheduler, RandomChurnKeepsExactAudit) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FakeBackend b(80, 8, 12);
    SchedulerOptions opt;
    opt.max_batch_tokens = 48;
    opt.prefill_chunk = 20;
    Scheduler s(b, opt);
    std::vector<uint64_t> live;
    std::map<uint64_t, std::pair<std::vector<int32_t>, GenerationParams>> submitted;
    std::map<uint64_t, std::vector<int32_t>> got;
    std::map<uint64_t, FinishReason> finished;
    for (int it = 0; it < 3000; ++it) {
        const uint64_t action = rng() % 10;
        if (action < 3) {
            auto p = random_prompt(rng, 1 + int(rng() % 60));
            auto g = params(1 + int64_t(rng() % 40), (rng() % 2) ? 1.0f : 0.f, rng());
            const uint64_t id = s.submit(p, g);
            live.push_back(id);
            submitted[id] = {p, g};
        } else if (action == 3 && !live.empty()) {
            const uint64_t id = live[rng() % live.size()];
            if (s.finish(id, FinishReason::Cancelled)) finished[id] = FinishReason::Cancelled;
        } else {
            for (const auto& ev : s.step()) {
                if (ev.has_token) got[ev.id].push_back(ev.sample.token);
                if (ev.finish != FinishReason::None) finished[ev.id] = ev.finish;
            }
        }
        const SchedulerAudit a = s.audit();
        ASSERT_TRUE(a.ok) << "iteration " << it << ": " << a.detail;
    }
    Outcome o;
    drain(s, o);
    for (auto& [id, toks] : o.tokens) got[id].insert(got[id].end(), toks.begin(), toks.end());
    for (auto& [id, f] : o.finish) finished[id] = f;
    expect_empty_pool(s, b);
    // Every request that completed normally produced exactly its solo continuation, preempted or not.
    int checked = 0;
    for (const auto& [id, pg] : submitted) {
        ASSERT_TRUE(finished.count(id)) << "request " << id << " never finished";
        if (finished[id] != FinishReason::Length) continue;
        EXPECT_EQ(got[id], reference(pg.first, pg.second)) << "request " << id;
        ++checked;
    }
    EXPECT_GT(checked, 10);
    EXPECT_GT(s.counters().preemptions, 0u);
}

TEST(Scheduler, ForcedTokensReplaceSamplesAndStillStop) {
    FakeBackend b(1000, 16, 4);
    Scheduler s(b, {});
    std::mt19937_64 rng(fresh_seed());
    GenerationParams g = params(10);
    g.forced_tokens = {7, 8, 9, 1};  // the 4th forced token is EOS: the request stops there
    const uint64_t id = s.submit(random_prompt(rng, 5), g);
    Outcome o;
    drain(s, o);
    EXPECT_EQ(o.tokens[id], (std::vector<int32_t>{7, 8, 9, 1}));
    EXPECT_EQ(o.finish[id], FinishReason::Stop);
    expect_empty_pool(s, b);
}

// Prompt scoring (echo / prompt logprobs): every prompt position after the first is reported exactly once, in
// order, with the target the backend scored, also when chunked prefill splits the prompt and when preemption
// recomputes it; the generated tokens are those of unscored runs.
TEST(Scheduler, PromptScoresEveryPositionOnceAcrossChunksAndPreemption) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FakeBackend b(60, 8, 32);  // submit_oversubscribing's pool, as in PreemptionByRecomputeReproducesOutputs
    SchedulerOptions opt;
    opt.max_batch_tokens = 64;
    opt.prefill_chunk = 16;
    Scheduler s(b, opt);
    const auto submitted =
        submit_oversubscribing(s, rng, [&](GenerationParams& g) { g.prompt_logprobs = int(rng() % 3); });
    Outcome o;
    for (int i = 0; i < 100000 && !s.idle(); ++i)
        for (const auto& ev : s.step()) o.record(ev);
    ASSERT_TRUE(s.idle());
    EXPECT_GT(s.counters().preemptions, 0u);
    for (const auto& [id, pg] : submitted) {
        const auto& prompt = pg.first;
        const auto& scores = o.prompt_scores[id];
        ASSERT_EQ(scores.size(), prompt.size() - 1) << "request " << id;
        for (size_t pos = 1; pos < prompt.size(); ++pos) {
            EXPECT_EQ(scores[pos - 1].token, prompt[pos]) << "request " << id << " position " << pos;
            EXPECT_EQ(scores[pos - 1].logprob, FakeBackend::score_of(int64_t(pos), prompt[pos]));
        }
        GenerationParams unscored = pg.second;
        unscored.prompt_logprobs = -1;
        EXPECT_EQ(o.tokens[id], reference(prompt, unscored)) << "request " << id;
    }
    expect_empty_pool(s, b);
}

TEST(Scheduler, MaxTokensZeroOnlyScoresThePrompt) {
    std::mt19937_64 rng(fresh_seed());
    FakeBackend b(1000, 16, 8);
    SchedulerOptions opt;
    opt.prefill_chunk = 7;
    Scheduler s(b, opt);
    const auto prompt = random_prompt(rng, 30);
    GenerationParams g = params(0);
    g.prompt_logprobs = 1;
    const uint64_t id = s.submit(prompt, g);
    Outcome o;
    for (int i = 0; i < 100 && !s.idle(); ++i)
        for (const auto& ev : s.step()) {
            EXPECT_FALSE(ev.has_token);
            o.record(ev);
        }
    EXPECT_EQ(o.finish[id], FinishReason::Length);
    const auto& scored = o.prompt_scores[id];
    ASSERT_EQ(scored.size(), prompt.size() - 1);
    EXPECT_EQ(scored.back().token, prompt.back());
    // Without scoring, max_tokens 0 is refused.
    EXPECT_THROW(s.submit(prompt, params(0)), Error);
    expect_empty_pool(s, b);
}

TEST(Scheduler, MinTokensBansStopIdsUntilReached) {
    FakeBackend b(1000, 16, 8);
    b.eos_after = 1;  // the fake "model" wants EOS (id 1) at once
    Scheduler s(b, {});
    std::mt19937_64 rng(fresh_seed());
    GenerationParams g = params(50);
    g.min_new_tokens = 6;
    const uint64_t id = s.submit(random_prompt(rng, 5), g);
    Outcome o;
    drain(s, o);
    ASSERT_EQ(o.tokens[id].size(), 7u);  // 6 tokens with EOS banned, then EOS
    EXPECT_EQ(o.tokens[id].back(), 1);
    EXPECT_EQ(o.finish[id], FinishReason::Stop);
    size_t banned_steps = 0;
    for (const auto& seen : b.seen) banned_steps += seen.banned == std::vector<int32_t>{1} ? 1 : 0;
    EXPECT_EQ(banned_steps, 6u);
}

namespace {
// Allows only tokens of one residue class mod 7, completes after `length` tokens, and rejects anything else.
class ModuloConstraint : public TokenConstraint {
public:
    ModuloConstraint(int residue, int length) : residue_(residue), length_(length) {}
    void fill_allowed(uint32_t* words, int64_t vocab) override {
        ++fills;
        std::fill(words, words + token_mask_words(vocab), 0u);
        for (int64_t t = 0; t < vocab; ++t)
            if (t % 7 == residue_) words[t >> 5] |= 1u << (t & 31);
    }
    bool accept(int32_t token) override {
        if (token % 7 != residue_) {
            error_ = "token " + std::to_string(token) + " is not allowed";
            return false;
        }
        return ++accepted_ <= length_;
    }
    bool complete() const override { return accepted_ >= length_; }
    std::string error() const override { return error_; }
    int fills = 0;

private:
    int residue_, length_, accepted_ = 0;
    std::string error_;
};
}  // namespace

TEST(Scheduler, ConstraintMasksEverySampleAndEndsWhenComplete) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    FakeBackend b(1000, 16, 8);
    SchedulerOptions opt;
    opt.prefill_chunk = 8;
    Scheduler s(b, opt);
    std::map<uint64_t, std::shared_ptr<ModuloConstraint>> constraints;
    std::map<uint64_t, int> lengths;
    uint64_t unconstrained = 0;
    for (int i = 0; i < 6; ++i) {
        GenerationParams g = params(100, 0.8f, rng());
        if (i == 5) {
            unconstrained = s.submit(random_prompt(rng, 20), g);
            continue;
        }
        const int length = 3 + int(rng() % 10);
        // Residue 1 would allow the stop id 1 (EOS), which the fake picks when its own token is masked.
        auto c = std::make_shared<ModuloConstraint>(2 + int(rng() % 5), length);
        g.constraint = c;
        g.min_new_tokens = 50;  // does not apply to constrained requests: the constraint ends them
        const uint64_t id = s.submit(random_prompt(rng, 10 + int(rng() % 20)), g);
        constraints[id] = c;
        lengths[id] = length;
    }
    Outcome o;
    drain(s, o);
    for (const auto& [id, c] : constraints) {
        ASSERT_EQ(int(o.tokens[id].size()), lengths[id]) << "request " << id;
        EXPECT_EQ(o.finish[id], FinishReason::Stop);
        EXPECT_EQ(c->fills, lengths[id]);  // one mask per sampled token, none for prefill chunks
    }
    EXPECT_EQ(o.tokens[unconstrained].size(), 100u);
    expect_empty_pool(s, b);
}

TEST(Scheduler, ConstraintThatRejectsATokenEndsOnlyItsRequest) {
    FakeBackend b(1000, 16, 8);
    Scheduler s(b, {});
    std::mt19937_64 rng(fresh_seed());
    GenerationParams g = params(20);
    g.constraint = std::make_shared<ModuloConstraint>(3, 10);
    g.forced_tokens = {3, 4};  // the debug hook forces a token the constraint rejects
    const uint64_t bad = s.submit(random_prompt(rng, 8), g);
    const uint64_t good = s.submit(random_prompt(rng, 8), params(20));
    Outcome o;
    for (int i = 0; i < 1000 && !s.idle(); ++i)
        for (const auto& ev : s.step()) o.record(ev);
    EXPECT_EQ(o.finish[bad], FinishReason::Error);
    const std::string& error = o.error[bad];
    EXPECT_NE(error.find("token 4 is not allowed"), std::string::npos) << error;
    EXPECT_EQ(o.finish[good], FinishReason::Length);
    EXPECT_EQ(o.tokens[good].size(), 20u);
    expect_empty_pool(s, b);
}
