// legacy_panels_x86.cpp — AVX-512 VNNI kernels of Q4_0, Q5_0 and Q8_0 with
// weight rows in vector lanes: the mat-mat panel (up to 16 weight rows × up
// to 128 activation rows per call, ggml_type.h: gemm_panel_fn), the mat-vec
// that gives the same result bit for bit, and the single-row dot product on
// the same code. Formats and registration: legacy.cpp / legacy_x86.cpp.
//
// Layout. Lane r of a vector belongs to weight row r; dword t of a block
// (t < 8) holds the block's elements 4t..4t+3 as unsigned bytes (Q4_0: q,
// Q5_0: q, Q8_0: q + 128). vpdpbusd of such a vector against the broadcast
// dword t of one activation block adds that column's 4 products to each of
// the 16 rows at once: 8 vpdpbusd per block and column, no horizontal
// reductions and no shuffles in the inner loop. The weights are brought into
// this layout with dword gathers (16 rows, one per lane) and unpacked:
//   mat-mat: once per call into a panel in L1 (16 rows × K: ~36 KB at
//            K = 2048), then reused by all columns, 4 at a time;
//   mat-vec: unpacked block by block and used at once (each weight is used
//            once, so a panel would only add stores), with a linear software
//            prefetch over the 16 rows' bytes (see simd_x86.h: why).
// The offset of the unsigned weights (8, 16, 128) is removed in integers: the
// vpdpbusd chain starts at −offset·Σa for its column and block, computed once
// per call.
//
// Float part, per (row, column): acc = 0; for each block b in order
//   acc = fma(float(isum_b), d_w(b) · d_a(b), acc)
// with isum_b the exact integer block sum (|isum| < 2^24, so float(isum) is
// exact). Mat-mat and mat-vec do exactly these IEEE operations in this order
// per lane, so a batch gives what one token at a time gives. (The AVX2 level
// keeps its own order: levels are compared with tolerances, not bits.)
#include "legacy_x86.h"

#include <cstddef>
#include <algorithm>
#include <cstring>
#include <vector>

#include "../common.h"
#include "blocks.h"

#if defined(LP_X86)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "simd_x86.h"

namespace lp {

#if defined(LP_HAVE_AVX512)
namespace {

using namespace x86;

static_assert(kPanelRows == 16, "one weight row per lane of a 512-bit vector");
constexpr int kBlock = 32;    // elements per block (all three formats)

// Per format: the unsigned-quant offset and the unpacking of block b of 16
// rows (base = row 0's block b, idx = row r's byte offset in lane r, m = the
// rows that exist) into 8 dword vectors and the 16 rows' scales.
struct fmt_q4_0 {
    using block = block_q4_0;
    static constexpr int offset = 8;
    LP_TARGET_AVX512 static LP_INLINE void unpack(const uint8_t* base, __m512i idx, __mmask16 m, __m512i* w,
                                                  __m512* d) {
        const __m512i z = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0f);
        const __m512i dq = _mm512_mask_i32gather_epi32(z, m, idx, base, 1);  // low word: d
        *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dq));
        for (int t = 0; t < 4; ++t) {
            // byte j of qs: element j (low nibble) and element 16 + j (high)
            const __m512i g = _mm512_mask_i32gather_epi32(z, m, idx, base + offsetof(block, qs) + 4 * t, 1);
            w[t] = _mm512_and_si512(g, m4);
            w[t + 4] = _mm512_and_si512(_mm512_srli_epi32(g, 4), m4);
        }
    }
};

struct fmt_q5_0 {
    using block = block_q5_0;
    static constexpr int offset = 16;
    LP_TARGET_AVX512 static LP_INLINE void unpack(const uint8_t* base, __m512i idx, __mmask16 m, __m512i* w,
                                                  __m512* d) {
        const __m512i z = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
        const __m512i dq = _mm512_mask_i32gather_epi32(z, m, idx, base, 1);
        *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dq));
        const __m512i qh = _mm512_mask_i32gather_epi32(z, m, idx, base + offsetof(block, qh), 1);
        for (int t = 0; t < 4; ++t) {
            const __m512i g = _mm512_mask_i32gather_epi32(z, m, idx, base + offsetof(block, qs) + 4 * t, 1);
            w[t] = _mm512_and_si512(g, m4);
            w[t + 4] = _mm512_and_si512(_mm512_srli_epi32(g, 4), m4);
        }
        // Bit e of qh is the fifth bit of element e. Elements 4t..4t+3 have
        // theirs in byte t/2 of qh, bits 4(t%2)..4(t%2)+3: replicate that
        // byte over the dword, test one bit per byte, add 16 where set.
        const __m512i bits_even = _mm512_set1_epi32(0x08040201), bits_odd = _mm512_set1_epi32((int)0x80402010);
        // (vpshufb indexes within 128-bit lanes: byte k of dword j is 4j + k)
        const __m512i own = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
        for (int k = 0; k < 4; ++k) {  // qh byte k: elements 8k..8k+7 = dwords 2k, 2k+1
            const __m512i rep = _mm512_shuffle_epi8(qh, _mm512_add_epi32(own, _mm512_set1_epi32(0x01010101 * k)));
            const __mmask64 lo = _mm512_test_epi8_mask(rep, bits_even), hi = _mm512_test_epi8_mask(rep, bits_odd);
            w[2 * k] = _mm512_mask_add_epi8(w[2 * k], lo, w[2 * k], sixteen);
            w[2 * k + 1] = _mm512_mask_add_epi8(w[2 * k + 1], hi, w[2 * k + 1], sixteen);
        }
    }
};

struct fmt_q8_0 {
    using block = block_q8_0;
    static constexpr int offset = 128;
    LP_TARGET_AVX512 static LP_INLINE void unpack(const uint8_t* base, __m512i idx, __mmask16 m, __m512i* w,
                                                  __m512* d) {
        const __m512i z = _mm512_setzero_si512(), flip = _mm512_set1_epi8((char)0x80);
        const __m512i dq = _mm512_mask_i32gather_epi32(z, m, idx, base, 1);
        *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dq));
        for (int t = 0; t < 8; ++t)
            w[t] = _mm512_xor_si512(_mm512_mask_i32gather_epi32(z, m, idx, base + offsetof(block, qs) + 4 * t, 1), flip);
    }
};

// Row r's byte offset in lane r (r < nr; the other lanes are masked off).
LP_TARGET_AVX512 LP_INLINE __m512i row_offsets(size_t w_stride) {
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32((int)w_stride));
}

// Per activation row and block: d as float and −offset·Σa (the chain start).
struct act_info {
    float d;
    int32_t start;
};

template <int offset>
LP_TARGET_AVX512 void prepare_activations(int64_t nb, const uint8_t* a, size_t a_stride, int nc, act_info* info) {
    const __m256i k = _mm256_set1_epi8(1);
    for (int c = 0; c < nc; ++c) {
        const auto* y = reinterpret_cast<const block_q8_0*>(a + c * a_stride);
        act_info* out = info + c * nb;
        for (int64_t b = 0; b < nb; ++b) {
            // Σa over 32 int8 as 8 int32 lanes (vpdpbusd against ones), then summed
            const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), k, _mm256_loadu_si256((const __m256i*)y[b].qs));
            out[b].start = -offset * hsum_i32x8(s);
            out[b].d = half_to_float(y[b].d);
        }
    }
}

// Software prefetch over the rows' bytes as one linear stream (simd_x86.h).
LP_TARGET_AVX512 LP_INLINE void prefetch_bytes(const char*& p, int bytes) {
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
    p += bytes;
}

// One column against the 16 rows' block b (unpacked into w, scales dw).
LP_TARGET_AVX512 LP_INLINE __m512 block_step(const __m512i* w, __m512 dw, const uint8_t* qa, act_info ai, __m512 acc) {
    __m512i s0 = _mm512_set1_epi32(ai.start), s1 = _mm512_setzero_si512();
    // Each activation dword broadcast straight from memory (a load-port
    // broadcast, foldable into vpdpbusd): taking them through general
    // registers cost a move, a shift and a shuffle-port broadcast per dword,
    // about as many instructions as the vpdpbusd themselves.
    for (int t = 0; t < 8; t += 2) {
        s0 = _mm512_dpbusd_epi32(s0, w[t], _mm512_broadcastd_epi32(_mm_loadu_si32(qa + 4 * t)));
        s1 = _mm512_dpbusd_epi32(s1, w[t + 1], _mm512_broadcastd_epi32(_mm_loadu_si32(qa + 4 * t + 4)));
    }
    const __m512i s = _mm512_add_epi32(s0, s1);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(ai.d)), acc);
}

LP_TARGET_AVX512 LP_INLINE void store_rows(float* out, __m512 v, int nr) {
    _mm512_mask_storeu_ps(out, (__mmask16)((1u << nr) - 1), v);
}

// Scratch of the calling thread: the unpacked panel and the activation info.
struct alignas(64) vec64 {
    __m512i v;
};
struct panel_scratch {
    std::vector<vec64> w;  // per block: 8 quant vectors, then the scales
    std::vector<act_info> act;
};
panel_scratch& thread_scratch() {
    static thread_local panel_scratch s;
    return s;
}

// Mat-vec over nr <= 16 rows, blocks [b0, nb): unpack each block with
// gathers and use it at once. Gathers are slow (~15 cycles each on Zen 5), so
// this serves the single-row dot product and the blocks past the last group
// of 8 of matvec_rows.
template <typename F>
LP_TARGET_AVX512 __m512 matvec_gather(int64_t b0, int64_t nb, const uint8_t* w, size_t w_stride, int nr,
                                      const uint8_t* a, __m512 acc) {
    using block = typename F::block;
    const auto* y = reinterpret_cast<const block_q8_0*>(a);
    const __m512i idx = row_offsets(w_stride);
    const __mmask16 m = (__mmask16)((1u << nr) - 1);
    const char* pf = reinterpret_cast<const char*>(w) + (size_t)nr * w_stride + prefetch_x86::kPanelAhead;
    const int pf_bytes = nr * (int)sizeof(block);
    for (int64_t b = b0; b < nb; ++b) {
        prefetch_bytes(pf, pf_bytes);
        __m512i q[8];
        __m512 dw;
        F::unpack(w + b * sizeof(block), idx, m, q, &dw);
        const int32_t s = -F::offset * hsum_i32x8(_mm256_dpbusd_epi32(
            _mm256_setzero_si256(), _mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i*)y[b].qs)));
        acc = block_step(q, dw, reinterpret_cast<const uint8_t*>(y[b].qs), act_info{half_to_float(y[b].d), s}, acc);
    }
    return acc;
}


// --- mat-vec, fast path --------------------------------------------------------
// Per group of 8 blocks each row's integer dot products are computed as in
// the row kernels of legacy_x86.cpp (weights from a few 64-byte loads and
// word permutes, activations prepared once per group), leaving per row two
// "quad" vectors: 128-bit lane L of vector h holds 4 partial int32 sums of
// block 4h+L. Four rows' quads are summed and transposed together
// (reduce_pairs_x4: lane 4L+j = row j's block 4h+L), then a 128-bit
// transpose over the 4 row groups gives one vector per block with row r in
// lane r. The scales take the same path without the sums. Then the float
// steps are those of the panel, block by block.
struct row_quads {
    __m512i s[2];  // partial sums, quads layout
    __m512 d;      // the row's scales, lane_layout::quads
};

// One 128-bit lane shuffle of two vectors of any 512-bit type. A named
// function, not a lambda: a lambda does not inherit the enclosing function's
// target attribute, so without -march=native its intrinsics fail to inline.
template <int imm, typename V>
LP_TARGET_AVX512 LP_INLINE V shuffle_128(V a, V b) {
    __m512i x, y;
    std::memcpy(&x, &a, 64);
    std::memcpy(&y, &b, 64);
    const __m512i r = _mm512_shuffle_i64x2(x, y, imm);
    V v;
    std::memcpy(&v, &r, 64);
    return v;
}

// 128-bit lane transpose: out[L] = (in[0].L, in[1].L, in[2].L, in[3].L).
template <typename V>
LP_TARGET_AVX512 LP_INLINE void transpose_128(const V* in, V* out) {
    const V t0 = shuffle_128<0x44>(in[0], in[1]), t1 = shuffle_128<0xee>(in[0], in[1]);
    const V t2 = shuffle_128<0x44>(in[2], in[3]), t3 = shuffle_128<0xee>(in[2], in[3]);
    out[0] = shuffle_128<0x88>(t0, t2);
    out[1] = shuffle_128<0xdd>(t0, t2);
    out[2] = shuffle_128<0x88>(t1, t3);
    out[3] = shuffle_128<0xdd>(t1, t3);
}

// A row's 8-block group unpacked for the nibble formats: the lo / hi
// element vectors of each quad half (unsigned quants) and the scales. The
// weight-only half of a row's step, so that several activation rows can use
// one unpacking (matvec_cols_rows); quad_dots is the other half.
struct nibble_bits {
    __m512i lo[2], hi[2];
    __m512 d;
};

LP_TARGET_AVX512 LP_INLINE row_quads quad_dots(const nibble_bits& b, const act_quads& a) {
    row_quads r;
    for (int h = 0; h < 2; ++h)
        r.s[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a.neg128[h], b.lo[h], a.lo[h]), b.hi[h], a.hi[h]);
    r.d = b.d;
    return r;
}

struct rows_q4_0 {
    using block = block_q4_0;
    using act = act_quads;
    LP_TARGET_AVX512 static LP_INLINE act load_act(const block_q8_0* y) {
        act a = load_act_quads(y);
        for (int h = 0; h < 2; ++h) a.neg128[h] = _mm512_srai_epi32(a.neg128[h], 4);  // -8 * sum
        return a;
    }
    LP_TARGET_AVX512 static LP_INLINE nibble_bits unpack(const block_q4_0* x) {
        const loaded<3> g = load_group_4bit<sizeof(block_q4_0)>(x);
        __m512i q[2];
        nibble_quads_of<sizeof(block_q4_0), offsetof(block_q4_0, qs)>(g, &q[0], &q[1]);
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        nibble_bits b;
        for (int h = 0; h < 2; ++h) {
            b.lo[h] = _mm512_and_si512(q[h], m4);
            b.hi[h] = _mm512_and_si512(_mm512_srli_epi16(q[h], 4), m4);
        }
        b.d = halves_of<sizeof(block_q4_0), 0, lane_layout::quads>(g);
        return b;
    }
    LP_TARGET_AVX512 static LP_INLINE row_quads row(const block_q4_0* x, const act& a) { return quad_dots(unpack(x), a); }
};

// Word indices (for three_loads) of the qh halves of 8 blocks: lo16 of
// blocks 0..3, lo16 of 4..7, hi16 of 0..3, hi16 of 4..7.
template <int STRIDE, int QH_OFF>
struct qh_words {
    alignas(64) uint16_t low[32] = {};
    alignas(64) uint16_t high[32] = {};
    uint32_t from_high = 0;
    constexpr qh_words() {
        for (int i = 0; i < 16; ++i) {
            const int half = i / 8, blk = i % 8, w = (blk * STRIDE + QH_OFF) / 2 + half;
            if (w < 64) {
                low[i] = three_loads<STRIDE>::index_low(w);
            } else {
                high[i] = three_loads<STRIDE>::index_high(w);
                from_high |= 1u << i;
            }
        }
    }
};

struct rows_q5_0 {
    using block = block_q5_0;
    using act = act_quads;
    LP_TARGET_AVX512 static LP_INLINE act load_act(const block_q8_0* y) {
        act a = load_act_quads(y);
        for (int h = 0; h < 2; ++h) a.neg128[h] = _mm512_srai_epi32(a.neg128[h], 3);  // -16 * sum
        return a;
    }
    LP_TARGET_AVX512 static LP_INLINE nibble_bits unpack(const block_q5_0* x) {
        const loaded<3> g = load_group_4bit<sizeof(block_q5_0)>(x);
        __m512i q[2];
        nibble_quads_of<sizeof(block_q5_0), offsetof(block_q5_0, qs)>(g, &q[0], &q[1]);
        const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
        // fifth bits, as four 64-bit masks: the low / high 16 bits of the qh
        // of blocks 0..3 and 4..7 (elements 0..15 / 16..31 of each block)
        static constexpr qh_words<sizeof(block_q5_0), offsetof(block_q5_0, qh)> idx{};
        const __m512i qv = _mm512_mask_blend_epi16(
            (__mmask32)idx.from_high, _mm512_permutex2var_epi16(g.v[0], _mm512_load_si512(idx.low), g.v[1]),
            _mm512_permutex2var_epi16(g.v[1], _mm512_load_si512(idx.high), g.v[2]));
        alignas(32) uint64_t qh[4];
        _mm256_store_si256((__m256i*)qh, _mm512_castsi512_si256(qv));
        nibble_bits b;
        for (int h = 0; h < 2; ++h) {
            const uint64_t m_lo = qh[h], m_hi = qh[2 + h];
            const __m512i lo = _mm512_and_si512(q[h], m4), hi = _mm512_and_si512(_mm512_srli_epi16(q[h], 4), m4);
            b.lo[h] = _mm512_mask_add_epi8(lo, _cvtu64_mask64(m_lo), lo, sixteen);
            b.hi[h] = _mm512_mask_add_epi8(hi, _cvtu64_mask64(m_hi), hi, sixteen);
        }
        b.d = halves_of<sizeof(block_q5_0), 0, lane_layout::quads>(g);
        return b;
    }
    LP_TARGET_AVX512 static LP_INLINE row_quads row(const block_q5_0* x, const act& a) { return quad_dots(unpack(x), a); }
};

struct rows_q8_0 {
    using block = block_q8_0;
    using act = act_pairs;
    LP_TARGET_AVX512 static LP_INLINE act load_act(const block_q8_0* y) { return load_act_pairs(y); }
    LP_TARGET_AVX512 static LP_INLINE row_quads row(const block_q8_0* x, const act& a) {
        // pairs straight from (broadcast) loads: no shuffle port
        __m512i q[4], s[4];
        for (int p = 0; p < 4; ++p) q[p] = load_pair_32(x[2 * p].qs, x[2 * p + 1].qs);
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (int p = 0; p < 4; ++p) s[p] = _mm512_dpbusd_epi32(a.neg128[p], _mm512_xor_si512(q[p], flip), a.v[p]);
        // pairs (block 2p | 2p+1, 256 bits each) -> quads: add each block's two 128-bit lanes
        row_quads r;
        for (int h = 0; h < 2; ++h)
            r.s[h] = _mm512_add_epi32(_mm512_shuffle_i64x2(s[2 * h], s[2 * h + 1], 0x88),
                                      _mm512_shuffle_i64x2(s[2 * h], s[2 * h + 1], 0xdd));
        r.d = gather_halves16<sizeof(block_q8_0), 0, lane_layout::quads>(x);
        return r;
    }
};

// One group of 8 blocks of 16 rows against one column (yg: the column's
// group): the rows' integer dots, reduced and transposed to row r in lane r,
// then the float steps block by block. rows[r] is row r's group.
template <typename R>
LP_TARGET_AVX512 LP_INLINE __m512 matvec_group(const typename R::block* const* rows, const block_q8_0* yg,
                                               __m512 acc) {
    const typename R::act act = R::load_act(yg);
    __m512i sums[2][4];
    __m512 ds[2][4];
#pragma GCC unroll 4
    for (int gr = 0; gr < 4; ++gr) {
        row_quads q[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) q[j] = R::row(rows[4 * gr + j], act);
        for (int h = 0; h < 2; ++h) sums[h][gr] = reduce_pairs_x4(q[0].s[h], q[1].s[h], q[2].s[h], q[3].s[h]);
        const __m512 d01 = _mm512_unpacklo_ps(q[0].d, q[1].d), d23 = _mm512_unpacklo_ps(q[2].d, q[3].d);
        ds[0][gr] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(d01), _mm512_castps_pd(d23)));
        ds[1][gr] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(d01), _mm512_castps_pd(d23)));
    }
    for (int h = 0; h < 2; ++h) {
        __m512i v[4];
        __m512 dv[4];
        transpose_128(sums[h], v);
        transpose_128(ds[h], dv);
        for (int l = 0; l < 4; ++l)
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[l]),
                                  _mm512_mul_ps(dv[l], _mm512_set1_ps(half_to_float(yg[4 * h + l].d))), acc);
    }
    return acc;
}

// The blocks past a row's last group of 8 (1..7 of them: Gemma's 640-wide
// rows end with 4), as one more group: the 16 rows' tail blocks and the
// column's are copied into a group padded with zero blocks. A zero block has
// scale 0, so its step fma(isum, 0 * d_a, acc) leaves acc as it is, and the
// real blocks take the same integer sums and float steps as the per-block
// gather path (matvec_gather, which the mat-mat panel's block_step matches):
// the same bits, without 16-lane gathers per block.
template <typename R>
struct padded_tail {
    using block = typename R::block;
    alignas(64) block w[kPanelRows][8];
    alignas(64) block_q8_0 y[8];
    const block* rows[kPanelRows];
    // rows[r]: row r's tail (rows past nr repeat row nr - 1; their lanes are not stored)
    void set_rows(const uint8_t* w0, size_t w_stride, int nr, int64_t nb8, int64_t nb) {
        const size_t n = (size_t)(nb - nb8) * sizeof(block);
        std::memset(static_cast<void*>(w), 0, sizeof(w));
        for (int r = 0; r < kPanelRows; ++r) {
            std::memcpy(static_cast<void*>(w[r]), w0 + (size_t)std::min(r, nr - 1) * w_stride + nb8 * sizeof(block), n);
            rows[r] = w[r];
        }
    }
    const block_q8_0* column(const uint8_t* a, int64_t nb8, int64_t nb) {
        std::memset(static_cast<void*>(y), 0, sizeof(y));
        std::memcpy(static_cast<void*>(y), a + nb8 * sizeof(block_q8_0), (size_t)(nb - nb8) * sizeof(block_q8_0));
        return y;
    }
};

template <typename F, typename R, bool FULL>
LP_TARGET_AVX512 void matvec_rows(int64_t n, const uint8_t* w, size_t w_stride, int nr, const uint8_t* a, float* out) {
    using block = typename R::block;
    const int64_t nb = n / kBlock, nb8 = nb & ~(int64_t)7;
    const auto* y = reinterpret_cast<const block_q8_0*>(a);
    // rows past nr read row nr - 1 again; their lanes are never stored
    const size_t last = (size_t)(nr - 1) * w_stride;
    const block* rows[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r)
        rows[r] = reinterpret_cast<const block*>(w + (FULL ? r * w_stride : std::min((size_t)r * w_stride, last)));
    // Prefetch: the next panel's bytes as one linear stream into L2, at the
    // rate this one is read (the 16 rows side by side are 16 streams, which
    // the hardware prefetchers follow badly). Into L1 (T0) measured worse:
    // two 16-row panels of Q8_0 (2 x 35 KB at K = 2048) do not fit.
    const char* pf = reinterpret_cast<const char*>(w) + (size_t)nr * w_stride;
    const int pf_bytes = nr * 8 * (int)sizeof(block);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb8; ib += 8) {
        for (int off = 0; off < pf_bytes; off += 64) _mm_prefetch(pf + off, _MM_HINT_T1);
        pf += pf_bytes;
        const block* g[kPanelRows];
        for (int r = 0; r < kPanelRows; ++r) g[r] = rows[r] + ib;
        acc = matvec_group<R>(g, y + ib, acc);
    }
    if (nb8 < nb) {
        padded_tail<R> t;
        t.set_rows(w, w_stride, nr, nb8, nb);
        acc = matvec_group<R>(t.rows, t.column(a, nb8, nb), acc);
    }
    store_rows(out, acc, nr);
}

// One group of 8 blocks of 16 rows against NC columns (yg[c]: column c's
// group): the rows are unpacked once (5 KB, in L1), then each column takes
// matvec_group's integer dots and float steps.
template <typename R, int NC>
LP_TARGET_AVX512 LP_INLINE void matvec_cols_group(const typename R::block* const* rows, const block_q8_0* const* yg,
                                                  __m512* acc) {
    nibble_bits bits[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) bits[r] = R::unpack(rows[r]);
    __m512 dv[2][4];  // the scales, transposed as matvec_group has them
    {
        __m512 ds[2][4];
        for (int gr = 0; gr < 4; ++gr) {
            const nibble_bits* q = bits + 4 * gr;
            const __m512 d01 = _mm512_unpacklo_ps(q[0].d, q[1].d), d23 = _mm512_unpacklo_ps(q[2].d, q[3].d);
            ds[0][gr] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(d01), _mm512_castps_pd(d23)));
            ds[1][gr] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(d01), _mm512_castps_pd(d23)));
        }
        for (int h = 0; h < 2; ++h) transpose_128(ds[h], dv[h]);
    }
    for (int c = 0; c < NC; ++c) {
        const typename R::act act = R::load_act(yg[c]);
        __m512i sums[2][4];
#pragma GCC unroll 4
        for (int gr = 0; gr < 4; ++gr) {
            row_quads q[4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) q[j] = quad_dots(bits[4 * gr + j], act);
            for (int h = 0; h < 2; ++h) sums[h][gr] = reduce_pairs_x4(q[0].s[h], q[1].s[h], q[2].s[h], q[3].s[h]);
        }
        for (int h = 0; h < 2; ++h) {
            __m512i v[4];
            transpose_128(sums[h], v);
            for (int l = 0; l < 4; ++l)
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[l]),
                                         _mm512_mul_ps(dv[h][l], _mm512_set1_ps(half_to_float(yg[c][4 * h + l].d))),
                                         acc[c]);
        }
    }
}

// The mat-vec over NC activation rows at once (type_traits::matvec_cols):
// per column exactly matvec_rows's operations in its order (same bits as NC
// mat-vec calls), but each row's 8-block group is loaded and unpacked once
// for all NC columns. Only for formats with R::unpack (Q4_0, Q5_0).
template <typename F, typename R, bool FULL, int NC>
LP_TARGET_AVX512 void matvec_cols_rows(int64_t n, const uint8_t* w, size_t w_stride, int nr, const uint8_t* a,
                                       size_t a_stride, float* out, size_t out_stride) {
    using block = typename R::block;
    const int64_t nb = n / kBlock, nb8 = nb & ~(int64_t)7;
    const block_q8_0* y[NC];
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const block_q8_0*>(a + c * a_stride);
    const size_t last = (size_t)(nr - 1) * w_stride;
    const block* rows[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r)
        rows[r] = reinterpret_cast<const block*>(w + (FULL ? r * w_stride : std::min((size_t)r * w_stride, last)));
    const char* pf = reinterpret_cast<const char*>(w) + (size_t)nr * w_stride;
    const int pf_bytes = nr * 8 * (int)sizeof(block);
    __m512 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb8; ib += 8) {
        for (int off = 0; off < pf_bytes; off += 64) _mm_prefetch(pf + off, _MM_HINT_T1);
        pf += pf_bytes;
        const block* g[kPanelRows];
        for (int r = 0; r < kPanelRows; ++r) g[r] = rows[r] + ib;
        const block_q8_0* yg[NC];
        for (int c = 0; c < NC; ++c) yg[c] = y[c] + ib;
        matvec_cols_group<R, NC>(g, yg, acc);
    }
    if (nb8 < nb) {
        padded_tail<R> t;
        t.set_rows(w, w_stride, nr, nb8, nb);
        alignas(64) block_q8_0 ypad[NC][8];
        const block_q8_0* yg[NC];
        for (int c = 0; c < NC; ++c) {
            std::memcpy(static_cast<void*>(ypad[c]), t.column(a + c * a_stride, nb8, nb), sizeof(ypad[c]));
            yg[c] = ypad[c];
        }
        matvec_cols_group<R, NC>(t.rows, yg, acc);
    }
    for (int c = 0; c < NC; ++c) store_rows(out + c * out_stride, acc[c], nr);
}

template <typename F, typename R, int NC>
LP_TARGET_AVX512 void matvec_cols_nc(int64_t n, const uint8_t* w, size_t w_stride, int nr, const uint8_t* a,
                                     size_t a_stride, float* out, size_t out_stride) {
    if (nr == kPanelRows)
        matvec_cols_rows<F, R, true, NC>(n, w, w_stride, nr, a, a_stride, out, out_stride);
    else
        matvec_cols_rows<F, R, false, NC>(n, w, w_stride, nr, a, a_stride, out, out_stride);
}

// type_traits::matvec_cols: nr <= 16 weight rows (one panel's) × nc <= 4 columns.
template <typename F, typename R>
LP_TARGET_AVX512 void matvec_cols_panel(int64_t n, const void* w_, size_t w_stride, const void* a_, size_t a_stride,
                                        float* out, size_t out_stride, int nr, int nc) {
    const auto* w = static_cast<const uint8_t*>(w_);
    const auto* a = static_cast<const uint8_t*>(a_);
    switch (nc) {
        case 4: matvec_cols_nc<F, R, 4>(n, w, w_stride, nr, a, a_stride, out, out_stride); return;
        case 3: matvec_cols_nc<F, R, 3>(n, w, w_stride, nr, a, a_stride, out, out_stride); return;
        case 2: matvec_cols_nc<F, R, 2>(n, w, w_stride, nr, a, a_stride, out, out_stride); return;
        default: matvec_cols_nc<F, R, 1>(n, w, w_stride, nr, a, a_stride, out, out_stride); return;
    }
}

// NC columns against the unpacked panel.
template <int NC>
LP_TARGET_AVX512 void panel_columns(int64_t nb, const __m512i* panel, const uint8_t* a, size_t a_stride,
                                    const act_info* info, float* out, size_t out_stride, int nr) {
    __m512 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    const uint8_t* qa[NC];
    for (int c = 0; c < NC; ++c) qa[c] = a + c * a_stride + offsetof(block_q8_0, qs);
    for (int64_t b = 0; b < nb; ++b) {
        const __m512i* pw = panel + b * 9;
        const __m512 dw = _mm512_castsi512_ps(_mm512_load_si512(pw + 8));
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c)
            acc[c] = block_step(pw, dw, qa[c] + b * sizeof(block_q8_0), info[c * nb + b], acc[c]);
    }
    for (int c = 0; c < NC; ++c) store_rows(out + c * out_stride, acc[c], nr);
}

// nr rows (any number: sub-panels of kPanelRows, so that a type whose
// panel_rows is larger prepares the activations once for all of them) × nc
// columns. Each sub-panel is unpacked once into L1 and used by every column.
template <typename F, typename R>
LP_TARGET_AVX512 void gemm_panel(int64_t n, const void* w_, size_t w_stride, int nr, const void* a_, size_t a_stride,
                                 int nc, float* out, size_t out_stride) {
    using block = typename F::block;
    const auto* w = static_cast<const uint8_t*>(w_);
    const auto* a = static_cast<const uint8_t*>(a_);
    if (nc == 1) {
        for (int r0 = 0; r0 < nr; r0 += kPanelRows) {
            const int nrr = std::min(kPanelRows, nr - r0);
            if (nrr == kPanelRows)
                matvec_rows<F, R, true>(n, w + r0 * w_stride, w_stride, nrr, a, out + r0);
            else
                matvec_rows<F, R, false>(n, w + r0 * w_stride, w_stride, nrr, a, out + r0);
        }
        return;
    }
    const int64_t nb = n / kBlock;
    panel_scratch& sc = thread_scratch();
    if (sc.w.size() < (size_t)nb * 9) sc.w.resize((size_t)nb * 9);
    if (sc.act.size() < (size_t)nb * nc) sc.act.resize((size_t)nb * nc);
    prepare_activations<F::offset>(nb, a, a_stride, nc, sc.act.data());
    const __m512i idx = row_offsets(w_stride);
    for (int r0 = 0; r0 < nr; r0 += kPanelRows) {
        const int nrr = std::min(kPanelRows, nr - r0);
        const uint8_t* wr = w + r0 * w_stride;
        float* o = out + r0;
        // unpack the rows once (streaming from memory: prefetch as in mat-vec)
        const __mmask16 m = (__mmask16)((1u << nrr) - 1);
        const char* pf = reinterpret_cast<const char*>(wr) + (size_t)nrr * w_stride + prefetch_x86::kPanelAhead;
        __m512i* pw = &sc.w.data()->v;
        for (int64_t b = 0; b < nb; ++b, pw += 9) {
            prefetch_bytes(pf, nrr * (int)sizeof(block));
            __m512 dw;
            F::unpack(wr + b * sizeof(block), idx, m, pw, &dw);
            pw[8] = _mm512_castps_si512(dw);
        }
        const __m512i* panel = &sc.w.data()->v;
        const act_info* info = sc.act.data();
        int c = 0;
        for (; c + 4 <= nc; c += 4)
            panel_columns<4>(nb, panel, a + c * a_stride, a_stride, info + c * nb, o + c * out_stride, out_stride, nrr);
        switch (nc - c) {
            case 3: panel_columns<3>(nb, panel, a + c * a_stride, a_stride, info + c * nb, o + c * out_stride, out_stride, nrr); break;
            case 2: panel_columns<2>(nb, panel, a + c * a_stride, a_stride, info + c * nb, o + c * out_stride, out_stride, nrr); break;
            case 1: panel_columns<1>(nb, panel, a + c * a_stride, a_stride, info + c * nb, o + c * out_stride, out_stride, nrr); break;
            default: break;
        }
    }
}

// The single-row dot product: row 0 of the mat-vec (same bits).
template <typename F>
LP_TARGET_AVX512 void vec_dot_panel(int64_t n, float* out, const void* w_row, const void* a_row) {
    const __m512 acc = matvec_gather<F>(0, n / kBlock, static_cast<const uint8_t*>(w_row), 0, 1,
                                        static_cast<const uint8_t*>(a_row), _mm512_setzero_ps());
    store_rows(out, acc, 1);
}

}  // namespace
#endif  // LP_HAVE_AVX512

void register_legacy_panels_x86(type_traits* table, isa level) {
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) {
        type_traits& q4_0 = table[(int)ggml_type::Q4_0];
        type_traits& q5_0 = table[(int)ggml_type::Q5_0];
        q4_0.vec_dot = vec_dot_panel<fmt_q4_0>;
        q4_0.gemm_panel = gemm_panel<fmt_q4_0, rows_q4_0>;
        q5_0.vec_dot = vec_dot_panel<fmt_q5_0>;
        q5_0.gemm_panel = gemm_panel<fmt_q5_0, rows_q5_0>;
        q4_0.matvec_cols = matvec_cols_panel<fmt_q4_0, rows_q4_0>;
        q5_0.matvec_cols = matvec_cols_panel<fmt_q5_0, rows_q5_0>;
        for (type_traits* t : {&q4_0, &q5_0}) t->matvec_batch_max = 8;
        // the 4-row tiles would sum in another order: the panel replaces them
        for (type_traits* t : {&q4_0, &q5_0}) t->gemm_tile = nullptr;
        // Q8_0 (fmt_q8_0, rows_q8_0) keeps the row kernels and 4x4 tiles
        // (legacy_x86.cpp) for mat-vec and mat-mat: its panel runs mat-mat
        // ~2.4x the tiles (MiniLM's shapes, 1 thread, Xeon: 184 against 76
        // GFLOP per CPU second), but its mat-vec reads only ~70% of the
        // bandwidth the row kernels reach (Q4_0 / Q5_0: on par), and the two
        // sum in different orders. So it is the throughput panel: encoders,
        // which never compare a batch with a step, take it for every product.
        // 64 rows per call: the activations' sums and scales are prepared
        // once per call, and at K = 384 (MiniLM) that costs about what one
        // 16-row sub-panel's products do.
        type_traits& q8_0 = table[(int)ggml_type::Q8_0];
        q8_0.throughput_panel = gemm_panel<fmt_q8_0, rows_q8_0>;
        q8_0.panel_rows = 4 * kPanelRows;
    }
#endif
    (void)table;
    (void)level;
}

}  // namespace lp
