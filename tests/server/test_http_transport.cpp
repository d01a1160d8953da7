// The transport settings of the HTTP server that no end-to-end test can see: every accepted connection sends each
// write at once (TCP_NODELAY). Without it a streamed response's first chunk after its headers, and each token's
// chunk after the previous one, waited for the client's delayed acknowledgement (up to 40 ms a time on Linux).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <thread>

#include "server/http.h"
#include "server/http_client.h"
#include "server/http_connection.h"

using namespace flashseek::server;

TEST(HttpTransport, AcceptedConnectionsSendEveryWriteAtOnce) {
    HttpOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    HttpServer server(options);
    server.get("/nodelay", [](const HttpRequest&, HttpResponse& res) {
        // The handler runs on the worker thread that serves the connection: read the option off its socket.
        int on = -1;
        socklen_t len = sizeof on;
        const int fd = current_connection_fd();
        const bool read = fd >= 0 && getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0;
        res.content_type = "text/plain";
        res.body = read ? std::to_string(on) : "unreadable";
    });
    const int port = server.bind();
    std::thread serving([&] { server.run(); });
    HttpClient client("127.0.0.1", port, 10);
    for (int request = 0; request < 2; ++request) {  // the option holds for every request of a kept-alive connection
        const HttpClientResponse r = client.get("/nodelay", {});
        EXPECT_EQ(r.error, "") << "request " << request;
        EXPECT_EQ(r.status, 200) << "request " << request;
        EXPECT_NE(r.body, "0") << "request " << request << ": Nagle's algorithm is on";
        EXPECT_NE(r.body, "unreadable") << "request " << request;
        EXPECT_NE(r.body, "") << "request " << request;
    }
    server.stop();
    serving.join();
}
