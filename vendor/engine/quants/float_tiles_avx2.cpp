// float_tiles_avx2.cpp — the AVX2 F32 and F16 dot products as register-
// blocked tiles (gemm_tile_fn): the mat-mat of F32 / F16 models (BERT-style
// embedders are stored that way) ran one vec_dot per (row, column), which is
// load bound — two loads per FMA. A tile loads each weight vector once for
// all its columns and each activation vector once for all its rows.
//
// Every (row, column) pair has one 8-lane accumulator that takes the FMAs of
// elements 0-7, 8-15, ... in order, the last partial vector zero-padded
// (masked loads), then one horizontal sum. vec_dot is the 1 × 1 tile, so
// vec_dot, mat-vec (the driver's 4 × 1 tiles) and mat-mat give the same bits.
// (float.cpp's former AVX2 vec_dot kept 4 accumulators per product: no room
// for that in a tile's 16 registers.)
//
// Shape: the driver asks for up to 4 × 4; that is run as 4 rows × 2 columns
// twice: 8 accumulators (enough independent chains to hide the FMA latency on
// two FMA ports), 4 weight vectors and 1 activation vector fit the 16 ymm
// registers; 6 loads per 8 FMAs keep it FMA bound.
#include <cstddef>
#include <cstdint>

#include "../common.h"
#include "../ggml_type.h"

#if defined(LP_X86)
#include <immintrin.h>
#endif

#include "simd_x86.h"
#include "tiles_avx2_common.h"

namespace lp {

#if defined(LP_HAVE_AVX2)

namespace {

struct f32_avx2 {
    static constexpr size_t elem = 4;
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    // the cnt (< 8) elements from i, zeros after; live: lanes < cnt
    LP_TARGET_AVX2 static LP_INLINE __m256 load_tail(const uint8_t* row, int64_t i, int, __m256i live) {
        return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + i, live);
    }
};

struct f16_avx2 {
    static constexpr size_t elem = 2;
    LP_TARGET_AVX2 static LP_INLINE __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i)));
    }
    // no 16-bit masked load in AVX2: the tail goes through a zeroed buffer
    LP_TARGET_AVX2 static LP_INLINE __m256 load_tail(const uint8_t* row, int64_t i, int cnt, __m256i) {
        alignas(16) uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const auto* h = reinterpret_cast<const uint16_t*>(row) + i;
        for (int k = 0; k < cnt; ++k) buf[k] = h[k];
        return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
    }
};

template <class L, int NR, int NC>
LP_TARGET_AVX2 void float_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                               size_t os) {
    __m256 acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    // Mat-vec streams the weights: one linear prefetch stream for the NR rows
    // (tiles_avx2_common.h).
    [[maybe_unused]] const char* pf = tiles_avx2::prefetch_start(w, ws, NR);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if constexpr (NC == 1) tiles_avx2::prefetch_step(pf, NR * 8 * L::elem);
        __m256 wv[NR];
        for (int r = 0; r < NR; ++r) {
            wv[r] = L::load(w + r * ws, i);
            // Keep the weights in registers: GCC otherwise folds each
            // weight load into every column's FMA (10 loads per 8 FMAs, load
            // bound on 2-load-per-cycle cores such as Zen 3; 6 this way).
            __asm__("" : "+x"(wv[r]));
        }
        for (int c = 0; c < NC; ++c) {
            const __m256 av = L::load(a + c * as, i);
            for (int r = 0; r < NR; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], av, acc[r][c]);
        }
    }
    if (i < n) {
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const int cnt = (int)(n - i);
        __m256 wv[NR];
        for (int r = 0; r < NR; ++r) wv[r] = L::load_tail(w + r * ws, i, cnt, live);
        for (int c = 0; c < NC; ++c) {
            const __m256 av = L::load_tail(a + c * as, i, cnt, live);
            for (int r = 0; r < NR; ++r) acc[r][c] = _mm256_fmadd_ps(wv[r], av, acc[r][c]);
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = x86::hsum_f32x8(acc[r][c]);
}

template <class L, int NR>
LP_TARGET_AVX2 void float_rows(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                               size_t os, int nc) {
    int c = 0;
    for (; c + 2 <= nc; c += 2) float_tile<L, NR, 2>(n, w, ws, a + c * as, as, out + c * os, os);
    if (c < nc) float_tile<L, NR, 1>(n, w, ws, a + c * as, as, out + c * os, os);
}

template <class L>
LP_TARGET_AVX2 void gemm_tile_float_avx2(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out,
                                         size_t os, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    switch (nr) {
        case 4: float_rows<L, 4>(n, wb, ws, ab, as, out, os, nc); return;
        case 3: float_rows<L, 3>(n, wb, ws, ab, as, out, os, nc); return;
        case 2: float_rows<L, 2>(n, wb, ws, ab, as, out, os, nc); return;
        case 1: float_rows<L, 1>(n, wb, ws, ab, as, out, os, nc); return;
        default: return;
    }
}

template <class L>
LP_TARGET_AVX2 void vec_dot_float_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    float_tile<L, 1, 1>(n, static_cast<const uint8_t*>(w_row), 0, static_cast<const uint8_t*>(a_row), 0, out, 0);
}

}  // namespace

void register_float_tiles_avx2(type_traits* table, isa level) {
    if (level != isa::avx2) return;
    type_traits& f32 = table[(int)ggml_type::F32];
    type_traits& f16 = table[(int)ggml_type::F16];
    f32.vec_dot = vec_dot_float_avx2<f32_avx2>;
    f32.gemm_tile = gemm_tile_float_avx2<f32_avx2>;
    f16.vec_dot = vec_dot_float_avx2<f16_avx2>;
    f16.gemm_tile = gemm_tile_float_avx2<f16_avx2>;
}

#else

void register_float_tiles_avx2(type_traits*, isa) {}

#endif  // LP_HAVE_AVX2

}  // namespace lp
