// tiles_avx2_common.h — what the AVX2 register-blocked tiles share
// (float_tiles_avx2.cpp, legacy_tiles_avx2.cpp, kquants_tiles_avx2.cpp): the
// weight prefetch of mat-vec, and running a 4-row tile over more rows.
// Include after <immintrin.h>.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common.h"
#include "prefetch_x86.h"

// The tiles' second instruction choice where the CPU has it: AVX2 plus
// AVX-VNNI's VEX vpdpbusd (Alder Lake, Zen 5; picked at run time).
#define LP_TARGET_AVXVNNI __attribute__((target("avx2,fma,f16c,bmi2,popcnt,avxvnni")))

namespace lp {
namespace tiles_avx2 {

#if defined(LP_HAVE_AVX2)

// Element types of the panels' per-thread buffers (32-byte aligned, for the
// aligned loads; a std::vector of __m256 would drop the alignment).
struct alignas(32) bytes32 {
    uint8_t b[32];
};
struct alignas(32) floats8 {
    float f[8];
};

// Mat-vec runs a tile over 4 rows with one activation row. Four rows walked
// side by side defeat the hardware prefetchers (they follow one sequential
// stream, not four interleaved ones), so the tile prefetches the 4 rows'
// bytes itself as one linear stream, a fixed distance past the tile: the
// same idea as simd_x86.h's AVX-512 prefetch_start / prefetch_step. One row
// alone streams by itself and prefetches a little ahead of where it reads
// (prefetch_x86.h: the distances).
LP_TARGET_AVX2 LP_INLINE const char* prefetch_start(const uint8_t* w, size_t w_stride, int nr) {
    if (nr == 1) return reinterpret_cast<const char*>(w) + prefetch_x86::kStreamAhead;
    return reinterpret_cast<const char*>(w) + (size_t)nr * w_stride + prefetch_x86::kTileAhead;
}

// Prefetches `bytes` bytes at p (rounded up to cache lines) and advances p.
LP_TARGET_AVX2 LP_INLINE void prefetch_step(const char*& p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
    p += bytes;
}

// A gemm_tile_fn over nr weight rows (a panel's 16) in groups of 4, each
// group against all nc <= 4 columns: the panels' narrow calls (nc < 4), and a
// type's matvec_cols where its tile gives vec_dot's bits.
template <void (*Tile)(int64_t, const void*, size_t, const void*, size_t, float*, size_t, int, int)>
LP_TARGET_AVX2 void tiles_by_fours(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride,
                                   float* out, size_t out_stride, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    for (int r = 0; r < nr; r += 4)
        Tile(n, wb + (size_t)r * w_stride, w_stride, a, a_stride, out + r, out_stride, nr - r < 4 ? nr - r : 4, nc);
}

#endif  // LP_HAVE_AVX2

}  // namespace tiles_avx2
}  // namespace lp
