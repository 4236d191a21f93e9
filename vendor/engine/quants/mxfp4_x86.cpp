// mxfp4_x86.cpp — the x86 kernels of MXFP4 against Q8_0 activations
// (format, reference and registration: mxfp4.cpp, mxfp4.h), at the AVX2 and
// the AVX-512 level. A portable build without LP_ENABLE_AVX2 compiles this
// file to the empty registration.
//
// Every (row, column) pair goes through the same arithmetic whatever the
// call (vec_dot, gemm_tile, matvec_cols, at AVX2 gemm_panel), so a row's
// result does not depend on the batch it came in (tests/test_mxfp4.py checks
// it). Against the reference the results differ by float summation order
// only.
//
// The codes become their table values with one byte shuffle (vpshufb) per 16.
// The table is looked up offset by +12 (0..24, unsigned), the unsigned
// operand maddubs and vpdpbusd want, and each activation block's integer
// sums start from -12 · (the sum of the bytes they cover), computed once per
// activation block for all rows: they hold the exact signed dot product
// (maddubs' int16 pairs at most 2 · 24 · 127, no saturation). The weight
// scale 2^(e - 128) is exact, and d_a · 2^(e - 128) is the reference's
// product; each block adds its integer sums times that product into float
// accumulators, summed at the end.
//
// AVX-512: per block 8 int32 lanes of 4 products each (16 = two blocks per
// vector), one vpdpbusd; a tile (NR x NC, gemm_tile 4 x 4 at most) prepares
// its activation blocks as it goes, matvec_cols (a group of rows against up
// to 4 columns) once for all its rows.
//
// AVX2 (no vpdpbusd: maddubs then madd, both on the one integer-multiply
// pipe of Zen 2): per block and product two int32 sums, of the block's lower
// and upper 16 bytes, each multiplied into its own float chain; the product
// is the lower chain + the upper chain. Four products share a vector, [lo x4
// | hi x4]: four maddubs, then 16-bit adds (exact: a word holds at most 8
// products, 24384) and one madd, one conversion, one scale product and one
// fma for all four, where the 8-lane form took a madd, a conversion, a
// product and an fma per product. The tiles (vec_dot, gemm_tile,
// matvec_cols) put four rows against one column in a vector, the panel
// (mat-mat) one row against four columns, its rows unpacked once per call;
// the integers and each lane's float steps are the same either way.
//
// Not here: an AVX-VNNI variant of the AVX2 level (the legacy types have
// one; Alder Lake-class CPUs without AVX-512 would gain from it).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../common.h"
#include "blocks.h"
#include "mxfp4.h"

#if defined(LP_X86)
// GCC 12 reports the self-initialised placeholder inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialised at -O3 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "simd_x86.h"
#include "tiles_avx2_common.h"

namespace lp {

#if defined(LP_HAVE_AVX2)

namespace {

constexpr int kOffset = 12;  // -min(kvalues_mxfp4): the offset table is unsigned

struct offset_table {
    alignas(16) uint8_t v[16];
};
constexpr offset_table make_offset_table() {
    offset_table t{};
    for (int i = 0; i < 16; ++i) t.v[i] = (uint8_t)(kvalues_mxfp4[i] + kOffset);
    return t;
}
constexpr offset_table kvalues_u8 = make_offset_table();

// 2^(e - 128) for every exponent byte, so a kernel takes a block's scale
// with one load (vbroadcastss) instead of building its bits. The powers of
// two are exact in double and as floats (e = 0, 1: subnormal floats), so
// entry e is e8m0_half(e) bit for bit.
struct scale_table {
    float v[256];
};
constexpr scale_table make_scale_table() {
    scale_table t{};
    double p = 0x1p-128;
    for (int e = 0; e < 256; ++e, p *= 2) t.v[e] = (float)p;
    return t;
}
constexpr scale_table kscale = make_scale_table();

// The blocks of weight row r / activation row c.
inline const block_mxfp4* w_row(const uint8_t* w, size_t ws, int r) {
    return reinterpret_cast<const block_mxfp4*>(w + (size_t)r * ws);
}
inline const block_q8_0* a_row(const uint8_t* a, size_t as, int c) {
    return reinterpret_cast<const block_q8_0*>(a + (size_t)c * as);
}

// ===========================================================================
// AVX2: per block and product two int32 sums (the block's halves), four
// products to a vector
// ===========================================================================
namespace avx2 {

using tiles_avx2::bytes32;
using tiles_avx2::floats8;
using x86::half_to_float;

// A weight block's 32 codes as table value + 12, in element order: the 16
// code bytes in both halves, the upper half's dwords shifted right by 4 (so
// each byte's low nibble is its own high nibble; a neighbour's bits land
// above it and are masked off).
LP_TARGET_AVX2 LP_INLINE __m256i codes_u8(const block_mxfp4& b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)kvalues_u8.v));
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)b.qs));
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                         _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(table, idx);
}

// Four int16 vectors (maddubs results: |word| <= 2 · 24 · 127) reduced to
// their half sums times `ones` (words of +1 or -1): [lo(m0) lo(m1) lo(m2)
// lo(m3) | hi(m0) .. hi(m3)], lo / hi the sum of the 8 words of the lower /
// upper 128-bit half. The words are first added in int16 by unpacks and
// 16-bit adds (a word then holds 8 products, |.| <= 24384: exact), so one
// madd widens all four: maddubs and madd share one pipe on Zen 2, the
// unpacks and adds run on others.
LP_TARGET_AVX2 LP_INLINE __m256i half_sums4(__m256i m0, __m256i m1, __m256i m2, __m256i m3, __m256i ones) {
    const __m256i t01 = _mm256_add_epi16(_mm256_unpacklo_epi32(m0, m1), _mm256_unpackhi_epi32(m0, m1));
    const __m256i t23 = _mm256_add_epi16(_mm256_unpacklo_epi32(m2, m3), _mm256_unpackhi_epi32(m2, m3));
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23)),
                             ones);
}

// One int16 vector's half sums (times `ones`) in every lane of their half:
// [lo lo lo lo | hi hi hi hi], the same integers as half_sums4's.
LP_TARGET_AVX2 LP_INLINE __m256i half_sums1(__m256i m, __m256i ones) {
    __m256i x = _mm256_madd_epi16(m, ones);
    x = _mm256_add_epi32(x, _mm256_shuffle_epi32(x, 0x4E));
    return _mm256_add_epi32(x, _mm256_shuffle_epi32(x, 0xB1));
}

// The result of a product's accumulator lanes j (lower half) and j + 4
// (upper half), for j = 0..3 at once.
LP_TARGET_AVX2 LP_INLINE __m128 finish4(__m256 acc) {
    return _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
}

// An activation block as every row uses it: its bytes, the offset term
// [-12 · lo(a) x4 | -12 · hi(a) x4], d_a in every lane. alignas: outside an
// AVX target (std::vector's code in a portable build) GCC aligns __m256i
// members to 16 only, and the kernels' aligned stores into the prepared
// buffer would fault.
struct alignas(32) act_block {
    __m256i a, init;
    __m256 d;
};
LP_TARGET_AVX2 LP_INLINE act_block load_act(const block_q8_0& y) {
    act_block r;
    r.a = _mm256_loadu_si256((const __m256i*)y.qs);
    r.init = half_sums1(_mm256_maddubs_epi16(_mm256_set1_epi8(kOffset), r.a), _mm256_set1_epi16(-1));
    r.d = _mm256_set1_ps(half_to_float(y.d));
    return r;
}

// Where a tile's activation blocks come from: prepared as it goes, or read
// back from a call's buffer (load_act's values either way).
struct acts_direct {
    const uint8_t* a;
    size_t as;
    LP_TARGET_AVX2 LP_INLINE act_block at(int c, int64_t ib) const { return load_act(a_row(a, as, c)[ib]); }
};
template <int NC>
struct acts_prepared {
    const act_block* p;  // [block][column]
    LP_TARGET_AVX2 LP_INLINE const act_block& at(int c, int64_t ib) const { return p[ib * NC + c]; }
};

// NR <= 4 rows x NC <= 4 columns straight from the blocks (vec_dot,
// mat-vec, small batches): per block the rows' codes and the vector
// [d_w(r0) .. d_w(r3) | the same] once, then per column one vector of the
// four rows' half sums (rows past NR repeat the last row). pf: the linear
// prefetch stream over the rows (mat-vec), or nullptr.
template <int NR, int NC, class Acts>
LP_TARGET_AVX2 void tile(int64_t n, const uint8_t* w, size_t ws, const Acts& acts, float* out, size_t os,
                         const char* pf) {
    static_assert(NR >= 1 && NR <= 4 && NC >= 1 && NC <= 4, "a tile is at most 4 x 4");
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib) {
        if (pf) tiles_avx2::prefetch_step(pf, NR * sizeof(block_mxfp4));
        if constexpr (NR == 1) {
            const block_mxfp4& b = w_row(w, ws, 0)[ib];
            const __m256i u = codes_u8(b);
            const __m256 dw = _mm256_broadcast_ss(&kscale.v[b.e]);
            for (int c = 0; c < NC; ++c) {
                const act_block& y = acts.at(c, ib);
                const __m256i x = half_sums1(_mm256_maddubs_epi16(u, y.a), ones);
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(x, y.init)), _mm256_mul_ps(dw, y.d),
                                         acc[c]);
            }
        } else {
            const block_mxfp4& b0 = w_row(w, ws, 0)[ib];
            const block_mxfp4& b1 = w_row(w, ws, 1)[ib];
            const block_mxfp4& b2 = w_row(w, ws, NR > 2 ? 2 : NR - 1)[ib];
            const block_mxfp4& b3 = w_row(w, ws, NR > 3 ? 3 : NR - 1)[ib];
            const __m256i u0 = codes_u8(b0), u1 = codes_u8(b1), u2 = codes_u8(b2), u3 = codes_u8(b3);
            const __m128 d4 = _mm_setr_ps(kscale.v[b0.e], kscale.v[b1.e], kscale.v[b2.e], kscale.v[b3.e]);
            const __m256 dw = _mm256_set_m128(d4, d4);
            for (int c = 0; c < NC; ++c) {
                const act_block& y = acts.at(c, ib);
                const __m256i x = half_sums4(_mm256_maddubs_epi16(u0, y.a), _mm256_maddubs_epi16(u1, y.a),
                                             _mm256_maddubs_epi16(u2, y.a), _mm256_maddubs_epi16(u3, y.a), ones);
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(x, y.init)), _mm256_mul_ps(dw, y.d),
                                         acc[c]);
            }
        }
    }
    for (int c = 0; c < NC; ++c) {
        alignas(16) float v[4];
        _mm_store_ps(v, finish4(acc[c]));
        for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = v[r];
    }
}

template <int NR>
LP_TARGET_AVX2 void tile_cols(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                              size_t os, int nc, const char* pf) {
    const acts_direct acts{a, as};
    switch (nc) {
        case 4: tile<NR, 4>(n, w, ws, acts, out, os, pf); return;
        case 3: tile<NR, 3>(n, w, ws, acts, out, os, pf); return;
        case 2: tile<NR, 2>(n, w, ws, acts, out, os, pf); return;
        default: tile<NR, 1>(n, w, ws, acts, out, os, pf); return;
    }
}

// gemm_tile_fn: nr <= 4 rows x nc <= 4 columns.
LP_TARGET_AVX2 void gemm_tile(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out, size_t os,
                              int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    const char* pf = tiles_avx2::prefetch_start(wb, ws, nr);
    switch (nr) {
        case 4: tile_cols<4>(n, wb, ws, ab, as, out, os, nc, pf); return;
        case 3: tile_cols<3>(n, wb, ws, ab, as, out, os, nc, pf); return;
        case 2: tile_cols<2>(n, wb, ws, ab, as, out, os, nc, pf); return;
        default: tile_cols<1>(n, wb, ws, ab, as, out, os, nc, pf); return;
    }
}

// matvec_cols: the columns' blocks prepared once, then the rows four at a
// time against all of them, so each weight block is decoded once.
template <int NC>
LP_TARGET_AVX2 void row_quads(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                              size_t os, int nr) {
    const int64_t nb = n / QK_MXFP4;
    thread_local std::vector<act_block> prep;
    if (prep.size() < (size_t)(nb * NC)) prep.resize((size_t)(nb * NC));
    for (int64_t ib = 0; ib < nb; ++ib)
        for (int c = 0; c < NC; ++c) prep[ib * NC + c] = load_act(a_row(a, as, c)[ib]);
    const acts_prepared<NC> acts{prep.data()};
    for (int r = 0; r < nr; r += 4) {
        const uint8_t* wr = w + (size_t)r * ws;
        const int k = nr - r < 4 ? nr - r : 4;
        const char* pf = tiles_avx2::prefetch_start(wr, ws, k);
        switch (k) {
            case 4: tile<4, NC>(n, wr, ws, acts, out + r, os, pf); break;
            case 3: tile<3, NC>(n, wr, ws, acts, out + r, os, pf); break;
            case 2: tile<2, NC>(n, wr, ws, acts, out + r, os, pf); break;
            default: tile<1, NC>(n, wr, ws, acts, out + r, os, pf); break;
        }
    }
}

LP_TARGET_AVX2 void matvec_cols(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out, size_t os,
                                int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    switch (nc) {
        case 4: row_quads<4>(n, wb, ws, ab, as, out, os, nr); return;
        case 3: row_quads<3>(n, wb, ws, ab, as, out, os, nr); return;
        case 2: row_quads<2>(n, wb, ws, ab, as, out, os, nr); return;
        default: row_quads<1>(n, wb, ws, ab, as, out, os, nr); return;
    }
}

LP_TARGET_AVX2 void vec_dot(int64_t n, float* out, const void* w, const void* a) {
    tile<1, 1>(n, static_cast<const uint8_t*>(w), 0, acts_direct{static_cast<const uint8_t*>(a), 0}, out, 0, nullptr);
}

// ---------------------------------------------------------------------------
// The panel (mat-mat): the other orientation of the same sums. Per block one
// vector holds one row's half sums against a quad of four columns, [lo(c0)
// .. lo(c3) | hi(c0) .. hi(c3)], so a row's codes are decoded once per panel
// (into a buffer) instead of once per tile, and the columns' offset terms
// and d_a once per call instead of once per row tile.
// ---------------------------------------------------------------------------

// A column quad's block: the four columns' bytes (copied: aligned loads,
// where the 34-byte Q8_0 blocks straddle cache lines), their offset terms
// [-12 · lo(a_c0) .. | -12 · hi(a_c0) ..] and d_a [d_c0 .. d_c3 | the same].
// alignas: as act_block's.
struct alignas(32) quad_block {
    __m256i a[4];
    __m256i init;
    __m256 d;
};

// The column quads' blocks (a short last quad repeats its last column).
LP_TARGET_AVX2 void prepare_quads(const uint8_t* a, size_t as, int nc, int64_t nb, quad_block* dst) {
    const __m256i offset = _mm256_set1_epi8(kOffset), minus = _mm256_set1_epi16(-1);
    for (int q = 0; 4 * q < nc; ++q) {
        const block_q8_0* y[4];
        for (int j = 0; j < 4; ++j) y[j] = a_row(a, as, 4 * q + j < nc ? 4 * q + j : nc - 1);
        for (int64_t ib = 0; ib < nb; ++ib) {
            quad_block& qb = dst[q * nb + ib];
            __m256i m[4];
            for (int j = 0; j < 4; ++j) {
                qb.a[j] = _mm256_loadu_si256((const __m256i*)y[j][ib].qs);
                m[j] = _mm256_maddubs_epi16(offset, qb.a[j]);
            }
            qb.init = half_sums4(m[0], m[1], m[2], m[3], minus);
            const __m128 d = _mm_setr_ps(half_to_float(y[0][ib].d), half_to_float(y[1][ib].d),
                                         half_to_float(y[2][ib].d), half_to_float(y[3][ib].d));
            qb.d = _mm256_set_m128(d, d);
        }
    }
}

// NR <= 4 unpacked rows (codes u and d_w, row r at r · nb) against one
// column quad (its blocks qb; the first ncq columns are stored).
template <int NR>
LP_TARGET_AVX2 void quad_tile(int64_t nb, const bytes32* u, const float* dw, const quad_block* qb, float* out,
                              size_t os, int ncq) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ++ib) {
        const __m256i a0 = _mm256_load_si256(&qb[ib].a[0]), a1 = _mm256_load_si256(&qb[ib].a[1]);
        const __m256i a2 = _mm256_load_si256(&qb[ib].a[2]), a3 = _mm256_load_si256(&qb[ib].a[3]);
        const __m256i init = _mm256_load_si256(&qb[ib].init);
        const __m256 d = _mm256_load_ps((const float*)&qb[ib].d);
        for (int r = 0; r < NR; ++r) {
            const __m256i ur = _mm256_load_si256((const __m256i*)u[r * nb + ib].b);
            const __m256i x = half_sums4(_mm256_maddubs_epi16(ur, a0), _mm256_maddubs_epi16(ur, a1),
                                         _mm256_maddubs_epi16(ur, a2), _mm256_maddubs_epi16(ur, a3), ones);
            // d_w(r) · d_c lane by lane: the scalar product's bits, as the row tiles' d_w(r) · d_a
            const __m256 s = _mm256_mul_ps(_mm256_broadcast_ss(&dw[r * nb + ib]), d);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(x, init)), s, acc[r]);
        }
    }
    for (int r = 0; r < NR; ++r) {
        alignas(16) float v[4];
        _mm_store_ps(v, finish4(acc[r]));
        for (int c = 0; c < ncq; ++c) out[(size_t)c * os + r] = v[c];
    }
}

// gemm_panel_fn: up to panel_rows rows x panel_cols columns. From 4 columns
// on, the columns' quads are prepared once per call and the rows unpacked in
// sub-panels of kPanelRows; each column quad then runs over a sub-panel's
// row tiles while its blocks stay in L1. Below 4 columns, the row tiles on
// the blocks (same bits).
LP_TARGET_AVX2 void gemm_panel(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nc,
                               float* out, size_t os) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    if (nc < 4) {
        tiles_avx2::tiles_by_fours<gemm_tile>(n, wb, ws, ab, as, out, os, nr, nc);
        return;
    }
    const int64_t nb = n / QK_MXFP4;
    const int nq = (nc + 3) / 4;
    thread_local std::vector<quad_block> quads;
    thread_local std::vector<bytes32> codes;
    thread_local std::vector<float> scales;
    if (quads.size() < (size_t)(nq * nb)) quads.resize((size_t)(nq * nb));
    if (codes.size() < (size_t)(kPanelRows * nb)) codes.resize((size_t)(kPanelRows * nb));
    if (scales.size() < (size_t)(kPanelRows * nb)) scales.resize((size_t)(kPanelRows * nb));
    prepare_quads(ab, as, nc, nb, quads.data());
    for (int s0 = 0; s0 < nr; s0 += kPanelRows) {
        const int ns = nr - s0 < kPanelRows ? nr - s0 : kPanelRows;
        for (int r = 0; r < ns; ++r) {
            const block_mxfp4* x = w_row(wb, ws, s0 + r);
            for (int64_t ib = 0; ib < nb; ++ib) {
                _mm256_store_si256((__m256i*)codes[r * nb + ib].b, codes_u8(x[ib]));
                scales[r * nb + ib] = kscale.v[x[ib].e];
            }
        }
        for (int q = 0; q < nq; ++q) {
            const int ncq = nc - 4 * q < 4 ? nc - 4 * q : 4;
            const quad_block* qb = quads.data() + q * nb;
            float* oq = out + (size_t)(4 * q) * os + s0;
            for (int r = 0; r < ns; r += 4) {
                const bytes32* u = codes.data() + r * nb;
                const float* dw = scales.data() + r * nb;
                switch (ns - r < 4 ? ns - r : 4) {
                    case 4: quad_tile<4>(nb, u, dw, qb, oq + r, os, ncq); break;
                    case 3: quad_tile<3>(nb, u, dw, qb, oq + r, os, ncq); break;
                    case 2: quad_tile<2>(nb, u, dw, qb, oq + r, os, ncq); break;
                    default: quad_tile<1>(nb, u, dw, qb, oq + r, os, ncq); break;
                }
            }
        }
    }
}

}  // namespace avx2

// ===========================================================================
// AVX-512: two blocks per step in one 512-bit vector, 16 int32 lanes
// ===========================================================================
#if defined(LP_HAVE_AVX512)
namespace avx512 {

// Two blocks' codes (blocks x0, x1) as table value + 12, in the order of
// two Q8_0 blocks loaded side by side: 128-bit lanes [x0 elements 0-15,
// x0 16-31, x1 0-15, x1 16-31]. Each block's 16 code bytes are broadcast
// to two lanes, of which the second takes the high nibbles.
LP_TARGET_AVX512 LP_INLINE __m512i codes_u8(const block_mxfp4& x0, const block_mxfp4& x1) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i*)kvalues_u8.v));
    const __m256i q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)x0.qs));
    const __m256i q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)x1.qs));
    __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    q = _mm512_mask_srli_epi16(q, (__mmask32)0xff00ff00u, q, 4);  // lanes 1 and 3: high nibbles
    return _mm512_shuffle_epi8(table, _mm512_and_si512(q, _mm512_set1_epi8(0x0f)));
}

// Two blocks' weight scales, x0's in lanes 0-7 and x1's in lanes 8-15 (two
// broadcast loads from the table).
LP_TARGET_AVX512 LP_INLINE __m512 weight_scales(const block_mxfp4& x0, const block_mxfp4& x1) {
    return _mm512_insertf32x8(_mm512_set1_ps(kscale.v[x0.e]), _mm256_set1_ps(kscale.v[x1.e]), 1);
}

// Two activation blocks (or one, the other half zero) as every row uses them.
struct alignas(64) act_pair {  // alignas: as act_block's at AVX2
    __m512i a, init;  // bytes; -12 · sum per int32 lane
    __m512 d;         // d_a of each block over its 8 lanes (0 for a missing block)
};
template <bool TWO>
LP_TARGET_AVX512 LP_INLINE act_pair load_act(const block_q8_0* y) {
    act_pair r;
    // the two fp16 scales broadcast over 8 words each, converted at once
    const __m256i d0 = _mm256_set1_epi16((short)y[0].d);
    if constexpr (TWO) {
        r.a = x86::load_pair_32(y[0].qs, y[1].qs);
        r.d = _mm512_cvtph_ps(_mm256_mask_set1_epi16(d0, (__mmask16)0xff00, (short)y[1].d));
    } else {
        r.a = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)y[0].qs));
        r.d = _mm512_cvtph_ps(_mm256_maskz_mov_epi16((__mmask16)0x00ff, d0));
    }
    r.init = _mm512_sub_epi32(_mm512_setzero_si512(),
                              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(kOffset), r.a));
    return r;
}

// Where a tile's activation pairs come from (as at AVX2): prepared as it
// goes, or read back from a call's buffer, one entry per pair and column
// (the lone last block of an odd count in the last one).
struct acts_direct {
    const uint8_t* a;
    size_t as;
    template <bool TWO>
    LP_TARGET_AVX512 LP_INLINE act_pair at(int c, int64_t ib) const {
        return load_act<TWO>(a_row(a, as, c) + ib);
    }
};
template <int NC>
struct acts_prepared {
    const act_pair* p;  // [pair][column]
    template <bool TWO>
    LP_TARGET_AVX512 LP_INLINE const act_pair& at(int c, int64_t ib) const {
        return p[ib / 2 * NC + c];
    }
};

// One step of NR rows x NC columns over the blocks ib, ib + 1 (TWO) or ib
// alone: a missing second block enters as zero bytes (its codes repeat the
// first block's, which stays in bounds) with zero scales, so its lanes add
// +0 to the accumulators.
template <int NR, int NC, bool TWO, class Acts>
LP_TARGET_AVX512 LP_INLINE void step(__m512 (&acc)[NR][NC], int64_t ib, const uint8_t* w, size_t ws,
                                     const Acts& acts) {
    act_pair act[NC];
    for (int c = 0; c < NC; ++c) act[c] = acts.template at<TWO>(c, ib);
    for (int r = 0; r < NR; ++r) {
        const block_mxfp4* x = w_row(w, ws, r) + ib;
        const block_mxfp4& x1 = TWO ? x[1] : x[0];
        const __m512i u = codes_u8(x[0], x1);
        const __m512 dw = weight_scales(x[0], x1);
        for (int c = 0; c < NC; ++c) {
            const __m512 lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(act[c].init, u, act[c].a));
            acc[r][c] = _mm512_fmadd_ps(lanes, _mm512_mul_ps(dw, act[c].d), acc[r][c]);
        }
    }
}

// NR <= 4 rows x NC <= 4 columns. pf: the linear prefetch stream over the
// rows (weights from memory), or nullptr.
template <int NR, int NC, class Acts>
LP_TARGET_AVX512 void tile(int64_t n, const uint8_t* w, size_t ws, const Acts& acts, float* out, size_t os,
                           const char* pf) {
    const int64_t nb = n / QK_MXFP4;
    __m512 acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        if (pf) x86::prefetch_step<NR * 2 * (int)sizeof(block_mxfp4)>(pf);
        step<NR, NC, true>(acc, ib, w, ws, acts);
    }
    if (ib < nb) step<NR, NC, false>(acc, ib, w, ws, acts);
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r) out[(size_t)c * os + r] = _mm512_reduce_add_ps(acc[r][c]);
}

template <int NR, class Acts>
LP_TARGET_AVX512 void tile_cols(int64_t n, const uint8_t* w, size_t ws, const Acts& acts, float* out, size_t os,
                                int nc, const char* pf) {
    switch (nc) {
        case 4: tile<NR, 4>(n, w, ws, acts, out, os, pf); return;
        case 3: tile<NR, 3>(n, w, ws, acts, out, os, pf); return;
        case 2: tile<NR, 2>(n, w, ws, acts, out, os, pf); return;
        default: tile<NR, 1>(n, w, ws, acts, out, os, pf); return;
    }
}

template <class Acts>
LP_TARGET_AVX512 void tile_rows(int64_t n, const uint8_t* w, size_t ws, const Acts& acts, float* out, size_t os,
                                int nr, int nc) {
    const char* pf = x86::prefetch_start(w, ws, nr);
    switch (nr) {
        case 4: tile_cols<4>(n, w, ws, acts, out, os, nc, pf); return;
        case 3: tile_cols<3>(n, w, ws, acts, out, os, nc, pf); return;
        case 2: tile_cols<2>(n, w, ws, acts, out, os, nc, pf); return;
        default: tile_cols<1>(n, w, ws, acts, out, os, nc, pf); return;
    }
}

LP_TARGET_AVX512 void gemm_tile(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out, size_t os,
                                int nr, int nc) {
    tile_rows(n, static_cast<const uint8_t*>(w), ws, acts_direct{static_cast<const uint8_t*>(a), as}, out, os, nr, nc);
}

// matvec_cols: the columns' pairs prepared once, then the rows 4 at a time.
template <int NC>
LP_TARGET_AVX512 void rows_by_fours(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
                                    size_t os, int nr) {
    const int64_t nb = n / QK_MXFP4, n_pairs = (nb + 1) / 2;
    thread_local std::vector<act_pair> prep;
    if (prep.size() < (size_t)(n_pairs * NC)) prep.resize((size_t)(n_pairs * NC));
    for (int c = 0; c < NC; ++c) {
        const block_q8_0* y = a_row(a, as, c);
        for (int64_t ib = 0; ib < nb; ib += 2)
            prep[ib / 2 * NC + c] = ib + 2 <= nb ? load_act<true>(y + ib) : load_act<false>(y + ib);
    }
    const acts_prepared<NC> acts{prep.data()};
    for (int r = 0; r < nr; r += 4) tile_rows(n, w + (size_t)r * ws, ws, acts, out + r, os, nr - r < 4 ? nr - r : 4, NC);
}

LP_TARGET_AVX512 void matvec_cols(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out,
                                  size_t os, int nr, int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
    switch (nc) {
        case 4: rows_by_fours<4>(n, wb, ws, ab, as, out, os, nr); return;
        case 3: rows_by_fours<3>(n, wb, ws, ab, as, out, os, nr); return;
        case 2: rows_by_fours<2>(n, wb, ws, ab, as, out, os, nr); return;
        default: rows_by_fours<1>(n, wb, ws, ab, as, out, os, nr); return;
    }
}

LP_TARGET_AVX512 void vec_dot(int64_t n, float* out, const void* w, const void* a) {
    tile<1, 1>(n, static_cast<const uint8_t*>(w), 0, acts_direct{static_cast<const uint8_t*>(a), 0}, out, 0, nullptr);
}

}  // namespace avx512
#endif  // LP_HAVE_AVX512

}  // namespace

void register_mxfp4_x86(type_traits* table, isa level) {
    type_traits& t = table[(int)ggml_type::MXFP4];
    if (level == isa::avx2) {
        t.vec_dot = avx2::vec_dot;
        t.gemm_tile = avx2::gemm_tile;
        t.matvec_cols = avx2::matvec_cols;
        t.gemm_panel = avx2::gemm_panel;
        // 128 rows a call: the columns' quads, prepared once per call, serve
        // eight sub-panels of rows (Zen 2, 2 threads: 1-4 % faster than 64 on
        // dense 2880 x 2880 x 64 tokens, 0.5-1 % on the experts' products)
        t.panel_rows = 8 * kPanelRows;
        t.matvec_by_cols = true;
        t.vec_dot_isa = isa::avx2;
    }
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) {
        t.vec_dot = avx512::vec_dot;
        t.gemm_tile = avx512::gemm_tile;
        t.matvec_cols = avx512::matvec_cols;
        t.vec_dot_isa = isa::avx512;
    }
#endif
}

#else

void register_mxfp4_x86(type_traits*, isa) {}

#endif  // LP_HAVE_AVX2

}  // namespace lp
