// A small persistent thread pool for the CPU reference: parallel_for splits [0, n) into contiguous chunks that
// the caller and the workers take in turn. Workers persist because a decode step issues thousands of short
// loops; spawning threads per loop would cost more than the work.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flashseek::cpu {

class ThreadPool {
public:
    // threads = total threads including the caller; 0 = hardware concurrency.
    explicit ThreadPool(int threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return int(workers_.size()) + 1; }

    // Calls fn(begin, end) on disjoint chunks covering [0, n), each at least min_chunk long (except the last).
    // Returns when all chunks are done; the first exception thrown by fn is rethrown here. Calls made from inside
    // a chunk run serially (no nested parallelism).
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

private:
    void worker_loop();
    void run_chunks();

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    uint64_t generation_ = 0;
    bool stop_ = false;
    // the current job
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0, chunk_ = 1, n_chunks_ = 0;
    int64_t next_chunk_ = 0;  // guarded by mu_
    int active_ = 0;          // workers still inside the current job
    std::exception_ptr error_;
};

// Runs fn over [0, n) on pool (serially when pool is null).
inline void parallel_for(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                         int64_t min_chunk = 1) {
    if (pool) {
        pool->parallel_for(n, fn, min_chunk);
    } else if (n > 0) {
        fn(0, n);
    }
}

}  // namespace flashseek::cpu
