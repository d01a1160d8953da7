// The route table and the OpenAPI 3.1 document (see openapi.h). Schemas say what the validators in protocol.cpp,
// responses_protocol.cpp, output_constraint.cpp and request_entry.cpp accept and what the builders produce; where a
// field is accepted only at its neutral value (best_of, suffix), the schema says exactly that (const). A schema may be
// looser than its validator (a value it admits can still get 400), never stricter: schemathesis sends what violates
// it and expects a 4xx. Fields not listed are accepted and ignored (additionalProperties), as OpenAI-compatible
// servers do.
#include "server/openapi.h"

namespace flashseek::server {

using ojson = nlohmann::ordered_json;

const std::vector<RouteSpec>& api_routes() {
    static const std::vector<RouteSpec> routes = {
        {RouteId::ChatCompletions, "POST", "/v1/chat/completions", "Chat completion (OpenAI), streamed or not"},
        {RouteId::Completions, "POST", "/v1/completions", "Text completion (OpenAI legacy), streamed or not"},
        {RouteId::Responses, "POST", "/v1/responses", "Response (OpenAI Responses API, stateless), streamed or not"},
        {RouteId::ResponseById, "GET", "/v1/responses/{response_id}",
         "Always 404: responses are not stored (store is treated as false)"},
        {RouteId::Tokenize, "POST", "/tokenize", "Prompt token ids of a completion prompt or a chat conversation"},
        {RouteId::Detokenize, "POST", "/detokenize", "Text of token ids"},
        {RouteId::Models, "GET", "/v1/models", "The served model"},
        {RouteId::Health, "GET", "/health", "Readiness: 200 when serving, 503 while draining or stalled"},
        {RouteId::Metrics, "GET", "/metrics", "Prometheus metrics (text format 0.0.4)"},
        {RouteId::OpenApi, "GET", "/openapi.json", "This document"},
    };
    return routes;
}

namespace {

ojson ref(const std::string& name) { return ojson{{"$ref", "#/components/schemas/" + name}}; }
ojson nullable(ojson schema) { return ojson{{"anyOf", ojson::array({std::move(schema), ojson{{"type", "null"}}})}}; }
ojson str(const std::string& description = {}) {
    ojson s = {{"type", "string"}};
    if (!description.empty()) s["description"] = description;
    return s;
}
ojson enum_of(std::vector<std::string> values, const std::string& description = {}) {
    ojson s = {{"type", "string"}, {"enum", values}};
    if (!description.empty()) s["description"] = description;
    return s;
}
ojson constant(ojson value, const std::string& description) { return ojson{{"const", value}, {"description", description}}; }
ojson integer(std::optional<int64_t> min, std::optional<int64_t> max, const std::string& description = {}) {
    ojson s = {{"type", "integer"}};
    if (min) s["minimum"] = *min;
    if (max) s["maximum"] = *max;
    if (!description.empty()) s["description"] = description;
    return s;
}
ojson number(std::optional<double> min = {}, std::optional<double> max = {}, const std::string& description = {}) {
    ojson s = {{"type", "number"}};
    if (min) s["minimum"] = *min;
    if (max) s["maximum"] = *max;
    if (!description.empty()) s["description"] = description;
    return s;
}
ojson boolean(const std::string& description = {}) {
    ojson s = {{"type", "boolean"}};
    if (!description.empty()) s["description"] = description;
    return s;
}
ojson array_of(ojson items, std::optional<int64_t> min_items = {}, std::optional<int64_t> max_items = {}) {
    ojson s = {{"type", "array"}, {"items", std::move(items)}};
    if (min_items) s["minItems"] = *min_items;
    if (max_items) s["maxItems"] = *max_items;
    return s;
}
ojson object(ojson properties, std::vector<std::string> required = {}, bool closed = false) {
    ojson s = {{"type", "object"}, {"properties", std::move(properties)}};
    if (!required.empty()) s["required"] = required;
    if (closed) s["additionalProperties"] = false;
    return s;
}
ojson any_of(std::vector<ojson> options) { return ojson{{"anyOf", options}}; }

// The request parsers treat a field sent as null like a field left out (OpenAI clients send nulls), so every
// optional property of a request schema, at any depth, also admits null.
void admit_null_for_optional(ojson& schema) {
    if (schema.contains("anyOf"))
        for (ojson& branch : schema["anyOf"]) admit_null_for_optional(branch);
    if (schema.contains("items")) admit_null_for_optional(schema["items"]);
    if (!schema.contains("properties")) return;
    const ojson required = schema.value("required", ojson::array());
    for (auto& [name, property] : schema["properties"].items()) {
        admit_null_for_optional(property);
        bool is_required = false;
        for (const ojson& r : required) is_required = is_required || r == name;
        if (!is_required) property = nullable(std::move(property));
    }
}

struct Schemas {
    const OpenApiFacts& f;
    int64_t vocab() const { return f.limits.vocab_size; }
    ojson token_id() const { return integer(0, vocab() - 1); }
    ojson token_ids(std::optional<int64_t> max_items = {}) const { return array_of(token_id(), 1, max_items); }

    // Fields every generation route shares (parse_common in protocol.cpp).
    ojson sampling_fields(bool chat_names) const {
        const auto& L = f.limits;
        ojson p;
        p["model"] = enum_of({L.model_name}, "optional; any other id gives 404");
        p["temperature"] = ojson{{"type", "number"}, {"minimum", 0}, {"maximum", 2}, {"description", "0 = greedy"}};
        p["top_p"] = ojson{{"type", "number"}, {"exclusiveMinimum", 0}, {"maximum", 1}};
        p["top_k"] = integer(-1, vocab(), "0 or -1 = off");
        p["seed"] = integer(INT64_MIN, std::nullopt, "64-bit seed (unsigned values up to 2^64-1 too)");
        p["stop"] = any_of({ojson{{"type", "string"}, {"minLength", 1}, {"maxLength", L.max_stop_bytes}},
                            array_of(ojson{{"type", "string"}, {"minLength", 1}, {"maxLength", L.max_stop_bytes}},
                                     std::nullopt, L.max_stop)});
        p["stop_token_ids"] = array_of(token_id(), std::nullopt, L.max_stop);
        p["ignore_eos"] = boolean();
        p["stream"] = boolean();
        if (chat_names) {
            p["stream_options"] = object({{"include_usage", boolean()}, {"continuous_usage_stats", boolean()}});
            p["stream_options"]["description"] = "only with stream: true";
            p["max_tokens"] = integer(1, f.max_model_len - 1, "default: the remaining context");
            p["max_completion_tokens"] = integer(1, f.max_model_len - 1, "the smaller of this and max_tokens counts");
            p["n"] = integer(1, L.max_n, "n > 1 needs temperature > 0");
        }
        p["presence_penalty"] = number(-2, 2, "subtracted once from the logit of every token in the output");
        p["frequency_penalty"] = number(-2, 2, "subtracted per occurrence in the output");
        p["repetition_penalty"] = ojson{{"type", "number"}, {"exclusiveMinimum", 0}, {"maximum", 100},
                                        {"description", "divides positive, multiplies negative logits of tokens in "
                                                        "the prompt or output; 1 = off"}};
        p["min_p"] = number(0, 1, "drop tokens less likely than min_p x the most likely one");
        p["logit_bias"] = ojson{{"type", "object"},
                                {"propertyNames", {{"pattern", "^[0-9]{1,10}$"}}},
                                {"maxProperties", L.max_logit_bias},
                                {"additionalProperties", number(-100, 100)},
                                {"description", fmt::format("token id (0 to {}) -> bias added to its logit",
                                                            vocab() - 1)}};
        p["min_tokens"] = integer(0, std::nullopt, "stop ids and stop strings wait for this many tokens");
        constraint_fields(p, chat_names);
        if (L.debug_hooks)
            p["debug_forced_tokens"] = array_of(token_id(), std::nullopt, std::nullopt);
        return p;
    }

    // A JSON schema as the constraint parser takes it: an object, true / false, or JSON text of one.
    ojson json_schema_value() const {
        return any_of({ojson{{"type", "object"}}, boolean(),
                       ojson{{"type", "string"}, {"minLength", 2}, {"maxLength", f.limits.max_constraint_bytes}}});
    }

    // Constrained decoding (output_constraint.cpp): at most one source per request; what the grammar engine cannot
    // compile is a 400 naming the field. /v1/responses spells response_format as text.format.
    void constraint_fields(ojson& p, bool with_response_format) const {
        const ojson text = ojson{{"type", "string"}, {"minLength", 1}, {"maxLength", f.limits.max_constraint_bytes}};
        const ojson choices =
            array_of(ojson{{"type", "string"}, {"minLength", 1}}, 1, f.limits.max_constraint_choices);
        const ojson schema_format = object({{"type", constant("json_schema", "")},
                                            {"json_schema", object({{"name", str()},
                                                                    {"schema", json_schema_value()},
                                                                    {"strict", boolean()},
                                                                    {"description", str()}},
                                                                   {"schema"})}},
                                           {"type", "json_schema"});
        if (with_response_format) {
            p["response_format"] = any_of({object({{"type", enum_of({"text", "json_object"})}}, {"type"}),
                                           schema_format});
            p["response_format"]["description"] = "json_object / json_schema constrain the output to JSON (the schema)";
        }
        p["structured_outputs"] = object({{"json", json_schema_value()},
                                          {"regex", text},
                                          {"choice", choices},
                                          {"grammar", text},
                                          {"json_object", boolean()}});
        p["structured_outputs"]["description"] =
            "vLLM: exactly one of json, regex, choice, grammar (xgrammar EBNF, root rule root), json_object; vLLM's "
            "backend options (disable_fallback, whitespace_pattern, ...) are accepted and ignored";
        p["guided_json"] = json_schema_value();
        p["guided_regex"] = text;
        p["guided_choice"] = choices;
        p["guided_grammar"] = text;
    }

    ojson chat_thinking_fields(ojson& p) const {
        const ojson thinking = any_of({boolean(), object({{"type", enum_of({"enabled", "disabled"})}}, {"type"})});
        p["thinking"] = thinking;
        p["reasoning_effort"] = enum_of({"none", "minimal", "low", "medium", "high", "xhigh", "max"},
                                        "low/medium/high = high, xhigh/max = max (DeepSeek-V4 thinking mode)");
        p["drop_thinking"] = boolean();
        p["chat_template_kwargs"] = object({{"thinking", thinking}, {"enable_thinking", thinking},
                                            {"reasoning_effort", p["reasoning_effort"]}, {"drop_thinking", boolean()}});
        return p;
    }

    ojson chat_message() const {
        const ojson text_part = object({{"type", constant("text", "text parts only")}, {"text", str()}}, {"type", "text"});
        const ojson content = any_of({str(), ojson{{"type", "null"}}, array_of(text_part)});
        const ojson call = object({{"id", str()},
                                   {"function", object({{"name", str()}, {"arguments", any_of({str(), object({})})}},
                                                       {"name", "arguments"})}},
                                  {"function"});
        return object({{"role", enum_of({"system", "user", "assistant", "tool", "developer", "latest_reminder"})},
                       {"content", content},
                       {"reasoning_content", nullable(str("assistant: earlier reasoning"))},
                       {"tool_calls", array_of(call)},
                       {"tool_call_id", str("tool: the call answered")},
                       {"wo_eos", boolean("assistant: leave the turn open (continue it)")},
                       {"prefix", boolean("assistant: same as wo_eos")}},
                      {"role"});
    }

    ojson chat_tool() const {
        return object({{"type", constant("function", "function tools only")},
                       {"function", object({{"name", str()},
                                            {"parameters", ojson{{"type", "object"}, {"description", "JSON Schema"}}}},
                                           {"name"})}},
                      {"type", "function"});
    }

    ojson chat_request() const {
        ojson p = sampling_fields(true);
        p["messages"] = array_of(ref("ChatMessage"), 1);
        p["logprobs"] = boolean();
        p["top_logprobs"] = integer(0, f.limits.max_logprobs, "needs logprobs: true");
        p["prompt_logprobs"] = integer(0, f.limits.max_logprobs, "vLLM: top-N logprobs of every prompt token");
        p["tools"] = array_of(ref("ChatTool"));
        p["tool_choice"] = any_of({enum_of({"auto", "none", "required"}, "required: at least one call of a tool"),
                                   object({{"type", constant("function", "")},
                                           {"function", object({{"name", str()}}, {"name"})}},
                                          {"function"})});
        p["tool_choice"]["description"] = "required and a named function constrain the output to tool calls";
        p["parallel_tool_calls"] = boolean("with tool_choice required: false allows one call only");
        chat_thinking_fields(p);
        ojson s = object(p, {"messages"});
        s["description"] = "Fields not listed are accepted and ignored.";
        return s;
    }

    ojson completion_request() const {
        const auto& L = f.limits;
        ojson p = sampling_fields(true);
        const ojson text = ojson{{"type", "string"}, {"minLength", 1}};
        p["prompt"] = any_of({text, token_ids(), array_of(any_of({text, token_ids()}), 1, L.max_prompts)});
        p["prompt"]["description"] = "text, token ids, or a list of either (one kind per request)";
        p["logprobs"] = integer(0, L.max_logprobs, "top alternatives per token");
        p["echo"] = boolean("return the prompt (and with logprobs its token logprobs) before the completion");
        p["max_tokens"] = integer(0, f.max_model_len - 1, "default: the remaining context; 0 only with echo");
        p["max_completion_tokens"] = integer(0, f.max_model_len - 1, "the smaller of this and max_tokens counts");
        p["prompt_logprobs"] = integer(0, L.max_logprobs, "vLLM: top-N logprobs of every prompt token");
        p["best_of"] = constant(1, "only 1 is accepted");
        p["suffix"] = ojson{{"type", "string"}, {"maxLength", 0}, {"description", "only \"\" is accepted"}};
        p["skip_special_tokens"] = boolean("default true");
        ojson s = object(p, {"prompt"});
        s["description"] = "Fields not listed are accepted and ignored.";
        return s;
    }

    ojson responses_request() const {
        ojson p = sampling_fields(false);
        const ojson text_part = object({{"type", enum_of({"input_text", "output_text", "text"})}, {"text", str()}},
                                       {"type", "text"});
        const ojson content = any_of({str(), array_of(text_part)});
        const ojson message = object({{"type", constant("message", "optional")},
                                      {"role", enum_of({"user", "assistant", "system", "developer"})},
                                      {"content", content}},
                                     {"role", "content"});
        // Only what the translation reads is described (other item fields, such as id and status, are ignored).
        const ojson text_list = array_of(object({{"text", str()}}, {"text"}));
        const ojson reasoning = object({{"type", constant("reasoning", "")}, {"summary", text_list},
                                        {"content", text_list}},
                                       {"type"});
        const ojson call = object({{"type", constant("function_call", "")}, {"call_id", str()}, {"name", str()},
                                   {"arguments", str()}},
                                  {"type", "call_id", "name", "arguments"});
        const ojson output = object({{"type", constant("function_call_output", "")}, {"call_id", str()},
                                     {"output", content}},
                                    {"type", "call_id", "output"});
        p["input"] = any_of({str(), array_of(any_of({message, reasoning, call, output}), 1)});
        p["instructions"] = str("rendered as the first system message");
        p["tools"] = array_of(object({{"type", constant("function", "function tools only")},
                                      {"name", str()},
                                      {"description", str()},
                                      {"parameters", ojson{{"type", "object"}}},
                                      {"strict", boolean()}},
                                     {"type", "name"}));
        p["tool_choice"] = any_of({enum_of({"auto", "none", "required"}, "required: at least one call of a tool"),
                                   object({{"type", constant("function", "")}, {"name", str()}}, {"type", "name"})});
        p["tool_choice"]["description"] = "required and a named function constrain the output to tool calls";
        const ojson format = any_of({object({{"type", constant("text", "")}}, {"type"}),
                                     object({{"type", constant("json_object", "")}}, {"type"}),
                                     object({{"type", constant("json_schema", "")},
                                             {"name", str()},
                                             {"schema", ojson{{"type", "object"}}},
                                             {"strict", boolean()},
                                             {"description", str()}},
                                            {"type", "name", "schema"})});
        p["text"] = object({{"format", format}, {"verbosity", str("ignored")}});
        p["text"]["description"] = "format json_object / json_schema constrains the output text (as response_format)";
        p["reasoning"] = object({{"effort", enum_of({"none", "minimal", "low", "medium", "high", "xhigh", "max"},
                                                    "any effort but none turns DeepSeek-V4 thinking on")},
                                 {"summary", str("ignored")},
                                 {"generate_summary", str("ignored")}});
        p["max_output_tokens"] = integer(1, f.max_model_len - 1, "default: the remaining context");
        p["store"] = boolean("accepted; nothing is stored (the response says store: false)");
        p["metadata"] = ojson{{"type", "object"},
                              {"maxProperties", 16},
                              {"propertyNames", {{"maxLength", 64}}},
                              {"additionalProperties", {{"type", "string"}, {"maxLength", 512}}}};
        p["user"] = str();
        p["safety_identifier"] = str();
        p["prompt_cache_key"] = str();
        p["service_tier"] = str();
        p["parallel_tool_calls"] = boolean();
        p["max_tool_calls"] = integer(0, std::nullopt);
        p["truncation"] = enum_of({"auto", "disabled"}, "nothing is truncated; an over-long input gives 400");
        p["include"] = array_of(ojson{{"type", "string"}, {"not", {{"const", "message.output_text.logprobs"}}}});
        p["top_logprobs"] = constant(0, "only 0 is accepted");
        p["background"] = constant(false, "only false is accepted");
        p["stream_options"] = object({});
        p["chat_template_kwargs"] = ojson{{"type", "object"}, {"description", "as on chat completions"}};
        ojson s = object(p, {"input"});
        s["description"] = "Stateless: previous_response_id, conversation, prompt and item_reference inputs are "
                           "refused (400). Fields not listed are accepted and ignored.";
        return s;
    }

    ojson usage() const {
        return object({{"prompt_tokens", integer(0, {})},
                       {"completion_tokens", integer(0, {})},
                       {"total_tokens", integer(0, {})},
                       {"prompt_tokens_details", object({{"cached_tokens", integer(0, {})}})},
                       {"completion_tokens_details", object({{"reasoning_tokens", integer(0, {})}})}},
                      {"prompt_tokens", "completion_tokens", "total_tokens"});
    }

    // The non-streamed answer of chat completions and completions around its choices.
    static ojson completion_envelope(const char* object_name, const ojson& choice) {
        return object({{"id", str()},
                       {"object", constant(object_name, "")},
                       {"created", integer(0, {})},
                       {"model", str()},
                       {"system_fingerprint", str()},
                       {"choices", array_of(choice)},
                       {"usage", ref("Usage")}},
                      {"id", "object", "created", "model", "choices", "usage"});
    }

    ojson chat_completion() const {
        const ojson top = object({{"token", str()}, {"logprob", number()}, {"bytes", array_of(integer(0, 255))}},
                                 {"token", "logprob", "bytes"});
        ojson entry = top;
        entry["properties"]["top_logprobs"] = array_of(top);
        entry["required"].push_back("top_logprobs");
        const ojson call = object({{"id", str()},
                                   {"type", constant("function", "")},
                                   {"function", object({{"name", str()}, {"arguments", str("JSON text")}},
                                                       {"name", "arguments"})}},
                                  {"id", "type", "function"});
        const ojson message = object({{"role", constant("assistant", "")},
                                      {"content", nullable(str())},
                                      {"reasoning_content", nullable(str())},
                                      {"tool_calls", array_of(call)}},
                                     {"role", "content"});
        const ojson choice = object({{"index", integer(0, {})},
                                     {"message", message},
                                     {"logprobs", nullable(object({{"content", array_of(entry)}}, {"content"}))},
                                     {"finish_reason", enum_of({"stop", "length", "tool_calls"})}},
                                    {"index", "message", "finish_reason"});
        return completion_envelope("chat.completion", choice);
    }

    ojson completion() const {
        // With echo the prompt's first token has no logprob: null in token_logprobs and top_logprobs (as OpenAI).
        const ojson logprobs = object({{"tokens", array_of(str())},
                                       {"token_logprobs", array_of(nullable(number()))},
                                       {"top_logprobs", array_of(nullable(ojson{{"type", "object"},
                                                                                {"additionalProperties", number()}}))},
                                       {"text_offset", array_of(integer(0, {}, "in characters (code points)"))}},
                                      {"tokens", "token_logprobs", "top_logprobs", "text_offset"});
        const ojson choice = object({{"index", integer(0, {})},
                                     {"text", str()},
                                     {"logprobs", nullable(logprobs)},
                                     {"finish_reason", enum_of({"stop", "length"})}},
                                    {"index", "text", "finish_reason"});
        return completion_envelope("text_completion", choice);
    }

    ojson response_object() const {
        const ojson status = enum_of({"in_progress", "completed", "incomplete"});
        const ojson reasoning = object({{"id", str()},
                                        {"type", constant("reasoning", "")},
                                        {"summary", array_of(object({}))},
                                        {"content", array_of(object({{"type", constant("reasoning_text", "")},
                                                                     {"text", str()}},
                                                                    {"type", "text"}))},
                                        {"status", status}},
                                       {"id", "type", "summary"});
        const ojson message = object({{"id", str()},
                                      {"type", constant("message", "")},
                                      {"role", constant("assistant", "")},
                                      {"status", status},
                                      {"content", array_of(object({{"type", constant("output_text", "")},
                                                                   {"text", str()},
                                                                   {"annotations", array_of(object({}))},
                                                                   {"logprobs", array_of(object({}))}},
                                                                  {"type", "text", "annotations"}))}},
                                     {"id", "type", "role", "status", "content"});
        const ojson call = object({{"id", str()},
                                   {"type", constant("function_call", "")},
                                   {"call_id", str()},
                                   {"name", str()},
                                   {"arguments", str("JSON text")},
                                   {"status", status}},
                                  {"type", "call_id", "name", "arguments"});
        const ojson usage = object({{"input_tokens", integer(0, {})},
                                    {"input_tokens_details", object({{"cached_tokens", integer(0, {})}})},
                                    {"output_tokens", integer(0, {})},
                                    {"output_tokens_details", object({{"reasoning_tokens", integer(0, {})}})},
                                    {"total_tokens", integer(0, {})}},
                                   {"input_tokens", "output_tokens", "total_tokens"});
        return object({{"id", str()},
                       {"object", constant("response", "")},
                       {"created_at", integer(0, {})},
                       {"status", enum_of({"completed", "incomplete", "failed", "in_progress"})},
                       {"error", nullable(object({{"code", str()}, {"message", str()}}, {"code", "message"}))},
                       {"incomplete_details", nullable(object({{"reason", str()}}))},
                       {"model", str()},
                       {"output", array_of(any_of({reasoning, message, call}))},
                       {"instructions", nullable(str())},
                       {"max_output_tokens", nullable(integer(1, {}))},
                       {"metadata", ojson{{"type", "object"}}},
                       {"parallel_tool_calls", boolean()},
                       {"previous_response_id", ojson{{"type", "null"}}},
                       {"reasoning", object({{"effort", nullable(str())}, {"summary", nullable(str())}})},
                       {"store", constant(false, "nothing is stored")},
                       {"temperature", number()},
                       {"text", ojson{{"type", "object"}}},
                       {"tool_choice", any_of({str(), ojson{{"type", "object"}}})},
                       {"tools", array_of(ojson{{"type", "object"}})},
                       {"top_p", number()},
                       {"truncation", str()},
                       {"user", nullable(str())},
                       {"usage", nullable(usage)}},
                      {"id", "object", "created_at", "status", "model", "output", "parallel_tool_calls",
                       "tool_choice", "tools"});
    }

    ojson components() const {
        ojson s;
        s["Error"] = object({{"error", object({{"message", str()},
                                               {"type", str()},
                                               {"param", nullable(str())},
                                               {"code", nullable(str())}},
                                              {"message", "type", "param", "code"})},
                             {"object", constant("error", "")}},
                            {"error"});
        s["Usage"] = usage();
        s["ChatMessage"] = chat_message();
        s["ChatTool"] = chat_tool();
        s["ChatCompletionRequest"] = chat_request();
        s["ChatCompletion"] = chat_completion();
        s["CompletionRequest"] = completion_request();
        s["Completion"] = completion();
        s["ResponsesRequest"] = responses_request();
        for (const char* request : {"ChatMessage", "ChatTool", "ChatCompletionRequest", "CompletionRequest",
                                    "ResponsesRequest"})
            admit_null_for_optional(s[request]);
        s["Response"] = response_object();
        s["TokenizeRequest"] = any_of({ref("CompletionRequest"), ref("ChatCompletionRequest")});
        s["TokenizeResponse"] = object({{"tokens", array_of(token_id())},
                                        {"count", integer(0, {})},
                                        {"max_model_len", integer(1, {})}},
                                       {"tokens", "count", "max_model_len"});
        s["DetokenizeRequest"] = object({{"model", enum_of({f.limits.model_name}, "optional")},
                                         {"tokens", array_of(token_id())}},
                                        {"tokens"});
        admit_null_for_optional(s["DetokenizeRequest"]);
        s["DetokenizeResponse"] = object({{"prompt", str("special tokens kept")}}, {"prompt"});
        const ojson card = object({{"id", str()},
                                   {"object", constant("model", "")},
                                   {"created", integer(0, {})},
                                   {"owned_by", str()},
                                   {"root", str()},
                                   {"parent", ojson{{"type", "null"}}},
                                   {"max_model_len", integer(1, {})},
                                   {"permission", array_of(object({}))}},
                                  {"id", "object", "created", "owned_by", "max_model_len"});
        s["ModelList"] = object({{"object", constant("list", "")}, {"data", array_of(card)}}, {"object", "data"});
        s["Health"] = object({{"status", constant("ok", "")}}, {"status"});
        return s;
    }
};

ojson error_response(const std::string& description) {
    return ojson{{"description", description},
                 {"content", {{"application/json", {{"schema", ref("Error")}}}}}};
}

ojson json_response(const std::string& description, const ojson& schema) {
    return ojson{{"description", description}, {"content", {{"application/json", {{"schema", schema}}}}}};
}

}  // namespace

ojson openapi_document(const OpenApiFacts& facts) {
    Schemas schemas{facts};
    ojson doc;
    doc["openapi"] = "3.1.0";
    doc["info"] = {{"title", "flashseek OpenAI-compatible API"},
                   {"version", "1"},
                   {"description",
                    fmt::format("Model '{}', context {} tokens. Request bodies: JSON objects of at most {} bytes, "
                                "nested at most {} levels, without duplicate keys.",
                                facts.limits.model_name, facts.max_model_len, facts.max_body_bytes, kMaxJsonDepth)}};
    ojson components = {{"schemas", schemas.components()}};
    if (facts.api_key_required) {
        components["securitySchemes"] = {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}},
                                         {"apiKey", {{"type", "apiKey"}, {"in", "header"}, {"name", "X-Api-Key"}}}};
        doc["security"] = ojson::array({{{"bearer", ojson::array()}}, {{"apiKey", ojson::array()}}});
    }
    doc["components"] = components;

    // Each server-sent event: a data line with one JSON object ("[DONE]" last on chat and completions), and on
    // /v1/responses an event line naming its type.
    const ojson sse = {{"schema", object({{"event", str()}, {"data", str("JSON text, or [DONE]")}}, {"data"})}};
    ojson paths = ojson::object();
    for (const RouteSpec& r : api_routes()) {
        ojson op = {{"summary", r.summary}, {"operationId", r.path}};
        ojson responses = ojson::object();
        auto generation = [&](const char* request, const char* answer, const char* stream_note) {
            op["requestBody"] = {{"required", true}, {"content", {{"application/json", {{"schema", ref(request)}}}}}};
            responses["200"] = {{"description", std::string("the answer; with stream: true, ") + stream_note},
                                {"content", {{"application/json", {{"schema", ref(answer)}}}, {"text/event-stream", sse}}}};
            responses["400"] = error_response("invalid request (the message and param name the field)");
            responses["404"] = error_response("unknown model");
            responses["408"] = error_response("the request did not finish before its deadline");
            responses["413"] = error_response("request body over the size limit");
            responses["429"] = error_response("at capacity; Retry-After says when to retry");
            responses["500"] = error_response("generation failed in the engine");
            responses["503"] = error_response("shutting down, or the grammar compiler busy; Retry-After");
        };
        switch (r.id) {
            case RouteId::ChatCompletions:
                generation("ChatCompletionRequest", "ChatCompletion", "chat.completion.chunk events, then [DONE]");
                break;
            case RouteId::Completions:
                generation("CompletionRequest", "Completion", "text_completion events, then [DONE]");
                break;
            case RouteId::Responses:
                generation("ResponsesRequest", "Response",
                           "typed events (response.created ... response.completed), no [DONE]");
                break;
            case RouteId::ResponseById:
                op["parameters"] = ojson::array(
                    {{{"name", "response_id"}, {"in", "path"}, {"required", true}, {"schema", str()}}});
                responses["404"] = error_response("responses are not stored");
                break;
            case RouteId::Tokenize:
            case RouteId::Detokenize: {
                const bool tokenize = r.id == RouteId::Tokenize;
                op["requestBody"] = {{"required", true},
                                     {"content", {{"application/json",
                                                   {{"schema", ref(tokenize ? "TokenizeRequest" : "DetokenizeRequest")}}}}}};
                responses["200"] = json_response("the answer", ref(tokenize ? "TokenizeResponse" : "DetokenizeResponse"));
                responses["400"] = error_response("invalid request");
                responses["404"] = error_response("unknown model");
                responses["413"] = error_response("request body over the size limit");
                break;
            }
            case RouteId::Models: responses["200"] = json_response("the served model", ref("ModelList")); break;
            case RouteId::Health:
                op["security"] = ojson::array();
                responses["200"] = json_response("serving", ref("Health"));
                responses["503"] = error_response("draining or the step loop is stalled");
                break;
            case RouteId::Metrics:
                responses["200"] = {{"description", "Prometheus text"},
                                    {"content", {{"text/plain", {{"schema", {{"type", "string"}}}}}}}};
                break;
            case RouteId::OpenApi:
                responses["200"] = json_response("this document", ojson{{"type", "object"}});
                break;
        }
        if (facts.api_key_required && r.id != RouteId::Health)
            responses["401"] = error_response("missing or wrong API key");
        op["responses"] = responses;
        std::string method = r.method;
        for (char& c : method) c = char(std::tolower(static_cast<unsigned char>(c)));
        paths[r.path][method] = op;
    }
    doc["paths"] = paths;
    return doc;
}

}  // namespace flashseek::server
