// q8_0_tiles_avx2.cpp — Q8_0 weights × Q8_0 activations at the AVX2 level:
// vec_dot, the mat-vec / small-batch tiles and the prefill panels, all with
// the same bits, with or without AVX-VNNI.
//
// Per (row, column, block) the product is 8 int32 lanes, lane j the 4
// products of bytes 4j..4j+3: without VNNI the sign trick (|w| unsigned times
// a with w's sign, maddubs, madd: 3 multiply-port uops), with AVX-VNNI one
// vpdpbusd of w + 128 starting from -128·Σa. Converting and scaling each
// product's 8 lanes (cvt + fma) made the plain product 5 uops, all on the two
// ports that execute them, while port 5 sat idle. So two rows' lanes are
// first paired up by one vphaddd (port 5 mostly): [r0 q0 q1, r1 q0 q1 | r0 q2
// q3, r1 q2 q3], q_k = bytes 8k..8k+7, and one cvt and one fma serve both
// rows, with the scale vector [s0 s0 s1 s1 s0 s0 s1 s1] (s_r = d_w(r)·d_a; the
// panel keeps the d_w pattern per row pair and block). Stand-alone 4 × 2 panel
// tile, one thread, portable build: ~75 GFLOP/s against the per-row tile's ~63.
//
// Bits: a row's four lanes hold q_0..q_3 whether it is a pair's first row
// (lanes 0, 1, 4, 5) or second (2, 3, 6, 7), or a lone row paired with itself;
// each lane accumulates fma(float(q_k), d_w·d_a, acc) over the blocks in
// order, and the row's result is (acc_0 + acc_2) + (acc_1 + acc_3). The
// integer lanes are exact whichever instructions make them. So vec_dot,
// mat-vec, the small batches and the panels agree bit for bit (batch
// invariance) whatever rows they pair, with VNNI or without.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <vector>

#include "../common.h"
#include "blocks.h"
#include "legacy_x86.h"

#if defined(LP_X86)
#include <immintrin.h>
#endif

#include "simd_x86.h"
#include "tiles_avx2_common.h"

namespace lp {

#if defined(LP_HAVE_AVX2)

namespace {

using x86::half_to_float;

// A panel's columns go in groups of kGroupCols (their activations stay in L1
// across the panel's row tiles; their d_a, converted once per panel call, are
// laid out per group).
constexpr int kGroupCols = 8;
constexpr int kPanelPairs = kPanelRows / 2;
// Weight rows per mat-mat panel call (type_traits::panel_rows), in sub-panels
// of kPanelRows: the columns' d_a, converted once per call, then serve 64
// rows instead of 16 (the conversion was ~6 % of a 1B Q8_0 prompt).
constexpr int kPanelRowsQ8 = 4 * kPanelRows;
// Rows longer than kStretch blocks (4096 weights: Llama-1B's down projection
// has 8192) go through a panel in stretches, so a 4-row tile's unpacked rows
// and the column group's activations stay in L1/L2 (1 thread, K = 8192: 65 ->
// 70 GFLOP/s; shorter rows are one stretch).
constexpr int64_t kStretch = 128;

using tiles_avx2::bytes32;
using tiles_avx2::floats8;

// The two ways to make a product's lanes. `unpack` is what a panel keeps of a
// weight block (kSlots × 32 bytes), `u` the unsigned operand from a block,
// `column` what a column block contributes before any row (the lanes' start).
struct sign_lanes {  // plain AVX2
    static constexpr int kSlots = 2;  // |w|, w
    LP_TARGET_AVX2 static LP_INLINE __m256i u(__m256i w) { return _mm256_abs_epi8(w); }
    LP_TARGET_AVX2 static LP_INLINE void unpack(bytes32* dst, __m256i w) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst[0].b), _mm256_abs_epi8(w));
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst[1].b), w);
    }
    LP_TARGET_AVX2 static LP_INLINE __m256i column(__m256i) { return _mm256_setzero_si256(); }
    // a is never -128 and |w| <= 128, so maddubs' int16 pairs do not saturate
    LP_TARGET_AVX2 static LP_INLINE __m256i lanes(__m256i, __m256i u, __m256i w, __m256i a) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1));
    }
};
struct vnni_lanes {  // AVX-VNNI: w + 128 unsigned (vpdpbusd does not saturate)
    static constexpr int kSlots = 1;  // w + 128
    LP_TARGET_AVX2 static LP_INLINE __m256i u(__m256i w) { return _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); }
    LP_TARGET_AVX2 static LP_INLINE void unpack(bytes32* dst, __m256i w) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst[0].b), u(w));
    }
    // -128·Σa per lane: takes the offset back out, exactly
    LP_TARGET_AVXVNNI static LP_INLINE __m256i column(__m256i a) {
        return _mm256_sub_epi32(_mm256_setzero_si256(),
                                _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), a));
    }
    LP_TARGET_AVXVNNI static LP_INLINE __m256i lanes(__m256i start, __m256i u, __m256i, __m256i a) {
        return _mm256_dpbusd_avx_epi32(start, u, a);
    }
};

// The d_w pattern of a row pair's lanes: [d0 d0 d1 d1 d0 d0 d1 d1].
LP_TARGET_AVX2 LP_INLINE __m256 pair_pattern(float d0, float d1) {
    const __m128 x = _mm_unpacklo_ps(_mm_set_ss(d0), _mm_set_ss(d1));  // d0 d1 0 0
    const __m128 y = _mm_unpacklo_ps(x, x);                            // d0 d0 d1 d1
    return _mm256_set_m128(y, y);
}

// The pair's two results from its accumulator (see the bits note above);
// r1 == nullptr for a lone row.
LP_TARGET_AVX2 LP_INLINE void pair_results(__m256 acc, float* r0, float* r1) {
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    alignas(16) float v[4];
    _mm_store_ps(v, t);
    *r0 = v[0] + v[1];
    if (r1) *r1 = v[2] + v[3];
}

// Weight rows straight from the blocks (vec_dot, mat-vec, small batches).
template <class L>
struct direct_rows {
    const uint8_t* w;
    size_t ws;
    LP_TARGET_AVX2 LP_INLINE const block_q8_0& at(int r, int64_t ib) const {
        return reinterpret_cast<const block_q8_0*>(w + r * ws)[ib];
    }
    LP_TARGET_AVX2 LP_INLINE __m256i raw(int r, int64_t ib) const {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at(r, ib).qs));
    }
    LP_TARGET_AVX2 LP_INLINE __m256i u(int r, int64_t ib) const { return L::u(raw(r, ib)); }
    LP_TARGET_AVX2 LP_INLINE __m256 pattern(int r0, int r1, int64_t ib) const {
        return pair_pattern(half_to_float(at(r0, ib).d), half_to_float(at(r1, ib).d));
    }
};

// A panel's rows, unpacked once for all its columns: per row and block the
// L::kSlots × 32 bytes of L::unpack, per block and row pair the d_w pattern.
template <class L>
struct panel_rows {
    const bytes32* q;    // [row][block][L::kSlots]
    const floats8* pat;  // [block][kPanelPairs], from this tile's first pair
    int64_t nb;
    LP_TARGET_AVX2 LP_INLINE __m256i slot(int r, int64_t ib, int k) const {
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(q[(r * nb + ib) * L::kSlots + k].b));
    }
    LP_TARGET_AVX2 LP_INLINE __m256i u(int r, int64_t ib) const { return slot(r, ib, 0); }
    LP_TARGET_AVX2 LP_INLINE __m256i raw(int r, int64_t ib) const { return slot(r, ib, L::kSlots - 1); }
    LP_TARGET_AVX2 LP_INLINE __m256 pattern(int r0, int, int64_t ib) const {
        return _mm256_load_ps(pat[ib * kPanelPairs + r0 / 2].f);
    }
};

// A stretch of the blocks [b0, b1): the panels walk long rows in stretches,
// carrying the accumulators between them in `state` (a tile's NP × NC
// vectors; a lane's sum goes on in the same order, so the bits do not change).
struct kspan {
    int64_t b0, b1;
    floats8* state;  // nullptr: the whole row in one go
    bool first, last;
};
LP_TARGET_AVX2 LP_INLINE kspan whole(int64_t nb) { return kspan{0, nb, nullptr, true, true}; }
// The span of a tile's columns from c on (a tile keeps 2 × 2 vectors a column pair).
LP_TARGET_AVX2 LP_INLINE kspan from_col(const kspan& k, int c) {
    return kspan{k.b0, k.b1, k.state ? k.state + 2 * c : nullptr, k.first, k.last};
}

// The columns' d_a as floats, block-major with stride kGroupCols.
LP_TARGET_AVX2 void column_scales(const uint8_t* a, size_t as, int nc, int64_t nb, float* dac) {
    for (int64_t ib = 0; ib < nb; ++ib)
        for (int c = 0; c < nc; ++c)
            dac[ib * kGroupCols + c] = half_to_float(reinterpret_cast<const block_q8_0*>(a + c * as)[ib].d);
}

// Room for the d_a of `groups` column groups of nb blocks (per thread).
float* column_scale_buffer(int64_t nb, int64_t groups) {
    thread_local std::vector<float> dac;
    const size_t n = (size_t)(kGroupCols * nb * groups);
    if (dac.size() < n) dac.resize(n);
    return dac.data();
}

// The kernels, once per instruction choice (TARGET: the target attribute, L:
// the lanes' maker).
#define LP_Q8_0_KERNELS(TARGET, SUFFIX, L)                                                                      \
    /* NR <= 4 weight rows (in pairs; an odd last row alone) × NC columns over the span's blocks. dac: */      \
    /* the columns' d_a, column c's of block ib at dac[ib * kGroupCols + c]; nullptr: converted from the */   \
    /* blocks. pf: the mat-vec's weight prefetch (nullptr: none). */                                            \
    template <int NR, int NC, class Rows>                                                                       \
    TARGET void tile_##SUFFIX(const kspan& k, const Rows& rows, const uint8_t* a, size_t as, const float* dac,  \
                              float* out, size_t os, const char* pf) {                                          \
        constexpr int NP = (NR + 1) / 2;                                                                        \
        __m256 acc[NP][NC];                                                                                     \
        for (int p = 0; p < NP; ++p)                                                                            \
            for (int c = 0; c < NC; ++c)                                                                        \
                acc[p][c] = k.first ? _mm256_setzero_ps() : _mm256_load_ps(k.state[p * NC + c].f);              \
        for (int64_t ib = k.b0; ib < k.b1; ++ib) {                                                              \
            if (pf) tiles_avx2::prefetch_step(pf, NR * sizeof(block_q8_0));                                     \
            __m256i av[NC], start[NC];                                                                          \
            __m256 da[NC];                                                                                      \
            for (int c = 0; c < NC; ++c) {                                                                      \
                const block_q8_0& y = reinterpret_cast<const block_q8_0*>(a + c * as)[ib];                      \
                av[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs));                             \
                start[c] = L::column(av[c]);                                                                    \
                da[c] = _mm256_set1_ps(dac ? dac[ib * kGroupCols + c] : half_to_float(y.d));                    \
            }                                                                                                   \
            for (int p = 0; p < NP; ++p) {                                                                      \
                const int r0 = 2 * p, r1 = std::min(2 * p + 1, NR - 1);                                         \
                const __m256i u0 = rows.u(r0, ib), w0 = rows.raw(r0, ib);                                       \
                const __m256 pat = rows.pattern(r0, r1, ib);                                                    \
                for (int c = 0; c < NC; ++c) {                                                                  \
                    const __m256i m0 = L::lanes(start[c], u0, w0, av[c]);                                       \
                    const __m256i m1 = r1 == r0 ? m0 : L::lanes(start[c], rows.u(r1, ib), rows.raw(r1, ib), av[c]); \
                    /* the scale lanes d_w·d_a: the scalar products' bits */                                    \
                    acc[p][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(m0, m1)),                  \
                                                _mm256_mul_ps(pat, da[c]), acc[p][c]);                          \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
        if (!k.last) {                                                                                          \
            for (int p = 0; p < NP; ++p)                                                                        \
                for (int c = 0; c < NC; ++c) _mm256_store_ps(k.state[p * NC + c].f, acc[p][c]);                 \
            return;                                                                                             \
        }                                                                                                       \
        for (int p = 0; p < NP; ++p) {                                                                          \
            const int r0 = 2 * p, r1 = std::min(2 * p + 1, NR - 1);                                             \
            for (int c = 0; c < NC; ++c)                                                                        \
                pair_results(acc[p][c], out + c * os + r0, r1 == r0 ? nullptr : out + c * os + r1);             \
        }                                                                                                       \
    }                                                                                                           \
    /* NR rows against nc columns, two at a time; the first pass over the rows prefetches them */              \
    template <int NR, class Rows>                                                                               \
    TARGET void cols_##SUFFIX(const kspan& k, const Rows& rows, const uint8_t* a, size_t as, const float* dac,  \
                              float* out, size_t os, int nc, const char* pf) {                                  \
        int c = 0;                                                                                              \
        for (; c + 2 <= nc; c += 2)                                                                             \
            tile_##SUFFIX<NR, 2>(from_col(k, c), rows, a + c * as, as, dac ? dac + c : nullptr, out + c * os,  \
                                 os, c == 0 ? pf : nullptr);                                                    \
        if (c < nc)                                                                                             \
            tile_##SUFFIX<NR, 1>(from_col(k, c), rows, a + c * as, as, dac ? dac + c : nullptr, out + c * os,  \
                                 os, c == 0 ? pf : nullptr);                                                    \
    }                                                                                                           \
    template <class Rows>                                                                                       \
    TARGET void rows_cols_##SUFFIX(const kspan& k, const Rows& rows, int nr, const uint8_t* a, size_t as,       \
                                   const float* dac, float* out, size_t os, int nc, const char* pf) {           \
        switch (nr) {                                                                                           \
            case 4: cols_##SUFFIX<4>(k, rows, a, as, dac, out, os, nc, pf); return;                             \
            case 3: cols_##SUFFIX<3>(k, rows, a, as, dac, out, os, nc, pf); return;                             \
            case 2: cols_##SUFFIX<2>(k, rows, a, as, dac, out, os, nc, pf); return;                             \
            case 1: cols_##SUFFIX<1>(k, rows, a, as, dac, out, os, nc, pf); return;                             \
            default: return;                                                                                    \
        }                                                                                                       \
    }                                                                                                           \
    /* gemm_tile_fn: nr <= 4 rows × nc <= 4 columns from the blocks; mat-vec and small batches stream */       \
    /* the weights, prefetched as one linear stream */                                                          \
    TARGET void gemm_tile_##SUFFIX(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out,   \
                                   size_t os, int nr, int nc) {                                                 \
        const auto* wb = static_cast<const uint8_t*>(w);                                                        \
        rows_cols_##SUFFIX(whole(n / 32), direct_rows<L>{wb, ws}, nr, static_cast<const uint8_t*>(a), as,       \
                           nullptr, out, os, nc, tiles_avx2::prefetch_start(wb, ws, nr));                       \
    }                                                                                                           \
    /* matvec_cols (small batches, nc <= 4 columns): row pairs against all columns, each weight block */       \
    /* decoded once for all of them; the columns' d_a converted once per call */                                \
    template <int NC>                                                                                           \
    TARGET void row_pairs_##SUFFIX(int64_t nb, const uint8_t* w, size_t ws, int nr, const uint8_t* a,           \
                                   size_t as, const float* dac, float* out, size_t os) {                        \
        for (int r = 0; r < nr; r += 2) {                                                                       \
            const uint8_t* wr = w + (size_t)r * ws;                                                             \
            const direct_rows<L> rows{wr, ws};                                                                  \
            if (r + 2 <= nr)                                                                                    \
                tile_##SUFFIX<2, NC>(whole(nb), rows, a, as, dac, out + r, os,                                  \
                                     tiles_avx2::prefetch_start(wr, ws, 2));                                    \
            else                                                                                                \
                tile_##SUFFIX<1, NC>(whole(nb), rows, a, as, dac, out + r, os,                                  \
                                     tiles_avx2::prefetch_start(wr, ws, 1));                                    \
        }                                                                                                       \
    }                                                                                                           \
    TARGET void matvec_cols_##SUFFIX(int64_t n, const void* w, size_t ws, const void* a, size_t as,             \
                                     float* out, size_t os, int nr, int nc) {                                   \
        const auto* wb = static_cast<const uint8_t*>(w);                                                        \
        const auto* ab = static_cast<const uint8_t*>(a);                                                        \
        const int64_t nb = n / 32;                                                                              \
        float* dac = column_scale_buffer(nb, 1);                                                                \
        column_scales(ab, as, nc, nb, dac);                                                                     \
        switch (nc) {                                                                                           \
            case 4: row_pairs_##SUFFIX<4>(nb, wb, ws, nr, ab, as, dac, out, os); return;                        \
            case 3: row_pairs_##SUFFIX<3>(nb, wb, ws, nr, ab, as, dac, out, os); return;                        \
            case 2: row_pairs_##SUFFIX<2>(nb, wb, ws, nr, ab, as, dac, out, os); return;                        \
            default: row_pairs_##SUFFIX<1>(nb, wb, ws, nr, ab, as, dac, out, os); return;                       \
        }                                                                                                       \
    }                                                                                                           \
    /* Panels (gemm_panel_fn): up to kPanelRowsQ8 rows × 128 columns. From 4 columns on the columns' d_a */  \
    /* are converted once per call, and each 16-row sub-panel is unpacked once (L::unpack, the pair */          \
    /* patterns) for 4-row × 2-column tiles that read it back in column groups of 8 and stretches of */         \
    /* kStretch blocks; below 4 columns the tiles work on the blocks. */                                        \
    TARGET void gemm_panel_##SUFFIX(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as,      \
                                    int nc, float* out, size_t os) {                                            \
        const auto* wb = static_cast<const uint8_t*>(w);                                                        \
        const auto* ab = static_cast<const uint8_t*>(a);                                                        \
        if (nc < 4) {                                                                                           \
            tiles_avx2::tiles_by_fours<gemm_tile_##SUFFIX>(n, wb, ws, ab, as, out, os, nr, nc);                 \
            return;                                                                                             \
        }                                                                                                       \
        const int64_t nb = n / 32;                                                                              \
        constexpr int S = L::kSlots;                                                                            \
        const int groups = (nc + kGroupCols - 1) / kGroupCols;                                                  \
        float* dac = column_scale_buffer(nb, groups);                                                           \
        for (int g = 0; g < groups; ++g)                                                                        \
            column_scales(ab + (size_t)g * kGroupCols * as, as, std::min(kGroupCols, nc - g * kGroupCols), nb,  \
                          dac + (size_t)g * kGroupCols * nb);                                                   \
        thread_local std::vector<bytes32> q;                                                                    \
        thread_local std::vector<floats8> pat;                                                                  \
        if (q.size() < (size_t)(kPanelRows * nb * S)) q.resize((size_t)(kPanelRows * nb * S));                  \
        if (pat.size() < (size_t)(kPanelPairs * nb)) pat.resize((size_t)(kPanelPairs * nb));                    \
        alignas(32) floats8 state[(kPanelRows / 4) * kGroupCols * 2]; /* (row tile, column) -> 2 vectors */    \
        for (int s0 = 0; s0 < nr; s0 += kPanelRows) {                                                           \
            const int ns = std::min(kPanelRows, nr - s0);                                                       \
            const direct_rows<L> src{wb + (size_t)s0 * ws, ws};                                                 \
            for (int r = 0; r < ns; ++r)                                                                        \
                for (int64_t ib = 0; ib < nb; ++ib) L::unpack(&q[(r * nb + ib) * S], src.raw(r, ib));           \
            for (int64_t ib = 0; ib < nb; ++ib)                                                                 \
                for (int r = 0; r < ns; r += 2) /* an odd last row pairs with itself */                         \
                    _mm256_store_ps(pat[ib * kPanelPairs + r / 2].f, src.pattern(r, std::min(r + 1, ns - 1), ib)); \
            /* the next sub-panel's weights come from memory: ask for them in slices while this one runs */    \
            const char* next = reinterpret_cast<const char*>(wb + (size_t)(s0 + ns) * ws);                      \
            const size_t next_bytes = (size_t)std::min(kPanelRows, nr - s0 - ns) * ws;                          \
            const int64_t slices = std::max<int64_t>(1, groups * ((nb + kStretch - 1) / kStretch));           \
            const size_t slice = (next_bytes / (size_t)slices + 63) & ~(size_t)63;                              \
            size_t fetched = 0;                                                                                 \
            for (int g = 0; g < groups; ++g) {                                                                  \
                const int c0 = g * kGroupCols, ncc = std::min(kGroupCols, nc - c0);                             \
                for (int64_t b0 = 0; b0 < nb; b0 += kStretch) {                                                 \
                    const int64_t b1 = std::min(nb, b0 + kStretch);                                             \
                    for (size_t e = std::min(next_bytes, fetched + slice); fetched < e; fetched += 64)          \
                        _mm_prefetch(next + fetched, _MM_HINT_T1);                                              \
                    for (int r = 0; r < ns; r += 4) {                                                           \
                        const panel_rows<L> rows{q.data() + r * nb * S, pat.data() + r / 2, nb};                \
                        const kspan k{b0, b1, state + (r / 4) * kGroupCols * 2, b0 == 0, b1 == nb};             \
                        rows_cols_##SUFFIX(k, rows, std::min(4, ns - r), ab + c0 * as, as,                      \
                                           dac + (size_t)g * kGroupCols * nb, out + c0 * os + s0 + r, os, ncc,  \
                                           nullptr);                                                            \
                    }                                                                                           \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }                                                                                                           \
    TARGET void vec_dot_##SUFFIX(int64_t n, float* out, const void* w_row, const void* a_row) {                 \
        tile_##SUFFIX<1, 1>(whole(n / 32), direct_rows<L>{static_cast<const uint8_t*>(w_row), 0},              \
                            static_cast<const uint8_t*>(a_row), 0, nullptr, out, 0, nullptr);                   \
    }

LP_Q8_0_KERNELS(LP_TARGET_AVX2, avx2, sign_lanes)
LP_Q8_0_KERNELS(LP_TARGET_AVXVNNI, avxvnni, vnni_lanes)
#undef LP_Q8_0_KERNELS

}  // namespace

void set_q8_0_tiles_avx2(type_traits& q8_0, bool vnni) {
    q8_0.vec_dot = vnni ? vec_dot_avxvnni : vec_dot_avx2;
    q8_0.gemm_tile = vnni ? gemm_tile_avxvnni : gemm_tile_avx2;
    q8_0.gemm_panel = vnni ? gemm_panel_avxvnni : gemm_panel_avx2;
    q8_0.matvec_cols = vnni ? matvec_cols_avxvnni : matvec_cols_avx2;
    q8_0.panel_rows = kPanelRowsQ8;
    // Mat-vec through matvec_cols (rows in pairs, the same tile and bits)
    // instead of the panel's 4-row tiles: two rows side by side stream from
    // memory faster than four (Xeon VM, 2 threads: 13.2-14.0 against
    // 11.0-11.4 GB of weights per CPU second; benchmarks/LOG.md 2026-12-07).
    q8_0.matvec_by_cols = true;
    if (!vnni) use_dequantized_q8_0_avx2(q8_0);  // encoders (throughput products)
}

#else

void set_q8_0_tiles_avx2(type_traits&, bool) {}

#endif  // LP_HAVE_AVX2

}  // namespace lp
