// Responses request → chat request (see responses_protocol.h). The translation builds a chat-completions body in
// the client's key order and hands it to parse_chat_request; fields the Responses API names differently are
// renamed on the way (max_output_tokens → max_tokens, text.format → response_format, flat function tools →
// chat tools) and errors from the chat rules are reported under the Responses names.
#include "server/responses_protocol.h"

#include <cctype>
#include <set>

#include "util/error.h"

namespace flashseek::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const std::string& string_member(const ojson& obj, const char* name, const std::string& where) {
    const ojson* v = given_member(obj, name);
    if (!v || !v->is_string()) bad_param(where, "'{}.{}' must be a string", where, name);
    return v->get_ref<const std::string&>();
}

// Responses content: a string or a list of parts; text parts become chat text parts, anything else is refused.
ojson text_parts(const ojson& content, const std::string& where, bool assistant) {
    if (content.is_string()) return content;
    if (!content.is_array()) bad_param(where, "'{}' must be a string or an array of content parts", where);
    ojson parts = ojson::array();
    for (size_t i = 0; i < content.size(); ++i) {
        const ojson& p = content[i];
        const std::string pw = fmt::format("{}[{}]", where, i);
        if (!p.is_object()) bad_param(pw, "'{}' must be an object", pw);
        const std::string& type = string_member(p, "type", pw);
        const bool text_type = type == "input_text" || type == "output_text" || type == "text" ||
                               (assistant && type == "refusal");
        if (!text_type)
            bad_param(pw, "'{}.type' = '{}' is not supported (text parts only: input_text, output_text)", pw,
                      type.substr(0, 64));
        const std::string& text = string_member(p, type == "refusal" ? "refusal" : "text", pw);
        parts.push_back(ojson{{"type", "text"}, {"text", text}});
    }
    return parts;
}

// The text of a reasoning item: its reasoning_text content, else its summary.
std::string reasoning_text(const ojson& item, const std::string& where) {
    std::string text;
    for (const char* key : {"content", "summary"}) {
        const ojson* parts = given_member(item, key);
        if (!parts) continue;
        if (!parts->is_array()) bad_param(where, "'{}.{}' must be an array", where, key);
        for (size_t i = 0; i < parts->size(); ++i) {
            const std::string pw = fmt::format("{}.{}[{}]", where, key, i);
            if (!(*parts)[i].is_object()) bad_param(pw, "'{}' must be an object", pw);
            if (!text.empty() && i > 0) text += "\n";
            text += string_member((*parts)[i], "text", pw);
        }
        if (!text.empty()) return text;
    }
    return text;
}

class MessageBuilder {
public:
    void add(ojson message) {
        pending_reasoning_into(message);
        messages_.push_back(std::move(message));
        open_assistant_ = messages_.back()["role"] == "assistant";
    }
    void reasoning(std::string text) { reasoning_ += text; }
    // A function call joins the assistant turn right before it, or opens one.
    void function_call(ojson call) {
        if (!open_assistant_) add(ojson{{"role", "assistant"}, {"content", nullptr}});
        ojson& turn = messages_.back();
        if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
        turn["tool_calls"].push_back(std::move(call));
    }
    ojson take() { return std::move(messages_); }

private:
    // A reasoning item belongs to the assistant turn right after it; before any other message it has no turn.
    void pending_reasoning_into(ojson& message) {
        if (!reasoning_.empty() && message["role"] == "assistant") message["reasoning_content"] = reasoning_;
        reasoning_.clear();
    }
    ojson messages_ = ojson::array();
    std::string reasoning_;
    bool open_assistant_ = false;
};

void translate_input(const ojson& input, MessageBuilder& out) {
    if (input.is_string()) {
        out.add(ojson{{"role", "user"}, {"content", input}});
        return;
    }
    if (!input.is_array()) bad_param("input", "'input' must be a string or an array of input items");
    if (input.empty()) bad_param("input", "'input' must contain at least one item");
    static const std::set<std::string> roles = {"user", "assistant", "system", "developer"};
    for (size_t i = 0; i < input.size(); ++i) {
        const ojson& item = input[i];
        const std::string where = fmt::format("input[{}]", i);
        if (!item.is_object()) bad_param(where, "'{}' must be an object", where);
        const ojson* type_v = given_member(item, "type");
        if (type_v && !type_v->is_string()) bad_param(where, "'{}.type' must be a string", where);
        const std::string type = type_v ? type_v->get<std::string>() : "message";
        if (type == "message") {
            const std::string& role = string_member(item, "role", where);
            if (!roles.count(role))
                bad_param(where, "'{}.role' = '{}' is not one of user, assistant, system, developer", where,
                          role.substr(0, 64));
            const ojson* content = given_member(item, "content");
            if (!content) bad_param(where, "'{}.content' is required", where);
            out.add(ojson{{"role", role}, {"content", text_parts(*content, where + ".content", role == "assistant")}});
        } else if (type == "reasoning") {
            out.reasoning(reasoning_text(item, where));
        } else if (type == "function_call") {
            const std::string& call_id = string_member(item, "call_id", where);
            const std::string& name = string_member(item, "name", where);
            const std::string& arguments = string_member(item, "arguments", where);
            out.function_call(ojson{{"id", call_id},
                                    {"type", "function"},
                                    {"function", {{"name", name}, {"arguments", arguments}}}});
        } else if (type == "function_call_output") {
            const std::string& call_id = string_member(item, "call_id", where);
            const ojson* output = given_member(item, "output");
            if (!output) bad_param(where, "'{}.output' is required", where);
            out.add(ojson{{"role", "tool"}, {"tool_call_id", call_id},
                          {"content", text_parts(*output, where + ".output", false)}});
        } else if (type == "item_reference") {
            bad_param(where, "'{}' is an item reference; this server stores nothing, so send the item itself", where);
        } else {
            bad_param(where, "input item type '{}' is not supported (message, reasoning, function_call, "
                      "function_call_output)", type.substr(0, 64));
        }
    }
}

// Responses function tools are flat ({type, name, description, parameters, strict}); chat nests them in "function".
ojson translate_tools(const ojson& tools) {
    if (!tools.is_array()) bad_param("tools", "'tools' must be an array");
    ojson out = ojson::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const ojson& t = tools[i];
        const std::string where = fmt::format("tools[{}]", i);
        if (!t.is_object()) bad_param("tools", "'{}' must be an object", where);
        const ojson* type = given_member(t, "type");
        if (!type || !type->is_string()) bad_param("tools", "'{}.type' must be a string", where);
        if (*type != "function")
            bad_param("tools", "'{}.type' = '{}' is not supported (function tools only)", where,
                      type->get<std::string>().substr(0, 64));
        ojson function = ojson::object();
        for (const auto& [key, value] : t.items()) {
            if (key == "type") continue;
            if (key == "name" && !value.is_string()) bad_param("tools", "'{}.name' must be a string", where);
            if (key == "description" && !value.is_string() && !value.is_null())
                bad_param("tools", "'{}.description' must be a string", where);
            if (key == "parameters" && !value.is_object() && !value.is_null())
                bad_param("tools", "'{}.parameters' must be a JSON Schema object", where);
            if (key == "strict" && !value.is_boolean() && !value.is_null())
                bad_param("tools", "'{}.strict' must be a boolean", where);
            if (!value.is_null()) function[key] = value;
        }
        if (!function.contains("name")) bad_param("tools", "'{}.name' is required", where);
        out.push_back(ojson{{"type", "function"}, {"function", std::move(function)}});
    }
    return out;
}

ojson translate_tool_choice(const ojson& tc) {
    if (tc.is_string()) return tc;  // auto / none / required; the chat rules check the value
    if (tc.is_object() && tc.contains("type") && tc["type"] == "function" && tc.contains("name") &&
        tc["name"].is_string())
        return ojson{{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    bad_param("tool_choice", "'tool_choice' must be auto, none, required or {{\"type\": \"function\", \"name\": ...}}");
}

// text.format → chat response_format.
ojson translate_text_format(const ojson& text) {
    if (!text.is_object()) bad_param("text", "'text' must be an object");
    if (const ojson* v = given_member(text, "verbosity"))
        if (!v->is_string()) bad_param("text", "'text.verbosity' must be a string");
    const ojson* format = given_member(text, "format");
    if (!format) return nullptr;
    if (!format->is_object() || !(*format).contains("type") || !(*format)["type"].is_string())
        bad_param("text.format", "'text.format' must be an object with a string 'type'");
    const std::string type = (*format)["type"].get<std::string>();
    if (type == "text") return nullptr;
    if (type == "json_object") return ojson{{"type", "json_object"}};
    if (type != "json_schema")
        bad_param("text.format", "'text.format.type' must be text, json_object or json_schema, got '{}'",
                  type.substr(0, 64));
    ojson schema = ojson::object();
    for (const auto& [key, value] : format->items())
        if (key != "type") schema[key] = value;
    if (!schema.contains("schema") || !schema["schema"].is_object())
        bad_param("text.format", "'text.format' of type json_schema needs a 'schema' object");
    if (!schema.contains("name") || !schema["name"].is_string())
        bad_param("text.format", "'text.format' of type json_schema needs a string 'name'");
    return ojson{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

// Responses fields with no chat counterpart that are validated and echoed, or refused.
void check_state_fields(const ojson& body) {
    if (given_member(body, "previous_response_id"))
        bad_param("previous_response_id", "'previous_response_id' is not supported: this server stores no responses "
                  "(send the earlier output items in 'input' instead)");
    if (given_member(body, "conversation"))
        bad_param("conversation", "'conversation' is not supported: this server stores no conversations");
    if (const ojson* b = given_member(body, "background")) {
        if (!b->is_boolean()) bad_param("background", "'background' must be a boolean");
        if (b->get<bool>()) bad_param("background", "'background' responses are not supported (nothing is stored)");
    }
    if (given_member(body, "prompt"))
        bad_param("prompt", "'prompt' (stored prompt templates) is not supported; send 'input' and 'instructions'");
    if (const ojson* s = given_member(body, "store"))
        if (!s->is_boolean()) bad_param("store", "'store' must be a boolean");
    if (const ojson* inc = given_member(body, "include")) {
        if (!inc->is_array()) bad_param("include", "'include' must be an array of strings");
        for (const ojson& v : *inc) {
            if (!v.is_string()) bad_param("include", "'include' must be an array of strings");
            if (v == "message.output_text.logprobs")
                bad_param("include", "'message.output_text.logprobs' is not supported on /v1/responses");
        }
    }
    if (const ojson* tl = given_member(body, "top_logprobs")) {
        if (!tl->is_number_integer()) bad_param("top_logprobs", "'top_logprobs' must be an integer");
        if (*tl != 0) bad_param("top_logprobs", "'top_logprobs' is not supported on /v1/responses (only 0)");
    }
    if (const ojson* t = given_member(body, "truncation"))
        if (!t->is_string() || (*t != "auto" && *t != "disabled"))
            bad_param("truncation", "'truncation' must be auto or disabled");
    if (const ojson* p = given_member(body, "parallel_tool_calls"))
        if (!p->is_boolean()) bad_param("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (const ojson* m = given_member(body, "max_tool_calls"))
        if (!m->is_number_integer() || m->get<int64_t>() < 0)
            bad_param("max_tool_calls", "'max_tool_calls' must be a non-negative integer");
    for (const char* name : {"user", "safety_identifier", "prompt_cache_key", "service_tier", "instructions"})
        if (const ojson* v = given_member(body, name))
            if (!v->is_string()) bad_param(name, "'{}' must be a string", name);
    if (const ojson* m = given_member(body, "metadata")) {
        if (!m->is_object()) bad_param("metadata", "'metadata' must be an object of strings");
        if (m->size() > 16) bad_param("metadata", "'metadata' has {} keys; at most 16 are allowed", m->size());
        for (const auto& [k, v] : m->items())
            if (!v.is_string() || k.size() > 64 || v.get_ref<const std::string&>().size() > 512)
                bad_param("metadata", "'metadata' values must be strings (keys up to 64, values up to 512 bytes)");
    }
    if (const ojson* r = given_member(body, "reasoning")) {
        if (!r->is_object()) bad_param("reasoning", "'reasoning' must be an object");
        for (const char* key : {"effort", "summary", "generate_summary"})
            if (const ojson* v = given_member(*r, key))
                if (!v->is_string()) bad_param("reasoning", "'reasoning.{}' must be a string", key);
    }
    if (const ojson* so = given_member(body, "stream_options"))
        if (!so->is_object()) bad_param("stream_options", "'stream_options' must be an object");
}

// Chat fields that have a Responses name, or no meaning here.
const std::set<std::string>& refused_chat_fields() {
    static const std::set<std::string> names = {"messages", "max_tokens", "max_completion_tokens", "response_format",
                                                "logprobs", "n", "best_of", "echo", "suffix", "prompt_logprobs"};
    return names;
}

// Keys the translation handles itself; every other key goes to the chat rules unchanged (sampling extensions such
// as top_k, seed, stop, ignore_eos, chat_template_kwargs; ignored informational fields).
const std::set<std::string>& responses_only_fields() {
    static const std::set<std::string> names = {
        "input", "instructions", "tools", "tool_choice", "text", "reasoning", "max_output_tokens", "store",
        "previous_response_id", "conversation", "background", "include", "metadata", "truncation",
        "parallel_tool_calls", "max_tool_calls", "top_logprobs", "stream_options", "prompt", "user",
        "safety_identifier", "prompt_cache_key", "service_tier", "prompt_cache_retention"};
    return names;
}

}  // namespace

std::string responses_param(const std::string& chat_param) {
    if (chat_param.rfind("messages", 0) == 0) return "input";
    if (chat_param == "max_tokens") return "max_output_tokens";
    if (chat_param == "response_format") return "text.format";
    return chat_param;
}

ApiError responses_error(const ApiError& chat_error, bool effort_translated) {
    std::string param = chat_error.param, message = chat_error.what();
    // The chat name as a whole word of the message (not part of a longer name such as max_tokens_foo).
    auto rename_in_message = [&](const std::string& from, const std::string& to) {
        const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
        for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at)) {
            const bool whole = (at == 0 || !word(message[at - 1])) &&
                               (at + from.size() == message.size() || !word(message[at + from.size()]));
            if (whole) {
                message.replace(at, from.size(), to);
                at += to.size();
            } else {
                at += from.size();
            }
        }
    };
    if (param == "max_tokens" || param == "max_completion_tokens") {
        rename_in_message(param, "max_output_tokens");
    } else if (param == "response_format") {
        rename_in_message(param, "text.format");
    } else if (param == "reasoning_effort" && effort_translated) {
        rename_in_message(param, "reasoning.effort");
        param = "reasoning.effort";
    } else if (param == "tools") {
        // Responses tools are flat: tools[i].name, where chat has tools[i].function.name.
        for (size_t at = message.find("].function."); at != std::string::npos; at = message.find("].function.", at))
            message.erase(at + 1, 9);
    } else if (param == "messages") {
        // Only the bare field: an indexed messages[i] counts chat messages, which input items do not match one
        // for one (instructions add one, reasoning items none), so its index is left as the chat rules gave it.
        rename_in_message("'messages'", "'input'");
    }
    return ApiError(chat_error.status, message, responses_param(param), chat_error.type, chat_error.code);
}

ResponsesFields parse_responses_request(const json& body, const ProtocolLimits& limits, std::string_view raw_body,
                                        ParsedRequest& request) {
    const ojson ob = raw_body.empty() ? ojson(body) : ojson::parse(raw_body);
    for (const auto& [key, value] : ob.items())
        if (refused_chat_fields().count(key) && !value.is_null())
            bad_param(key, "'{}' is a chat/completions field; /v1/responses does not take it{}", key,
                      key == "max_tokens" || key == "max_completion_tokens" ? " (use max_output_tokens)"
                      : key == "response_format"                            ? " (use text.format)"
                      : key == "messages"                                    ? " (use input)"
                                                                             : "");
    check_state_fields(ob);

    ojson chat = ojson::object();
    for (const auto& [key, value] : ob.items())
        if (!responses_only_fields().count(key)) chat[key] = value;
    MessageBuilder messages;
    if (const ojson* instructions = given_member(ob, "instructions"))
        messages.add(ojson{{"role", "system"}, {"content", *instructions}});
    const ojson* input = given_member(ob, "input");
    if (!input) bad_param("input", "'input' is required");
    translate_input(*input, messages);
    chat["messages"] = messages.take();
    if (const ojson* tools = given_member(ob, "tools")) chat["tools"] = translate_tools(*tools);
    if (const ojson* tc = given_member(ob, "tool_choice")) chat["tool_choice"] = translate_tool_choice(*tc);
    // Checked above; on chat it decides whether a forced tool choice may call more than one tool.
    if (const ojson* ptc = given_member(ob, "parallel_tool_calls")) chat["parallel_tool_calls"] = *ptc;
    if (const ojson* text = given_member(ob, "text"))
        if (ojson rf = translate_text_format(*text); !rf.is_null()) chat["response_format"] = std::move(rf);
    if (const ojson* mot = given_member(ob, "max_output_tokens")) chat["max_tokens"] = *mot;
    bool effort_translated = false;
    if (const ojson* r = given_member(ob, "reasoning"))
        if (const ojson* effort = given_member(*r, "effort"); effort && *effort != "none") {
            // DeepSeek-V4 thinks when asked to reason; the effort maps as on chat (reasoning_effort).
            chat["thinking"] = ojson{{"type", "enabled"}};
            chat["reasoning_effort"] = *effort;
            effort_translated = true;
        }

    try {
        request = parse_chat_request_ordered(json(chat), limits, chat);
    } catch (const ApiError& e) {
        throw responses_error(e, effort_translated);
    }
    // Named in the grammar engine's errors, which come after this translation.
    request.constraint.param = responses_param(request.constraint.param);

    ResponsesFields out;
    ojson& echo = out.echo;
    // A field sent as null is echoed as its default, like one left out.
    auto given_or = [&](const char* key, ojson fallback) {
        const ojson* v = given_member(ob, key);
        return v ? *v : fallback;
    };
    echo["instructions"] = given_or("instructions", ojson(nullptr));
    echo["max_output_tokens"] = given_or("max_output_tokens", ojson(nullptr));
    echo["metadata"] = given_or("metadata", ojson::object());
    echo["parallel_tool_calls"] = given_or("parallel_tool_calls", ojson(true));
    echo["previous_response_id"] = nullptr;
    ojson reasoning = {{"effort", nullptr}, {"summary", nullptr}};
    if (const ojson* r = given_member(ob, "reasoning"))
        for (const char* key : {"effort", "summary"})
            if (const ojson* v = given_member(*r, key)) reasoning[key] = *v;
    echo["reasoning"] = reasoning;
    echo["store"] = false;  // nothing is kept, whatever the request asked
    echo["temperature"] = given_or("temperature", ojson(1.0));
    ojson text = {{"format", {{"type", "text"}}}};
    if (const ojson* t = given_member(ob, "text"))
        if (const ojson* f = given_member(*t, "format")) text["format"] = *f;
    echo["text"] = text;
    echo["tool_choice"] = given_or("tool_choice", ojson("auto"));
    echo["tools"] = given_or("tools", ojson::array());
    echo["top_p"] = given_or("top_p", ojson(1.0));
    echo["truncation"] = given_or("truncation", ojson("disabled"));
    echo["user"] = given_or("user", ojson(nullptr));
    return out;
}

}  // namespace flashseek::server
