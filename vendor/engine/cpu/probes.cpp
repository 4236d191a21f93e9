// probes.cpp — see probes.h. The read loop is plain C++ over 64-byte
// chunks with several independent accumulators; compilers turn it into wide
// vector loads at -O3, and it is the same loop shape a kernel sees.
#include "probes.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../common.h"
#include "../huge_pages.h"
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


}  // namespace

double measure_read_bandwidth(size_t nbytes, int n_reps, thread_pool& pool) {
    nbytes = std::max<size_t>(nbytes, 1 << 20) & ~(size_t)4095;
    // In 2 MiB pages where the kernel gives them, as the weights are mapped
    // by default (huge_pages.h): the probe is the ceiling generation is
    // measured against, so it reads the way the machine reads fastest.
    struct huge_deleter {
        size_t n;
        void operator()(uint64_t* p) const { unmap_huge(p, n); }
    };
    std::unique_ptr<uint64_t, huge_deleter> buf((uint64_t*)alloc_huge_advised(nbytes), huge_deleter{nbytes});
    if (!buf) throw value_error("cannot allocate the bandwidth probe buffer");
    const size_t n = nbytes / 8;
    const int nth = pool.n_threads();
    // First touch from the threads that will read (matters on NUMA machines).
    pool.run_on_all([&](int t, int nt) {
        const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        for (size_t i = lo; i < hi; ++i) buf.get()[i] = i;
    });
    std::vector<uint64_t> sink(nth);
    const bool use_avx2 = isa_at_least(best_isa(), isa::avx2);
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

namespace {

// Each function runs `iters` rounds of 12 independent vector operations and
// returns a value that depends on all of them (so nothing is optimised away).
float fma_scalar(int64_t iters) {
    float a[12];
    for (int i = 0; i < 12; ++i) a[i] = 1.0f + i * 1e-7f;
    const float m = 0.999999f, c = 1e-7f;
    for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 12; ++i) a[i] = a[i] * m + c;
    float s = 0;
    for (float v : a) s += v;
    return s;
}

#if defined(LP_HAVE_AVX2)
LP_TARGET_AVX2 float fma_avx2(int64_t iters) {
    __m256 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-7f);
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
    return _mm256_cvtss_f32(s);
}
LP_TARGET_AVX2 float dot_avx2(int64_t iters) {
    __m256i a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_epi32(i);
    const __m256i u = _mm256_set1_epi8(3), v = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
    for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 12; ++i) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), one));
    __m256i s = a[0];
    for (int i = 1; i < 12; ++i) s = _mm256_add_epi32(s, a[i]);
    return (float)_mm256_extract_epi32(s, 0);
}
#endif

#if defined(LP_HAVE_AVX512)
LP_TARGET_AVX512 float fma_avx512(int64_t iters) {
    __m512 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + i * 1e-7f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
LP_TARGET_AVX512 float dot_avx512(int64_t iters) {
    __m512i a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
    const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
    for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], u, v);
    __m512i s = a[0];
    for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, a[i]);
    return (float)_mm512_reduce_add_epi32(s);
}
#endif

}  // namespace

double measure_peak_gflops(const char* kind, thread_pool& pool) {
    const std::string k(kind);
    if (k != "f32_fma" && k != "i8_dot") throw value_error("peak kind must be 'f32_fma' or 'i8_dot'");
    const isa level = best_isa();
    double ops_per_iter = 12 * 2;  // scalar FMA: 12 multiply-adds
    float (*fn)(int64_t) = fma_scalar;
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level, isa::avx2)) {
        fn = k == "f32_fma" ? fma_avx2 : dot_avx2;
        ops_per_iter = k == "f32_fma" ? 12 * 8 * 2 : 12 * 32 * 2;
    }
#endif
#if defined(LP_HAVE_AVX512)
    if (isa_at_least(level, isa::avx512)) {
        fn = k == "f32_fma" ? fma_avx512 : dot_avx512;
        ops_per_iter = k == "f32_fma" ? 12 * 16 * 2 : 12 * 64 * 2;
    }
#endif
    if (k == "i8_dot" && !isa_at_least(level, isa::avx2)) throw value_error("no integer dot probe for this kernel level");
    const int64_t iters = 20 * 1000 * 1000;
    std::vector<double> rates;
    std::vector<float> sink(pool.n_threads());
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        pool.run_on_all([&](int t, int) { sink[t] += fn(iters); });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rates.push_back(ops_per_iter * (double)iters * pool.n_threads() / s / 1e9);
    }
    volatile float keep = 0;
    for (float v : sink) keep = keep + v;
    (void)keep;
    std::sort(rates.begin(), rates.end());
    return rates.back();
}

}  // namespace lp
