// One thread that runs jobs one at a time for callers that will wait only so long: a job that has not started within
// the caller's queue wait is handed back unrun (the worker is busy), and a caller whose job runs past its run limit
// stops waiting for it. A running job cannot be interrupted: it runs on to its end on the worker, its result
// dropped, while later jobs wait behind it. So at most one abandoned job burns CPU at any time, and nobody waits
// longer than queue wait + run limit. The grammar compiler (runtime/grammar.h) compiles through one of these, because
// the grammar engine's compile time can grow far faster than the constraint's size and has no cancellation.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

namespace flashseek::runtime {

class DeadlineWorker {
public:
    enum class Outcome {
        Done,        // the job ran to its end within the limits (an exception it threw is rethrown by run)
        NotStarted,  // the queue was full, or the job did not start within the queue wait (it never runs)
        Overran,     // the job started but was still running at its run limit (it finishes on its own, unseen)
    };

    // max_pending: jobs that may wait in the queue at once; a caller beyond that gets NotStarted at once.
    explicit DeadlineWorker(size_t max_pending);
    // Pending jobs are withdrawn. The thread is detached and shares its state with us, so it may still finish the
    // job it is inside (an overrun one) after we are gone, then ends.
    ~DeadlineWorker();
    DeadlineWorker(const DeadlineWorker&) = delete;
    DeadlineWorker& operator=(const DeadlineWorker&) = delete;

    // Thread-safe; blocks the caller for at most queue_wait + run_limit.
    Outcome run(std::function<void()> job, std::chrono::nanoseconds queue_wait, std::chrono::nanoseconds run_limit);

    // Whether the thread is inside a job now (one whose caller may have stopped waiting).
    bool busy() const;
    // Jobs waiting to start.
    size_t pending() const;

private:
    struct Shared;
    std::shared_ptr<Shared> shared_;
};

}  // namespace flashseek::runtime
