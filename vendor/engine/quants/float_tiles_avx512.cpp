// float_tiles_avx512.cpp — the AVX-512 F32 and F16 products: vec_dot, the
// 4 × 4 tile (gemm_tile_fn) and the mat-mat panel (gemm_panel_fn) that
// BERT-style embedders and vision encoders (F32 / F16 weights) spend most of
// their time in.
//
// One order of arithmetic for every path: each (row, column) pair has one
// 16-lane accumulator that takes the FMAs of elements 0-15, 16-31, ... in
// order, the last partial vector zero-padded (masked loads), then one
// horizontal sum in hsum_f32x16's order. vec_dot is the 1 × 1 tile, mat-vec
// runs 4 × 1 tiles, the panel keeps the same per-pair order across its K
// blocks, so all three give the same bits (tests/test_matmul_batching.py).
//
// Why a panel: the 4 × 4 tile loaded 20 vectors per 16 FMAs (GCC folds each
// weight load into every FMA that uses it) and walked whole K-long rows, so
// it was load bound and its working set left L1 for K past a few hundred.
// The panel's register tile is 4 weight rows × 6 activation rows: 24
// accumulators, 6 activation vectors held, each weight vector loaded once for
// its 6 FMAs: 10 loads per 24 FMAs in 31 of the 32 zmm registers. K runs in
// blocks of kKc; per block the panel's weight rows (up to 64: 64 KB, from L2)
// and one 6-row activation group at a time (6 KB, L1) are copied (F32) or
// widened (F16, exact) into per-thread buffers, so the rows a tile reads lie
// 1 KB apart instead of a row stride apart (see gemm_panel_float_avx512 for
// why that matters), and partial accumulators wait in a per-thread buffer
// between blocks.
//
// Not here: BF16 and the conversions (float.cpp), the AVX2 level
// (float_tiles_avx2.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../common.h"
#include "../ggml_type.h"

#if defined(LP_X86)
// GCC 12 reports the placeholder inside its own _mm512_shuffle_f32x4 as
// uninitialised (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "simd_x86.h"

// Keeps a value in a register: GCC otherwise folds a vector's load into each
// FMA that uses it (a load per FMA). "v": any of the 32 zmm registers (the
// panel tile keeps 31 live). tests/cpp/avx512_emulated_check.cpp, which runs
// these kernels on emulated vectors, defines it away.
#ifndef LP_PIN_ZMM
#define LP_PIN_ZMM(x) __asm__("" : "+v"(x))
#endif

namespace lp {

#if defined(LP_HAVE_AVX512)

namespace {

// Sum of 16 lanes: y_j = v_j + v_{j+8}, z_j = y_j + y_{j+4},
// then (z0 + z2) + (z1 + z3). Spelled out (GCC's _mm512_reduce_add_ps uses
// this tree; other compilers need not) because reduce4 must match it.
LP_TARGET_AVX512 LP_INLINE float hsum_f32x16(__m512 v) {
    const __m256 y = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 z = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    const __m128 w = _mm_add_ps(z, _mm_movehl_ps(z, z));
    return _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w)));
}

// [hsum(v0), hsum(v1), hsum(v2), hsum(v3)], each in hsum_f32x16's order.
LP_TARGET_AVX512 LP_INLINE __m128 reduce4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
    // 128-bit quarters: s01 = [y(v0) | y(v1)], s23 = [y(v2) | y(v3)]
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
    // quarter i = z(v_i)
    const __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
    // per quarter: lanes 0, 1 = z0 + z2, z1 + z3; then lane 0 = their sum
    const __m512 w = _mm512_add_ps(z, _mm512_shuffle_ps(z, z, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512 h = _mm512_add_ps(w, _mm512_shuffle_ps(w, w, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), h));
}

// Row loads of the two element types, widened to F32 (exact).
struct f32_lanes {
    static constexpr int elem_bytes = 4;
    static LP_TARGET_AVX512 LP_INLINE __m512 load(const uint8_t* row, int64_t i) {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    static LP_TARGET_AVX512 LP_INLINE __m512 load_tail(const uint8_t* row, int64_t i, __mmask16 m) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
    }
};
struct f16_lanes {
    static constexpr int elem_bytes = 2;
    static LP_TARGET_AVX512 LP_INLINE __m512 load(const uint8_t* row, int64_t i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i)));
    }
    static LP_TARGET_AVX512 LP_INLINE __m512 load_tail(const uint8_t* row, int64_t i, __mmask16 m) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + i));
    }
};

LP_TARGET_AVX512 LP_INLINE __mmask16 first_lanes(int64_t cnt) { return (__mmask16)((1u << cnt) - 1); }

// ---------------------------------------------------------------------------
// vec_dot, mat-vec and the 4 × 4 tile: NR weight rows × NC activation rows
// over whole rows, one accumulator per pair.
template <class L, int NR, int NC>
LP_TARGET_AVX512 void float_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                                 size_t os) {
    __m512 acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    // Mat-vec (NC == 1) streams the weights: prefetch them as one linear
    // stream, as the quantized kernels do (simd_x86.h); 4 rows side by side
    // otherwise lose the hardware prefetchers.
    [[maybe_unused]] const char* pf = x86::prefetch_start(w, ws, NR);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if constexpr (NC == 1) x86::prefetch_step<NR * 16 * L::elem_bytes>(pf);
        __m512 wv[NR];
        for (int r = 0; r < NR; ++r) wv[r] = L::load(w + r * ws, i);
        for (int c = 0; c < NC; ++c) {
            const __m512 av = L::load(a + c * as, i);
            for (int r = 0; r < NR; ++r) acc[r][c] = _mm512_fmadd_ps(wv[r], av, acc[r][c]);
        }
    }
    if (i < n) {
        const __mmask16 m = first_lanes(n - i);
        __m512 wv[NR];
        for (int r = 0; r < NR; ++r) wv[r] = L::load_tail(w + r * ws, i, m);
        for (int c = 0; c < NC; ++c) {
            const __m512 av = L::load_tail(a + c * as, i, m);
            for (int r = 0; r < NR; ++r) acc[r][c] = _mm512_fmadd_ps(wv[r], av, acc[r][c]);
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = hsum_f32x16(acc[r][c]);
}

template <class L>
LP_TARGET_AVX512 void gemm_tile_float_avx512(int64_t n, const void* w, size_t ws, const void* a, size_t as,
                                             float* out, size_t os, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
#define LP_FLOAT_TILE(R, C) \
    case R * 8 + C: float_tile<L, R, C>(n, wb, ws, ab, as, out, os); return;
    switch (nr * 8 + nc) {
        LP_FLOAT_TILE(4, 4) LP_FLOAT_TILE(4, 3) LP_FLOAT_TILE(4, 2) LP_FLOAT_TILE(4, 1)
        LP_FLOAT_TILE(3, 4) LP_FLOAT_TILE(3, 3) LP_FLOAT_TILE(3, 2) LP_FLOAT_TILE(3, 1)
        LP_FLOAT_TILE(2, 4) LP_FLOAT_TILE(2, 3) LP_FLOAT_TILE(2, 2) LP_FLOAT_TILE(2, 1)
        LP_FLOAT_TILE(1, 4) LP_FLOAT_TILE(1, 3) LP_FLOAT_TILE(1, 2) LP_FLOAT_TILE(1, 1)
        default: return;
    }
#undef LP_FLOAT_TILE
}

template <class L>
LP_TARGET_AVX512 void vec_dot_float_avx512(int64_t n, float* out, const void* w_row, const void* a_row) {
    float_tile<L, 1, 1>(n, static_cast<const uint8_t*>(w_row), 0, static_cast<const uint8_t*>(a_row), 0, out, 0);
}

// ---------------------------------------------------------------------------
// Mat-mat panels: up to kFloatPanelRows weight rows × kPanelCols activation
// rows per call (the driver gives these types taller panels than the
// quantized ones: type_traits::panel_rows). A call copies (F32) or widens
// (F16) every activation block it uses once, so the rows per call are what
// that work is shared by: at 16 rows the F16 widening took 17% of the time.
constexpr int64_t kKc = 256;
constexpr int kTileRows = 4, kTileCols = 6;
constexpr int kFloatPanelRows = 64;
static_assert(kFloatPanelRows % kPanelRows == 0, "panel_rows is a multiple of kPanelRows");
constexpr int kRowGroups = kFloatPanelRows / kTileRows;
constexpr int kColGroups = (kPanelCols + kTileCols - 1) / kTileCols;
constexpr size_t kTilePart = (size_t)kTileRows * kTileCols * 16;  // floats of one tile's accumulators

// NR (<= 4) F32 weight rows w (stride wsf floats) × NC (<= 6) F32 activation
// rows a (stride asf floats), len elements from the block's start: the
// accumulators start at zero (first) or from part ([c][r] 16-lane vectors),
// and end in part or, at the row's last block (last: its zero-padded tail
// included), summed into out[c · os + r].
template <int NR, int NC>
LP_TARGET_AVX512 void panel_tile(int64_t len, bool first, bool last, const float* w, size_t wsf, const float* a,
                                 size_t asf, float* part, float* out, size_t os) {
    __m512 acc[NR][NC];
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r)
            acc[r][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + (c * kTileRows + r) * 16);
    int64_t k = 0;
    for (; k + 16 <= len; k += 16) {
        __m512 av[NC];
        for (int c = 0; c < NC; ++c) {
            av[c] = _mm512_loadu_ps(a + c * asf + k);
            LP_PIN_ZMM(av[c]);
        }
        for (int r = 0; r < NR; ++r) {
            __m512 wv = _mm512_loadu_ps(w + r * wsf + k);
            LP_PIN_ZMM(wv);  // one load per weight vector, not one folded into each FMA
            for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(wv, av[c], acc[r][c]);
        }
    }
    if (k < len) {  // the row's tail (only in its last block)
        const __mmask16 m = first_lanes(len - k);
        __m512 av[NC];
        for (int c = 0; c < NC; ++c) av[c] = _mm512_maskz_loadu_ps(m, a + c * asf + k);
        for (int r = 0; r < NR; ++r) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, w + r * wsf + k);
            for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(wv, av[c], acc[r][c]);
        }
    }
    if (!last) {
        for (int c = 0; c < NC; ++c)
            for (int r = 0; r < NR; ++r) _mm512_storeu_ps(part + (c * kTileRows + r) * 16, acc[r][c]);
        return;
    }
    for (int c = 0; c < NC; ++c) {
        if constexpr (NR == 4) {
            _mm_storeu_ps(out + (size_t)c * os, reduce4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
        } else {
            for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = hsum_f32x16(acc[r][c]);
        }
    }
}

using panel_tile_fn = void (*)(int64_t, bool, bool, const float*, size_t, const float*, size_t, float*, float*,
                               size_t);

template <int NR>
struct tile_row {
    static constexpr panel_tile_fn fns[kTileCols] = {panel_tile<NR, 1>, panel_tile<NR, 2>, panel_tile<NR, 3>,
                                                     panel_tile<NR, 4>, panel_tile<NR, 5>, panel_tile<NR, 6>};
};
// [NR - 1][NC - 1]
constexpr const panel_tile_fn* kPanelTiles[kTileRows] = {tile_row<1>::fns, tile_row<2>::fns, tile_row<3>::fns,
                                                         tile_row<4>::fns};

// len elements of n_rows rows (src stride bytes, from element i0) widened to
// F32 (F16) or copied (F32) to dst (stride kKc floats); the partial last
// vector zero-padded.
template <class L>
LP_TARGET_AVX512 void widen_block(const uint8_t* src, size_t stride, int n_rows, int64_t i0, int64_t len,
                                  float* dst) {
    for (int r = 0; r < n_rows; ++r) {
        const uint8_t* row = src + r * stride;
        int64_t k = 0;
        for (; k + 16 <= len; k += 16) _mm512_storeu_ps(dst + r * kKc + k, L::load(row, i0 + k));
        if (k < len) _mm512_storeu_ps(dst + r * kKc + k, L::load_tail(row, i0 + k, first_lanes(len - k)));
    }
}

// Per-thread buffers of a panel: the partial accumulators of every tile
// (K past one block), one block of the weight rows and of one activation
// group as F32.
struct panel_scratch {
    std::vector<float> part, rows, acts;
};

// Both operands are copied block by block into these buffers, F32 too: read
// in place, a tile's 10 rows lie a row stride apart, which for the usual
// power-of-two widths (2048 floats = 8 KB) puts the same offset of all ten in
// one L1 set; eight ways cannot hold them (perf: the loop stalled on its
// loads), and on a Zen 4 the F32 panel ran at 44% of the FMA peak where the
// packed F16 panel ran at 50% (Llama-1B shapes, batch 512; F32 48-52% after).
template <class L>
LP_TARGET_AVX512 void gemm_panel_float_avx512(int64_t n, const void* w_, size_t ws, int nr, const void* a_,
                                              size_t as, int nc, float* out, size_t os) {
    const auto* w = static_cast<const uint8_t*>(w_);
    const auto* a = static_cast<const uint8_t*>(a_);
    if (nc == 1) {  // mat-vec: stream the rows (float_tile's prefetch), 4 at a time
        for (int r = 0; r < nr; r += 4)
            gemm_tile_float_avx512<L>(n, w + r * ws, ws, a, as, out + r, os, std::min(4, nr - r), 1);
        return;
    }
    static thread_local panel_scratch s;
    if (n > kKc) s.part.resize((size_t)kColGroups * kRowGroups * kTilePart);
    s.rows.resize((size_t)kFloatPanelRows * kKc);
    s.acts.resize((size_t)kTileCols * kKc);
    for (int64_t i0 = 0; i0 < n; i0 += kKc) {
        const int64_t len = std::min(kKc, n - i0);
        const bool first = i0 == 0, last = i0 + len == n;
        widen_block<L>(w, ws, nr, i0, len, s.rows.data());
        const float* wf = s.rows.data();
        for (int c = 0, g = 0; c < nc; c += kTileCols, ++g) {
            const int ncg = std::min(kTileCols, nc - c);
            widen_block<L>(a + c * as, as, ncg, i0, len, s.acts.data());
            for (int r = 0; r < nr; r += kTileRows) {
                const int nrg = std::min(kTileRows, nr - r);
                float* part = s.part.empty() ? nullptr : s.part.data() + ((size_t)g * kRowGroups + r / kTileRows) * kTilePart;
                kPanelTiles[nrg - 1][ncg - 1](len, first, last, wf + r * kKc, (size_t)kKc, s.acts.data(), (size_t)kKc,
                                              part, out + c * os + r, os);
            }
        }
    }
}

}  // namespace

void register_float_tiles_avx512(type_traits* table, isa level) {
    if (level != isa::avx512) return;
    type_traits& f32 = table[(int)ggml_type::F32];
    type_traits& f16 = table[(int)ggml_type::F16];
    f32.vec_dot = vec_dot_float_avx512<f32_lanes>;
    f32.gemm_tile = gemm_tile_float_avx512<f32_lanes>;
    f32.gemm_panel = gemm_panel_float_avx512<f32_lanes>;
    f16.vec_dot = vec_dot_float_avx512<f16_lanes>;
    f16.gemm_tile = gemm_tile_float_avx512<f16_lanes>;
    f16.gemm_panel = gemm_panel_float_avx512<f16_lanes>;
    f32.panel_rows = f16.panel_rows = kFloatPanelRows;
}

#else

void register_float_tiles_avx512(type_traits*, isa) {}

#endif  // LP_HAVE_AVX512

}  // namespace lp
