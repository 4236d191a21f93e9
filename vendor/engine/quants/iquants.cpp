// iquants.cpp — the non-linear 4-bit formats IQ4_NL and IQ4_XS. Both store
// 4-bit indices into one fixed table of 16 int8 values (kvalues, spaced more
// finely near zero) instead of linear quants:
//   IQ4_NL: blocks of 32, w = d * kvalues[q]                  (like Q4_0's layout)
//   IQ4_XS: super-blocks of 256 = 8 sub-blocks of 32 with 6-bit sub-scales,
//           w = d * (ls - 32) * kvalues[q]
// Here: exact dequantization (gguf-py's float order), reference quantization
// (llama.cpp's algorithm without an importance matrix: per block, try the
// scales that map the largest value onto the table's ends, keep the one with
// the best weighted least-squares fit), and dot products against Q8_0
// (IQ4_NL) or Q8_K (IQ4_XS; its format and quantizer live in kquants.cpp) as
// scalar reference, AVX2 and AVX-512 kernels.
// Not here: the other i-quants (IQ2/IQ3/IQ1), which llamapy does not support.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "../common.h"
#include "../ggml_type.h"
#include "blocks.h"
#include "weighted.h"
#include "neon_kernels.h"
#include "simd_x86.h"

#if defined(LP_HAVE_AVX512) && !defined(LP_HAVE_AVX2)
#error "the AVX-512 kernels finish row tails with the AVX2 ones; enable both"
#endif

namespace lp {

namespace {

// The IQ4 value table (a fact of the format, as in every GGUF reader).
constexpr int8_t kvalues_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// ===========================================================================
// Scalar reference
// ===========================================================================

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the
// integer in the low mantissa bits (the float addition does the rounding).
inline int nearest_int(float v) {
    const float t = v + 12582912.f;
    return (int)(fp32_to_bits(t) & 0x007fffff) - 0x00400000;
}

// Index of the table value nearest to x (the lower one on ties).
int best_index_iq4(float x) {
    if (x <= kvalues_iq4[0]) return 0;
    if (x >= kvalues_iq4[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < kvalues_iq4[mid]) hi = mid; else lo = mid;
    }
    return x - kvalues_iq4[hi - 1] < kvalues_iq4[hi] - x ? hi - 1 : hi;
}

// Weighted least-squares fit of x ~ d * kvalues[L] for the indices L that the
// inverse scale `id` picks: returns sum(w q x) and sum(w q q).
void fit_iq4(const float* x, const float* weight, float id, float* sumqx, float* sumq2, uint8_t* L) {
    float sqx = 0, sq2 = 0;
    for (int j = 0; j < 32; ++j) {
        const int l = best_index_iq4(id * x[j]);
        if (L) L[j] = (uint8_t)l;
        const float q = kvalues_iq4[l];
        sqx += weight[j] * q * x[j];
        sq2 += weight[j] * q * q;
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

// Best scale of one 32-element sub-block (0 for an all-but-zero one): start
// from d = max/127, then try the 15 scales that put the largest value on the
// table entries -127 + t (t = -7..7) and keep the best fit. Weights are x^2
// without an importance matrix (large values matter most); with one, the
// caller's importance·sqrt(σ² + x²) (weighted.cpp's convention).
float best_scale_iq4(const float* x, const float* weights_or_null) {
    constexpr int ntry = 7;
    float x2[32];
    const float* weight = weights_or_null ? weights_or_null : x2;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        x2[j] = x[j] * x[j];
        const float ax = std::fabs(x[j]);
        if (ax > amax) { amax = ax; max = x[j]; }
    }
    if (amax < 1e-15f) return 0;
    float d = -max / kvalues_iq4[0];
    float sumqx, sumq2;
    fit_iq4(x, weight, 1 / d, &sumqx, &sumq2, nullptr);
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;  // 0 weights (an importance matrix's unused expert): no fit
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
        fit_iq4(x, weight, (itry + kvalues_iq4[0]) / max, &sumqx, &sumq2, nullptr);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// 32 indices -> 16 bytes: element j in the low nibble of byte j, element
// 16 + j in its high nibble.
void pack_iq4(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

// Importance weights of n elements: qw·sqrt(σ² + x²), σ² = 2·mean(x²) over them.
void iq4_weights(const float* x, const float* qw, int n_super, const float* sub, float* w) {
    float sigma2 = 0;
    for (int j = 0; j < n_super; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / n_super;
    for (int j = 0; j < 32; ++j) w[j] = qw[j] * std::sqrt(sigma2 + sub[j] * sub[j]);
}

void quantize_iq4_nl(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<block_iq4_nl*>(dst);
    for (int64_t ib = 0; ib < n / QK4_NL; ++ib, x += QK4_NL) {
        float w[32];
        if (qw) iq4_weights(x, qw + QK4_NL * ib, QK4_NL, x, w);
        const float d = best_scale_iq4(x, qw ? w : nullptr);
        const float id = d != 0 ? 1 / d : 0.0f;
        uint8_t L[32];
        for (int j = 0; j < 32; ++j) L[j] = (uint8_t)best_index_iq4(id * x[j]);
        y[ib].d = fp32_to_fp16(d);
        pack_iq4(L, y[ib].qs);
    }
}

// IQ4_XS: the sub-block scales are quantized to 6 bits against a super-block
// scale d = -max_scale/32 (max_scale: the sub-block scale of largest
// magnitude), then each sub-block's indices are re-picked for its quantized
// scale d * l.
void quantize_iq4_xs(const float* x, void* dst, int64_t n, const float* qw) {
    auto* y = static_cast<block_iq4_xs*>(dst);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl, x += QK_K) {
        float scales[QK_K / 32];
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            float w[32];
            if (qw) iq4_weights(x, qw + QK_K * ibl + 32 * ib, QK_K, x + 32 * ib, w);
            scales[ib] = best_scale_iq4(x + 32 * ib, qw ? w : nullptr);
            if (std::fabs(scales[ib]) > amax_scale) { amax_scale = std::fabs(scales[ib]); max_scale = scales[ib]; }
        }
        block_iq4_xs& b = y[ibl];
        std::memset(&b, 0, sizeof b);
        const float d = -max_scale / 32;
        b.d = fp32_to_fp16(d);
        const float id = d != 0 ? 1 / d : 0.0f;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
            const float dl = d * l;
            const float idl = dl != 0 ? 1 / dl : 0.0f;
            uint8_t L[32];
            for (int j = 0; j < 32; ++j) L[j] = (uint8_t)best_index_iq4(idl * x[32 * ib + j]);
            pack_iq4(L, b.qs + 16 * ib);
            const int u = l + 32;
            b.scales_l[ib / 2] = (uint8_t)(b.scales_l[ib / 2] | ((u & 0xf) << (4 * (ib % 2))));
            b.scales_h = (uint16_t)(b.scales_h | ((u >> 4) << (2 * ib)));
        }
    }
}

void quantize_row_iq4_nl_ref(const float* x, void* dst, int64_t n) { quantize_iq4_nl(x, dst, n, nullptr); }
void quantize_row_iq4_xs_ref(const float* x, void* dst, int64_t n) { quantize_iq4_xs(x, dst, n, nullptr); }

// Sub-block scale of an IQ4_XS super-block, -32..31.
inline int iq4_xs_scale(const block_iq4_xs& b, int ib) {
    const int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
    const int hi = (b.scales_h >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

void dequantize_row_iq4_nl(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_iq4_nl*>(src);
    for (int64_t ib = 0; ib < n / QK4_NL; ++ib, y += QK4_NL) {
        const float d = fp16_to_fp32(x[ib].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * (float)kvalues_iq4[x[ib].qs[j] & 0xf];
            y[j + 16] = d * (float)kvalues_iq4[x[ib].qs[j] >> 4];
        }
    }
}

// gguf-py: dl = d * (ls - 32), then dl * value.
void dequantize_row_iq4_xs(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const block_iq4_xs*>(src);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const float d = fp16_to_fp32(x[ibl].d);
        for (int ib = 0; ib < QK_K / 32; ++ib, y += 32) {
            const float dl = d * (float)iq4_xs_scale(x[ibl], ib);
            const uint8_t* qs = x[ibl].qs + 16 * ib;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * (float)kvalues_iq4[qs[j] & 0xf];
                y[j + 16] = dl * (float)kvalues_iq4[qs[j] >> 4];
            }
        }
    }
}

void vec_dot_iq4_nl_q8_0_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_iq4_nl*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    float sum = 0;
    for (int64_t ib = 0; ib < n / QK4_NL; ++ib) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += kvalues_iq4[x[ib].qs[j] & 0xf] * y[ib].qs[j];
            sumi += kvalues_iq4[x[ib].qs[j] >> 4] * y[ib].qs[j + 16];
        }
        sum += (float)sumi * (fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d));
    }
    *out = sum;
}

void vec_dot_iq4_xs_q8_k_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_iq4_xs*>(w_row);
    const auto* y = static_cast<const block_q8_K*>(a_row);
    float sum = 0;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        int sumi = 0;
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const uint8_t* qs = x[ibl].qs + 16 * ib;
            const int8_t* a = y[ibl].qs + 32 * ib;
            int s = 0;
            for (int j = 0; j < 16; ++j) s += kvalues_iq4[qs[j] & 0xf] * a[j] + kvalues_iq4[qs[j] >> 4] * a[j + 16];
            sumi += iq4_xs_scale(x[ibl], ib) * s;
        }
        sum += (float)sumi * (fp16_to_fp32(x[ibl].d) * y[ibl].d);
    }
    *out = sum;
}

// ===========================================================================
// AVX2: table lookup with vpshufb, signed products with the sign trick
// ===========================================================================
#if defined(LP_HAVE_AVX2)

using namespace x86;

// 16 nibble-packed bytes -> the 32 table values in element order.
LP_TARGET_AVX2 LP_INLINE __m256i lookup_iq4_avx2(const uint8_t* qs) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)kvalues_iq4));
    const __m128i raw = _mm_loadu_si128((const __m128i*)qs);
    const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(table, idx);
}

LP_TARGET_AVX2 void vec_dot_iq4_nl_q8_0_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_iq4_nl*>(w_row);
    const auto* y = static_cast<const block_q8_0*>(a_row);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / QK4_NL; ++ib) {
        const __m256i p = dot_i8x32(lookup_iq4_avx2(x[ib].qs), _mm256_loadu_si256((const __m256i*)y[ib].qs));
        const __m256 s = _mm256_set1_ps(half_to_float(x[ib].d) * half_to_float(y[ib].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
    }
    *out = hsum_f32x8(acc);
}

// The sub-block scale multiplies the int16 pair sums inside vpmaddwd (in
// place of the usual ones), so the super-block sum stays in int32 lanes:
// at most 256 * 127 * 127 * 32 < 2^31.
LP_TARGET_AVX2 void vec_dot_iq4_xs_q8_k_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* x = static_cast<const block_iq4_xs*>(w_row);
    const auto* y = static_cast<const block_q8_K*>(a_row);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const __m256i q = lookup_iq4_avx2(x[ibl].qs + 16 * ib);
            const __m256i a = _mm256_loadu_si256((const __m256i*)(y[ibl].qs + 32 * ib));
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16((short)iq4_xs_scale(x[ibl], ib))));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(half_to_float(x[ibl].d) * y[ibl].d), acc);
    }
    *out = hsum_f32x8(acc);
}

#endif  // LP_HAVE_AVX2

// ===========================================================================
// AVX-512 + VNNI: the quads layout of legacy.cpp's 4-bit kernels (see there
// and simd_x86.h). The table is looked up already offset by +128, so the
// values enter vpdpbusd unsigned and the shared -128*sum term restores them.
// ===========================================================================
#if defined(LP_HAVE_AVX512)

// kvalues + 128 as unsigned bytes, in every 128-bit lane for vpshufb.
LP_TARGET_AVX512 LP_INLINE __m512i iq4_table_u8() {
    const __m128i t = _mm_xor_si128(_mm_loadu_si128((const __m128i*)kvalues_iq4), _mm_set1_epi8((char)0x80));
    return _mm512_broadcast_i32x4(t);
}

// Table values (+128) for the low and high nibbles of a quad vector.
LP_TARGET_AVX512 LP_INLINE void lookup_iq4_quad(__m512i table, __m512i q, __m512i* lo, __m512i* hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    *lo = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
    *hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
}

struct iq4_nl_q8_0_avx512 {
    static constexpr int stream_rows = 4;
    template <int NR, bool STREAM>
    LP_TARGET_AVX512 static void rows(int64_t n, const uint8_t* w, size_t w_stride, const void* a_row, float* out) {
        const auto* y = static_cast<const block_q8_0*>(a_row);
        const int64_t nb = n / QK4_NL, nb8 = nb & ~(int64_t)7;
        const __m512i table = iq4_table_u8();
        __m512 acc[NR];
        for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
        [[maybe_unused]] const char* pf = prefetch_start(w, w_stride, NR);
        for (int64_t ib = 0; ib < nb8; ib += 8) {
            if constexpr (STREAM) prefetch_step<NR * 8 * (int)sizeof(block_iq4_nl)>(pf);
            const act_quads a = load_act_quads(y + ib);
            const __m512 da = gather_halves16<sizeof(block_q8_0), 0, lane_layout::quads>(y + ib);
            for (int r = 0; r < NR; ++r) {
                const auto* x = reinterpret_cast<const block_iq4_nl*>(w + r * w_stride) + ib;
                const loaded<3> g = load_group_4bit<sizeof(block_iq4_nl)>(x);
                __m512i q[2], s[2];
                nibble_quads_of<sizeof(block_iq4_nl), offsetof(block_iq4_nl, qs)>(g, &q[0], &q[1]);
                for (int h = 0; h < 2; ++h) {
                    __m512i lo, hi;
                    lookup_iq4_quad(table, q[h], &lo, &hi);
                    s[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a.neg128[h], lo, a.lo[h]), hi, a.hi[h]);
                }
                const __m512 dw = halves_of<sizeof(block_iq4_nl), 0, lane_layout::quads>(g);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(reduce_quads_x2(s[0], s[1])), _mm512_mul_ps(dw, da), acc[r]);
            }
        }
        for (int r = 0; r < NR; ++r) {
            const auto* x = reinterpret_cast<const block_iq4_nl*>(w + r * w_stride);
            out[r] = _mm512_reduce_add_ps(acc[r]) + tail_avx2(vec_dot_iq4_nl_q8_0_avx2, nb, nb8, x, y);
        }
    }
};

// Q8_K super-block (256 int8) in the quads layout: sub-blocks 0..3 and 4..7.
LP_TARGET_AVX512 LP_INLINE act_quads load_act_quads_q8_k(const block_q8_K& y) {
    act_quads a;
    for (int h = 0; h < 2; ++h) {
        const __m512i p0 = _mm512_loadu_si512(y.qs + 128 * h), p1 = _mm512_loadu_si512(y.qs + 128 * h + 64);
        a.lo[h] = _mm512_shuffle_i64x2(p0, p1, 0x88);
        a.hi[h] = _mm512_shuffle_i64x2(p0, p1, 0xdd);
        a.neg128[h] = minus_128_sum(minus_128_sum(_mm512_setzero_si512(), a.lo[h]), a.hi[h]);
    }
    return a;
}

// The 8 sub-block scales (-32..31) of a super-block as int32 lanes in the
// reduced quads order (lane 4L+j: sub-block L + 4(j%2)): 4-bit low parts at
// bit 4*ib of scales_l, 2-bit high parts at bit 2*ib of scales_h.
LP_TARGET_AVX512 LP_INLINE __m512i iq4_xs_scales_quads(const block_iq4_xs& b) {
    uint32_t lo;
    std::memcpy(&lo, b.scales_l, 4);
    const __m512i sub = _mm512_set_epi32(7, 3, 7, 3, 6, 2, 6, 2, 5, 1, 5, 1, 4, 0, 4, 0);
    const __m512i l4 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)lo), _mm512_slli_epi32(sub, 2)),
                                        _mm512_set1_epi32(0xf));
    const __m512i h2 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(b.scales_h), _mm512_slli_epi32(sub, 1)),
                                        _mm512_set1_epi32(3));
    return _mm512_sub_epi32(_mm512_or_si512(l4, _mm512_slli_epi32(h2, 4)), _mm512_set1_epi32(32));
}

struct iq4_xs_q8_k_avx512 {
    static constexpr int stream_rows = 4;
    template <int NR, bool STREAM>
    LP_TARGET_AVX512 static void rows(int64_t n, const uint8_t* w, size_t w_stride, const void* a_row, float* out) {
        const auto* y = static_cast<const block_q8_K*>(a_row);
        const __m512i table = iq4_table_u8();
        __m512 acc[NR];
        for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
        [[maybe_unused]] const char* pf = prefetch_start(w, w_stride, NR);
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
            if constexpr (STREAM) prefetch_step<NR * 1 * (int)sizeof(block_iq4_xs)>(pf);
            const act_quads a = load_act_quads_q8_k(y[ibl]);
            for (int r = 0; r < NR; ++r) {
                const auto& x = reinterpret_cast<const block_iq4_xs*>(w + r * w_stride)[ibl];
                __m512i s[2];
                for (int h = 0; h < 2; ++h) {
                    __m512i lo, hi;
                    lookup_iq4_quad(table, _mm512_loadu_si512(x.qs + 64 * h), &lo, &hi);
                    s[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a.neg128[h], lo, a.lo[h]), hi, a.hi[h]);
                }
                const __m512i t = _mm512_mullo_epi32(reduce_quads_x2(s[0], s[1]), iq4_xs_scales_quads(x));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(fp16_to_fp32(x.d) * y[ibl].d), acc[r]);
            }
        }
        for (int r = 0; r < NR; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
    }
};

#endif  // LP_HAVE_AVX512

}  // namespace

void quantize_row_iq4_nl_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_iq4_nl(x, dst, n, qw);
}
void quantize_row_iq4_xs_weighted(const float* x, void* dst, int64_t n, const float* qw) {
    quantize_iq4_xs(x, dst, n, qw);
}

void register_iquant_types(type_traits* table, isa level) {
    type_traits& nl = table[(int)ggml_type::IQ4_NL];
    nl.to_float = dequantize_row_iq4_nl;
    nl.from_float_ref = quantize_row_iq4_nl_ref;
    nl.vec_dot_type = ggml_type::Q8_0;
    nl.vec_dot_ref = vec_dot_iq4_nl_q8_0_ref;

    type_traits& xs = table[(int)ggml_type::IQ4_XS];
    xs.to_float = dequantize_row_iq4_xs;
    xs.from_float_ref = quantize_row_iq4_xs_ref;
    xs.vec_dot_type = ggml_type::Q8_K;
    xs.vec_dot_ref = vec_dot_iq4_xs_q8_k_ref;

#if defined(LP_HAVE_AVX2)
    if (level == isa::avx2) {
        nl.vec_dot = vec_dot_iq4_nl_q8_0_avx2;
        xs.vec_dot = vec_dot_iq4_xs_q8_k_avx2;
        nl.vec_dot_isa = xs.vec_dot_isa = isa::avx2;
    }
#endif
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) {
        nl.vec_dot = vec_dot_by_rows<iq4_nl_q8_0_avx512>;
        nl.gemm_tile = gemm_tile_by_rows<iq4_nl_q8_0_avx512>;
        xs.vec_dot = vec_dot_by_rows<iq4_xs_q8_k_avx512>;
        xs.gemm_tile = gemm_tile_by_rows<iq4_xs_q8_k_avx512>;
        nl.vec_dot_isa = xs.vec_dot_isa = isa::avx512;
    }
#endif
#if defined(LP_HAVE_NEON)
    register_iquant_neon(table, level);
#endif
    (void)level;
}

}  // namespace lp
