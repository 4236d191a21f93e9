// float_tiles_avx512.cpp — the AVX-512 F32 and F16 products: vec_dot, the
// 4 × 4 tile (gemm_tile_fn, mat-vec's 4 × 1) and the packed mat-mat
// (gemm_packed_fn) that BERT-style embedders and vision encoders (F32 / F16
// weights) spend most of their time in.
//
// One order of arithmetic for every path: each (row, column) pair's dot
// product is 16 lane chains (lane l takes the FMAs of elements l, l + 16,
// ... in order from zero, the last partial vector zero-padded), summed in
// hsum_f32x16's tree. vec_dot and the tiles keep the 16 chains side by side
// in one vector per pair; the packed product runs them lane by lane over
// many pairs at once and adds the lanes in the same tree. So vec_dot,
// mat-vec and mat-mat give the same bits (tests/test_matmul_batching.py).
//
// Encoders (matmul_kernels::throughput) take the packed product's one-chain
// form (throughput_packed): each pair summed in one chain over the packed
// order, no lane tree; other bits than vec_dot's, still independent of the
// batch. Only here: the same change at the AVX2 level ran MiniLM at 0.6x
// (not understood yet; benchmarks/LOG.md, 2026-12-07 21:20).
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
// packed product's tile keeps 27 live). tests/cpp/avx512_emulated_check.cpp,
// which runs these kernels on emulated vectors, defines it away.
#ifndef LP_PIN_ZMM
#define LP_PIN_ZMM(x) __asm__("" : "+v"(x))
#endif

namespace lp {

#if defined(LP_HAVE_AVX512)

namespace {

// Sum of 16 lanes: y_j = v_j + v_{j+8}, z_j = y_j + y_{j+4},
// then (z0 + z2) + (z1 + z3). Spelled out (GCC's _mm512_reduce_add_ps uses
// this tree; other compilers need not) because the packed product's lane
// merge (merge_lane) must match it.
LP_TARGET_AVX512 LP_INLINE float hsum_f32x16(__m512 v) {
    const __m256 y = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 z = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    const __m128 w = _mm_add_ps(z, _mm_movehl_ps(z, z));
    return _mm_cvtss_f32(_mm_add_ss(w, _mm_movehdup_ps(w)));
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
// Mat-mat: the packed product (gemm_packed_fn, pack_acts_fn).
//
// A (row, column) pair's dot product is 16 independent FMA chains, one per
// lane l (elements l, l + 16, l + 32, ... in order, starting from zero, the
// zero-padded tail included), then hsum_f32x16's tree over the 16 chains.
// vec_dot runs the 16 chains side by side in one vector per pair, which in a
// register tile means 4 rows × 6 columns of accumulators, 10 loads per 24
// FMAs and a horizontal sum per pair: on K = 384 (MiniLM) that ran at 30% of
// the FMA peak of an AVX-512 Xeon core. The packed product runs the same
// chains the other way round: one lane at a time, 32 weight rows in two
// vectors × 12 activation rows broadcast, 24 accumulators, 14 loads per 24
// FMAs, no horizontal work in the loop; each chain's FMAs are vec_dot's, in
// vec_dot's order. The 16 chains of a pair are then added in hsum_f32x16's
// tree with vertical adds: lanes are taken in bit-reversed order (0, 8, 4,
// 12, ...) and merged like a binary counter, so that lane l meets lane l + 8
// first, then l + 4, l + 2, l + 1 (merge_lane). Same bits as vec_dot, the
// tiles and mat-vec (tests/test_matmul_batching.py, avx512_emulated_check).
//
// Layouts (floats; S = ceil(K / 16) steps, step j = elements 16j..16j+15):
//   packed activations, per tile of kPackCols rows: [lane][step][12 rows],
//     made once per matmul by the driver (pack_acts_float_avx512);
//   packed weights, per tile of kPackRows rows: [lane][step][32 rows],
//     made once per gemm_packed call (F16 widened here, exactly).
// Both are zero-padded past K and past the last row, so every lane runs S
// steps, as vec_dot's masked tail does.
constexpr int kLanes = 16;
constexpr int kPackRows = 32;               // weight rows of the register tile: two vectors
constexpr int kPackCols = 12;               // activation rows of the register tile (and of a packed tile)
constexpr int kPackedPanelRows = 64;        // weight rows per gemm_packed call
constexpr int kTreeLevels = 4;              // log2(kLanes)
static_assert(kPackedPanelRows % kPanelRows == 0, "panel_rows is a multiple of kPanelRows");

// In place: lane j of r[i] becomes lane i of r[j].
LP_TARGET_AVX512 LP_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {  // per 128-bit quarter: [a0 b0 a1 b1], [a2 b2 a3 b3]
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    __m512 u[16];  // u[4g + m], quarter q: rows 4g..4g+3 of column 4q + m
    for (int g = 0; g < 4; ++g) {
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int m = 0; m < 4; ++m) {
        const __m512 sa = _mm512_shuffle_f32x4(u[m], u[4 + m], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 sb = _mm512_shuffle_f32x4(u[m], u[4 + m], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512 ta = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 tb = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(3, 1, 3, 1));
        r[m] = _mm512_shuffle_f32x4(sa, ta, _MM_SHUFFLE(2, 0, 2, 0));
        r[m + 8] = _mm512_shuffle_f32x4(sa, ta, _MM_SHUFFLE(3, 1, 3, 1));
        r[m + 4] = _mm512_shuffle_f32x4(sb, tb, _MM_SHUFFLE(2, 0, 2, 0));
        r[m + 12] = _mm512_shuffle_f32x4(sb, tb, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

// Activation values as vec_dot sees them: F32 as they are, F16 rounded to
// F16 (to nearest even, as the F16 activation conversion) and widened back.
struct f32_acts {
    static LP_TARGET_AVX512 LP_INLINE __m512 load(const float* x, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x); }
};
struct f16_acts {
    static LP_TARGET_AVX512 LP_INLINE __m512 load(const float* x, __mmask16 m) {
        // by 256-bit halves (F16C): SIMDe, which the emulated check runs on, has no _mm512_cvtps_ph
        const __m512 v = _mm512_maskz_loadu_ps(m, x);
        constexpr int rne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        const __m128i lo = _mm256_cvtps_ph(_mm512_castps512_ps256(v), rne);
        const __m128i hi = _mm256_cvtps_ph(_mm512_extractf32x8_ps(v, 1), rne);
        return _mm512_cvtph_ps(_mm256_set_m128i(hi, lo));
    }
};

// nc (<= kPackCols) F32 activation rows x (stride xs floats) of n elements
// into one packed tile at dst (kPackCols × kLanes × S floats); rows past nc
// are zeros.
template <class A>
LP_TARGET_AVX512 void pack_acts_float_avx512(int64_t n, const float* x, int64_t xs, int nc, float* dst) {
    const int64_t S = (n + kLanes - 1) / kLanes;
    for (int64_t j = 0; j < S; ++j) {
        const __mmask16 m = j * kLanes + kLanes <= n ? (__mmask16)0xFFFF : first_lanes(n - j * kLanes);
        __m512 v[16];
        for (int c = 0; c < 16; ++c) v[c] = c < nc ? A::load(x + c * xs + j * kLanes, m) : _mm512_setzero_ps();
        transpose16(v);
        for (int l = 0; l < kLanes; ++l) _mm512_mask_storeu_ps(dst + (l * S + j) * kPackCols, 0x0FFF, v[l]);
    }
}

// Rows [r0, r0 + 32) of the weights (nr rows in all) into one packed tile.
template <class L>
LP_TARGET_AVX512 void pack_weights(int64_t n, int64_t S, const uint8_t* w, size_t ws, int r0, int nr, float* dst) {
    for (int64_t j = 0; j < S; ++j) {
        const int64_t i = j * kLanes;
        const bool whole = i + kLanes <= n;
        const __mmask16 m = whole ? (__mmask16)0xFFFF : first_lanes(n - i);
        for (int h = 0; h < kPackRows / 16; ++h) {
            __m512 v[16];
            for (int k = 0; k < 16; ++k) {
                const int r = r0 + 16 * h + k;
                v[k] = r >= nr ? _mm512_setzero_ps() : whole ? L::load(w + r * ws, i) : L::load_tail(w + r * ws, i, m);
            }
            transpose16(v);
            for (int l = 0; l < kLanes; ++l) _mm512_storeu_ps(dst + (l * S + j) * kPackRows + 16 * h, v[l]);
        }
    }
}

// One lane's chains for a 32-row × NC-column tile: NC of the packed tile's
// 12 activation rows (the rest are padding; NC a multiple of 4).
template <int NC>
LP_TARGET_AVX512 LP_INLINE void lane_chains(int64_t S, const float* wp, const float* ap, __m512 acc[2][NC]) {
    for (int c = 0; c < NC; ++c) acc[0][c] = acc[1][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < S; ++j, wp += kPackRows, ap += kPackCols) {
        __m512 w0 = _mm512_loadu_ps(wp), w1 = _mm512_loadu_ps(wp + 16);
        LP_PIN_ZMM(w0);
        LP_PIN_ZMM(w1);
        for (int c = 0; c < NC; ++c) {
            __m512 b = _mm512_set1_ps(ap[c]);
            LP_PIN_ZMM(b);  // one broadcast per two FMAs, not one folded into each
            acc[0][c] = _mm512_fmadd_ps(w0, b, acc[0][c]);
            acc[1][c] = _mm512_fmadd_ps(w1, b, acc[1][c]);
        }
    }
}

// Adds the chains of the index-th lane (in bit-reversed order) into the tree
// kept in `tree` (kTreeLevels levels of 2 × NC vectors). Returns true when
// acc holds the finished sums (the 16th lane).
template <int NC>
LP_TARGET_AVX512 LP_INLINE bool merge_lane(int index, __m512 acc[2][NC], float* tree) {
    int level = 0;
    for (int bits = index; bits & 1; bits >>= 1, ++level) {
        const float* t = tree + level * (2 * kPackCols * 16);
        for (int c = 0; c < NC; ++c) {
            acc[0][c] = _mm512_add_ps(_mm512_loadu_ps(t + (2 * c) * 16), acc[0][c]);
            acc[1][c] = _mm512_add_ps(_mm512_loadu_ps(t + (2 * c + 1) * 16), acc[1][c]);
        }
    }
    if (level == kTreeLevels) return true;
    float* t = tree + level * (2 * kPackCols * 16);
    for (int c = 0; c < NC; ++c) {
        _mm512_storeu_ps(t + (2 * c) * 16, acc[0][c]);
        _mm512_storeu_ps(t + (2 * c + 1) * 16, acc[1][c]);
    }
    return false;
}

constexpr int bit_reversed4(int i) { return ((i & 1) << 3) | ((i & 2) << 1) | ((i & 4) >> 1) | ((i & 8) >> 3); }

// Per-thread buffers: the packed weights of a call and the lane trees.
struct packed_scratch {
    std::vector<float> w, tree;
};

// The finished sums of row tile rt for columns [0, nc): out[c · os + r].
template <int NC>
LP_TARGET_AVX512 LP_INLINE void store_tile(int rt, int nr, int nc, __m512 acc[2][NC], float* out, size_t os) {
    const int r0 = rt * kPackRows;
    const __mmask16 m0 = r0 + 16 <= nr ? (__mmask16)0xFFFF : first_lanes(std::max(0, nr - r0));
    const __mmask16 m1 = r0 + 32 <= nr ? (__mmask16)0xFFFF : first_lanes(std::max(0, nr - r0 - 16));
    for (int c = 0; c < nc; ++c) {
        _mm512_mask_storeu_ps(out + (size_t)c * os + r0, m0, acc[0][c]);
        _mm512_mask_storeu_ps(out + (size_t)c * os + r0 + 16, m1, acc[1][c]);
    }
}

// Columns [0, nc) of one packed activation tile against every row tile.
// OneChain (the throughput product): each pair is one chain over the packed
// order, lane 0's steps, then lane 1's, ... (the lanes lie back to back in
// both packings), stored when done: no tree. Else vec_dot's 16 chains and
// their tree.
template <int NC, bool OneChain>
LP_TARGET_AVX512 void packed_column_tile(int64_t S, int n_rt, int nr, const float* wp, const float* ap, int nc,
                                         float* tree, float* out, size_t os) {
    const size_t wtile = (size_t)kLanes * S * kPackRows, wlane = (size_t)S * kPackRows, alane = (size_t)S * kPackCols;
    if constexpr (OneChain) {
        for (int rt = 0; rt < n_rt; ++rt) {
            __m512 acc[2][NC];
            lane_chains<NC>(kLanes * S, wp + rt * wtile, ap, acc);
            store_tile<NC>(rt, nr, nc, acc, out, os);
        }
        return;
    }
    for (int i = 0; i < kLanes; ++i) {
        const int l = bit_reversed4(i);
        for (int rt = 0; rt < n_rt; ++rt) {
            __m512 acc[2][NC];
            lane_chains<NC>(S, wp + rt * wtile + l * wlane, ap + l * alane, acc);
            if (!merge_lane<NC>(i, acc, tree + (size_t)rt * kTreeLevels * 2 * kPackCols * 16)) continue;
            store_tile<NC>(rt, nr, nc, acc, out, os);
        }
    }
}

// nr (<= kPackedPanelRows) weight rows × nc activation rows packed by
// pack_acts_float_avx512 (tiles of kPackCols rows, back to back):
// out[c · os + r].
template <class L, bool OneChain>
LP_TARGET_AVX512 void gemm_packed_float_avx512(int64_t n, const void* w, size_t ws, int nr, const float* ap, int nc,
                                               float* out, size_t os) {
    const int64_t S = (n + kLanes - 1) / kLanes;
    const int n_rt = (nr + kPackRows - 1) / kPackRows;
    static thread_local packed_scratch s;
    const size_t wtile = (size_t)kLanes * S * kPackRows;
    if (s.w.size() < (size_t)n_rt * wtile) s.w.resize((size_t)n_rt * wtile);
    s.tree.resize((size_t)n_rt * kTreeLevels * 2 * kPackCols * 16);
    for (int rt = 0; rt < n_rt; ++rt)
        pack_weights<L>(n, S, static_cast<const uint8_t*>(w), ws, rt * kPackRows, nr, s.w.data() + rt * wtile);
    const size_t atile = (size_t)kPackCols * kLanes * S;
    for (int c0 = 0; c0 < nc; c0 += kPackCols) {
        const int ncc = std::min(kPackCols, nc - c0);
        const float* apt = ap + (size_t)(c0 / kPackCols) * atile;
        float* o = out + (size_t)c0 * os;
        if (ncc <= 4) packed_column_tile<4, OneChain>(S, n_rt, nr, s.w.data(), apt, ncc, s.tree.data(), o, os);
        else if (ncc <= 8) packed_column_tile<8, OneChain>(S, n_rt, nr, s.w.data(), apt, ncc, s.tree.data(), o, os);
        else packed_column_tile<12, OneChain>(S, n_rt, nr, s.w.data(), apt, ncc, s.tree.data(), o, os);
    }
}

}  // namespace

void register_float_tiles_avx512(type_traits* table, isa level) {
    if (level != isa::avx512) return;
    type_traits& f32 = table[(int)ggml_type::F32];
    type_traits& f16 = table[(int)ggml_type::F16];
    f32.vec_dot = vec_dot_float_avx512<f32_lanes>;
    f32.gemm_tile = gemm_tile_float_avx512<f32_lanes>;
    f32.pack_acts = pack_acts_float_avx512<f32_acts>;
    f32.gemm_packed = gemm_packed_float_avx512<f32_lanes, false>;
    f32.throughput_packed = gemm_packed_float_avx512<f32_lanes, true>;
    f16.vec_dot = vec_dot_float_avx512<f16_lanes>;
    f16.gemm_tile = gemm_tile_float_avx512<f16_lanes>;
    f16.pack_acts = pack_acts_float_avx512<f16_acts>;
    f16.gemm_packed = gemm_packed_float_avx512<f16_lanes, false>;
    f16.throughput_packed = gemm_packed_float_avx512<f16_lanes, true>;
    for (type_traits* t : {&f32, &f16}) {
        t->gemm_panel = nullptr;  // mat-vec: the 4-row tiles; mat-mat: the packed product
        t->pack_lanes = kLanes;
        t->pack_cols = kPackCols;
        t->panel_rows = kPackedPanelRows;
    }
}

#else

void register_float_tiles_avx512(type_traits*, isa) {}

#endif  // LP_HAVE_AVX512

}  // namespace lp
