// Thread pool implementation: one job at a time, chunks handed out under a mutex (chunks are coarse, so the
// lock is not contended), the caller works too and then waits for the workers that took a chunk.
#include "cpu/thread_pool.h"

#include <algorithm>

namespace flashseek::cpu {

namespace {
thread_local bool t_inside_job = false;
}

ThreadPool::ThreadPool(int threads) {
    if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
    for (;;) {
        int64_t c;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (next_chunk_ >= n_chunks_) return;
            c = next_chunk_++;
        }
        const int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
        try {
            (*fn_)(b, e);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu_);
            if (!error_) error_ = std::current_exception();
            next_chunk_ = n_chunks_;  // abandon the remaining chunks
        }
    }
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    t_inside_job = true;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            ++active_;
        }
        run_chunks();
        {
            std::lock_guard<std::mutex> lock(mu_);
            --active_;
        }
        done_cv_.notify_all();
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
    if (n <= 0) return;
    min_chunk = std::max<int64_t>(1, min_chunk);
    const int64_t threads = size();
    if (t_inside_job || workers_.empty() || n <= min_chunk) {
        fn(0, n);
        return;
    }
    // About 4 chunks per thread balances uneven chunk costs without much locking.
    int64_t chunk = std::max(min_chunk, (n + threads * 4 - 1) / (threads * 4));
    {
        std::lock_guard<std::mutex> lock(mu_);
        fn_ = &fn;
        n_ = n;
        chunk_ = chunk;
        n_chunks_ = (n + chunk - 1) / chunk;
        next_chunk_ = 0;
        error_ = nullptr;
        ++generation_;
    }
    start_cv_.notify_all();
    t_inside_job = true;
    run_chunks();
    t_inside_job = false;
    std::exception_ptr err;
    {
        std::unique_lock<std::mutex> lock(mu_);
        // Every chunk is taken once the caller's run_chunks returns; wait for the workers still running one.
        // Workers that wake late find no chunk left and leave at once.
        done_cv_.wait(lock, [&] { return active_ == 0; });
        fn_ = nullptr;
        n_chunks_ = 0;
        err = error_;
        error_ = nullptr;
    }
    if (err) std::rethrow_exception(err);
}

}  // namespace flashseek::cpu
