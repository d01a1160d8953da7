// The OpenAI-compatible HTTP API over one step loop (runtime/step_loop.h): routes, API-key gate, overload and shutdown answers, and the
// request handlers (parse → tokenize → submit → stream or wait). Handlers run on HTTP worker threads; only the
// step-loop thread touches the backend.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/step_loop.h"
#include "server/http.h"
#include "runtime/metrics.h"
#include "server/openapi.h"
#include "server/protocol.h"
#include "server/request_entry.h"

namespace flashseek::server {

struct ApiServerOptions {
    HttpOptions http;
    std::string api_key;           // empty = no authentication
    ProtocolLimits limits;         // model_name and vocab_size are filled in from the step loop when empty/0
    double request_timeout_s = 600;  // per-request deadline (queue + generation)
    int retry_after_s = 1;         // Retry-After on 429/503
    runtime::CompileLimits grammar_compile;  // constrained decoding: compile time limit and queue
};

class ApiServer {
public:
    ApiServer(runtime::StepLoop& loop, const tokenizer::Tokenizer& tok, runtime::Metrics& metrics, ApiServerOptions options);
    int bind() { return http_.bind(); }
    int port() const { return http_.port(); }
    void run() { http_.run(); }
    void stop() { http_.stop(); }
    // New generation requests get 503 and /health turns 503; running ones continue.
    void begin_shutdown() { shutting_down_ = true; }
    int64_t open_requests() const { return open_requests_.load(); }
    // A grammar compile is running (perhaps one abandoned at its time limit; runtime/grammar.h, compiling()).
    bool grammar_compile_running() const;

private:
    HttpHandler handler_for(RouteId id);
    void generate(const HttpRequest& req, HttpResponse& res, Route route);
    // Constrained decoding: the request's constraint compiled (cached per distinct constraint) on this worker
    // thread; nullptr when it has none. 400 naming the field when the grammar engine cannot compile it.
    std::shared_ptr<const runtime::CompiledConstraint> compile_constraint(PreparedGeneration& prepared, Route route);
    void submit(const PreparedGeneration& prepared, const std::shared_ptr<const runtime::CompiledConstraint>& grammar,
                const std::shared_ptr<runtime::OutputChannel>& channel, Clock::time_point arrival);
    // Routes answered without the model (vLLM-style extras): /tokenize, /detokenize.
    void answer(const HttpRequest& req, HttpResponse& res, Route route);
    EntryContext entry_context() const;
    void models(const HttpRequest& req, HttpResponse& res);
    void health(const HttpRequest& req, HttpResponse& res);
    void metrics(const HttpRequest& req, HttpResponse& res);
    bool authorized(const HttpRequest& req) const;
    // The grammar compiler of constrained decoding, built on first use (it indexes the whole vocabulary).
    const runtime::ConstraintCompiler& constraint_compiler();
    int32_t eos_token() const;
    void fail(HttpResponse& res, const ApiError& e);

    runtime::StepLoop& loop_;
    const tokenizer::Tokenizer& tok_;
    runtime::Metrics& metrics_;
    ApiServerOptions options_;
    HttpServer http_;
    std::atomic<bool> shutting_down_{false};
    std::atomic<int64_t> open_requests_{0};
    int64_t started_ = 0;
    std::once_flag compiler_once_;
    std::unique_ptr<runtime::ConstraintCompiler> compiler_;
    std::atomic<const runtime::ConstraintCompiler*> compiler_published_{nullptr};  // for threads outside call_once
    std::string openapi_json_;  // built once: the document depends only on start-up options
};

}  // namespace flashseek::server
