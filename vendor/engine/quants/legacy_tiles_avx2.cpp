// legacy_tiles_avx2.cpp — register-blocked AVX2 tiles (gemm_tile_fn) for the
// legacy types that carry prefill on the models we are measured with: Q4_0
// and Q5_0 (Gemma 3's q/k/v/gate/up; Q8_0's are in q8_0_tiles_avx2.cpp). Without
// them the AVX2 level ran mat-mat as one vec_dot per (row, column), which
// re-unpacks every weight block and re-loads every activation block for each
// product.
//
// A tile computes, for each (row r, column c), exactly the sequence of the
// AVX2 vec_dot: per 32-weight block, 8 int32 lanes of Σ (q - offset)·a over 4
// consecutive bytes each, converted and fused-multiply-added into one 8-lane
// float accumulator with the scale d_w·d_a; one horizontal sum at the end. The
// integer lanes are exact whichever instructions make them, so the tile,
// vec_dot and the mat-vec (the driver's 4 × 1 tiles) agree bit for bit
// (batch invariance), with or without AVX-VNNI.
//
// Mat-mat goes through panels (gemm_panel: 16 rows × up to 128 columns):
// the rows are unpacked once into a per-thread buffer (Q5_0's fifth bits
// cost more than a VNNI product) and 4-row × 2-column tiles read them back;
// mat-vec and small batches use the tiles on the blocks directly.
//
// Two instruction choices, picked at run time (register_legacy_tiles_avx2):
//  - plain AVX2: maddubs + madd per product, the offset as -offset·Σa per
//    column, shared by all rows;
//  - AVX-VNNI (vpdpbusd, VEX form; Alder Lake, Zen 5): one instruction per
//    product, starting from that offset term. LLAMAPY_AVXVNNI=0 turns it off
//    (benchmarking CPUs without it).
#include <cstddef>
#include <cstdlib>
#include <cstring>
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
using x86::hsum_f32x8;

// 16 nibble-packed bytes -> 32 bytes 0..15 in element order (low nibbles
// are elements 0-15, high nibbles 16-31).
LP_TARGET_AVX2 LP_INLINE __m256i nibbles32(const uint8_t* qs) {
    const __m128i raw = _mm_loadu_si128((const __m128i*)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

// Bit j of the 4 qh bytes -> 0x10 in byte j (Q5_0's fifth bit).
LP_TARGET_AVX2 LP_INLINE __m256i fifth_bits32(const uint8_t* qh_bytes) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)qh), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Formats. `row` turns a weight block into the unsigned operand (the signed
// operand is the activation block itself), `offset` is what the unsigned
// operand carries on top of the true quant.
struct q4_0_fmt {
    using block = block_q4_0;
    static constexpr int offset = 8;
    LP_TARGET_AVX2 static LP_INLINE __m256i row(const block& b) { return nibbles32(b.qs); }
};
struct q5_0_fmt {
    using block = block_q5_0;
    static constexpr int offset = 16;
    LP_TARGET_AVX2 static LP_INLINE __m256i row(const block& b) {
        return _mm256_or_si256(nibbles32(b.qs), fifth_bits32(b.qh));
    }
};

// The 8 int32 lanes of Σ u·s (4 bytes a lane) added to init.
LP_TARGET_AVX2 LP_INLINE __m256i dot_plain(__m256i init, __m256i u, __m256i s) {
    return _mm256_add_epi32(init, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
LP_TARGET_AVXVNNI LP_INLINE __m256i dot_vnni(__m256i init, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(init, u, s);
}

// One activation block as the small-batch kernel (row_cols) prepares it per
// call: the operand bytes, the -offset·Σa lanes and d_a.
struct alignas(32) col_block {
    __m256i av, init;
    float da;
};

// Where a tile's weight rows come from: straight from the blocks (mat-vec,
// small batches) or from a panel's rows unpacked once for all its columns.
// Both hand the tile the same operand bytes and scales.
template <class F>
struct direct_rows {
    static constexpr bool has_d4 = false;
    const uint8_t* w;
    size_t ws;
    LP_TARGET_AVX2 LP_INLINE const typename F::block& at(int r, int64_t ib) const {
        return reinterpret_cast<const typename F::block*>(w + r * ws)[ib];
    }
    LP_TARGET_AVX2 LP_INLINE __m256i u(int r, int64_t ib) const { return F::row(at(r, ib)); }
    LP_TARGET_AVX2 LP_INLINE float d(int r, int64_t ib) const { return half_to_float(at(r, ib).d); }
};
// Unpacked panel rows: per block 32 bytes of the unsigned operand and d,
// the d of a block's 16 panel rows side by side (dw[block][row]) so a 4-row
// tile loads its 4 scales as one vector.
using tiles_avx2::bytes32;
struct unpacked {
    bytes32* q;   // [row][block]
    float* dw;    // [block][kPanelRows]
    int64_t nb;
};
template <class F>
struct panel_rows {
    static constexpr bool has_d4 = true;
    const bytes32* q;
    const float* dw;  // row 0's column of unpacked::dw
    int64_t nb;
    LP_TARGET_AVX2 LP_INLINE __m256i u(int r, int64_t ib) const {
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(q[r * nb + ib].b));
    }
    LP_TARGET_AVX2 LP_INLINE float d(int r, int64_t ib) const { return dw[ib * kPanelRows + r]; }
    // rows 0-3's d of block ib, in both halves
    LP_TARGET_AVX2 LP_INLINE __m256 d4(int64_t ib) const {
        return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(dw + ib * kPanelRows));
    }
};

// A panel's unpacked rows (per thread, reused).
unpacked panel_buffer(int nr, int64_t nb) {
    thread_local std::vector<bytes32> q;
    thread_local std::vector<float> d;
    const size_t need = (size_t)nr * (size_t)nb;
    if (q.size() < need) q.resize(need);
    if (d.size() < (size_t)kPanelRows * (size_t)nb) d.resize((size_t)kPanelRows * (size_t)nb);
    return unpacked{q.data(), d.data(), nb};
}

// NR weight rows × NC activation rows (NC <= 2 so the NR·NC accumulators, the
// activations and their offset terms stay in the 16 ymm registers), over all
// blocks. The same per-(r, c) operations whatever NR, NC and row source.
#define LP_LEGACY_TILE(TARGET, SUFFIX, DOT)                                                                    \
    /* -offset·Σa per int32 lane of one activation block: exact, shared by every row */                        \
    template <class F>                                                                                         \
    TARGET LP_INLINE __m256i offset_term_##SUFFIX(__m256i av) {                                                \
        const __m256i off = _mm256_set1_epi8((char)F::offset);                                                 \
        return _mm256_sub_epi32(_mm256_setzero_si256(), DOT(_mm256_setzero_si256(), off, av));                 \
    }                                                                                                          \
    /* One (row, column) block: its int32 lanes, converted, fused-multiply-added with the scale */             \
    template <class F>                                                                                         \
    TARGET LP_INLINE __m256 step_##SUFFIX(__m256 acc, __m256i init, __m256i u, __m256i av, __m256 scale) {     \
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(init, u, av)), scale, acc);                              \
    }                                                                                                          \
    template <class F, int NR, int NC, class Rows>                                                             \
    TARGET void tile_##SUFFIX(int64_t n, const Rows& rows, const uint8_t* a, size_t as, float* out,            \
                              size_t os, const char* pf) {                                                     \
        const int64_t nb = n / 32;                                                                             \
        __m256 acc[NR][NC];                                                                                    \
        for (int r = 0; r < NR; ++r)                                                                           \
            for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();                                      \
        for (int64_t ib = 0; ib < nb; ++ib) {                                                                  \
            if (pf) tiles_avx2::prefetch_step(pf, NR * sizeof(typename F::block));                             \
            __m256i av[NC], init[NC];                                                                          \
            __m256 da[NC]; /* d_a broadcast once; dw·d_a as a vector product has the scalar product's bits */  \
            for (int c = 0; c < NC; ++c) {                                                                     \
                const block_q8_0& y = reinterpret_cast<const block_q8_0*>(a + c * as)[ib];                     \
                av[c] = _mm256_loadu_si256((const __m256i*)y.qs);                                              \
                da[c] = _mm256_set1_ps(half_to_float(y.d));                                                    \
                init[c] = offset_term_##SUFFIX<F>(av[c]);                                                      \
            }                                                                                                  \
            if constexpr (Rows::has_d4 && NR == 4 && NC == 2) {                                                \
                /* the 8 products dw·d_a in one multiply (lane by lane the bits of the */                      \
                /* broadcast products below), each read back as a broadcast load */                            \
                alignas(32) float pr[8];                                                                       \
                _mm256_store_ps(pr, _mm256_mul_ps(rows.d4(ib), _mm256_blend_ps(da[0], da[1], 0xF0)));          \
                for (int r = 0; r < NR; ++r) {                                                                 \
                    const __m256i u = rows.u(r, ib);                                                           \
                    for (int c = 0; c < NC; ++c) {                                                             \
                        acc[r][c] = step_##SUFFIX<F>(acc[r][c], init[c], u, av[c],                             \
                                                     _mm256_broadcast_ss(pr + 4 * c + r));                     \
                    }                                                                                          \
                }                                                                                              \
            } else {                                                                                           \
                for (int r = 0; r < NR; ++r) {                                                                 \
                    const __m256i u = rows.u(r, ib);                                                           \
                    const __m256 dw = _mm256_set1_ps(rows.d(r, ib));                                           \
                    for (int c = 0; c < NC; ++c) {                                                             \
                        acc[r][c] = step_##SUFFIX<F>(acc[r][c], init[c], u, av[c],                             \
                                                     _mm256_mul_ps(dw, da[c]));                                \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        for (int c = 0; c < NC; ++c)                                                                           \
            for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = hsum_f32x8(acc[r][c]);                     \
    }                                                                                                          \
    /* NR rows against nc columns, two at a time */                                                            \
    template <class F, int NR, class Rows>                                                                     \
    TARGET void cols_##SUFFIX(int64_t n, const Rows& rows, const uint8_t* a, size_t as, float* out, size_t os, \
                              int nc, const char* pf) {                                                        \
        /* the first pass over the rows prefetches them (pf: streaming from memory) */                          \
        int c = 0;                                                                                             \
        for (; c + 2 <= nc; c += 2)                                                                            \
            tile_##SUFFIX<F, NR, 2>(n, rows, a + c * as, as, out + c * os, os, c == 0 ? pf : nullptr);         \
        if (c < nc) tile_##SUFFIX<F, NR, 1>(n, rows, a + c * as, as, out + c * os, os, c == 0 ? pf : nullptr); \
    }                                                                                                          \
    template <class F, class Rows>                                                                             \
    TARGET void rows_##SUFFIX(int64_t n, const Rows& rows, int nr, const uint8_t* a, size_t as, float* out,    \
                              size_t os, int nc, const char* pf) {                                             \
        switch (nr) {                                                                                          \
            case 4: cols_##SUFFIX<F, 4>(n, rows, a, as, out, os, nc, pf); return;                              \
            case 3: cols_##SUFFIX<F, 3>(n, rows, a, as, out, os, nc, pf); return;                              \
            case 2: cols_##SUFFIX<F, 2>(n, rows, a, as, out, os, nc, pf); return;                              \
            case 1: cols_##SUFFIX<F, 1>(n, rows, a, as, out, os, nc, pf); return;                              \
            default: return;                                                                                   \
        }                                                                                                      \
    }                                                                                                          \
    template <class F>                                                                                         \
    TARGET void gemm_tile_##SUFFIX(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out,  \
                                   size_t os, int nr, int nc) {                                                \
        const auto* wb = static_cast<const uint8_t*>(w);                                                       \
        /* mat-vec and small batches stream the weights: prefetch them as one linear stream */                 \
        const char* pf = tiles_avx2::prefetch_start(wb, ws, nr);                                               \
        rows_##SUFFIX<F>(n, direct_rows<F>{wb, ws}, nr, static_cast<const uint8_t*>(a), as, out, os, nc, pf); \
    }                                                                                                          \
    /* Panels (gemm_panel_fn): up to 16 rows × 128 columns. From 4 columns on the rows are */                  \
    /* unpacked once (Q5_0: nibbles and fifth bits; Q4_0: nibbles) and every 4-row tile reads */               \
    /* them back; below that, and for mat-vec, the tiles unpack as they go. */                                 \
    template <class F>                                                                                         \
    TARGET void gemm_panel_##SUFFIX(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as,     \
                                    int nc, float* out, size_t os) {                                           \
        const auto* wb = static_cast<const uint8_t*>(w);                                                       \
        const auto* ab = static_cast<const uint8_t*>(a);                                                       \
        if (nc < 4) {                                                                                          \
            tiles_avx2::tiles_by_fours<gemm_tile_##SUFFIX<F>>(n, wb, ws, ab, as, out, os, nr, nc);             \
            return;                                                                                            \
        }                                                                                                      \
        const int64_t nb = n / 32;                                                                             \
        const unpacked buf = panel_buffer(nr, nb);                                                             \
        for (int r = 0; r < nr; ++r) {                                                                         \
            const auto* x = reinterpret_cast<const typename F::block*>(wb + r * ws);                           \
            for (int64_t ib = 0; ib < nb; ++ib) {                                                              \
                _mm256_store_si256(reinterpret_cast<__m256i*>(buf.q[r * nb + ib].b), F::row(x[ib]));                                                    \
                buf.dw[ib * kPanelRows + r] = half_to_float(x[ib].d);                                          \
            }                                                                                                  \
        }                                                                                                      \
        /* columns in groups of 8: their activations stay in L1 across the row tiles */                        \
        for (int c0 = 0; c0 < nc; c0 += 8) {                                                                   \
            const int ncc = std::min(8, nc - c0);                                                              \
            for (int r = 0; r < nr; r += 4) {                                                                  \
                const panel_rows<F> rows{buf.q + r * nb, buf.dw + r, nb};                                      \
                rows_##SUFFIX<F>(n, rows, std::min(4, nr - r), ab + c0 * as, as, out + c0 * os + r, os, ncc,   \
                                 nullptr);                                                                     \
            }                                                                                                  \
        }                                                                                                      \
    }                                                                                                          \
    /* Small batches (matvec_cols): nr rows × NC <= 4 columns, two rows at a time, each weight */            \
    /* block decoded once for all NC columns (the 4 × 2 tiles decoded it once per column pair and */          \
    /* redid the activation terms per row group). The columns' operands, offset terms and scales */           \
    /* are prepared once per call. Per (row, column) the tile's operations in its order. */                   \
    template <class F, int NR, int NC>                                                                         \
    TARGET void rows_cols_##SUFFIX(int64_t nb, const uint8_t* w, size_t ws, const col_block* prep, float* out, \
                                   size_t os) {                                                                \
        const direct_rows<F> rows{w, ws};                                                                      \
        const char* pf = tiles_avx2::prefetch_start(w, ws, NR);                                                \
        __m256 acc[NR][NC];                                                                                    \
        for (int r = 0; r < NR; ++r)                                                                           \
            for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();                                      \
        for (int64_t ib = 0; ib < nb; ++ib) {                                                                  \
            tiles_avx2::prefetch_step(pf, NR * sizeof(typename F::block));                                     \
            __m256i u[NR];                                                                                     \
            __m256 dw[NR];                                                                                     \
            for (int r = 0; r < NR; ++r) {                                                                     \
                u[r] = rows.u(r, ib);                                                                          \
                dw[r] = _mm256_set1_ps(rows.d(r, ib));                                                         \
            }                                                                                                  \
            for (int c = 0; c < NC; ++c) {                                                                     \
                const col_block& cb = prep[ib * NC + c];                                                       \
                const __m256 da = _mm256_set1_ps(cb.da);                                                       \
                for (int r = 0; r < NR; ++r) {                                                                 \
                    acc[r][c] = step_##SUFFIX<F>(acc[r][c], cb.init, u[r], cb.av,                              \
                                                 _mm256_mul_ps(dw[r], da));                                    \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        for (int r = 0; r < NR; ++r)                                                                           \
            for (int c = 0; c < NC; ++c) out[(size_t)c * os + r] = hsum_f32x8(acc[r][c]);                      \
    }                                                                                                          \
    template <class F, int NC>                                                                                 \
    TARGET void row_cols_##SUFFIX(int64_t n, const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, \
                                  float* out, size_t os) {                                                     \
        const int64_t nb = n / 32;                                                                             \
        thread_local std::vector<col_block> prep;                                                              \
        if (prep.size() < (size_t)(nb * NC)) prep.resize((size_t)(nb * NC));                                   \
        for (int64_t ib = 0; ib < nb; ++ib)                                                                    \
            for (int c = 0; c < NC; ++c) {                                                                     \
                const block_q8_0& y = reinterpret_cast<const block_q8_0*>(a + c * as)[ib];                     \
                col_block& cb = prep[ib * NC + c];                                                             \
                cb.av = _mm256_loadu_si256((const __m256i*)y.qs);                                              \
                cb.init = offset_term_##SUFFIX<F>(cb.av);                                                      \
                cb.da = half_to_float(y.d);                                                                    \
            }                                                                                                  \
        int r = 0;                                                                                             \
        for (; r + 2 <= nr; r += 2) rows_cols_##SUFFIX<F, 2, NC>(nb, w + (size_t)r * ws, ws, prep.data(), out + r, os); \
        if (r < nr) rows_cols_##SUFFIX<F, 1, NC>(nb, w + (size_t)r * ws, ws, prep.data(), out + r, os);        \
    }                                                                                                          \
    template <class F>                                                                                         \
    TARGET void matvec_cols_##SUFFIX(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out, \
                                     size_t os, int nr, int nc) {                                              \
        const auto* wb = static_cast<const uint8_t*>(w);                                                       \
        const auto* ab = static_cast<const uint8_t*>(a);                                                       \
        switch (nc) {                                                                                          \
            case 4: row_cols_##SUFFIX<F, 4>(n, wb, ws, nr, ab, as, out, os); return;                           \
            case 3: row_cols_##SUFFIX<F, 3>(n, wb, ws, nr, ab, as, out, os); return;                           \
            case 2: row_cols_##SUFFIX<F, 2>(n, wb, ws, nr, ab, as, out, os); return;                           \
            default: row_cols_##SUFFIX<F, 1>(n, wb, ws, nr, ab, as, out, os); return;                          \
        }                                                                                                      \
    }                                                                                                          \
    template <class F>                                                                                         \
    TARGET void vec_dot_##SUFFIX(int64_t n, float* out, const void* w_row, const void* a_row) {                \
        tile_##SUFFIX<F, 1, 1>(n, direct_rows<F>{static_cast<const uint8_t*>(w_row), 0},                       \
                               static_cast<const uint8_t*>(a_row), 0, out, 0, nullptr);                        \
    }

LP_LEGACY_TILE(LP_TARGET_AVX2, avx2, dot_plain)
LP_LEGACY_TILE(LP_TARGET_AVXVNNI, avxvnni, dot_vnni)
#undef LP_LEGACY_TILE

bool avx_vnni_wanted() {
    const char* env = std::getenv("LLAMAPY_AVXVNNI");
    if (env && (env[0] == '0' || env[0] == 'n' || env[0] == 'N' || env[0] == 'f' || env[0] == 'F')) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avxvnni");
}

}  // namespace

bool avx2_use_vnni() {
    static const bool on = avx_vnni_wanted();
    return on;
}

void register_legacy_tiles_avx2(type_traits* table, isa level) {
    if (level != isa::avx2) return;
    type_traits& q4_0 = table[(int)ggml_type::Q4_0];
    type_traits& q5_0 = table[(int)ggml_type::Q5_0];
    type_traits& q8_0 = table[(int)ggml_type::Q8_0];
    if (avx2_use_vnni()) {
        q4_0.vec_dot = vec_dot_avxvnni<q4_0_fmt>;
        q4_0.gemm_tile = gemm_tile_avxvnni<q4_0_fmt>;
        q4_0.gemm_panel = gemm_panel_avxvnni<q4_0_fmt>;
        q5_0.vec_dot = vec_dot_avxvnni<q5_0_fmt>;
        q5_0.gemm_tile = gemm_tile_avxvnni<q5_0_fmt>;
        q5_0.gemm_panel = gemm_panel_avxvnni<q5_0_fmt>;
    } else {
        // Q4_0 / Q5_0's vec_dot (legacy_x86.cpp) already is the tile's 1 × 1
        // sequence.
        q4_0.gemm_tile = gemm_tile_avx2<q4_0_fmt>;
        q4_0.gemm_panel = gemm_panel_avx2<q4_0_fmt>;
        q5_0.gemm_tile = gemm_tile_avx2<q5_0_fmt>;
        q5_0.gemm_panel = gemm_panel_avx2<q5_0_fmt>;
    }
    set_q8_0_tiles_avx2(q8_0, avx2_use_vnni());  // all four of its kernels
    // small batches: row_cols (two rows at a time against all columns, each
    // weight block decoded once), up to 8 rows (two calls of 4 columns), where
    // it beats the panels: Xeon at the AVX2 level, 2 threads, 2048 x 2048, 6 /
    // 8 rows: Q4_0 5.6 / 6.9 ms vs 6.2 / 8.0 through the panels, Q5_0 6.4 /
    // 7.7 vs 6.7 / 8.4, Q8_0 5.9 / 7.5 vs 7.4 / 9.6 (Gemma's head at 8 rows
    // 25.9 vs 34.2 ms)
    if (avx2_use_vnni()) {
        q4_0.matvec_cols = matvec_cols_avxvnni<q4_0_fmt>;
        q5_0.matvec_cols = matvec_cols_avxvnni<q5_0_fmt>;
    } else {
        q4_0.matvec_cols = matvec_cols_avx2<q4_0_fmt>;
        q5_0.matvec_cols = matvec_cols_avx2<q5_0_fmt>;
    }
    for (type_traits* t : {&q4_0, &q5_0, &q8_0}) t->matvec_batch_max = 8;
}

#else

void register_legacy_tiles_avx2(type_traits*, isa) {}

#endif  // LP_HAVE_AVX2

}  // namespace lp
