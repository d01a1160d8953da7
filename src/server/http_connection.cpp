// The connection loop behind ConnectionServer (see http_connection.h): one buffered stream per connection, the
// keep-alive wait between requests, and the lingering close of a connection whose last request may have left
// input unread.
#include "server/http_connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

namespace flashseek::server {

namespace {

// Set by close_after_response() while the worker thread handles a request; read by the loop after the response.
thread_local bool t_close_after_response = false;
// The socket the worker thread serves (current_connection_fd()).
thread_local int t_connection_fd = -1;

// How much unread input a closing connection discards at most before it is closed anyway.
constexpr size_t kLingerMaxBytes = 16u << 20;

using Clock = std::chrono::steady_clock;

int millis_until(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return int(std::clamp<long long>(left, 0, 1 << 30));
}

// Polls fd for input in 25 ms slices until `deadline`: true once input is there; false at the deadline, on a
// poll error, or when give_up() says so between slices (shutdown, or a worker other connections wait for).
template <typename GiveUp>
bool wait_input_unless(int fd, Clock::time_point deadline, GiveUp give_up) {
    for (;;) {
        const int left = millis_until(deadline);
        if (left == 0) return false;
        pollfd p{fd, POLLIN, 0};
        const int r = poll(&p, 1, std::min(left, 25));
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
        if (give_up()) return false;
    }
}

// poll() for `events` up to timeout_ms, retried when interrupted by a signal; true when ready.
bool wait_for(int fd, short events, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        pollfd p{fd, events, 0};
        const int r = poll(&p, 1, millis_until(deadline));
        if (r > 0) return true;
        if (r == 0 || errno != EINTR) return false;
    }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    ip.clear();
    port = -1;
    const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                        : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    if (rc != 0) return;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
        port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
        port = ntohs(a->sin6_port);
    }
    ip = buf;
}

// The connection's byte stream for the library's request parser and response writer. Input is read in blocks
// and kept across requests, so a pipelined request that arrived with the previous one is served next.
class ConnectionStream final : public httplib::Stream {
public:
    ConnectionStream(socket_t sock, int read_timeout_ms, int write_timeout_ms, std::function<bool()> starved)
        : sock_(sock), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms),
          starved_(std::move(starved)) {}

    bool has_buffered_input() const { return begin_ < end_; }

    // A request starts arriving: its head and body are read from here on (the handler itself never reads).
    void begin_request() {
        request_start_ = Clock::now();
        request_bytes_ = 0;
    }

    bool is_readable() const override { return has_buffered_input() || wait_readable(); }
    bool is_writable() const override { return wait_for(sock_, POLLOUT, write_timeout_ms_) && peer_connected(sock_); }

    ssize_t read(char* ptr, size_t size) override {
        if (has_buffered_input()) return take(ptr, size);
        if (!wait_readable()) return -1;
        if (size >= sizeof(buf_)) return receive(ptr, size);  // large reads (bodies) skip the copy
        const ssize_t n = receive(buf_, sizeof(buf_));
        if (n <= 0) return n;
        begin_ = 0;
        end_ = size_t(n);
        return take(ptr, size);
    }

    ssize_t write(const char* ptr, size_t size) override {
        if (!wait_for(sock_, POLLOUT, write_timeout_ms_)) return -1;
        for (;;) {
            const ssize_t n = send(sock_, ptr, size, MSG_NOSIGNAL);
            if (n >= 0 || errno != EINTR) return n;
        }
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
    void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
    socket_t socket() const override { return sock_; }

private:
    // Waits up to the read timeout for input. The read timeout alone does not stop a slow client (slowloris): one
    // that sends its head or body a byte every few seconds holds its worker for as long as it likes, and a few
    // hundred such connections took every worker (/health unanswered for minutes). So while every worker is taken
    // and accepted connections wait, a request still arriving after kSlowGraceMs at under kMinRequestRate bytes
    // per second gives up (the read fails: 400, connection closed); a client that sends its request at once, or
    // at any usable rate, never meets this, and without waiting connections nothing changes.
    bool wait_readable() const {
        return wait_input_unless(sock_, Clock::now() + std::chrono::milliseconds(read_timeout_ms_), [this] {
            const double elapsed = std::chrono::duration<double>(Clock::now() - request_start_).count();
            return elapsed * 1000 > kSlowGraceMs && double(request_bytes_) < elapsed * kMinRequestRate && starved_();
        });
    }
    ssize_t take(char* ptr, size_t size) {
        const size_t n = std::min(size, end_ - begin_);
        std::memcpy(ptr, buf_ + begin_, n);
        begin_ += n;
        request_bytes_ += n;
        return ssize_t(n);
    }
    ssize_t receive(char* ptr, size_t size) {
        for (;;) {
            const ssize_t n = recv(sock_, ptr, size, 0);
            if (n > 0 && ptr != buf_) request_bytes_ += size_t(n);  // bytes into buf_ count when taken
            if (n >= 0 || errno != EINTR) return n;
        }
    }

    static constexpr int kSlowGraceMs = 1000;
    static constexpr double kMinRequestRate = 64 * 1024;

    socket_t sock_;
    int read_timeout_ms_;
    int write_timeout_ms_;
    std::function<bool()> starved_;
    Clock::time_point request_start_ = Clock::now();
    size_t request_bytes_ = 0;
    char buf_[16384];
    size_t begin_ = 0, end_ = 0;
};

// Stops writing (the peer sees the end of the answer), discards what the peer still sends until it stops
// (250 ms quiet), kLingerMaxBytes were discarded or 2 s passed, then closes. Closing with unread input would send a
// reset that can destroy the answer before the peer reads it.
void linger_and_close(socket_t sock) {
    shutdown(sock, SHUT_WR);
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    char buf[16384];
    for (size_t discarded = 0; discarded < kLingerMaxBytes;) {
        const int left = millis_until(deadline);
        if (left == 0 || !wait_for(sock, POLLIN, std::min(left, 250))) break;
        const ssize_t n = recv(sock, buf, sizeof(buf), 0);
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
        if (n > 0) discarded += size_t(n);
    }
    close(sock);
}

// The library's thread pool, counting the connections queued for a worker and the workers serving one.
class CountingPool final : public httplib::TaskQueue {
public:
    CountingPool(size_t workers, std::atomic<int>& waiting, std::atomic<int>& busy)
        : pool_(workers), waiting_(waiting), busy_(busy) {}
    void enqueue(std::function<void()> fn) override {
        ++waiting_;
        pool_.enqueue([this, fn = std::move(fn)] {
            ++busy_;
            --waiting_;
            fn();
            --busy_;
        });
    }
    void shutdown() override { pool_.shutdown(); }

private:
    httplib::ThreadPool pool_;
    std::atomic<int>& waiting_;
    std::atomic<int>& busy_;
};

}  // namespace

void close_after_response(httplib::Response& res) {
    t_close_after_response = true;
    if (!res.has_header("Connection")) res.set_header("Connection", "close");
}

bool peer_connected(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) < 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
    if (p.revents & POLLIN) {
        char c;
        const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return false;
    }
    return true;
}

ConnectionServer::ConnectionServer(size_t workers) : workers_(int(workers)) {
    new_task_queue = [this, workers] { return new CountingPool(workers, waiting_connections_, busy_workers_); };
}

bool ConnectionServer::widen_backlog(int backlog) {
    const socket_t s = svr_sock_;
    return s != INVALID_SOCKET && ::listen(s, backlog) == 0;
}

int current_connection_fd() { return t_connection_fd; }

bool ConnectionServer::process_and_close_socket(socket_t sock) {
    t_connection_fd = sock;
    // Every write goes out at once. With Nagle's algorithm a response's second small write (a stream's first chunk
    // after its headers, each token's chunk after the previous one) waits until the client acknowledges the first,
    // and clients delay that acknowledgement by up to 40 ms: a streamed token could arrive 40 ms late.
    const int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto millis = [](time_t sec, time_t usec) { return int(std::min<long long>(sec * 1000LL + usec / 1000, 1 << 30)); };
    // Starved: every worker serves a connection and accepted ones wait (a connection merely being handed to a free
    // worker does not count).
    auto starved = [this] { return waiting_connections_ > 0 && busy_workers_ >= workers_; };
    ConnectionStream stream(sock, millis(read_timeout_sec_, read_timeout_usec_),
                            millis(write_timeout_sec_, write_timeout_usec_), starved);
    // Waits for the next request: true when input is there; false after the keep-alive timeout, on shutdown
    // (checked every 25 ms, so stopping the server never waits for idle connections), or when other connections
    // wait for a worker and this one has been idle for its grace (http_connection.h).
    bool served_one = false;
    auto next_request_arrives = [&] {
        if (stream.has_buffered_input()) return true;
        const auto start = Clock::now();
        const auto deadline = start + std::chrono::seconds(keep_alive_timeout_sec_);
        const auto yield_after = start + std::chrono::milliseconds(served_one ? 25 : 1000);
        if (svr_sock_ == INVALID_SOCKET) return false;
        return wait_input_unless(sock, deadline, [&] {
            return svr_sock_ == INVALID_SOCKET || (starved() && Clock::now() >= yield_after);
        });
    };
    bool ok = false, linger = false;
    for (size_t left = keep_alive_max_count_; left > 0 && next_request_arrives(); --left) {
        t_close_after_response = false;
        bool peer_asked_to_close = false;
        stream.begin_request();
        ok = process_request(stream, left == 1, peer_asked_to_close, nullptr);
        served_one = true;
        linger = t_close_after_response;
        t_close_after_response = false;
        if (!ok || peer_asked_to_close || linger) break;
    }
    t_connection_fd = -1;
    if (linger && ok) {
        linger_and_close(sock);
    } else {
        shutdown(sock, SHUT_RDWR);
        close(sock);
    }
    return ok;
}

}  // namespace flashseek::server
