// iq_lattice.cpp — the grid-based i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S, IQ1_S, IQ1_M; layouts and decoders: iq_lattice.h): their tables,
// exact dequantization (gguf-py's float order), and the dot product against
// Q8_K activations (llama.cpp's pairing; Q8_K's format and quantizer live in
// kquants.cpp) as scalar reference and AVX2 kernel.
//
// Reference: decode a super-block to 256 int8 q and 16 integer scales, one
// exact int32 sum  sumi = sum_g ls[g] * sum_{i in g} q[i] a[i],  then
// sum += sumi * (d * d_a * unit).
// AVX2: the same sums from registers. Each 32-weight chunk becomes a vector
// of grid magnitudes (one 8- or 4-byte table load per entry) and a vector of
// ±1 signs; vpsignb moves the signs onto the activations and vpmaddubsw /
// vpmaddwd take the products and the per-16 scales, so the int32 lanes hold
// exact partial sums (at most 62 * 127 * 32 * 31 per chunk). The tile variant
// decodes each chunk once for up to 4 activation rows. The AVX-512 level runs
// the AVX2 kernels: most of the work is the per-entry table loads and sign
// spreading, which wider vectors do not shorten (a VNNI variant was not
// written or measured).
// Not here: quantizing to these types (iq_lattice_write_iq2.cpp for IQ2_XXS,
// IQ2_XS, IQ2_S, IQ1_S, IQ1_M; iq_lattice_write_iq3.cpp for IQ3_XXS, IQ3_S).
#include "iq_lattice.h"

#include <cstddef>

#include "../common.h"
#include "../ggml_type.h"
#include "neon_kernels.h"
#include "simd_x86.h"
#include "weighted.h"

namespace lp {

namespace iq {
#include "iq_grids.inc"
}  // namespace iq

namespace {

using namespace iq;

// The fp16 scale of a block (IQ1_M spreads it over its scale words).
template <class B>
LP_INLINE float block_d(const B& b) { return fp16_to_fp32(b.d); }
LP_INLINE float block_d(const block_iq1_m& b) { return fp16_to_fp32(iq1_m::half_d(b)); }

// ===========================================================================
// Scalar reference
// ===========================================================================

template <class T>
void dequantize_row(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const typename T::block*>(src);
    decoded dc;
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
        T::decode(x[i], dc);
        for (int g = 0; g < QK_K / 16; ++g) {
            const float dl = T::dequant_scale(dc.d, dc.ls[g]);
            for (int j = 0; j < 16; ++j) y[16 * g + j] = dl * ((float)dc.q[16 * g + j] * T::q_unit);
        }
    }
}

// The exact integer sum of one decoded super-block against Q8_K quants.
inline int32_t decoded_dot(const decoded& dc, const int8_t* a) {
    int32_t sumi = 0;
    for (int g = 0; g < QK_K / 16; ++g) {
        int32_t s = 0;
        for (int j = 0; j < 16; ++j) s += dc.q[16 * g + j] * a[16 * g + j];
        sumi += dc.ls[g] * s;
    }
    return sumi;
}

template <class T>
void vec_dot_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const typename T::block*>(w_row);
    const auto* y = static_cast<const block_q8_K*>(a_row);
    float sum = 0;
    decoded dc;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        T::decode(x[i], dc);
        sum += (float)decoded_dot(dc, y[i].qs) * (dc.d * y[i].d * T::unit);
    }
    *out = sum;
}

// ===========================================================================
// AVX2
// ===========================================================================
#if defined(LP_HAVE_AVX2)

// One 32-weight chunk: weight = ls * sgn * mag (sgn ±1, mag >= 0); ls as 16
// int16 lanes, the first 8 for weights 0..15 of the chunk, the rest 16..31
// (the pair order vpmaddubsw leaves in each 128-bit half).
struct chunk {
    __m256i mag, sgn, ls;
};

// ±1 bytes from 32 sign bits (bit j set: weight j negative).
LP_TARGET_AVX2 LP_INLINE __m256i signs_pm1(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(1));
}

// 4 sign indices (7 bits each, at bits 0, 7, 14, 21 of aux) -> 32 sign bits.
LP_INLINE uint32_t ksigns_x4(uint32_t aux) {
    return (uint32_t)iq_ksigns[aux & 0x7f] | (uint32_t)iq_ksigns[(aux >> 7) & 0x7f] << 8 |
           (uint32_t)iq_ksigns[(aux >> 14) & 0x7f] << 16 | (uint32_t)iq_ksigns[(aux >> 21) & 0x7f] << 24;
}

LP_TARGET_AVX2 LP_INLINE __m256i grid8_x4(const uint64_t* grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1], (long long)grid[i0]);
}

LP_TARGET_AVX2 LP_INLINE __m256i two_scales(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

// IQ1: q = 8 g ± 1 per group of 8 (`minus`: 4 bytes, 0xff where the shift is -1/8).
LP_TARGET_AVX2 LP_INLINE void iq1_chunk(__m256i g, __m256i shift, chunk& c) {
    const __m256i q = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), shift);
    c.mag = _mm256_abs_epi8(q);
    c.sgn = q;
}

LP_TARGET_AVX2 LP_INLINE __m256i shift_x4(bool m0, bool m1, bool m2, bool m3) {
    const long long minus = -1, plus = 0x0101010101010101LL;
    return _mm256_set_epi64x(m3 ? minus : plus, m2 ? minus : plus, m1 ? minus : plus, m0 ? minus : plus);
}

template <class T> struct avx2_chunks;

template <> struct avx2_chunks<iq2_xxs> {
    LP_TARGET_AVX2 static LP_INLINE void get(const block_iq2_xxs& b, int ib, chunk& c) {
        const uint32_t grid = load_u32(b.qs + 4 * ib), aux = load_u32(b.qs + 4 * ib + 2);
        c.mag = grid8_x4(iq2xxs_grid, grid & 0xff, (grid >> 8) & 0xff, (grid >> 16) & 0xff, grid >> 24);
        c.sgn = signs_pm1(ksigns_x4(aux));
        c.ls = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
    }
};

template <> struct avx2_chunks<iq2_xs> {
    LP_TARGET_AVX2 static LP_INLINE void get(const block_iq2_xs& b, int ib, chunk& c) {
        const uint16_t* v = b.qs + 4 * ib;
        c.mag = grid8_x4(iq2xs_grid, v[0] & 511, v[1] & 511, v[2] & 511, v[3] & 511);
        c.sgn = signs_pm1((uint32_t)iq_ksigns[v[0] >> 9] | (uint32_t)iq_ksigns[v[1] >> 9] << 8 |
                          (uint32_t)iq_ksigns[v[2] >> 9] << 16 | (uint32_t)iq_ksigns[v[3] >> 9] << 24);
        c.ls = two_scales(2 * (b.scales[ib] & 0xf) + 1, 2 * (b.scales[ib] >> 4) + 1);
    }
};

template <> struct avx2_chunks<iq2_s> {
    LP_TARGET_AVX2 static LP_INLINE void get(const block_iq2_s& b, int ib, chunk& c) {
        const uint8_t* q = b.qs + 4 * ib;
        const int h = b.qh[ib];
        c.mag = grid8_x4(iq2s_grid, q[0] | (h & 3) << 8, q[1] | (h & 0xc) << 6, q[2] | (h & 0x30) << 4,
                         q[3] | (h & 0xc0) << 2);
        c.sgn = signs_pm1(load_u32(b.qs + QK_K / 8 + 4 * ib));
        c.ls = two_scales(2 * (b.scales[ib] & 0xf) + 1, 2 * (b.scales[ib] >> 4) + 1);
    }
};

template <> struct avx2_chunks<iq3_xxs> {
    LP_TARGET_AVX2 static LP_INLINE void get(const block_iq3_xxs& b, int ib, chunk& c) {
        const uint8_t* q = b.qs + 8 * ib;
        const uint32_t aux = load_u32(b.qs + QK_K / 4 + 4 * ib);
        c.mag = _mm256_set_epi32((int)iq3xxs_grid[q[7]], (int)iq3xxs_grid[q[6]], (int)iq3xxs_grid[q[5]],
                                 (int)iq3xxs_grid[q[4]], (int)iq3xxs_grid[q[3]], (int)iq3xxs_grid[q[2]],
                                 (int)iq3xxs_grid[q[1]], (int)iq3xxs_grid[q[0]]);
        c.sgn = signs_pm1(ksigns_x4(aux));
        c.ls = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
    }
};

template <> struct avx2_chunks<iq3_s> {
    LP_TARGET_AVX2 static LP_INLINE void get(const block_iq3_s& b, int ib, chunk& c) {
        const uint8_t* q = b.qs + 8 * ib;
        const int h = b.qh[ib];
        c.mag = _mm256_set_epi32(
            (int)iq3s_grid[q[7] | (h & 0x80) << 1], (int)iq3s_grid[q[6] | (h & 0x40) << 2],
            (int)iq3s_grid[q[5] | (h & 0x20) << 3], (int)iq3s_grid[q[4] | (h & 0x10) << 4],
            (int)iq3s_grid[q[3] | (h & 0x08) << 5], (int)iq3s_grid[q[2] | (h & 0x04) << 6],
            (int)iq3s_grid[q[1] | (h & 0x02) << 7], (int)iq3s_grid[q[0] | (h & 0x01) << 8]);
        c.sgn = signs_pm1(load_u32(b.signs + 4 * ib));
        c.ls = _mm256_set1_epi16((short)(2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xf) + 1));
    }
};

template <> struct avx2_chunks<iq1_s> {
    LP_TARGET_AVX2 static LP_INLINE void get(const block_iq1_s& b, int ib, chunk& c) {
        const uint8_t* q = b.qs + 4 * ib;
        const int h = b.qh[ib];
        const __m256i g = grid8_x4(iq1s_grid, q[0] | (h & 7) << 8, q[1] | (h & 0x38) << 5, q[2] | (h & 0x1c0) << 2,
                                   q[3] | (h & 0xe00) >> 1);
        const bool minus = (h & 0x8000) != 0;
        iq1_chunk(g, shift_x4(minus, minus, minus, minus), c);
        c.ls = _mm256_set1_epi16((short)(2 * ((h >> 12) & 7) + 1));
    }
};

template <> struct avx2_chunks<iq1_m> {
    LP_TARGET_AVX2 static LP_INLINE void get(const block_iq1_m& b, int ib, chunk& c) {
        const uint8_t* q = b.qs + 4 * ib;
        const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
        const __m256i g = grid8_x4(iq1s_grid, q[0] | (h0 & 7) << 8, q[1] | (h0 & 0x70) << 4, q[2] | (h1 & 7) << 8,
                                   q[3] | (h1 & 0x70) << 4);
        iq1_chunk(g, shift_x4(h0 & 0x08, h0 & 0x80, h1 & 0x08, h1 & 0x80), c);
        const int sc = load_u16(b.scales + 2 * (ib / 2)) >> (6 * (ib % 2));
        c.ls = two_scales(2 * (sc & 7) + 1, 2 * ((sc >> 3) & 7) + 1);
    }
};

// NC activation rows (1..4) against one weight row: each chunk is decoded
// once for all of them. Per pair the same operations in the same order, so
// every NC gives vec_dot's bits.
template <class T, int NC>
LP_TARGET_AVX2 void row_avx2(int64_t n, const typename T::block* x, const uint8_t* a, size_t as, float* out,
                             size_t os) {
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i sumi[NC];
        for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            chunk ch;
            avx2_chunks<T>::get(x[i], ib, ch);
            for (int c = 0; c < NC; ++c) {
                const auto& y = reinterpret_cast<const block_q8_K*>(a + c * as)[i];
                const __m256i av = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)(y.qs + 32 * ib)), ch.sgn);
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(_mm256_maddubs_epi16(ch.mag, av), ch.ls));
            }
        }
        const float d = block_d(x[i]);
        for (int c = 0; c < NC; ++c) {
            const auto& y = reinterpret_cast<const block_q8_K*>(a + c * as)[i];
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_set1_ps(d * y.d * T::unit), acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) out[c * os] = x86::hsum_f32x8(acc[c]);
}

template <class T>
LP_TARGET_AVX2 void vec_dot_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    row_avx2<T, 1>(n, static_cast<const typename T::block*>(w_row), static_cast<const uint8_t*>(a_row), 0, out, 0);
}

template <class T>
LP_TARGET_AVX2 void gemm_tile_avx2(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out,
                                   size_t os, int nr, int nc) {
    const auto* ab = static_cast<const uint8_t*>(a);
    for (int r = 0; r < nr; ++r) {
        const auto* x = reinterpret_cast<const typename T::block*>(static_cast<const uint8_t*>(w) + r * ws);
        switch (nc) {
            case 1: row_avx2<T, 1>(n, x, ab, as, out + r, os); break;
            case 2: row_avx2<T, 2>(n, x, ab, as, out + r, os); break;
            case 3: row_avx2<T, 3>(n, x, ab, as, out + r, os); break;
            default: row_avx2<T, 4>(n, x, ab, as, out + r, os); break;
        }
    }
}

#endif  // LP_HAVE_AVX2

template <class T>
void register_one(type_traits* table, ggml_type type, isa level) {
    type_traits& t = table[(int)type];
    t.to_float = dequantize_row<T>;
    t.vec_dot_type = ggml_type::Q8_K;
    t.vec_dot_ref = vec_dot_ref<T>;
#if defined(LP_HAVE_AVX2)
    if (isa_at_least(level, isa::avx2)) {
        t.vec_dot = vec_dot_avx2<T>;
        t.gemm_tile = gemm_tile_avx2<T>;
        t.vec_dot_isa = isa::avx2;
    }
#endif
    (void)level;
}

}  // namespace

void register_iq_lattice_types(type_traits* table, isa level) {
    register_one<iq2_xxs>(table, ggml_type::IQ2_XXS, level);
    register_one<iq2_xs>(table, ggml_type::IQ2_XS, level);
    register_one<iq2_s>(table, ggml_type::IQ2_S, level);
    register_one<iq3_xxs>(table, ggml_type::IQ3_XXS, level);
    register_one<iq3_s>(table, ggml_type::IQ3_S, level);
    register_one<iq1_s>(table, ggml_type::IQ1_S, level);
    register_one<iq1_m>(table, ggml_type::IQ1_M, level);
    // the ones llama.cpp also writes without an importance matrix
    table[(int)ggml_type::IQ2_S].from_float_ref = quantize_row_iq2_s_ref;
    table[(int)ggml_type::IQ1_M].from_float_ref = quantize_row_iq1_m_ref;
    table[(int)ggml_type::IQ3_XXS].from_float_ref = quantize_row_iq3_xxs_ref;
    table[(int)ggml_type::IQ3_S].from_float_ref = quantize_row_iq3_s_ref;
#if defined(LP_HAVE_NEON)
    register_iq_lattice_neon(table, level);
#endif
}

}  // namespace lp
