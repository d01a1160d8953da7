// One long-lived thread that runs submitted jobs in order and hands back a shared_future per job. The scheduler uses
// it to fill grammar masks while the backend runs the forward pass, without creating a thread per step.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace flashseek {

class BackgroundWorker {
public:
    BackgroundWorker() : thread_([this] { run(); }) {}
    ~BackgroundWorker() {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    BackgroundWorker(const BackgroundWorker&) = delete;
    BackgroundWorker& operator=(const BackgroundWorker&) = delete;

    // Queues a job; the future is ready when it has run (it carries the job's exception, if any).
    std::shared_future<void> submit(std::function<void()> job) {
        std::packaged_task<void()> task(std::move(job));
        std::shared_future<void> done = task.get_future().share();
        {
            std::lock_guard lock(mu_);
            jobs_.push_back(std::move(task));
        }
        cv_.notify_one();
        return done;
    }

private:
    void run() {
        while (true) {
            std::packaged_task<void()> task;
            {
                std::unique_lock lock(mu_);
                cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
                if (jobs_.empty()) return;  // stop_ and nothing left
                task = std::move(jobs_.front());
                jobs_.pop_front();
            }
            task();
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::packaged_task<void()>> jobs_;
    bool stop_ = false;
    std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace flashseek
