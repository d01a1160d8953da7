// Model-load progress for BackendOptions::progress: a redrawn bar when stderr is a terminal, otherwise one log
// line per 10% with the throughput in GB/s (readable in CI logs and journald). Returning false cancels the load,
// which is how Ctrl-C during a long load takes effect.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>

namespace flashseek::server {

class LoadProgress {
public:
    // `cancelled` is polled on every callback; when it returns true the load is abandoned.
    explicit LoadProgress(std::function<bool()> cancelled, bool tty = false);
    bool operator()(size_t done, size_t total);
    void finish();  // ends the bar line (TTY) or prints the final line

private:
    std::function<bool()> cancelled_;
    bool tty_;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_{};
    int last_decile_ = -1;
    size_t done_ = 0, total_ = 0;
};

}  // namespace flashseek::server
