// ChatRequest::from_json: OpenAI chat request body → the message list the DeepSeek-V4 renderer takes. Every rejection
// names the JSON path of the offending field.
#include "tokenizer/chat_encoding.h"
#include "util/error.h"

namespace flashseek::chat {

namespace {

// The request is read in its own key order (tool schemas render in that order, as the official Python encoder's
// dicts do) and in place: no copy through text, which would walk (and for a hostile body, recurse through) every
// value again.
using json = nlohmann::ordered_json;

std::optional<std::string> read_content(const json& m, const std::string& where, const char* joiner) {
    if (!m.contains("content") || m["content"].is_null()) return std::nullopt;
    const auto& c = m["content"];
    if (c.is_string()) return c.get<std::string>();
    FS_CHECK(c.is_array(), "{}.content: expected a string, null or an array of text parts", where);
    std::string out;
    for (std::size_t i = 0; i < c.size(); ++i) {
        const auto& part = c[i];
        FS_CHECK(part.is_object() && part.contains("type") && part["type"].is_string(),
                 "{}.content[{}]: expected an object with a string 'type'", where, i);
        const auto type = part["type"].get<std::string>();
        FS_CHECK(type == "text", "{}.content[{}].type: '{}' is not supported (only text parts)", where, i, type);
        FS_CHECK(part.contains("text") && part["text"].is_string(), "{}.content[{}].text: expected a string", where, i);
        if (i > 0) out += joiner;
        out += part["text"].get<std::string>();
    }
    return out;
}

std::optional<std::string> optional_string(const json& m, const char* key, const std::string& where) {
    if (!m.contains(key) || m[key].is_null()) return std::nullopt;
    FS_CHECK(m[key].is_string(), "{}.{}: expected a string", where, key);
    return m[key].get<std::string>();
}

bool optional_bool(const json& m, const char* key, bool fallback, const std::string& where) {
    if (!m.contains(key) || m[key].is_null()) return fallback;
    FS_CHECK(m[key].is_boolean(), "{}.{}: expected a boolean", where, key);
    return m[key].get<bool>();
}

Message read_message(const json& m, std::size_t index) {
    const std::string where = fmt::format("messages[{}]", index);
    FS_CHECK(m.is_object(), "{}: expected an object", where);
    FS_CHECK(m.contains("role") && m["role"].is_string(), "{}.role: missing or not a string", where);
    Message msg;
    msg.role = m["role"].get<std::string>();
    static const char* const roles[] = {"system", "user", "assistant", "tool", "developer", "latest_reminder"};
    bool known = false;
    for (const char* r : roles) known = known || msg.role == r;
    FS_CHECK(known, "{}.role: unknown role '{}' (system, user, assistant, tool, developer, latest_reminder)", where,
             msg.role);
    msg.content = read_content(m, where, msg.role == "tool" ? "\n\n" : "\n");
    // The fields the API schema types for every message are checked whatever the role, and kept only where the role
    // reads them: a wrong type is an error even where the value would be ignored.
    {
        std::optional<std::string> reasoning = optional_string(m, "reasoning_content", where);
        if (!reasoning) reasoning = optional_string(m, "reasoning", where);
        const bool wo_eos = optional_bool(m, "wo_eos", false, where) || optional_bool(m, "prefix", false, where);
        std::optional<std::string> tool_call_id = optional_string(m, "tool_call_id", where);
        std::vector<ToolCall> tool_calls;
        if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
            const auto& calls = m["tool_calls"];
            FS_CHECK(calls.is_array(), "{}.tool_calls: expected an array", where);
            for (std::size_t i = 0; i < calls.size(); ++i) {
                const std::string cw = fmt::format("{}.tool_calls[{}]", where, i);
                const auto& c = calls[i];
                FS_CHECK(c.is_object(), "{}: expected an object", cw);
                ToolCall call;
                if (auto id = optional_string(c, "id", cw)) call.id = *id;
                FS_CHECK(c.contains("function") && c["function"].is_object(), "{}.function: missing or not an object", cw);
                const auto& f = c["function"];
                FS_CHECK(f.contains("name") && f["name"].is_string(), "{}.function.name: missing or not a string", cw);
                call.name = f["name"].get<std::string>();
                FS_CHECK(f.contains("arguments"), "{}.function.arguments: missing", cw);
                if (f["arguments"].is_string()) call.arguments = f["arguments"].get<std::string>();
                else if (f["arguments"].is_object()) call.arguments = f["arguments"].dump();
                else fail("{}.function.arguments: expected a JSON string or object", cw);
                tool_calls.push_back(std::move(call));
            }
        }
        if (msg.role == "assistant") {
            msg.reasoning_content = std::move(reasoning);
            msg.tool_calls = std::move(tool_calls);
            msg.wo_eos = wo_eos;
        }
        if (msg.role == "tool" && tool_call_id) msg.tool_call_id = *tool_call_id;
    }
    if (msg.role == "system" || msg.role == "developer") {
        if (m.contains("tools") && !m["tools"].is_null()) {
            FS_CHECK(m["tools"].is_array(), "{}.tools: expected an array", where);
            msg.tools = m["tools"];
        }
        if (m.contains("response_format") && !m["response_format"].is_null()) {
            FS_CHECK(m["response_format"].is_object(), "{}.response_format: expected an object", where);
            msg.response_format = m["response_format"];
        }
    }
    if (msg.role == "user" || msg.role == "assistant") msg.task = optional_string(m, "task", where);
    return msg;
}

}  // namespace

ChatRequest ChatRequest::from_json(const nlohmann::json& body_in, ThinkingMode default_thinking) {
    FS_CHECK(body_in.is_object(), "request body: expected a JSON object");
    // nlohmann::json has already sorted the object keys, so tool schemas render in sorted key order here; callers
    // that need Python's insertion order (the official encoder's) use from_ordered_json.
    return from_ordered_json(nlohmann::ordered_json(body_in), default_thinking);
}

ChatRequest ChatRequest::from_ordered_json(const nlohmann::ordered_json& body, ThinkingMode default_thinking) {
    try {
        return parse_request(body, default_thinking);
    } catch (const nlohmann::json::exception& e) {
        // e.g. a string that is not valid UTF-8 (type_error 316) in a body built in memory rather than parsed.
        fail("request body: {}", e.what());
    }
}

ChatRequest ChatRequest::parse_request(const nlohmann::ordered_json& body, ThinkingMode default_thinking) {
    FS_CHECK(body.is_object(), "request body: expected a JSON object");
    const json& b = body;
    ChatRequest req;
    req.thinking = default_thinking;
    FS_CHECK(b.contains("messages") && b["messages"].is_array(), "messages: missing or not an array");
    for (std::size_t i = 0; i < body["messages"].size(); ++i) req.messages.push_back(read_message(body["messages"][i], i));

    const json kwargs = b.contains("chat_template_kwargs") && !b["chat_template_kwargs"].is_null()
                            ? b["chat_template_kwargs"]
                            : json::object();
    FS_CHECK(kwargs.is_object(), "chat_template_kwargs: expected an object");
    auto set_thinking = [&](const json& v, const char* where) {
        if (v.is_null()) return;
        if (v.is_boolean()) {
            req.thinking = v.get<bool>() ? ThinkingMode::thinking : ThinkingMode::chat;
        } else if (v.is_object() && v.contains("type") && v["type"].is_string()) {
            const auto t = v["type"].get<std::string>();
            FS_CHECK(t == "enabled" || t == "disabled", "{}.type: expected \"enabled\" or \"disabled\", got \"{}\"", where,
                     t);
            req.thinking = t == "enabled" ? ThinkingMode::thinking : ThinkingMode::chat;
        } else {
            fail("{}: expected a boolean or {{\"type\": \"enabled\"|\"disabled\"}}", where);
        }
    };
    if (kwargs.contains("enable_thinking")) set_thinking(kwargs["enable_thinking"], "chat_template_kwargs.enable_thinking");
    if (kwargs.contains("thinking")) set_thinking(kwargs["thinking"], "chat_template_kwargs.thinking");
    if (b.contains("thinking")) set_thinking(b["thinking"], "thinking");

    auto set_effort = [&](const json& v, const char* where) {
        if (v.is_null()) return;
        FS_CHECK(v.is_string(), "{}: expected a string", where);
        const auto e = v.get<std::string>();
        if (e == "none" || e == "minimal" || e == "low" || e == "medium" || e == "high") {
            req.reasoning_effort = e == "high" ? ReasoningEffort::high : ReasoningEffort::none;
        } else if (e == "xhigh" || e == "max") {
            req.reasoning_effort = ReasoningEffort::max;
        } else {
            fail("{}: unknown reasoning effort '{}' (low, medium, high, max)", where, e);
        }
    };
    if (kwargs.contains("reasoning_effort")) set_effort(kwargs["reasoning_effort"], "chat_template_kwargs.reasoning_effort");
    if (b.contains("reasoning_effort")) set_effort(b["reasoning_effort"], "reasoning_effort");
    req.drop_thinking = optional_bool(kwargs, "drop_thinking", req.drop_thinking, "chat_template_kwargs");
    req.drop_thinking = optional_bool(b, "drop_thinking", req.drop_thinking, "request body");

    if (body.contains("tools") && !body["tools"].is_null()) {
        FS_CHECK(body["tools"].is_array(), "tools: expected an array");
        for (std::size_t i = 0; i < body["tools"].size(); ++i) {
            const auto& t = body["tools"][i];
            FS_CHECK(t.is_object() && t.contains("function") && t["function"].is_object(),
                     "tools[{}].function: missing or not an object", i);
            FS_CHECK(t["function"].contains("name") && t["function"]["name"].is_string(),
                     "tools[{}].function.name: missing or not a string", i);
        }
        if (!body["tools"].empty()) {
            // The reference expects tools on a system (or developer) message; the API has them at the top level.
            if (req.messages.empty() || req.messages[0].role != "system") {
                Message sys;
                sys.role = "system";
                sys.content = std::string();
                req.messages.insert(req.messages.begin(), std::move(sys));
            }
            FS_CHECK(!(req.messages[0].tools.is_array() && !req.messages[0].tools.empty()),
                     "tools: given both at the top level and on messages[0]");
            req.messages[0].tools = body["tools"];
        }
    }
    return req;
}

}  // namespace flashseek::chat
