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

constexpr size_t kMaxChoices = 1024;

const json* present(const json& body, const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

// A JSON schema given as an object (or true / false), or as JSON text of one.
std::string schema_text(const json& v, const std::string& param) {
    if (v.is_object() || v.is_boolean()) return v.dump();
    if (v.is_string()) {
        json parsed;
        try {
            parsed = json::parse(v.get<std::string>());
        } catch (const json::exception&) {
            bad_param(param, "'{}' is a string but not JSON text of a schema", param);
        }
        if (parsed.is_object() || parsed.is_boolean()) return parsed.dump();
    }
    bad_param(param, "'{}' must be a JSON schema object", param);
}

std::string string_field(const json& v, const std::string& param) {
    if (!v.is_string()) bad_param(param, "'{}' must be a string", param);
    if (v.get<std::string>().empty()) bad_param(param, "'{}' is empty", param);
    return v.get<std::string>();
}

std::vector<std::string> choice_list(const json& v, const std::string& param) {
    if (!v.is_array() || v.empty()) bad_param(param, "'{}' must be a non-empty array of strings", param);
    if (v.size() > kMaxChoices)
        bad_param(param, "'{}' has {} entries; at most {} are allowed", param, v.size(), kMaxChoices);
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string() || v[i].get<std::string>().empty())
            bad_param(param, "'{}[{}]' must be a non-empty string", param, i);
        out.push_back(v[i].get<std::string>());
    }
    return out;
}

void set_constraint(ParsedRequest& r, OutputConstraint c) {
    if (r.constraint.kind != Kind::None)
        bad_param(c.param, "'{}' conflicts with '{}': a request can be constrained by only one of them", c.param,
                  r.constraint.param);
    r.constraint = std::move(c);
}

void parse_response_format(const json& rf, ParsedRequest& r) {
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
        const json* js = present(rf, "json_schema");
        if (!js || !js->is_object())
            bad_param("response_format", "'response_format' of type json_schema needs a 'json_schema' object");
        const json* schema = present(*js, "schema");
        if (!schema) bad_param("response_format", "'response_format.json_schema' needs a 'schema'");
        c.json_schema = schema_text(*schema, "response_format");
    }
    set_constraint(r, std::move(c));
}

void parse_structured_outputs(const json& so, ParsedRequest& r) {
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
            c.json_schema = schema_text(*it, param);
        } else if (k == "json_object") {
            if (!it->is_boolean()) bad_param(param, "'{}' must be a boolean", param);
            if (!it->get<bool>()) continue;
            c.kind = Kind::Json;
            c.json_schema = R"({"type": "object"})";
        } else if (k == "regex") {
            c.kind = Kind::Regex;
            c.pattern = string_field(*it, param);
        } else if (k == "choice") {
            c.kind = Kind::Choice;
            c.choices = choice_list(*it, param);
        } else if (k == "grammar") {
            c.kind = Kind::Grammar;
            c.pattern = string_field(*it, param);
        } else {
            bad_param("structured_outputs", "'{}' is not supported (json, regex, choice, grammar, json_object)", param);
        }
        if (r.constraint.kind != Kind::None && r.constraint.param == "structured_outputs")
            bad_param("structured_outputs", "'structured_outputs' must set only one of json, regex, choice, grammar");
        set_constraint(r, std::move(c));
    }
}

void parse_guided_fields(const json& body, ParsedRequest& r) {
    struct Guided {
        const char* name;
        Kind kind;
    };
    for (const Guided g : {Guided{"guided_json", Kind::Json}, Guided{"guided_regex", Kind::Regex},
                           Guided{"guided_choice", Kind::Choice}, Guided{"guided_grammar", Kind::Grammar}}) {
        const json* v = present(body, g.name);
        if (!v) continue;
        OutputConstraint c;
        c.kind = g.kind;
        c.param = g.name;
        if (g.kind == Kind::Json) c.json_schema = schema_text(*v, g.name);
        else if (g.kind == Kind::Choice) c.choices = choice_list(*v, g.name);
        else c.pattern = string_field(*v, g.name);
        set_constraint(r, std::move(c));
    }
}

// tool_choice required: a call of any declared tool; a named function: a call of that one.
void parse_forced_tool_calls(const json& body, ParsedRequest& r) {
    if (r.endpoint != Endpoint::Chat || r.tool_choice == "auto" || r.tool_choice == "none") return;
    const json* tools = present(body, "tools");
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
    if (const json* p = present(body, "parallel_tool_calls"); p && p->is_boolean())
        c.parallel_tool_calls = p->get<bool>();
    if (r.tool_choice != "required") c.parallel_tool_calls = false;
    set_constraint(r, std::move(c));
}

}  // namespace

void parse_output_constraint(const nlohmann::json& sorted_body, ParsedRequest& r, std::string_view raw_body) {
    static const char* const kFields[] = {"response_format", "structured_outputs", "guided_json", "guided_regex",
                                           "guided_choice", "guided_grammar"};
    const bool forced_tools = r.endpoint == Endpoint::Chat && r.tool_choice != "auto" && r.tool_choice != "none";
    if (!forced_tools && std::none_of(std::begin(kFields), std::end(kFields),
                                      [&](const char* f) { return sorted_body.contains(f); }))
        return;
    // The body was parsed (and validated as strict JSON) once already; parsed again only when it constrains.
    const json body = raw_body.empty() ? json(sorted_body) : json::parse(raw_body);
    parse_forced_tool_calls(body, r);
    if (const json* rf = present(body, "response_format")) parse_response_format(*rf, r);
    if (const json* so = present(body, "structured_outputs")) parse_structured_outputs(*so, r);
    parse_guided_fields(body, r);
}

}  // namespace flashseek::server
