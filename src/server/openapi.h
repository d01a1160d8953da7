// The server's API surface in one place: the route table the HTTP server is built from (ApiServer registers exactly
// these routes, nothing else) and the OpenAPI 3.1 document served at /openapi.json, which describes every route,
// request field and response as implemented, with this server's live limits (n, logprobs, stop lists, context,
// nesting depth, model id) filled in. A field or route added to the server is added here, or the document's tests
// (schemathesis against /openapi.json, the entry tests in test_server_unit) see the difference.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol.h"

namespace flashseek::server {

enum class RouteId {
    ChatCompletions, Completions, Responses, Tokenize, Detokenize, Models, Health, Metrics, OpenApi, ResponseById
};

struct RouteSpec {
    RouteId id;
    const char* method;   // "GET" or "POST"
    const char* path;     // OpenAPI form ("/v1/responses/{response_id}")
    const char* summary;
};

// Every route, in the order the document lists them.
const std::vector<RouteSpec>& api_routes();

struct OpenApiFacts {
    ProtocolLimits limits;
    int64_t max_model_len = 0;
    size_t max_body_bytes = 0;
    bool api_key_required = false;
};

nlohmann::ordered_json openapi_document(const OpenApiFacts& facts);

}  // namespace flashseek::server
