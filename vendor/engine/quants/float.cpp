// float.cpp — the unquantized element types F32, F16 and BF16: conversions
// to and from float and their dot products, scalar reference plus AVX2 and
// AVX-512 versions side by side. The F32 / F16 products of the AVX2 and
// AVX-512 levels (vec_dot, tiles, mat-mat panels with one shared order of
// arithmetic) live in float_tiles_avx2.cpp / float_tiles_avx512.cpp.
//
// Conversions are exact: F16 and BF16 widen to float without rounding, and
// float -> F16 / BF16 rounds to nearest even (common.h), which is what numpy's
// astype(float16) and gguf-py's BF16 quantizer do. NaN stays NaN (quietened;
// the payload is not kept), infinities and subnormals are exact.
//
// Dot products: the references accumulate in double (products of two floats
// are exact in double), so they are the yardstick; the SIMD kernels use float
// accumulators in several independent lanes and differ from the reference
// only by float rounding of the partial sums.
//
// Not here: quantized types (legacy.cpp, kquants.cpp, iquants.cpp).
#include <cstring>

#include "../common.h"
#include "../cpu/features.h"
#include "../ggml_type.h"
#include "neon_kernels.h"
#include "simd_x86.h"

#if defined(LP_X86)
// GCC 12 reports the placeholder inside its own _mm512_reduce_add_ps as
// uninitialised (GCC bug 105593); the tiled kernels below use it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace lp {

// float_tiles_avx2.cpp: at the AVX2 level, F32 / F16 tiles and the vec_dot
// with their bits (replacing the AVX2 vec_dot below for those two types).
void register_float_tiles_avx2(type_traits* table, isa level);
// float_tiles_avx512.cpp: the same for the AVX-512 level.
void register_float_tiles_avx512(type_traits* table, isa level);
// float_tiles_avx2.cpp: F16's AVX2 vec_dot, tiles and panel into f16's traits.
void use_f16_avx2_kernels(type_traits& f16);

namespace {

// ---------------------------------------------------------------------------
// Scalar reference
// ---------------------------------------------------------------------------

void f32_to_float(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * sizeof(float)); }
void f32_from_float(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * sizeof(float)); }

void f16_to_float_ref(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}
void f16_from_float_ref(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

void bf16_to_float_ref(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}
void bf16_from_float_ref(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

void vec_dot_f32_f32_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const float*>(w_row);
    const auto* a = static_cast<const float*>(a_row);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)w[i] * (double)a[i];
    *out = (float)sum;
}

void vec_dot_f16_f16_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const uint16_t*>(w_row);
    const auto* a = static_cast<const uint16_t*>(a_row);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)fp16_to_fp32(w[i]) * (double)fp16_to_fp32(a[i]);
    *out = (float)sum;
}

void vec_dot_bf16_bf16_ref(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const uint16_t*>(w_row);
    const auto* a = static_cast<const uint16_t*>(a_row);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (double)bf16_to_fp32(w[i]) * (double)bf16_to_fp32(a[i]);
    *out = (float)sum;
}

// ---------------------------------------------------------------------------
// AVX2 (+FMA, F16C)
// ---------------------------------------------------------------------------
#if defined(LP_HAVE_AVX2)

LP_TARGET_AVX2 LP_INLINE float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// vcvtph2ps is exact; it quietens signalling NaNs, which the reference keeps
// signalling — both are NaN, and nothing downstream looks at payloads.
LP_TARGET_AVX2 void f16_to_float_avx2(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(h + i))));
    for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

// vcvtps2ph rounds to nearest even like the reference for every non-NaN; for
// NaN it keeps the top payload bits, so NaN lanes are rewritten to the
// reference's canonical sign|0x7e00.
LP_TARGET_AVX2 void f16_from_float_avx2(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    const __m128i qnan = _mm_set1_epi16(0x7e00), sign = _mm_set1_epi16((short)0x8000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(src + i);
        __m128i r = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
        r = _mm_blendv_epi8(r, _mm_or_si128(_mm_and_si128(r, sign), qnan), nan16);
        _mm_storeu_si128((__m128i*)(h + i), r);
    }
    for (; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

LP_TARGET_AVX2 void vec_dot_f32_f32_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const float*>(w_row);
    const auto* a = static_cast<const float*>(a_row);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(a + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(a + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(a + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(a + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(a + i), acc0);
    float sum = hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) sum += w[i] * a[i];
    *out = sum;
}

LP_TARGET_AVX2 LP_INLINE __m256 load_f16x8_avx2(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
}

LP_TARGET_AVX2 void vec_dot_f16_f16_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const uint16_t*>(w_row);
    const auto* a = static_cast<const uint16_t*>(a_row);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load_f16x8_avx2(w + i), load_f16x8_avx2(a + i), acc0);
        acc1 = _mm256_fmadd_ps(load_f16x8_avx2(w + i + 8), load_f16x8_avx2(a + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load_f16x8_avx2(w + i + 16), load_f16x8_avx2(a + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load_f16x8_avx2(w + i + 24), load_f16x8_avx2(a + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_f16x8_avx2(w + i), load_f16x8_avx2(a + i), acc0);
    float sum = hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) sum += fp16_to_fp32(w[i]) * fp16_to_fp32(a[i]);
    *out = sum;
}

// bf16 -> float is a 16-bit left shift of each lane.
LP_TARGET_AVX2 LP_INLINE __m256 load_bf16x8_avx2(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

LP_TARGET_AVX2 void vec_dot_bf16_bf16_avx2(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const uint16_t*>(w_row);
    const auto* a = static_cast<const uint16_t*>(a_row);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load_bf16x8_avx2(w + i), load_bf16x8_avx2(a + i), acc0);
        acc1 = _mm256_fmadd_ps(load_bf16x8_avx2(w + i + 8), load_bf16x8_avx2(a + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load_bf16x8_avx2(w + i + 16), load_bf16x8_avx2(a + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load_bf16x8_avx2(w + i + 24), load_bf16x8_avx2(a + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_bf16x8_avx2(w + i), load_bf16x8_avx2(a + i), acc0);
    float sum = hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) sum += bf16_to_fp32(w[i]) * bf16_to_fp32(a[i]);
    *out = sum;
}

#endif  // LP_HAVE_AVX2

// ---------------------------------------------------------------------------
// AVX-512 (F+BW+VL+DQ; F16C for half conversions)
// ---------------------------------------------------------------------------
#if defined(LP_HAVE_AVX512)

LP_TARGET_AVX512 void f16_to_float_avx512(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(h + i))));
    for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

// See f16_from_float_avx2 for the NaN rewrite.
LP_TARGET_AVX512 void f16_from_float_avx512(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    const __m256i qnan = _mm256_set1_epi16(0x7e00), sign = _mm256_set1_epi16((short)0x8000);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(src + i);
        __m256i r = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        r = _mm256_mask_mov_epi16(r, nan, _mm256_or_si256(_mm256_and_si256(r, sign), qnan));
        _mm256_storeu_si256((__m256i*)(h + i), r);
    }
    for (; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

// Same rounding as fp32_to_bf16: add 0x7fff plus the lowest kept bit, keep
// the top half; NaN lanes keep their top half with the quiet bit set.
LP_TARGET_AVX512 void bf16_from_float_avx512(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(64);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(src + i));
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(bias, lsb)), 16);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet));
        _mm256_storeu_si256((__m256i*)(h + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

// Widening by shift: vdpbf16ps (AVX512_BF16) is not part of our AVX-512
// level, and the shift is exact anyway.
LP_TARGET_AVX512 LP_INLINE __m512 widen_bf16x16_avx512(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

LP_TARGET_AVX512 LP_INLINE __m512 load_bf16x16_avx512(const uint16_t* p) {
    return widen_bf16x16_avx512(_mm256_loadu_si256((const __m256i*)p));
}

LP_TARGET_AVX512 void vec_dot_bf16_bf16_avx512(int64_t n, float* out, const void* w_row, const void* a_row) {
    const auto* w = static_cast<const uint16_t*>(w_row);
    const auto* a = static_cast<const uint16_t*>(a_row);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(load_bf16x16_avx512(w + i), load_bf16x16_avx512(a + i), acc0);
        acc1 = _mm512_fmadd_ps(load_bf16x16_avx512(w + i + 16), load_bf16x16_avx512(a + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(load_bf16x16_avx512(w + i + 32), load_bf16x16_avx512(a + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(load_bf16x16_avx512(w + i + 48), load_bf16x16_avx512(a + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(load_bf16x16_avx512(w + i), load_bf16x16_avx512(a + i), acc0);
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 wv = widen_bf16x16_avx512(_mm256_maskz_loadu_epi16(m, w + i));
        const __m512 av = widen_bf16x16_avx512(_mm256_maskz_loadu_epi16(m, a + i));
        acc1 = _mm512_fmadd_ps(wv, av, acc1);
    }
    *out = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

#endif  // LP_HAVE_AVX512

}  // namespace

void register_float_types(type_traits* table, isa level) {
    type_traits& f32 = table[(int)ggml_type::F32];
    f32.to_float = f32_to_float;
    f32.from_float_ref = f32_from_float;
    f32.from_float = f32_from_float;
    f32.vec_dot_type = ggml_type::F32;
    f32.vec_dot_ref = vec_dot_f32_f32_ref;

    type_traits& f16 = table[(int)ggml_type::F16];
    f16.to_float = f16_to_float_ref;
    f16.from_float_ref = f16_from_float_ref;
    f16.vec_dot_type = ggml_type::F16;
    f16.vec_dot_ref = vec_dot_f16_f16_ref;

    type_traits& bf16 = table[(int)ggml_type::BF16];
    bf16.to_float = bf16_to_float_ref;  // a shift; the compiler vectorises it
    bf16.from_float_ref = bf16_from_float_ref;
    bf16.vec_dot_type = ggml_type::BF16;
    bf16.vec_dot_ref = vec_dot_bf16_bf16_ref;

#if defined(LP_HAVE_AVX2)
    if (level == isa::avx2) {
        f32.vec_dot = vec_dot_f32_f32_avx2;
        f16.to_float = f16_to_float_avx2;
        f16.from_float = f16_from_float_avx2;
        f16.vec_dot = vec_dot_f16_f16_avx2;
        bf16.vec_dot = vec_dot_bf16_bf16_avx2;
        f32.vec_dot_isa = f16.vec_dot_isa = bf16.vec_dot_isa = isa::avx2;
    }
#endif
#if defined(LP_HAVE_AVX512)
    if (level == isa::avx512) {
        f16.to_float = f16_to_float_avx512;
        f16.from_float = f16_from_float_avx512;
        bf16.from_float = bf16_from_float_avx512;
        bf16.vec_dot = vec_dot_bf16_bf16_avx512;
        f32.vec_dot_isa = f16.vec_dot_isa = bf16.vec_dot_isa = isa::avx512;
    }
#endif
#if defined(LP_HAVE_NEON)
    register_float_neon(table, level);
#endif
    register_float_tiles_avx2(table, level);    // the AVX2 vec_dot, tiles and panels of F32 / F16
    register_float_tiles_avx512(table, level);  // the same at the AVX-512 level
    // Zen 4 runs 512-bit ops as two 256-bit halves: there the AVX2 kernels
    // for F16 weights are faster on both paths (2 threads, kernels.py:
    // mat-mat 136-144 vs 109-114 GFLOP/s, mat-vec 24-28 vs 18-23 GB/s; a
    // CLIP-L image encode 2.85 vs 3.12 s), so F16 takes them whole (vec_dot,
    // tiles and panel together: a batch keeps mat-vec's bits). F32 keeps the
    // AVX-512 ones (mat-vec 29-35 vs 20-26 GB/s, mat-mat on par).
    if (level == isa::avx512 && cpu().zen4()) use_f16_avx2_kernels(table[(int)ggml_type::F16]);
    (void)level;
}

}  // namespace lp
