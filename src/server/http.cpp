// cpp-httplib behind HttpServer (see http.h). The library reads a body into memory before calling a handler and
// has no chunked-body limit, so POST routes use its content-reader form and enforce the limit while reading; a
// too-large Content-Length is refused in the pre-routing hook, before any of the body is read. Every answer given
// without reading the whole body (refused before routing, a body read that failed, any error the library answers
// itself, such as an unknown method) ends the connection (http_connection.h), so unread bytes are never parsed as
// a request. The connection probe peeks at the socket of the connection the handler's worker serves.
#include "server/http.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "server/api_error.h"
#include "server/http_connection.h"
#include "util/error.h"

namespace flashseek::server {

std::string HttpRequest::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (k.size() == name.size() &&
            std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
            return v;
    return {};
}

namespace {

HttpRequest convert(const httplib::Request& req) {
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    r.remote_addr = req.remote_addr;
    r.remote_port = req.remote_port;
    for (const auto& [k, v] : req.headers) r.headers.emplace_back(k, v);
    // The handler runs on the worker serving this request's connection, so its socket is at hand.
    const int fd = current_connection_fd();
    r.connection_alive = [fd]() { return fd >= 0 && peer_connected(fd); };
    return r;
}

class SinkAdapter : public StreamSink {
public:
    explicit SinkAdapter(httplib::DataSink& sink) : sink_(sink) {}
    bool write(std::string_view data) override { return ok_ = ok_ && sink_.write(data.data(), data.size()); }
    bool alive() override { return ok_ && sink_.is_writable(); }
    bool ok() const { return ok_; }

private:
    httplib::DataSink& sink_;
    bool ok_ = true;
};

void apply(const HttpResponse& in, httplib::Response& out) {
    out.status = in.status;
    for (const auto& [k, v] : in.headers) out.set_header(k, v);
    if (in.stream) {
        auto stream = in.stream;
        auto on_close = in.on_close;
        auto closed = std::make_shared<std::once_flag>();
        out.set_chunked_content_provider(
            in.content_type,
            [stream](size_t, httplib::DataSink& sink) {
                SinkAdapter a(sink);
                const StreamStatus st = stream(a);
                if (st == StreamStatus::Failed || !a.ok()) return false;
                if (st == StreamStatus::Done) sink.done();
                return true;
            },
            [on_close, closed](bool success) {
                if (on_close) std::call_once(*closed, [&] { on_close(success); });
            });
    } else {
        out.set_content(in.body, in.content_type);
    }
}

}  // namespace

struct HttpServer::Impl {
    explicit Impl(const HttpOptions& o) : options(o), svr(size_t(std::max(4, o.threads))) {}
    HttpOptions options;
    ConnectionServer svr;
    std::function<bool(const HttpRequest&, HttpResponse&)> gate;
    int port = -1;
};

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>(options)) {
    auto& svr = impl_->svr;
    svr.set_read_timeout(options.read_timeout_s, 0);
    svr.set_write_timeout(options.write_timeout_s, 0);
    svr.set_keep_alive_timeout(options.keep_alive_timeout_s);
    svr.set_keep_alive_max_count(options.keep_alive_max_requests);
    svr.set_payload_max_length(options.max_body_bytes);
    Impl* impl = impl_.get();
    svr.set_pre_routing_handler([impl](const httplib::Request& req, httplib::Response& res) {
        // A request refused here is answered before its body is read, so its connection ends with the answer.
        const auto refuse = [&](int status, std::string error) {
            res.status = status;
            close_after_response(res);
            res.set_content(std::move(error), "application/json");
            return httplib::Server::HandlerResponse::Handled;
        };
        // The library caps each header line (8 KiB, else 400) but not their number or total size.
        size_t header_bytes = 0;
        for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
        if (req.headers.size() > impl->options.max_headers || header_bytes > impl->options.max_header_bytes)
            return refuse(431, error_body(431,
                                          fmt::format("request headers too large: {} headers, {} bytes (limits {}, {})",
                                                      req.headers.size(), header_bytes, impl->options.max_headers,
                                                      impl->options.max_header_bytes),
                                          "headers", "invalid_request_error", "request_header_fields_too_large"));
        // Body framing the library gets wrong, so the bytes after a request could be parsed as a request of their
        // own (a desynchronised connection, or a request smuggled past a proxy that frames the body as RFC 9112
        // §6.3 says): it takes the first of several Content-Length headers; it treats a Transfer-Encoding other
        // than exactly "chunked" as no framing at all (reading until the peer closes); and with both headers
        // present the proxy and the library may each pick another. These are refused before the body is read.
        const auto refuse_framing = [&](const std::string& msg, const std::string& param) {
            return refuse(400, error_body(400, msg, param));
        };
        const auto [cl_first, cl_end] = req.headers.equal_range("Content-Length");
        for (auto it = cl_first; it != cl_end; ++it)
            if (it->second != cl_first->second)
                return refuse_framing("conflicting Content-Length headers", "Content-Length");
        const size_t te_count = req.get_header_value_count("Transfer-Encoding");
        if (te_count > 0) {
            std::string te = req.get_header_value("Transfer-Encoding");
            std::transform(te.begin(), te.end(), te.begin(), [](unsigned char c) { return char(std::tolower(c)); });
            while (!te.empty() && (te.back() == ' ' || te.back() == '\t')) te.pop_back();
            if (te_count > 1 || te != "chunked")
                return refuse_framing("unsupported Transfer-Encoding (only a single 'chunked' is accepted)",
                                      "Transfer-Encoding");
            if (cl_first != cl_end)
                return refuse_framing("a request cannot carry both Content-Length and Transfer-Encoding",
                                      "Transfer-Encoding");
            // The library's chunked decoder ends the body early, without an error, when a chunk is not followed
            // by CRLF; what follows would be parsed as the next request. A chunked request is therefore its
            // connection's last, so no byte after its body is ever read as a request.
            close_after_response(res);
        }
        // The library reads a body only for POST, PUT, PATCH and DELETE: the body of a GET (or HEAD, OPTIONS, …)
        // would stay in the stream and be parsed as the next request. Such a request is answered as usual and
        // ends its connection (the unread body is discarded while it closes).
        const bool library_reads_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                                        req.method == "DELETE" || req.method == "PRI";
        if (!library_reads_body && (te_count > 0 || (cl_first != cl_end && cl_first->second != "0")))
            close_after_response(res);
        const std::string len = req.get_header_value("Content-Length");
        if (!len.empty()) {
            char* end = nullptr;
            const unsigned long long n = std::strtoull(len.c_str(), &end, 10);
            if (end == len.c_str() || *end)
                return refuse(400, error_body(400, "invalid Content-Length header", "Content-Length"));
            if (n > impl->options.max_body_bytes)
                return refuse(413, error_body(413, fmt::format("request body of {} bytes exceeds the limit of {} bytes",
                                                               len, impl->options.max_body_bytes),
                                              "body", "invalid_request_error", "request_too_large"));
        }
        if (impl->gate) {
            HttpRequest r = convert(req);
            HttpResponse out;
            if (!impl->gate(r, out)) {
                apply(out, res);
                close_after_response(res);  // answered before the body was read
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        // An error the library answered itself: the request may not have been parsed, its body not read.
        close_after_response(res);
        std::string msg = res.status == 404   ? fmt::format("no route for {} {}", req.method, req.path)
                          : res.status == 413 ? std::string("request body exceeds the size limit")
                          : res.status == 405 ? fmt::format("method {} not allowed on {}", req.method, req.path)
                          : res.status == 414 ? fmt::format("request line longer than {} bytes", CPPHTTPLIB_REQUEST_URI_MAX_LENGTH)
                          : res.status == 400 && req.path.empty()
                              ? std::string("malformed HTTP request: expected a request line '<method> <path> HTTP/1.1' "
                                            "(this API serves GET and POST) and 'Name: value' header lines")
                          : res.status == 400 && req.method != "GET" && req.method != "POST"
                              ? fmt::format("method {} is not served (this API serves GET and POST)", req.method)
                          : res.status == 400 ? std::string("malformed HTTP request: its framing or body could not be read")
                                              : fmt::format("HTTP error {}", res.status);
        res.set_content(error_body(res.status, msg, res.status == 413 ? "body" : ""), "application/json");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(error_body(500, what), "application/json");
    });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::get(const std::string& path, HttpHandler handler) {
    impl_->svr.Get(path, [handler](const httplib::Request& req, httplib::Response& res) {
        HttpRequest r = convert(req);
        HttpResponse out;
        handler(r, out);
        apply(out, res);
    });
}

void HttpServer::post(const std::string& path, HttpHandler handler) {
    const size_t limit = impl_->options.max_body_bytes;
    impl_->svr.Post(path, [handler, limit](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader& reader) {
        HttpRequest r = convert(req);
        bool too_big = false;
        const bool read_ok = reader([&](const char* data, size_t n) {
            if (r.body.size() + n > limit) {
                too_big = true;
                return false;
            }
            r.body.append(data, n);
            return true;
        });
        if (too_big || !read_ok) {
            res.status = too_big ? 413 : 400;
            close_after_response(res);
            res.set_content(too_big ? error_body(413, fmt::format("request body exceeds the limit of {} bytes", limit),
                                                 "body", "invalid_request_error", "request_too_large")
                                    : error_body(400, "could not read the request body", "body"),
                            "application/json");
            return;
        }
        HttpResponse out;
        handler(r, out);
        apply(out, res);
    });
}

void HttpServer::set_gate(std::function<bool(const HttpRequest&, HttpResponse&)> gate) { impl_->gate = std::move(gate); }

int HttpServer::bind() {
    const auto& o = impl_->options;
    if (o.port == 0) {
        impl_->port = impl_->svr.bind_to_any_port(o.host.c_str());
        FS_CHECK(impl_->port > 0, "--host/--port: cannot bind {}:<any>", o.host);
    } else {
        FS_CHECK(impl_->svr.bind_to_port(o.host.c_str(), o.port),
                 "--host/--port: cannot bind {}:{} (in use, or not a local address?)", o.host, o.port);
        impl_->port = o.port;
    }
    // Room for a burst of connects: the library's backlog of 5 drops them (the kernel caps this at somaxconn).
    FS_CHECK(impl_->svr.widen_backlog(4096), "--host/--port: cannot listen on {}:{}", o.host, impl_->port);
    return impl_->port;
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() {
    if (impl_->svr.is_running()) impl_->svr.stop();
}

}  // namespace flashseek::server
