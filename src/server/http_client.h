// A small blocking HTTP/1.1 client (cpp-httplib behind it, like http.h on the server side), for the serving
// benchmark and tools: GET and POST with the response body streamed to a callback as it arrives.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashseek::server {

struct HttpClientResponse {
    int status = 0;       // 0 when no response arrived (see error)
    std::string body;     // empty when a body callback consumed it
    std::string error;    // transport error, if any
};

class HttpClient {
public:
    HttpClient(const std::string& host, int port, int timeout_s = 600);
    ~HttpClient();
    using Headers = std::vector<std::pair<std::string, std::string>>;
    HttpClientResponse get(const std::string& path, const Headers& headers = {});
    // on_data, when given, receives the body piece by piece; returning false aborts the transfer.
    HttpClientResponse post(const std::string& path, const std::string& body, const Headers& headers = {},
                            std::function<bool(std::string_view)> on_data = {});

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace flashseek::server
