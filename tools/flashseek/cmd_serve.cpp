// `flashseek serve`: the OpenAI-compatible server. Loads the model (progress bar, Ctrl-C cancels), starts the
// step-loop thread and the HTTP server on 127.0.0.1 unless --host says otherwise, and on SIGTERM/SIGINT drains:
// new requests get 503, in-flight ones may finish for --shutdown-timeout seconds, then the rest are aborted.
// A second signal exits at once. Without --model it serves the embedded default tiny model.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "backend_flags.h"
#include "byte_size.h"
#include "command.h"
#include "backend/registry.h"
#include "model/default_model.h"
#include "server/api_server.h"
#include "server/load_progress.h"
#include "server/signals.h"
#include "model/memory_estimate.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using namespace flashseek;
using namespace flashseek::server;

int run_serve(int argc, char** argv) {
    CLI::App app{"Serve a DeepSeek-V4 model over the OpenAI API (chat/completions, completions, responses, models, "
                 "tokenize, detokenize, health, metrics, openapi.json)"};
    std::string model_dir, served_name;
    cli::BackendFlags flags;
    ApiServerOptions api;
    runtime::StepLoopOptions loop_opt;
    int max_sequences = BackendOptions{}.max_sequences;
    int64_t max_context = 0;
    double shutdown_timeout = 30;
    std::string state_memory;
    bool debug_hooks = false;
    app.add_option("--model", model_dir, "model directory (config.json, safetensors, tokenizer.json); default: the "
                                         "embedded tiny model");
    app.add_option("--served-model-name", served_name, "model id in the API (default: the directory name)");
    app.add_option("--host", api.http.host, "address to bind (default 127.0.0.1; 0.0.0.0 exposes it)");
    app.add_option("--port", api.http.port, "port (0 = any free port, printed at start-up)");
    app.add_option("--api-key", api.api_key, "require 'Authorization: Bearer KEY' on every route except /health "
                                             "(also read from FLASHSEEK_API_KEY)");
    cli::add_backend_flags(app, flags, /*with_dummy=*/true);
    app.add_option("--max-num-seqs", max_sequences, "most sequences in the running batch");
    app.add_option("--max-model-len", max_context, "context limit per sequence (0 = the model's)");
    app.add_option("--state-memory", state_memory, "state-memory pool size: bytes or with KiB/MiB/GiB (or KB/MB/GB: "
                                                   "powers of 1000; default: the backend's)");
    CLI::Option* batch_tokens_opt =
        app.add_option("--max-batch-tokens", loop_opt.scheduler.max_batch_tokens,
                       "tokens per step (decode + prefill; default 8192 on cuda, 512 on cpu)");
    CLI::Option* batch_wait_opt = app.add_option(
        "--batch-wait-ms", loop_opt.batch_wait_ms,
        "an idle engine waits up to this long for the rest of a burst of requests before its first step, ending "
        "after a tenth of it without a new one (default 20 on cuda, 0 on cpu; 0 = step at once)");
    app.add_option("--prefill-hold-ms", loop_opt.scheduler.prefill_hold_ms,
                   "while requests decode, a new request waits up to this long for others to share its prefill pass "
                   "(ends early when the waiting prompts fill a step or the batch; 0 = off, the default)");
    app.add_option("--max-queue", loop_opt.max_waiting, "queued requests beyond the running batch before 429");
    app.add_option("--watchdog", loop_opt.watchdog_seconds, "/health reports 503 when one step takes longer (s)");
    app.add_option("--request-timeout", api.request_timeout_s, "per-request deadline in seconds (queue + generation)");
    app.add_option("--grammar-compile-timeout", api.grammar_compile.time_limit_s,
                   "constrained decoding: seconds one grammar may take to compile (400 beyond; default 10)");
    app.add_option("--grammar-compile-queue-wait", api.grammar_compile.queue_wait_s,
                   "constrained decoding: seconds a compile may wait for the one compiler thread (503 beyond; "
                   "default 10)");
    app.add_option("--grammar-compile-queue", api.grammar_compile.max_pending,
                   "constrained decoding: compiles that may wait at once (503 beyond; default 64)");
    app.add_option("--max-constraint-bytes", api.limits.max_constraint_bytes,
                   "constrained decoding: largest schema / regex / grammar / choices / forced tools, in bytes (400 "
                   "beyond; default 32768)");
    app.add_option("--max-constraint-choices", api.limits.max_constraint_choices,
                   "constrained decoding: most strings of a choice constraint (400 beyond; default 1024)");
    app.add_option("--max-logit-bias", api.limits.max_logit_bias,
                   "most entries of a logit_bias map (400 beyond; default 1024)");
    app.add_option("--shutdown-timeout", shutdown_timeout, "seconds in-flight requests may finish after SIGTERM");
    CLI::Option* http_threads_opt = app.add_option(
        "--http-threads", api.http.threads,
        "HTTP worker threads, one per open connection (default: enough for every request the engine runs or queues, "
        "--max-num-seqs + --max-queue + 16, at least 64)");
    app.add_option("--max-body-bytes", api.http.max_body_bytes, "request body limit (413 above it)");
    app.add_option("--keep-alive-max-requests", api.http.keep_alive_max_requests,
                   "requests one connection may carry before the server closes it");
    app.add_option("--keep-alive-timeout", api.http.keep_alive_timeout_s,
                   "seconds an idle keep-alive connection stays open (also the wait for a new connection's request)");
    app.add_option("--max-n", api.limits.max_n, "largest accepted n");
    app.add_option("--max-logprobs", api.limits.max_logprobs, "largest accepted top_logprobs / logprobs");
    app.add_flag("--enable-debug-hooks", debug_hooks, "accept test-only request fields (debug_forced_tokens)");
    CLI11_PARSE(app, argc, argv);
    if (api.api_key.empty())
        if (const char* k = std::getenv("FLASHSEEK_API_KEY")) api.api_key = k;
    FS_CHECK(api.http.threads >= 4, "--http-threads must be >= 4 (got {})", api.http.threads);
    // Checked here, not left to the socket: a port past 65535 would be truncated to 16 bits and bind another one.
    FS_CHECK(api.http.port >= 0 && api.http.port <= 65535, "--port must be in [0, 65535] (0 = any free port; got {})",
             api.http.port);
    FS_CHECK(max_sequences >= 1, "--max-num-seqs must be >= 1 (got {})", max_sequences);
    // Every admitted request holds its connection's worker until it ends (a queued one while it waits), so fewer
    // workers than the engine admits leaves admitted clients waiting for a worker instead of getting a 429.
    if (http_threads_opt->count() == 0)
        api.http.threads = std::max(64, max_sequences + std::max(0, loop_opt.max_waiting) + 16);
    FS_CHECK(api.http.keep_alive_max_requests >= 1, "--keep-alive-max-requests must be >= 1 (got {})",
             api.http.keep_alive_max_requests);
    FS_CHECK(api.http.keep_alive_timeout_s >= 1, "--keep-alive-timeout must be >= 1 s (got {})",
             api.http.keep_alive_timeout_s);
    FS_CHECK(shutdown_timeout >= 0, "--shutdown-timeout must be >= 0 (got {})", shutdown_timeout);
    FS_CHECK(api.request_timeout_s > 0, "--request-timeout must be > 0 (got {})", api.request_timeout_s);
    FS_CHECK(api.grammar_compile.time_limit_s > 0, "--grammar-compile-timeout must be > 0 (got {})",
             api.grammar_compile.time_limit_s);
    FS_CHECK(api.grammar_compile.queue_wait_s >= 0, "--grammar-compile-queue-wait must be >= 0 (got {})",
             api.grammar_compile.queue_wait_s);
    FS_CHECK(api.grammar_compile.max_pending >= 1, "--grammar-compile-queue must be >= 1 (got {})",
             api.grammar_compile.max_pending);
    FS_CHECK(api.limits.max_constraint_bytes >= 1, "--max-constraint-bytes must be >= 1 (got {})",
             api.limits.max_constraint_bytes);
    FS_CHECK(api.limits.max_constraint_choices >= 1, "--max-constraint-choices must be >= 1 (got {})",
             api.limits.max_constraint_choices);
    FS_CHECK(loop_opt.max_waiting >= 0, "--max-queue must be >= 0 (got {})", loop_opt.max_waiting);
    FS_CHECK(loop_opt.batch_wait_ms >= 0 && loop_opt.batch_wait_ms <= 10000, "--batch-wait-ms must be in [0, 10000] "
             "(got {})", loop_opt.batch_wait_ms);
    FS_CHECK(loop_opt.scheduler.prefill_hold_ms >= 0 && loop_opt.scheduler.prefill_hold_ms <= 10000,
             "--prefill-hold-ms must be in [0, 10000] (got {})", loop_opt.scheduler.prefill_hold_ms);
    // A held request's deadline keeps running: a hold as long as the deadline would expire requests that arrive
    // while others decode.
    FS_CHECK(loop_opt.scheduler.prefill_hold_ms < 1000 * api.request_timeout_s,
             "--prefill-hold-ms ({} ms) must be shorter than --request-timeout ({} s)",
             loop_opt.scheduler.prefill_hold_ms, api.request_timeout_s);

    SignalWatcher signals;  // before any other thread exists, so all of them inherit the blocked mask

    if (model_dir.empty()) {
        std::fprintf(stderr, "serve: no --model given; using the embedded default model\n");
        model_dir = ensure_default_model();
    }
    const std::string tokenizer_path = model_dir + "/tokenizer.json";
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tokenizer_path);

    BackendOptions bopt = cli::backend_options(flags);
    bopt.max_sequences = max_sequences;
    bopt.max_context = max_context;
    loop_opt.scheduler.max_context = bopt.max_context;
    loop_opt.scheduler.max_running = bopt.max_sequences;
    // One request's prefill piece per step is also the device backend's pass size: a piece cut into smaller passes
    // would stream the weights once per pass.
    if (flags.prefill_chunk > 0) loop_opt.scheduler.prefill_chunk = flags.prefill_chunk;
    // The device's defaults, from the served measurements of docs/perf.md §1.2: prefill passes of 4,096 tokens (the
    // CUDA backend's default chunk: at concurrency 16, 890 output tok/s and a median TTFT of 330 ms against 740 and
    // 409 ms with 2,048) and room for a whole piece beside the decodes of a full batch.
    if (flags.backend == "cuda") {
        if (flags.prefill_chunk == 0) loop_opt.scheduler.prefill_chunk = kDefaultPrefillChunkTokens;
        if (batch_tokens_opt->count() == 0) loop_opt.scheduler.max_batch_tokens = 2 * kDefaultPrefillChunkTokens;
        // A burst's requests in one prefill step (a lone 256-token prefill costs most of a 4,096-token one on the
        // device: docs/perf.md §1.2); at most 2 ms more for a lone request.
        if (batch_wait_opt->count() == 0) loop_opt.batch_wait_ms = 20;
    }
    bopt.state_memory_bytes = state_memory.empty() ? 0 : cli::parse_byte_size("--state-memory", state_memory);
    LoadProgress progress([&] { return signals.stop_requested(); }, isatty(STDERR_FILENO) != 0);
    bopt.progress = [&](size_t done, size_t total) { return progress(done, total); };
    std::unique_ptr<Backend> be;
    try {
        be = create_backend(model_dir, bopt);
    } catch (const std::exception& e) {
        if (signals.stop_requested()) {
            std::fprintf(stderr, "\nserve: model load interrupted\n");
            return 130;
        }
        throw;
    }
    progress.finish();
    if (signals.stop_requested()) {
        std::fprintf(stderr, "serve: interrupted during start-up\n");
        return 130;
    }

    if (served_name.empty()) {
        std::string d = model_dir;
        while (d.size() > 1 && d.back() == '/') d.pop_back();
        served_name = d.substr(d.find_last_of('/') + 1);
    }
    api.limits.model_name = served_name;
    api.limits.debug_hooks = debug_hooks;
    api.limits.vocab_size = int64_t(tok.vocab_size());
    FS_CHECK(api.limits.vocab_size <= be->config().vocab_size,
             "{}: the tokenizer has {} ids but the model's vocab_size is {}", tokenizer_path, api.limits.vocab_size,
             be->config().vocab_size);

    runtime::Metrics metrics(served_name);
    const StateMemoryStats mem = be->memory();
    const std::string backend_desc = be->name();
    runtime::StepLoop loop(std::move(be), tok, loop_opt, metrics);
    ApiServer server(loop, tok, metrics, api);
    const int port = server.bind();
    std::fprintf(stderr,
                 "serve: model '%s' on %s, max_model_len %lld, state memory %lld blocks x %lld tokens\n"
                 "serve: listening on http://%s:%d%s\n",
                 served_name.c_str(), backend_desc.c_str(), (long long)loop.max_model_len(),
                 (long long)mem.total_blocks, (long long)mem.block_tokens, api.http.host.c_str(), port,
                 api.api_key.empty() ? "" : " (API key required)");
    std::fflush(stderr);
    std::thread http_thread([&] { server.run(); });

    signals.wait_for_count(1, std::chrono::hours(24 * 365 * 100));
    std::fprintf(stderr, "serve: shutting down: new requests get 503; waiting up to %.0f s for %lld in flight\n",
                 shutdown_timeout, (long long)loop.status().in_flight);
    server.begin_shutdown();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(shutdown_timeout * 1000));
    while (std::chrono::steady_clock::now() < deadline && signals.count() < 2 &&
           (loop.status().in_flight > 0 || server.open_requests() > 0))
        signals.wait_for_count(2, std::chrono::milliseconds(50));
    loop.stop_accepting();
    loop.abort_all();
    // Let aborted streams send their error event and [DONE] before the sockets close.
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < grace && server.open_requests() > 0 && signals.count() < 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server.stop();
    http_thread.join();
    std::fprintf(stderr, "serve: stopped\n");
    if (server.grammar_compile_running()) {
        // A grammar compile abandoned at its time limit cannot be interrupted; static destructors must not run
        // under it.
        std::fprintf(stderr, "serve: a grammar compile past its time limit is still running; exiting now\n");
        std::fflush(nullptr);
        std::_Exit(0);
    }
    return 0;
}

FLASHSEEK_COMMAND("serve", "OpenAI-compatible server (chat/completions, completions, responses, models, health, "
                  "metrics, openapi.json)", run_serve);

}  // namespace
