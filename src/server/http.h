// A thin HTTP/1.1 server interface so the API code never touches the HTTP library (cpp-httplib today; Beast/asio
// could replace it for thousands of concurrent streams). Enforces the transport-level safety rules in one place:
// request-size limit (413 before the body is read when Content-Length is too large, and while reading chunked
// bodies), a gate run before routing (authentication), OpenAI-style error bodies for 404/405, and a probe that
// tells a handler whether its client is still connected (for cancelling non-streaming requests too).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashseek::server {

struct HttpRequest {
    std::string method;
    std::string path;
    std::string body;
    std::string remote_addr;
    int remote_port = -1;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string header(std::string_view name) const;  // case-insensitive; "" when absent
    // True while the client's TCP connection is open (checked without consuming data).
    std::function<bool()> connection_alive;
};

class StreamSink {
public:
    virtual ~StreamSink() = default;
    virtual bool write(std::string_view data) = 0;  // false once the client is gone
    virtual bool alive() = 0;
};

enum class StreamStatus { More, Done, Failed };

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    // Streaming: when set, the body is sent chunked; the function is called until it returns Done or Failed (it
    // should block briefly waiting for data rather than spin). on_close runs exactly once afterwards with whether
    // the stream completed, also when the client left before the first call.
    std::function<StreamStatus(StreamSink&)> stream;
    std::function<void(bool completed)> on_close;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

struct HttpOptions {
    std::string host = "127.0.0.1";
    int port = 8000;        // 0 = any free port (see HttpServer::port())
    int threads = 64;       // worker threads = connections served at once (an open connection holds one)
    size_t max_body_bytes = 8u << 20;
    size_t max_headers = 100;          // more headers, or more header bytes, gives 431
    size_t max_header_bytes = 16u << 10;
    int read_timeout_s = 10;
    int write_timeout_s = 10;
    int keep_alive_timeout_s = 10;  // also how long a fresh connection may take to send its request
    // Requests one connection may carry before the server closes it (cpp-httplib's own default is 5, which makes
    // benchmark clients reconnect all the time).
    size_t keep_alive_max_requests = 10000;
};

class HttpServer {
public:
    explicit HttpServer(HttpOptions options);
    ~HttpServer();
    void get(const std::string& path, HttpHandler handler);
    void post(const std::string& path, HttpHandler handler);
    // Runs before routing for every request (body not yet read): return false after filling `res` to answer
    // right away (e.g. 401).
    void set_gate(std::function<bool(const HttpRequest&, HttpResponse&)> gate);
    // Binds the socket; throws Error naming host and port on failure. Returns the bound port.
    int bind();
    int port() const;
    void run();   // serves until stop(); call after bind()
    void stop();  // thread-safe

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace flashseek::server
