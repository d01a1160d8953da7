// Constrained-decoding fields of a request (see protocol.h, parse_output_constraint): OpenAI response_format
// (json_object, json_schema), vLLM structured_outputs {json | regex | choice | grammar | json_object} and the older
// guided_json / guided_regex / guided_choice / guided_grammar, and chat tool_choice required or a named function.
// At most one source may constrain a request; what each asks for is checked here (shape, types), what the grammar
// engine cannot compile is reported when the server compiles it (api_server), both as 400 naming the field.
#include <algorithm>

#include "server/protocol.h"

namespace flashseek::server {

// The request's values in the client's key order: a schema's property order is the order the grammar imposes.
using json = nlohmann::ordered_json;
using Kind = OutputConstraint::Kind;

namespace {

// Thrown from the parser callback at the first value nested too deeply.
struct TooDeep {};

void check_size(size_t bytes, const std::string& param, const ProtocolLimits& lim) {
    if (bytes > lim.max_constraint_bytes)
        bad_param(param, "'{}' is {} bytes as a constraint; at most {} are allowed", param, bytes,
                  lim.max_constraint_bytes);
}

// A JSON schema given as an object (or true / false), or as JSON text of one. Text is held to the body's nesting
// bound too (the grammar engine and our own copies walk a schema recursively).
std::string schema_text(const json& v, const std::string& param, const ProtocolLimits& lim) {
    std::string text;
    if (v.is_object() || v.is_boolean()) {
        text = v.dump(-1, ' ', false, json::error_handler_t::replace);
    } else if (v.is_string()) {
        const std::string& given = v.get_ref<const std::string&>();
        if (given.size() > 4 * lim.max_constraint_bytes)  // room for indentation; the compact text is checked below
            check_size(given.size(), param, lim);
        auto bound_depth = [](int depth, json::parse_event_t ev, json&) {
            if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) &&
                depth >= kMaxJsonDepth)
                throw TooDeep{};
            return true;
        };
        json parsed;
        try {
            parsed = json::parse(given, bound_depth);
        } catch (const TooDeep&) {
            bad_param(param, "'{}' nests arrays/objects more than {} levels deep", param, kMaxJsonDepth);
        } catch (const json::exception&) {
            bad_param(param, "'{}' is a string but not JSON text of a schema", param);
        }
        if (!parsed.is_object() && !parsed.is_boolean()) bad_param(param, "'{}' must be a JSON schema object", param);
        text = parsed.dump(-1, ' ', false, json::error_handler_t::replace);
    } else {
        bad_param(param, "'{}' must be a JSON schema object", param);
    }
    check_size(text.size(), param, lim);
    return text;
}

std::string string_field(const json& v, const std::string& param, const ProtocolLimits& lim) {
    if (!v.is_string()) bad_param(param, "'{}' must be a string", param);
    const std::string& text = v.get_ref<const std::string&>();
    if (text.empty()) bad_param(param, "'{}' is empty", param);
    check_size(text.size(), param, lim);
    return text;
}

std::vector<std::string> choice_list(const json& v, const std::string& param, const ProtocolLimits& lim) {
    if (!v.is_array() || v.empty()) bad_param(param, "'{}' must be a non-empty array of strings", param);
    if (v.size() > lim.max_constraint_choices)
        bad_param(param, "'{}' has {} entries; at most {} are allowed", param, v.size(), lim.max_constraint_choices);
    std::vector<std::string> out;
    size_t bytes = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string() || v[i].get_ref<const std::string&>().empty())
            bad_param(param, "'{}[{}]' must be a non-empty string", param, i);
        out.push_back(v[i].get<std::string>());
        bytes += out.back().size();
    }
    check_size(bytes, param, lim);
    return out;
}

// Optional descriptive members of a json_schema format: checked for their type, not used.
void check_schema_format_members(const json& js, const std::string& param) {
    for (const char* key : {"name", "description"})
        if (const json* v = given_member(js, key); v && !v->is_string())
            bad_param(param, "'{}.json_schema.{}' must be a string", param, key);
    if (const json* v = given_member(js, "strict"); v && !v->is_boolean())
        bad_param(param, "'{}.json_schema.strict' must be a boolean", param);
}

void set_constraint(ParsedRequest& r, OutputConstraint c) {
    if (r.constraint.kind != Kind::None)
        bad_param(c.param, "'{}' conflicts with '{}': a request can be constrained by only one of them", c.param,
                  r.constraint.param);
    r.constraint = std::move(c);
}

void parse_response_format(const json& rf, const ProtocolLimits& lim, ParsedRequest& r) {
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
        bad_param("response_format", "'response_format' must be an object with a string 'type'");
    const std::string t = rf["type"].get<std::string>();
    if (t != "text" && t != "json_object" && t != "json_schema")
        bad_param("response_format", "'response_format.type' must be text, json_object or json_schema, got '{}'",
                  t.substr(0, 40));
    if (t == "text") return;
    OutputConstraint c;
    c.kind = Kind::Json;
    c.param = "response_format";
    if (t == "json_object") {
        c.json_schema = R"({"type": "object"})";
    } else {
        const json* js = given_member(rf, "json_schema");
        if (!js || !js->is_object())
            bad_param("response_format", "'response_format' of type json_schema needs a 'json_schema' object");
        check_schema_format_members(*js, "response_format");
        const json* schema = given_member(*js, "schema");
        if (!schema) bad_param("response_format", "'response_format.json_schema' needs a 'schema'");
        c.json_schema = schema_text(*schema, "response_format", lim);
    }
    set_constraint(r, std::move(c));
}

void parse_structured_outputs(const json& so, const ProtocolLimits& lim, ParsedRequest& r) {
    if (!so.is_object()) bad_param("structured_outputs", "'structured_outputs' must be an object");
    // Options of vLLM's backends that do not change which outputs are valid here.
    static const char* const kIgnored[] = {"disable_fallback", "disable_any_whitespace",
                                           "disable_additional_properties", "whitespace_pattern", "backend"};
    for (auto it = so.begin(); it != so.end(); ++it) {
        const std::string& k = it.key();
        if (it->is_null() || std::find(std::begin(kIgnored), std::end(kIgnored), k) != std::end(kIgnored)) continue;
        const std::string param = "structured_outputs." + k.substr(0, 40);
        OutputConstraint c;
        c.param = "structured_outputs";
        if (k == "json") {
            c.kind = Kind::Json;
            c.json_schema = schema_text(*it, param, lim);
        } else if (k == "json_object") {
            if (!it->is_boolean()) bad_param(param, "'{}' must be a boolean", param);
            if (!it->get<bool>()) continue;
            c.kind = Kind::Json;
            c.json_schema = R"({"type": "object"})";
        } else if (k == "regex") {
            c.kind = Kind::Regex;
            c.pattern = string_field(*it, param, lim);
        } else if (k == "choice") {
            c.kind = Kind::Choice;
            c.choices = choice_list(*it, param, lim);
        } else if (k == "grammar") {
            c.kind = Kind::Grammar;
            c.pattern = string_field(*it, param, lim);
        } else {
            bad_param("structured_outputs", "'{}' is not supported (json, regex, choice, grammar, json_object)", param);
        }
        if (r.constraint.kind != Kind::None && r.constraint.param == "structured_outputs")
            bad_param("structured_outputs", "'structured_outputs' must set only one of json, regex, choice, grammar");
        set_constraint(r, std::move(c));
    }
}

void parse_guided_fields(const json& body, const ProtocolLimits& lim, ParsedRequest& r) {
    struct Guided {
        const char* name;
        Kind kind;
    };
    for (const Guided g : {Guided{"guided_json", Kind::Json}, Guided{"guided_regex", Kind::Regex},
                           Guided{"guided_choice", Kind::Choice}, Guided{"guided_grammar", Kind::Grammar}}) {
        const json* v = given_member(body, g.name);
        if (!v) continue;
        OutputConstraint c;
        c.kind = g.kind;
        c.param = g.name;
        if (g.kind == Kind::Json) c.json_schema = schema_text(*v, g.name, lim);
        else if (g.kind == Kind::Choice) c.choices = choice_list(*v, g.name, lim);
        else c.pattern = string_field(*v, g.name, lim);
        set_constraint(r, std::move(c));
    }
}

// tool_choice required: a call of any declared tool; a named function: a call of that one.
void parse_forced_tool_calls(const json& body, const ProtocolLimits& lim, ParsedRequest& r) {
    if (r.endpoint != Endpoint::Chat || r.tool_choice == "auto" || r.tool_choice == "none") return;
    const json* tools = given_member(body, "tools");
    OutputConstraint c;
    c.kind = Kind::ToolCalls;
    c.param = "tool_choice";
    c.tools = json::array();
    for (const json& t : *tools)
        if (r.tool_choice == "required" || t["function"]["name"].get<std::string>() == r.tool_choice)
            c.tools.push_back(t);
    if (c.tools.empty())
        bad_param("tool_choice", "'tool_choice' names the function '{}', which is not in 'tools'",
                  r.tool_choice.substr(0, 80));
    size_t bytes = 0;
    for (const json& t : c.tools) {
        const json& fn = t["function"];
        bytes += fn["name"].get_ref<const std::string&>().size();
        if (const json* params = given_member(fn, "parameters"))
            bytes += params->dump(-1, ' ', false, json::error_handler_t::replace).size();
    }
    if (bytes > lim.max_constraint_bytes)
        bad_param("tools", "the tools a 'tool_choice' of '{}' forces are {} bytes as a constraint (names and "
                  "parameter schemas); at most {} are allowed", r.tool_choice.substr(0, 80), bytes,
                  lim.max_constraint_bytes);
    if (const json* p = given_member(body, "parallel_tool_calls"); p && p->is_boolean())
        c.parallel_tool_calls = p->get<bool>();
    if (r.tool_choice != "required") c.parallel_tool_calls = false;
    set_constraint(r, std::move(c));
}

}  // namespace

constexpr const char* kConstraintFields[] = {"response_format", "structured_outputs", "guided_json", "guided_regex",
                                             "guided_choice", "guided_grammar"};

bool mentions_output_constraint(const nlohmann::json& body) {
    return std::any_of(std::begin(kConstraintFields), std::end(kConstraintFields),
                       [&](const char* f) { return body.contains(f); });
}

void parse_output_constraint(const json& body, const ProtocolLimits& limits, ParsedRequest& r) {
    parse_forced_tool_calls(body, limits, r);
    if (const json* rf = given_member(body, "response_format")) parse_response_format(*rf, limits, r);
    if (const json* so = given_member(body, "structured_outputs")) parse_structured_outputs(*so, limits, r);
    parse_guided_fields(body, limits, r);
}

}  // namespace flashseek::server
