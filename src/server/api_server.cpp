// OpenAI API handlers (see api_server.h). Order inside a generation request: shutdown check → strict JSON →
// validation → tokenization (on this worker thread, never on the step-loop thread) → context check → overload
// reservation → submit every choice → stream SSE or wait. A client that disconnects at any point cancels its
// choices; the step loop frees their state before its next step.
#include "server/api_server.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "server/response_builder.h"
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

// Everything one streaming response needs after the handler returns (owned by the stream callbacks).
struct StreamState {
    ParsedRequest request;
    std::unique_ptr<ResponseBuilder> builder;
    std::shared_ptr<runtime::OutputChannel> channel;
    bool sent_first = false;
    bool completed = false;
};

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
    http_.post("/v1/chat/completions", [this](const HttpRequest& q, HttpResponse& r) { generate(q, r, Endpoint::Chat); });
    http_.post("/v1/completions", [this](const HttpRequest& q, HttpResponse& r) { generate(q, r, Endpoint::Completion); });
    http_.post("/tokenize", [this](const HttpRequest& q, HttpResponse& r) { tokenize(q, r); });
    http_.get("/v1/models", [this](const HttpRequest& q, HttpResponse& r) { models(q, r); });
    http_.get("/health", [this](const HttpRequest& q, HttpResponse& r) { health(q, r); });
    http_.get("/metrics", [this](const HttpRequest& q, HttpResponse& r) { this->metrics(q, r); });
}

const runtime::ConstraintCompiler& ApiServer::constraint_compiler() {
    std::call_once(compiler_once_, [this] {
        compiler_ = std::make_unique<runtime::ConstraintCompiler>(tok_, loop_.config().vocab_size, eos_token());
    });
    return *compiler_;
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

void ApiServer::tokenize(const HttpRequest& hreq, HttpResponse& res) {
    try {
        const json body = parse_json_body(hreq.body);
        std::vector<int32_t> ids;
        if (body.contains("messages")) {
            const ParsedRequest pr = parse_chat_request(body, options_.limits, hreq.body);
            try {
                ids = chat::encode_prompt(tok_, chat::render_prompt(pr.chat));
            } catch (const Error& e) {
                bad_param("messages", "could not tokenize the prompt: {}", e.what());
            }
        } else {
            const ParsedRequest pr = parse_completion_request(body, options_.limits);
            if (pr.prompt_texts.size() + pr.prompt_tokens.size() != 1)
                bad_param("prompt", "'/tokenize' takes exactly one prompt");
            if (!pr.prompt_tokens.empty()) ids = pr.prompt_tokens[0];
            else ids = tok_.encode_with_specials(pr.prompt_texts[0]);
        }
        res.body = json({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", loop_.max_model_len()}}).dump();
    } catch (const ApiError& e) {
        fail(res, e);
    } catch (const Error& e) {
        fail(res, ApiError(400, e.what(), ""));
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

void ApiServer::generate(const HttpRequest& hreq, HttpResponse& res, Endpoint endpoint) {
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
        const json body = parse_json_body(hreq.body);
        auto st = std::make_shared<StreamState>();
        st->request = endpoint == Endpoint::Chat ? parse_chat_request(body, options_.limits, hreq.body)
                                                 : parse_completion_request(body, options_.limits, hreq.body);
        ParsedRequest& pr = st->request;
        // Constrained decoding: compiled here, on this worker thread (cached per distinct constraint).
        std::shared_ptr<const runtime::CompiledConstraint> grammar;
        if (pr.constraint.kind != OutputConstraint::Kind::None) {
            pr.constraint.reasoning_first =
                endpoint == Endpoint::Chat && pr.chat.thinking == chat::ThinkingMode::thinking;
            try {
                grammar = constraint_compiler().compile(pr.constraint);
            } catch (const runtime::GrammarError& e) {
                bad_param(pr.constraint.param, "'{}' cannot be used for constrained decoding: {}", pr.constraint.param,
                          e.what());
            }
        }

        std::vector<std::vector<int32_t>> prompts;
        try {
            if (endpoint == Endpoint::Chat) {
                prompts.push_back(chat::encode_prompt(tok_, chat::render_prompt(pr.chat)));
            } else {
                // As HF encodes it: added tokens matched literally, no BOS (DeepSeek-V4's add_bos_token is false).
                for (const std::string& text : pr.prompt_texts) prompts.push_back(tok_.encode_with_specials(text));
                for (auto& ids : pr.prompt_tokens) prompts.push_back(ids);
            }
        } catch (const Error& e) {
            bad_param(endpoint == Endpoint::Chat ? "messages" : "prompt", "could not tokenize the prompt: {}", e.what());
        }
        std::vector<int64_t> max_new;
        for (const auto& p : prompts)
            max_new.push_back(resolve_max_tokens(pr, int64_t(p.size()), loop_.max_model_len()));
        // Prompt scores: vLLM's prompt_logprobs, and echo's prompt logprobs (also needed when nothing is generated).
        int prompt_logprobs = pr.prompt_logprobs;
        if (pr.echo && pr.logprobs) prompt_logprobs = std::max(prompt_logprobs, pr.top_logprobs);
        if (pr.echo && std::find(max_new.begin(), max_new.end(), 0) != max_new.end())
            prompt_logprobs = std::max(prompt_logprobs, 0);
        const int choices = int(prompts.size()) * pr.n;
        if (!loop_.try_reserve(choices))
            throw ApiError(429, "the server is at capacity; retry later", "", "rate_limit_error", "overloaded");

        st->channel = std::make_shared<runtime::OutputChannel>(choices);
        const uint64_t base_seed = pr.seed ? *pr.seed : random_seed();
        const int32_t eos = eos_token();
        const auto deadline = arrival + std::chrono::milliseconds(int64_t(options_.request_timeout_s * 1000));
        for (size_t p = 0; p < prompts.size(); ++p)
            for (int i = 0; i < pr.n; ++i) {
                const int index = int(p) * pr.n + i;
                runtime::GenerationRequest er;
                er.prompt = prompts[p];
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
                er.params.min_new_tokens = std::min(pr.min_tokens, max_new[p]);
                er.params.prompt_logprobs = prompt_logprobs;
                if (grammar) er.params.constraint = constraint_compiler().start(grammar);
                er.params.max_new_tokens = max_new[p];
                if (!pr.ignore_eos) er.params.stop_token_ids.push_back(eos);
                er.params.stop_token_ids.insert(er.params.stop_token_ids.end(), pr.stop_token_ids.begin(),
                                                pr.stop_token_ids.end());
                er.params.deadline = deadline;
                er.params.forced_tokens = pr.forced_tokens;
                er.stop_strings = pr.stop;
                er.skip_special = pr.skip_special_tokens;
                er.choice = index;
                er.arrival = arrival;
                er.channel = st->channel;
                loop_.submit(std::move(er));
            }
        const std::string id = (endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
        st->builder = std::make_unique<ResponseBuilder>(st->request, tok_, id, unix_now(), prompts);

        if (pr.stream) {
            guard.armed = false;  // the stream's on_close releases it
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
                    if (!sink.write(st->builder->last_chunks())) return StreamStatus::Failed;
                    st->completed = true;
                    return StreamStatus::Done;
                }
                if (events.empty() && !sink.alive()) return StreamStatus::Failed;
                return StreamStatus::More;
            };
            res.on_close = [st, this](bool) {
                if (!st->completed) st->channel->cancel();
                --open_requests_;
            };
            return;
        }

        // Non-streaming: wait, but keep probing the connection so a vanished client cancels its work too.
        std::vector<runtime::OutputEvent> events;
        int polls = 0;
        while (st->channel->wait_pop(events, std::chrono::milliseconds(50))) {
            st->builder->absorb(events);
            events.clear();
            if (++polls % 4 == 0 && hreq.connection_alive && !hreq.connection_alive()) {
                st->channel->cancel();
                res.status = 499;  // nobody will read it; keeps logs honest
                res.body = error_body(499, "client closed the connection", "", "client_closed_request");
                return;
            }
        }
        if (const std::optional<ApiError> f = st->builder->failure()) throw *f;
        res.body = st->builder->final_json().dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const ApiError& e) {
        fail(res, e);
    } catch (const Error& e) {
        fail(res, ApiError(400, e.what(), ""));
    } catch (const std::exception& e) {
        fail(res, ApiError(500, fmt::format("internal error: {}", e.what()), "", "server_error"));
    }
}

}  // namespace flashseek::server
