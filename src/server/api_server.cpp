// OpenAI API handlers (see api_server.h). Order inside a generation request: shutdown check → the request entry
// (strict JSON, validation, tokenization on this worker thread, never on the step-loop thread, context check) →
// overload reservation → submit every choice → stream SSE or wait. A client that disconnects at any point cancels its
// choices; the step loop frees their state before its next step.
#include "server/api_server.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "server/response_builder.h"
#include "server/responses_builder.h"
#include "util/error.h"
#include "util/random.h"

namespace flashseek::server {

using json = nlohmann::json;

namespace {

std::string random_hex(size_t n) {
    thread_local std::mt19937_64 rng{(uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
    static const char* digits = "0123456789abcdef";
    std::string s(n, '0');
    for (auto& c : s) c = digits[rng() & 15];
    return s;
}

uint64_t random_seed() {
    thread_local std::mt19937_64 rng{(uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()};
    return rng();
}

// Time depends on the configured key's length only, never on where the first mismatch is.
bool constant_time_equal(const std::string& given, const std::string& key) {
    unsigned char diff = given.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i)
        diff |= static_cast<unsigned char>(key[i] ^ (i < given.size() ? given[i] : 0));
    return diff == 0;
}

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Everything one generation needs after the handler returns (owned by the stream callbacks). Builder is
// ResponseBuilder (chat completions, completions) or ResponsesBuilder (/v1/responses); both hold a reference to
// `prepared.request`, so the state owns it.
template <typename Builder>
struct GenerationState {
    PreparedGeneration prepared;
    std::unique_ptr<Builder> builder;
    std::shared_ptr<runtime::OutputChannel> channel;
    bool sent_first = false;
    bool completed = false;
};

// Streams the answer (SSE) or waits for it, probing the connection so a vanished client cancels its work too.
// Returns true when the response was handed to the HTTP layer as a stream (its on_close then releases `open`).
template <typename Builder>
bool deliver(const std::shared_ptr<GenerationState<Builder>>& st, const HttpRequest& hreq, HttpResponse& res,
             std::atomic<int64_t>& open) {
    if (st->prepared.request.stream) {
        res.content_type = "text/event-stream";
        res.headers.emplace_back("Cache-Control", "no-cache");
        res.stream = [st](StreamSink& sink) {
            if (!st->sent_first) {
                st->sent_first = true;
                const std::string first = st->builder->first_chunks();
                if (!first.empty() && !sink.write(first)) return StreamStatus::Failed;
            }
            std::vector<runtime::OutputEvent> events;
            const bool more = st->channel->wait_pop(events, std::chrono::milliseconds(100));
            if (!events.empty()) {
                const std::string text = st->builder->stream(events);
                if (!text.empty() && !sink.write(text)) return StreamStatus::Failed;
            }
            if (!more) {
                const std::string last = st->builder->last_chunks();
                if (!last.empty() && !sink.write(last)) return StreamStatus::Failed;
                st->completed = true;
                return StreamStatus::Done;
            }
            if (events.empty() && !sink.alive()) return StreamStatus::Failed;
            return StreamStatus::More;
        };
        res.on_close = [st, &open](bool) {
            if (!st->completed) st->channel->cancel();
            --open;
        };
        return true;
    }
    std::vector<runtime::OutputEvent> events;
    int polls = 0;
    while (st->channel->wait_pop(events, std::chrono::milliseconds(50))) {
        st->builder->absorb(events);
        events.clear();
        if (++polls % 4 == 0 && hreq.connection_alive && !hreq.connection_alive()) {
            st->channel->cancel();
            res.status = 499;  // nobody will read it; keeps logs honest
            res.body = error_body(499, "client closed the connection", "", "client_closed_request");
            return false;
        }
    }
    if (const std::optional<ApiError> f = st->builder->failure()) throw *f;
    res.body = st->builder->final_json().dump(-1, ' ', false, json::error_handler_t::replace);
    return false;
}

}  // namespace

ApiServer::ApiServer(runtime::StepLoop& loop, const tokenizer::Tokenizer& tok, runtime::Metrics& metrics, ApiServerOptions options)
    : loop_(loop), tok_(tok), metrics_(metrics), options_(std::move(options)), http_(options_.http) {
    if (options_.limits.vocab_size <= 0) options_.limits.vocab_size = loop_.config().vocab_size;
    started_ = unix_now();
    http_.set_gate([this](const HttpRequest& req, HttpResponse& res) {
        if (req.path == "/health" || authorized(req)) return true;
        res.status = 401;
        res.headers.emplace_back("WWW-Authenticate", "Bearer");
        res.body = error_body(401, "missing or invalid API key (send 'Authorization: Bearer <key>')", "",
                              "authentication_error", "invalid_api_key");
        metrics_.on_rejected(401);
        return false;
    });
    // Exactly the routes of the table /openapi.json is generated from (server/openapi.h).
    for (const RouteSpec& spec : api_routes()) {
        std::string path = spec.path;
        if (const size_t brace = path.find('{'); brace != std::string::npos)
            path = path.substr(0, brace) + "[^/]+";  // "{response_id}" → one path segment
        if (std::string(spec.method) == "GET") http_.get(path, handler_for(spec.id));
        else http_.post(path, handler_for(spec.id));
    }
    OpenApiFacts facts;
    facts.limits = options_.limits;
    facts.max_model_len = loop_.max_model_len();
    facts.max_body_bytes = options_.http.max_body_bytes;
    facts.api_key_required = !options_.api_key.empty();
    openapi_json_ = openapi_document(facts).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

HttpHandler ApiServer::handler_for(RouteId id) {
    auto generation = [this](Route route) {
        return [this, route](const HttpRequest& q, HttpResponse& r) { generate(q, r, route); };
    };
    switch (id) {
        case RouteId::ChatCompletions: return generation(Route::ChatCompletions);
        case RouteId::Completions: return generation(Route::Completions);
        case RouteId::Responses: return generation(Route::Responses);
        case RouteId::Tokenize: return [this](const HttpRequest& q, HttpResponse& r) { answer(q, r, Route::Tokenize); };
        case RouteId::Detokenize:
            return [this](const HttpRequest& q, HttpResponse& r) { answer(q, r, Route::Detokenize); };
        case RouteId::ResponseById:
            // Clients that retrieve a response by id get a clear 404 instead of "no route".
            return [this](const HttpRequest&, HttpResponse& r) {
                fail(r, ApiError(404, "responses are not stored on this server (store is treated as false)",
                                 "response_id", "not_found_error", "response_not_found"));
            };
        case RouteId::Models: return [this](const HttpRequest& q, HttpResponse& r) { models(q, r); };
        case RouteId::Health: return [this](const HttpRequest& q, HttpResponse& r) { health(q, r); };
        case RouteId::Metrics: return [this](const HttpRequest& q, HttpResponse& r) { metrics(q, r); };
        case RouteId::OpenApi:
            return [this](const HttpRequest&, HttpResponse& r) { r.body = openapi_json_; };
    }
    throw Error("api_server: no handler for a route of the table");
}

const runtime::ConstraintCompiler& ApiServer::constraint_compiler() {
    std::call_once(compiler_once_, [this] {
        compiler_ = std::make_unique<runtime::ConstraintCompiler>(tok_, loop_.config().vocab_size, eos_token(),
                                                                  options_.grammar_compile);
        compiler_published_.store(compiler_.get(), std::memory_order_release);
    });
    return *compiler_;
}

bool ApiServer::grammar_compile_running() const {
    const runtime::ConstraintCompiler* compiler = compiler_published_.load(std::memory_order_acquire);
    return compiler != nullptr && compiler->compiling();
}

int32_t ApiServer::eos_token() const {
    try {
        return tok_.eos_id();
    } catch (const Error&) {
        return int32_t(loop_.config().eos_token_id);  // a tokenizer without one: the model config's
    }
}

bool ApiServer::authorized(const HttpRequest& req) const {
    if (options_.api_key.empty()) return true;
    std::string given = req.header("X-Api-Key");
    const std::string auth = req.header("Authorization");
    if (auth.size() > 7 && auth.compare(0, 7, "Bearer ") == 0) given = auth.substr(7);
    return constant_time_equal(given, options_.api_key);
}

void ApiServer::fail(HttpResponse& res, const ApiError& e) {
    res.status = e.status;
    res.content_type = "application/json";
    res.body = error_body(e);
    if (e.status == 429 || e.status == 503) res.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_s));
    metrics_.on_rejected(e.status);
}

void ApiServer::models(const HttpRequest&, HttpResponse& res) {
    json card = {{"id", options_.limits.model_name},
                 {"object", "model"},
                 {"created", started_},
                 {"owned_by", "flashseek"},
                 {"root", options_.limits.model_name},
                 {"parent", nullptr},
                 {"max_model_len", loop_.max_model_len()},
                 {"permission", json::array()}};
    res.body = json({{"object", "list"}, {"data", json::array({card})}}).dump();
}

EntryContext ApiServer::entry_context() const { return EntryContext{options_.limits, tok_, loop_.max_model_len()}; }

void ApiServer::answer(const HttpRequest& hreq, HttpResponse& res, Route route) {
    try {
        const json out = route == Route::Tokenize ? answer_tokenize(hreq.body, entry_context())
                                                  : answer_detokenize(hreq.body, entry_context());
        res.body = out.dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const ApiError& e) {
        fail(res, e);
    }
}

void ApiServer::health(const HttpRequest&, HttpResponse& res) {
    if (!shutting_down_ && loop_.healthy()) {
        res.body = R"({"status":"ok"})";
        return;
    }
    res.status = 503;
    res.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_s));
    res.body = error_body(503, shutting_down_ ? "the server is shutting down" : "the step loop is not responding", "",
                          "service_unavailable_error", shutting_down_ ? "shutting_down" : "engine_unhealthy");
}

void ApiServer::metrics(const HttpRequest&, HttpResponse& res) {
    const runtime::StepLoopStatus s = loop_.status();
    std::string text = metrics_.render(s.metrics);
    text += "# HELP flashseek:state_audit_ok 1 when the scheduler's block accounting matches the pool exactly.\n"
            "# TYPE flashseek:state_audit_ok gauge\n";
    text += fmt::format("flashseek:state_audit_ok{{model_name=\"{}\"}} {}\n", options_.limits.model_name,
                        s.audit.ok ? 1 : 0);
    text += "# HELP flashseek:state_memory_live_sequences Sequences alive in the backend.\n"
            "# TYPE flashseek:state_memory_live_sequences gauge\n";
    text += fmt::format("flashseek:state_memory_live_sequences{{model_name=\"{}\"}} {}\n", options_.limits.model_name,
                        s.audit.live_sequences);
    text += "# HELP flashseek:requests_in_flight Choices submitted and not finished.\n"
            "# TYPE flashseek:requests_in_flight gauge\n";
    text += fmt::format("flashseek:requests_in_flight{{model_name=\"{}\"}} {}\n", options_.limits.model_name,
                        s.in_flight);
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = std::move(text);
}

void ApiServer::generate(const HttpRequest& hreq, HttpResponse& res, Route route) {
    const Clock::time_point arrival = Clock::now();
    ++open_requests_;
    struct OpenGuard {
        std::atomic<int64_t>* n;
        bool armed = true;
        ~OpenGuard() { if (armed) --*n; }
    } guard{&open_requests_};
    try {
        if (shutting_down_ || !loop_.accepting())
            throw ApiError(503, "the server is shutting down", "", "service_unavailable_error", "shutting_down");
        PreparedGeneration prepared = prepare_generation(route, hreq.body, entry_context());
        const std::shared_ptr<const runtime::CompiledConstraint> grammar = compile_constraint(prepared, route);
        const ParsedRequest& pr = prepared.request;
        const int choices = int(prepared.prompts.size()) * pr.n;
        if (!loop_.try_reserve(choices))
            throw ApiError(429, "the server is at capacity; retry later", "", "rate_limit_error", "overloaded");
        auto channel = std::make_shared<runtime::OutputChannel>(choices);
        submit(prepared, grammar, channel, arrival);

        bool streamed = false;
        if (route == Route::Responses) {
            auto st = std::make_shared<GenerationState<ResponsesBuilder>>();
            st->prepared = std::move(prepared);
            st->channel = channel;
            st->builder = std::make_unique<ResponsesBuilder>(st->prepared.request, *st->prepared.responses,
                                                             "resp_" + random_hex(24), unix_now(),
                                                             int64_t(st->prepared.prompts.at(0).size()));
            streamed = deliver(st, hreq, res, open_requests_);
        } else {
            auto st = std::make_shared<GenerationState<ResponseBuilder>>();
            st->prepared = std::move(prepared);
            st->channel = channel;
            const std::string id = (route == Route::ChatCompletions ? "chatcmpl-" : "cmpl-") + random_hex(24);
            st->builder =
                std::make_unique<ResponseBuilder>(st->prepared.request, tok_, id, unix_now(), st->prepared.prompts);
            streamed = deliver(st, hreq, res, open_requests_);
        }
        if (streamed) guard.armed = false;  // the stream's on_close releases it
    } catch (const ApiError& e) {
        fail(res, e);
    } catch (const Error& e) {
        fail(res, ApiError(400, e.what(), ""));
    } catch (const std::exception& e) {
        fail(res, ApiError(500, fmt::format("internal error: {}", e.what()), "", "server_error"));
    }
}

std::shared_ptr<const runtime::CompiledConstraint> ApiServer::compile_constraint(PreparedGeneration& prepared,
                                                                               Route route) {
    OutputConstraint& c = prepared.request.constraint;
    if (c.kind == OutputConstraint::Kind::None) return nullptr;
    // Chat and responses in thinking mode: the reasoning stays free text up to </think>, then the constraint.
    c.reasoning_first = route != Route::Completions && prepared.request.chat.thinking == chat::ThinkingMode::thinking;
    try {
        return constraint_compiler().compile(c);
    } catch (const runtime::GrammarError& e) {
        bad_param(c.param, "'{}' cannot be used for constrained decoding: {}", c.param, e.what());
    } catch (const runtime::GrammarBusy& e) {
        throw ApiError(503, e.what(), c.param, "service_unavailable_error", "grammar_compiler_busy");
    }
}

void ApiServer::submit(const PreparedGeneration& prepared,
                       const std::shared_ptr<const runtime::CompiledConstraint>& grammar,
                       const std::shared_ptr<runtime::OutputChannel>& channel, Clock::time_point arrival) {
    const ParsedRequest& pr = prepared.request;
    const uint64_t base_seed = pr.seed ? *pr.seed : random_seed();
    const int32_t eos = eos_token();
    const auto deadline = arrival + std::chrono::milliseconds(int64_t(options_.request_timeout_s * 1000));
    for (size_t p = 0; p < prepared.prompts.size(); ++p) {
        const int64_t max_new = prepared.max_new_tokens[p];
        // Prompt scores: vLLM's prompt_logprobs, and echo's prompt logprobs (also needed when nothing is generated).
        int prompt_logprobs = pr.prompt_logprobs;
        if (pr.echo && pr.logprobs) prompt_logprobs = std::max(prompt_logprobs, pr.top_logprobs);
        if (pr.echo && max_new == 0) prompt_logprobs = std::max(prompt_logprobs, 0);
        for (int i = 0; i < pr.n; ++i) {
            const int index = int(p) * pr.n + i;
            runtime::GenerationRequest er;
            er.prompt = prepared.prompts[p];
            er.params.sample.temperature = pr.temperature;
            er.params.sample.top_p = pr.top_p;
            er.params.sample.top_k = pr.top_k;
            er.params.sample.seed = index == 0 ? base_seed : mix_seed(base_seed, uint64_t(index));
            er.params.sample.n_logprobs = pr.logprobs ? pr.top_logprobs : 0;
            er.params.sample.min_p = pr.min_p;
            er.params.sample.presence_penalty = pr.presence_penalty;
            er.params.sample.frequency_penalty = pr.frequency_penalty;
            er.params.sample.repetition_penalty = pr.repetition_penalty;
            for (const auto& [token, bias] : pr.logit_bias) er.params.logit_bias.push_back(LogitBias{token, bias});
            er.params.min_new_tokens = std::min(pr.min_tokens, max_new);
            er.params.prompt_logprobs = prompt_logprobs;
            if (grammar) er.params.constraint = constraint_compiler().start(grammar);
            er.params.max_new_tokens = max_new;
            if (!pr.ignore_eos) er.params.stop_token_ids.push_back(eos);
            er.params.stop_token_ids.insert(er.params.stop_token_ids.end(), pr.stop_token_ids.begin(),
                                            pr.stop_token_ids.end());
            er.params.deadline = deadline;
            er.params.forced_tokens = pr.forced_tokens;
            er.stop_strings = pr.stop;
            er.skip_special = pr.skip_special_tokens;
            er.choice = index;
            er.arrival = arrival;
            er.channel = channel;
            loop_.submit(std::move(er));
        }
    }
}

}  // namespace flashseek::server
