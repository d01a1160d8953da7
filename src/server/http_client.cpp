// HttpClient over cpp-httplib (see http_client.h).
#include "server/http_client.h"

#include <httplib.h>

namespace flashseek::server {

struct HttpClient::Impl {
    httplib::Client cli;
    Impl(const std::string& host, int port) : cli(host, port) {}
};

HttpClient::HttpClient(const std::string& host, int port, int timeout_s) : impl_(std::make_unique<Impl>(host, port)) {
    impl_->cli.set_connection_timeout(10, 0);
    impl_->cli.set_read_timeout(timeout_s, 0);
    impl_->cli.set_write_timeout(timeout_s, 0);
    impl_->cli.set_keep_alive(true);
    // The library writes a request's headers and its body separately; with Nagle's algorithm the body then waits
    // for the server's delayed acknowledgement of the headers (up to 40 ms), which bench-serve would count as
    // time to first token.
    impl_->cli.set_tcp_nodelay(true);
}

HttpClient::~HttpClient() = default;

namespace {
httplib::Headers to_headers(const HttpClient::Headers& h) {
    httplib::Headers out;
    for (const auto& [k, v] : h) out.emplace(k, v);
    return out;
}
}  // namespace

HttpClientResponse HttpClient::get(const std::string& path, const Headers& headers) {
    HttpClientResponse r;
    auto res = impl_->cli.Get(path.c_str(), to_headers(headers));
    if (!res) {
        r.error = httplib::to_string(res.error());
        return r;
    }
    r.status = res->status;
    r.body = res->body;
    return r;
}

HttpClientResponse HttpClient::post(const std::string& path, const std::string& body, const Headers& headers,
                                    std::function<bool(std::string_view)> on_data) {
    HttpClientResponse r;
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = to_headers(headers);
    req.set_header("Content-Type", "application/json");
    req.body = body;
    if (on_data)
        req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
            return on_data(std::string_view(data, n));
        };
    auto res = impl_->cli.send(req);
    if (!res) {
        r.error = httplib::to_string(res.error());
        return r;
    }
    r.status = res->status;
    r.body = res->body;
    return r;
}

}  // namespace flashseek::server
