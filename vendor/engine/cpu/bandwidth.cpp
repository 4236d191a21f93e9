// bandwidth.cpp — see bandwidth.h. The read loop is plain C++ over 64-byte
// chunks with several independent accumulators; compilers turn it into wide
// vector loads at -O3, and it is the same loop shape a kernel sees.
#include "bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "../common.h"
#include "features.h"

#if defined(LP_X86)
#include <immintrin.h>
#endif

namespace lp {

namespace {

uint64_t sum_scalar(const uint64_t* p, size_t n) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        a0 += p[i]; a1 += p[i + 1]; a2 += p[i + 2]; a3 += p[i + 3];
        a4 += p[i + 4]; a5 += p[i + 5]; a6 += p[i + 6]; a7 += p[i + 7];
    }
    return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

#if defined(LP_HAVE_AVX2)
LP_TARGET_AVX2 uint64_t sum_avx2(const uint64_t* p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i*)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i*)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i*)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i*)(p + i + 12)));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(s, 0) ^ (uint64_t)_mm256_extract_epi64(s, 3);
}
#endif

struct free_deleter { void operator()(void* p) const { std::free(p); } };

}  // namespace

double measure_read_bandwidth(size_t nbytes, int n_reps, thread_pool& pool) {
    nbytes = std::max<size_t>(nbytes, 1 << 20) & ~(size_t)4095;
    std::unique_ptr<uint64_t, free_deleter> buf((uint64_t*)std::aligned_alloc(4096, nbytes));
    if (!buf) throw value_error("cannot allocate the bandwidth probe buffer");
    const size_t n = nbytes / 8;
    const int nth = pool.n_threads();
    // First touch from the threads that will read (matters on NUMA machines).
    pool.run_on_all([&](int t, int nt) {
        const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        for (size_t i = lo; i < hi; ++i) buf.get()[i] = i;
    });
    std::vector<uint64_t> sink(nth);
    const bool use_avx2 = (int)best_isa() >= (int)isa::avx2;
    (void)use_avx2;
    std::vector<double> rates;
    for (int rep = 0; rep < std::max(1, n_reps); ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        pool.run_on_all([&](int t, int nt) {
            size_t lo = (n * t / nt) & ~(size_t)15, hi = (n * (t + 1) / nt) & ~(size_t)15;
            if (t == nt - 1) hi = n & ~(size_t)15;
#if defined(LP_HAVE_AVX2)
            if (use_avx2) { sink[t] += sum_avx2(buf.get() + lo, hi - lo); return; }
#endif
            sink[t] += sum_scalar(buf.get() + lo, hi - lo);
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rates.push_back((double)nbytes / s / 1e9);
    }
    volatile uint64_t keep = 0;
    for (uint64_t v : sink) keep = keep + v;
    (void)keep;
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}

}  // namespace lp
