// Python-compatible JSON serialization; see python_json.h.
#include "tokenizer/python_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "util/error.h"

namespace flashseek::chat {

namespace {

// repr(float) of CPython: shortest round-trip digits; exponent form when the decimal exponent is < -4 or >= 16.
std::string python_float_repr(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string sign;
    if (sci[0] == '-') sign = "-", sci.erase(0, 1);
    const auto e_pos = sci.find('e');
    std::string digits = sci.substr(0, e_pos);
    const int exponent = std::stoi(sci.substr(e_pos + 1));
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int decpt = exponent + 1;  // position of the decimal point relative to the digit string
    std::string out;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out = "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
        } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
            out = digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, static_cast<std::size_t>(decpt)) + "." + digits.substr(static_cast<std::size_t>(decpt));
        }
    } else {
        out = digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        const int e = decpt - 1;
        out += e < 0 ? "e-" : "e+";
        const int ae = std::abs(e);
        if (ae < 10) out += "0";
        out += std::to_string(ae);
    }
    return sign + out;
}

void dump(const nlohmann::ordered_json& v, std::string& out) {
    switch (v.type()) {
        case nlohmann::ordered_json::value_t::null: out += "null"; break;
        case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
        case nlohmann::ordered_json::value_t::number_integer: out += std::to_string(v.get<std::int64_t>()); break;
        case nlohmann::ordered_json::value_t::number_unsigned: out += std::to_string(v.get<std::uint64_t>()); break;
        case nlohmann::ordered_json::value_t::number_float: out += python_float_repr(v.get<double>()); break;
        case nlohmann::ordered_json::value_t::string: out += python_json_string(v.get_ref<const std::string&>()); break;
        case nlohmann::ordered_json::value_t::array: {
            out += '[';
            bool first = true;
            for (const auto& e : v) {
                if (!first) out += ", ";
                first = false;
                dump(e, out);
            }
            out += ']';
            break;
        }
        case nlohmann::ordered_json::value_t::object: {
            out += '{';
            bool first = true;
            for (auto it = v.begin(); it != v.end(); ++it) {
                if (!first) out += ", ";
                first = false;
                out += python_json_string(it.key());
                out += ": ";
                dump(it.value(), out);
            }
            out += '}';
            break;
        }
        default: fail("cannot serialize JSON value of type {}", v.type_name());
    }
}

}  // namespace

std::string python_json_string(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) out += fmt::format("\\u{:04x}", c);
                else out += ch;
        }
    }
    out += '"';
    return out;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
    std::string out;
    dump(value, out);
    return out;
}

}  // namespace flashseek::chat
