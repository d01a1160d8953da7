// DeadlineWorker (runtime/deadline_worker.h), the one-at-a-time runner behind the grammar compile time limit. Jobs
// block on promises the test releases, so every outcome is decided by the job's state, not by how fast this machine
// is: a blocked job always overruns its limit, a job queued behind it never starts within its wait.
#include <gtest/gtest.h>

#include <future>
#include <stdexcept>
#include <thread>

#include "runtime/deadline_worker.h"

using flashseek::runtime::DeadlineWorker;
using namespace std::chrono_literals;

namespace {

// A job that reports when it starts and then waits for the test to release it.
struct BlockingJob {
    std::promise<void> started;
    std::promise<void> release;
    std::shared_future<void> released{release.get_future().share()};

    std::function<void()> body() {
        return [this, released = released] {
            started.set_value();
            released.wait();
        };
    }
};

}  // namespace

TEST(DeadlineWorker, RunsJobsAndRethrowsTheirErrors) {
    DeadlineWorker worker(4);
    int ran = 0;
    EXPECT_EQ(worker.run([&] { ++ran; }, 60s, 60s), DeadlineWorker::Outcome::Done);
    EXPECT_EQ(worker.run([&] { ++ran; }, 60s, 60s), DeadlineWorker::Outcome::Done);
    EXPECT_EQ(ran, 2);
    EXPECT_THROW(worker.run([] { throw std::runtime_error("bad constraint"); }, 60s, 60s), std::runtime_error);
    EXPECT_FALSE(worker.busy());
}

TEST(DeadlineWorker, OverrunJobFinishesAloneWhileLaterJobsWaitOrAreTurnedAway) {
    DeadlineWorker worker(1);
    BlockingJob slow;
    std::future<void> slow_started = slow.started.get_future();
    EXPECT_EQ(worker.run(slow.body(), 60s, 10ms), DeadlineWorker::Outcome::Overran);
    slow_started.wait();
    EXPECT_TRUE(worker.busy());

    // Behind the overrun job: a short queue wait ends unrun, and the job never runs later.
    bool ran_late = false;
    EXPECT_EQ(worker.run([&] { ran_late = true; }, 10ms, 60s), DeadlineWorker::Outcome::NotStarted);

    // One job may wait (max_pending 1); a caller beyond that is turned away and its job never runs.
    bool patient_ran = false;
    std::thread patient([&] {
        EXPECT_EQ(worker.run([&] { patient_ran = true; }, 60s, 60s), DeadlineWorker::Outcome::Done);
    });
    while (worker.pending() == 0) std::this_thread::sleep_for(1ms);
    bool extra_ran = false;
    EXPECT_EQ(worker.run([&] { extra_ran = true; }, 60s, 60s), DeadlineWorker::Outcome::NotStarted);

    slow.release.set_value();  // the overrun job ends; the queued one runs
    patient.join();
    EXPECT_TRUE(patient_ran);
    EXPECT_FALSE(ran_late);
    EXPECT_FALSE(extra_ran);
    EXPECT_EQ(worker.run([] {}, 60s, 60s), DeadlineWorker::Outcome::Done);
}

TEST(DeadlineWorker, DestroyedWhileAJobRunsLetsItFinish) {
    BlockingJob slow;
    std::future<void> slow_started = slow.started.get_future();
    auto finished = std::make_shared<std::promise<void>>();
    std::future<void> done = finished->get_future();
    {
        DeadlineWorker worker(2);
        EXPECT_EQ(worker.run(
                      [&slow, finished, released = slow.released] {
                          slow.started.set_value();
                          released.wait();
                          finished->set_value();
                      },
                      60s, 1ms),
                  DeadlineWorker::Outcome::Overran);
        slow_started.wait();
    }  // the owner is gone; its thread is still inside the job
    slow.release.set_value();
    EXPECT_EQ(done.wait_for(60s), std::future_status::ready);
}
