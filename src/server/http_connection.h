// How one accepted TCP connection is served, replacing cpp-httplib's own loop (internal to src/server; only
// http.cpp includes it). The library's loop has two defects an HTTP/1.1 server cannot have:
// - It keeps a connection open after answering a request whose body it never read (an unknown method, an
//   unparseable request line, an answer given before routing such as 401 or 413). The unread body is then parsed
//   as the next request: its bytes become a "request line" (400, or 414 past 8 KiB) whose answer the client takes
//   for its next request's — a desynchronised connection, and a way to smuggle a request inside a body.
// - It reads through a fresh buffer for every request, so bytes of a pipelined request that arrived with the
//   previous one are dropped and the client waits forever.
// Here one buffered stream lives as long as the connection, and a response flagged with close_after_response()
// ends it: the server sends its answer, stops writing, discards what the client is still sending for a bounded
// time (closing a socket with unread input would reset the connection and could destroy the answer in flight),
// then closes.
// Each connection holds a worker thread while it is open, idle keep-alive time included. So that idle connections
// cannot starve new ones (a client pool larger than the workers, or connections opened and left silent), a
// connection that is idle while every worker is taken and accepted connections wait gives its worker up: after
// 25 ms between requests, or 1 s before its first request. The library listens with a backlog of 5, which drops
// the connects of a burst of clients; widen_backlog() raises it.
#pragma once
#include <httplib.h>

#include <atomic>
#include <cstddef>

namespace flashseek::server {

// Makes `res` the connection's last response (for a request whose body may be unread): says so in a Connection
// header and has the connection closed after it is sent. Call on the thread handling the request.
void close_after_response(httplib::Response& res);

// True while the peer of a connected socket has not closed or reset it (checked without consuming input).
bool peer_connected(int fd);

// The socket of the connection the calling worker thread serves; -1 outside a connection.
int current_connection_fd();

class ConnectionServer final : public httplib::Server {
public:
    // Serves connections on `workers` threads (call before listening).
    explicit ConnectionServer(size_t workers);

    // Raises the listening socket's backlog (call after binding); false if that failed.
    bool widen_backlog(int backlog);

private:
    bool process_and_close_socket(socket_t sock) override;

    const int workers_;
    // Accepted connections not yet taken up by a worker; workers serving a connection.
    std::atomic<int> waiting_connections_{0};
    std::atomic<int> busy_workers_{0};
};

}  // namespace flashseek::server
