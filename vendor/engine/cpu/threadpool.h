// threadpool.h — a small persistent thread pool for the CPU kernels.
// parallel_for(n_tasks, fn) runs fn(task, thread_index) for every task on the
// calling thread plus n_threads-1 workers, and returns when all are done.
// Workers spin briefly before sleeping, so back-to-back calls during token
// generation (hundreds per token) do not pay a futex wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lp {

class thread_pool {
public:
    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int n_threads() const { return n_threads_; }

    // Runs fn(task, thread) for task in [0, n_tasks). Tasks are claimed
    // dynamically. Not re-entrant; one caller at a time (guarded by a mutex).
    void parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn);

    // Runs fn(thread, n_threads) once on every thread (static partitioning).
    void run_on_all(const std::function<void(int, int)>& fn);

private:
    void worker_main(int index);
    void run_job(int index);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex call_mutex_;            // serialises callers
    std::mutex wake_mutex_;
    std::condition_variable wake_cv_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> n_active_{0};     // workers still in the current job
    std::atomic<int64_t> next_task_{0};
    std::atomic<bool> stop_{false};
    int64_t n_tasks_ = 0;
    const std::function<void(int64_t, int)>* task_fn_ = nullptr;
    const std::function<void(int, int)>* all_fn_ = nullptr;
};

}  // namespace lp
