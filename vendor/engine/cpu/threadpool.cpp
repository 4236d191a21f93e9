// threadpool.cpp — see threadpool.h.
#include "threadpool.h"

#include <chrono>

#include <sched.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define LP_CPU_RELAX() _mm_pause()
#else
#define LP_CPU_RELAX() ((void)0)
#endif

namespace lp {

namespace {
// Waits for a flag while being polite to an oversubscribed machine: pause
// instructions first (the common case: the other thread is running and
// finishes within microseconds), then sched_yield so a descheduled worker we
// are waiting for can get the core back.
template <class Pred>
void spin_until(Pred done) {
    for (int i = 0; !done(); ++i) {
        if (i < 2048) LP_CPU_RELAX();
        else sched_yield();
    }
}

// How long an idle worker spins on the generation counter before sleeping.
// Token generation issues a new job every few microseconds; a sleep/wake
// round trip costs tens of microseconds, so spin for a while first.
constexpr auto kSpin = std::chrono::microseconds(2000);
}  // namespace

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    workers_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(wake_mutex_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    wake_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::run_job(int index) {
    if (all_fn_) {
        (*all_fn_)(index, n_threads_);
        return;
    }
    for (;;) {
        const int64_t t = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (t >= n_tasks_) break;
        (*task_fn_)(t, index);
    }
}

void thread_pool::worker_main(int index) {
    uint64_t seen = 0;
    for (;;) {
        // Spin, then sleep, until a new generation is published.
        auto start = std::chrono::steady_clock::now();
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen) {
            LP_CPU_RELAX();
            if ((spins & 255) == 255) sched_yield();
            if (++spins == 1024) {
                spins = 0;
                if (std::chrono::steady_clock::now() - start > kSpin) {
                    std::unique_lock<std::mutex> lock(wake_mutex_);
                    wake_cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
                    break;
                }
            }
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        run_job(index);
        n_active_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void thread_pool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
    if (n_tasks <= 0) return;
    std::lock_guard<std::mutex> call_lock(call_mutex_);
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
        return;
    }
    task_fn_ = &fn;
    all_fn_ = nullptr;
    n_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    n_active_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(wake_mutex_);
        generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    wake_cv_.notify_all();
    run_job(0);
    spin_until([&] { return n_active_.load(std::memory_order_acquire) == 0; });
    task_fn_ = nullptr;
}

void thread_pool::run_on_all(const std::function<void(int, int)>& fn) {
    std::lock_guard<std::mutex> call_lock(call_mutex_);
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    all_fn_ = &fn;
    task_fn_ = nullptr;
    n_active_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(wake_mutex_);
        generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    wake_cv_.notify_all();
    run_job(0);
    spin_until([&] { return n_active_.load(std::memory_order_acquire) == 0; });
    all_fn_ = nullptr;
}

}  // namespace lp
