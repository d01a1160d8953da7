// One fuzz input through the request entry (server/request_entry.h) and the properties every outcome must have.
// Shared by the libFuzzer target (fuzz_request_entry.cpp) and the regression test that replays the checked-in
// corpus and past findings (test_request_entry.cpp), so a finding stays fixed. The first byte picks the route,
// the rest is the HTTP body.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/request_entry.h"

namespace flashseek::server::fuzzing {

// What one input did: "ok" or the ApiError's status and code, for the regression test's expectations.
struct EntryOutcome {
    int status = 200;
    std::string code;
    std::string param;
};

inline Route route_of(unsigned char selector) {
    static const Route routes[] = {Route::ChatCompletions, Route::Completions, Route::Responses, Route::Tokenize,
                                   Route::Detokenize};
    return routes[selector % 5];
}

// Runs the input; any property violated is reported through `violation` (the fuzzer traps, the test fails).
// Exceptions other than ApiError propagate: they are bugs too.
template <typename Violation>
EntryOutcome check_request_entry(std::string_view input, const EntryContext& ctx, Violation&& violation) {
    EntryOutcome outcome;
    if (input.empty()) return outcome;
    const Route route = route_of(static_cast<unsigned char>(input[0]));
    const std::string_view body = input.substr(1);
    try {
        if (route == Route::Tokenize || route == Route::Detokenize) {
            const nlohmann::json answer =
                route == Route::Tokenize ? answer_tokenize(body, ctx) : answer_detokenize(body, ctx);
            (void)answer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
            return outcome;
        }
        const PreparedGeneration g = prepare_generation(route, body, ctx);
        if (g.prompts.empty() || g.prompts.size() != g.max_new_tokens.size()) violation("no prompt, or no max_tokens per prompt");
        for (size_t i = 0; i < g.prompts.size(); ++i) {
            if (g.prompts[i].empty()) violation("an empty prompt was accepted");
            // max_tokens 0 only scores the prompt: completions with echo (lm-evaluation-harness).
            const int64_t least = route == Route::Completions && g.request.echo ? 0 : 1;
            if (g.max_new_tokens[i] < least || int64_t(g.prompts[i].size()) + g.max_new_tokens[i] > ctx.max_model_len)
                violation("prompt + max_tokens outside the context");
            for (int32_t id : g.prompts[i])
                if (id < 0 || id >= ctx.limits.vocab_size) violation("a prompt id outside the vocabulary");
        }
        if (g.request.n < 1 || g.request.n > ctx.limits.max_n) violation("n outside its bounds");
        // What the sampler takes without failing (a 500 otherwise): checked on the float values it receives.
        if (!(g.request.top_p > 0.f && g.request.top_p <= 1.f)) violation("top_p outside (0, 1] as a float");
        if (!(g.request.temperature >= 0.f && g.request.temperature <= 2.f)) violation("temperature outside [0, 2]");
        if ((route == Route::Responses) != g.responses.has_value()) violation("responses fields on the wrong route");
        if (g.responses) (void)g.responses->echo.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } catch (const ApiError& e) {
        outcome.status = e.status;
        outcome.code = e.code;
        outcome.param = e.param;
        if (e.status != 400 && e.status != 404) violation("an entry error that is not 400 or 404");
        const std::string body_text = error_body(e);
        if (body_text.size() > 4096) violation("an error body over 4 KiB (it echoes the input)");
        if (!nlohmann::json::accept(body_text)) violation("an error body that is not JSON");
    }
    return outcome;
}

}  // namespace flashseek::server::fuzzing
