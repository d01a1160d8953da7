// SignalWatcher (see signals.h). SIGUSR1 is used internally to wake the sigwait thread at destruction.
#include "server/signals.h"

#include <pthread.h>
#include <signal.h>

#include <csignal>

namespace flashseek::server {

namespace {
sigset_t watched_set() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    return set;
}
}  // namespace

SignalWatcher::SignalWatcher() {
    std::signal(SIGPIPE, SIG_IGN);
    sigset_t set = watched_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    thread_ = std::thread([this] {
        sigset_t s = watched_set();
        while (true) {
            int sig = 0;
            if (sigwait(&s, &sig) != 0) continue;
            if (quit_.load()) return;
            if (sig == SIGUSR1) continue;
            {
                std::lock_guard lock(mu_);
                ++count_;
            }
            cv_.notify_all();
        }
    });
}

SignalWatcher::~SignalWatcher() {
    quit_ = true;
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
}

bool SignalWatcher::wait_for_count(int n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return count_.load() >= n; });
}

}  // namespace flashseek::server
