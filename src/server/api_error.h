// A client-facing API failure: HTTP status plus the OpenAI error body {"error": {message, type, param, code}}.
// Thrown by request parsing/validation and caught by the HTTP layer, so every bad request becomes a 4xx naming
// the offending parameter instead of a 5xx or a crash.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace flashseek::server {

class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
             std::string code = {})
        : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)),
          code(std::move(code)) {}
    int status;
    std::string param;
    std::string type;
    std::string code;
};

// 400 invalid_request_error naming `param`.
template <typename... Args>
[[noreturn]] inline void bad_param(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
    throw ApiError(400, fmt::format(f, std::forward<Args>(args)...), param);
}

// The JSON error body for any status.
std::string error_body(int status, const std::string& message, const std::string& param = {},
                       const std::string& type = {}, const std::string& code = {});
std::string error_body(const ApiError& e);

}  // namespace flashseek::server
