// SIGINT/SIGTERM handling without async-signal-unsafe code: the signals are blocked in every thread and one
// watcher thread takes them with sigwait, counts them and wakes waiters. Construct it first in main, before any
// other thread starts, so that every thread inherits the blocked mask. SIGPIPE is ignored (dead clients are
// handled through write errors).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace flashseek::server {

class SignalWatcher {
public:
    SignalWatcher();
    ~SignalWatcher();
    int count() const { return count_.load(); }   // signals received so far
    bool stop_requested() const { return count() > 0; }
    // Waits until at least `n` signals arrived or the timeout passed; returns whether they arrived.
    bool wait_for_count(int n, std::chrono::milliseconds timeout);

private:
    std::atomic<int> count_{0};
    std::atomic<bool> quit_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
};

}  // namespace flashseek::server
