// DeadlineWorker (see deadline_worker.h). Everything the thread touches lives in Shared, held by the thread and by
// the owner, so a thread detached inside a long job outlives its owner safely. Every job state change happens under
// the one mutex, which also orders the job's own writes (its result) before a caller that saw it finish.
#include "runtime/deadline_worker.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace flashseek::runtime {

namespace {

enum class JobState { Queued, Running, Finished, Withdrawn };

struct Job {
    std::function<void()> body;
    JobState state = JobState::Queued;
    std::exception_ptr error;
};

}  // namespace

struct DeadlineWorker::Shared {
    std::mutex mu;
    std::condition_variable work;     // the thread waits for jobs (and for stop)
    std::condition_variable changed;  // callers wait for their job's state
    std::deque<std::shared_ptr<Job>> queue;
    bool stop = false;
    bool busy = false;  // the thread is inside a job
    size_t max_pending = 0;

    void serve() {
        std::unique_lock lock(mu);
        while (true) {
            work.wait(lock, [&] { return stop || !queue.empty(); });
            if (stop) return;
            std::shared_ptr<Job> job = std::move(queue.front());
            queue.pop_front();
            job->state = JobState::Running;
            busy = true;
            changed.notify_all();
            lock.unlock();
            std::exception_ptr error;
            try {
                job->body();
            } catch (...) {
                error = std::current_exception();
            }
            lock.lock();
            job->body = nullptr;  // what it captured goes now, not with the caller's last reference
            job->error = error;
            job->state = JobState::Finished;
            busy = false;
            changed.notify_all();
        }
    }
};

DeadlineWorker::DeadlineWorker(size_t max_pending) : shared_(std::make_shared<Shared>()) {
    shared_->max_pending = max_pending;
    std::thread([shared = shared_] { shared->serve(); }).detach();
}

DeadlineWorker::~DeadlineWorker() {
    // The thread holds its own reference to Shared and leaves its loop at the next check of `stop`: at once when
    // idle, after its current job otherwise. Pending jobs never run; their callers have returned or see Withdrawn.
    std::lock_guard lock(shared_->mu);
    shared_->stop = true;
    for (auto& job : shared_->queue) job->state = JobState::Withdrawn;
    shared_->queue.clear();
    shared_->work.notify_all();
    shared_->changed.notify_all();
}

DeadlineWorker::Outcome DeadlineWorker::run(std::function<void()> body, std::chrono::nanoseconds queue_wait,
                                            std::chrono::nanoseconds run_limit) {
    Shared& s = *shared_;
    auto job = std::make_shared<Job>();
    job->body = std::move(body);
    std::unique_lock lock(s.mu);
    if (s.stop || s.queue.size() >= s.max_pending) return Outcome::NotStarted;
    s.queue.push_back(job);
    s.work.notify_one();

    const auto queued_until = std::chrono::steady_clock::now() + queue_wait;
    if (!s.changed.wait_until(lock, queued_until, [&] { return job->state != JobState::Queued; })) {
        // Still queued: take it back so it never runs.
        for (auto it = s.queue.begin(); it != s.queue.end(); ++it)
            if (*it == job) {
                s.queue.erase(it);
                break;
            }
        return Outcome::NotStarted;
    }
    if (job->state == JobState::Withdrawn) return Outcome::NotStarted;

    const auto run_until = std::chrono::steady_clock::now() + run_limit;
    if (!s.changed.wait_until(lock, run_until, [&] { return job->state == JobState::Finished; }))
        return Outcome::Overran;
    if (job->error) std::rethrow_exception(job->error);
    return Outcome::Done;
}

bool DeadlineWorker::busy() const {
    std::lock_guard lock(shared_->mu);
    return shared_->busy;
}

size_t DeadlineWorker::pending() const {
    std::lock_guard lock(shared_->mu);
    return shared_->queue.size();
}

}  // namespace flashseek::runtime
