// simd_math_x86.h — the vector math the CPU ops and the flash-attention
// kernels share: a horizontal sum and exp(x) for AVX2 and AVX-512 (one
// polynomial, so the softmax of both attention paths uses the same exp).
// Include inside the files' own LP_HAVE_AVX2 / LP_HAVE_AVX512 sections'
// reach: everything here carries its target attribute.
#pragma once

#include "../common.h"

#if defined(LP_X86)
// GCC 12 reports the self-initialised placeholder inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialised at -O3 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace lp {

#if defined(LP_HAVE_AVX2)
LP_TARGET_AVX2 LP_INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// exp(x) to about 1 ulp: x = n·ln2 + r, |r| <= ln2/2, e^r by its degree-6
// Taylor polynomial, 2^n through the exponent bits. Inputs below -87.3 give
// a tiny positive number instead of 0 (harmless where it is used).
LP_TARGET_AVX2 LP_INLINE __m256 exp256(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.37f)), _mm256_set1_ps(-87.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    // n in [-126, 128]: split 2^n = 2^(n/2) · 2^(n - n/2) so n = 128 works too
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

#endif  // LP_HAVE_AVX2

#if defined(LP_HAVE_AVX512)
// exp(x) as exp256, with vscalefps doing 2^n (it handles under- and overflow).
LP_TARGET_AVX512 LP_INLINE __m512 exp512(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// exp(x), exactly 0 where x < -103 (where exp(x) is below the smallest
// float anyway; also keeps -inf from turning into NaN).
LP_TARGET_AVX512 LP_INLINE __m512 exp512_or_zero(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.0f), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(keep, exp512(_mm512_max_ps(x, _mm512_set1_ps(-103.0f))));
}

#endif  // LP_HAVE_AVX512

}  // namespace lp

#endif  // LP_X86
