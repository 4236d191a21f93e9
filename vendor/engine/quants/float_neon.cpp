// float_neon.cpp — the aarch64 NEON kernels of F32, F16 and BF16 (formats,
// references and registration: float.cpp): the dot products, their 4×4
// mat-mat tiles and the F16 / BF16 conversions. Float work has no dot-product instruction to gain from,
// so the neon and neon_dot levels share these kernels. Compiles to nothing
// where the build has no NEON.
//
// Conversions are exact and give the reference's bits (NaN: the reference's
// canonical quiet NaN). The dot products accumulate in float, 16 lanes in
// four independent registers, so they differ from the double-precision
// references by float rounding of the partial sums only (the budget
// tests/quant_checks.py states for every SIMD level).
#include "neon_kernels.h"

#if defined(LP_HAVE_NEON)

#include <cstring>

#include "../common.h"
#include "simd_neon.h"

namespace lp {

namespace {

// FCVTL widens exactly (subnormal halves included).
LP_INLINE float32x4_t load_f16x4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
// bf16 -> float is the 16-bit value moved to the top half of the word.
LP_INLINE float32x4_t load_bf16x4(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

void f16_to_float_neon(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(dst + i, load_f16x4(h + i));
        vst1q_f32(dst + i + 4, load_f16x4(h + i + 4));
    }
    for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

// FCVTN rounds by FPCR, nearest-even unless a caller changed the mode (we
// never do), overflowing to infinity like fp32_to_fp16. A NaN keeps part of
// its payload there, so NaN lanes become the reference's sign|0x7e00.
void f16_from_float_neon(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    const uint16x4_t qnan = vdup_n_u16(0x7e00), sign = vdup_n_u16(0x8000);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t x = vld1q_f32(src + i);
        uint16x4_t r = vreinterpret_u16_f16(vcvt_f16_f32(x));
        const uint16x4_t nan = vmovn_u32(vmvnq_u32(vceqq_f32(x, x)));
        r = vbsl_u16(nan, vorr_u16(vand_u16(r, sign), qnan), r);
        vst1_u16(h + i, r);
    }
    for (; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

// fp32_to_bf16 in integers: add 0x7fff plus the lowest kept bit and keep the
// top half; NaN keeps its top half with the quiet bit (64) set.
void bf16_from_float_neon(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);
    const uint32x4_t abs_mask = vdupq_n_u32(0x7fffffff), inf = vdupq_n_u32(0x7f800000);
    const uint32x4_t bias = vdupq_n_u32(0x7fff), one = vdupq_n_u32(1), quiet = vdupq_n_u32(64);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t x = vreinterpretq_u32_f32(vld1q_f32(src + i));
        const uint32x4_t nan = vcgtq_u32(vandq_u32(x, abs_mask), inf);
        const uint32x4_t top = vshrq_n_u32(x, 16);
        const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(x, vaddq_u32(bias, vandq_u32(top, one))), 16);
        vst1_u16(h + i, vmovn_u32(vbslq_u32(nan, vorrq_u32(top, quiet), rounded)));
    }
    for (; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

// One shape for the three dot products: L::load4 widens 4 elements to float.
struct f32_elems {
    static LP_INLINE float32x4_t load4(const void* p, int64_t i) { return vld1q_f32(static_cast<const float*>(p) + i); }
    static LP_INLINE float scalar(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
};
struct f16_elems {
    static LP_INLINE float32x4_t load4(const void* p, int64_t i) { return load_f16x4(static_cast<const uint16_t*>(p) + i); }
    static LP_INLINE float scalar(const void* p, int64_t i) { return fp16_to_fp32(static_cast<const uint16_t*>(p)[i]); }
};
struct bf16_elems {
    static LP_INLINE float32x4_t load4(const void* p, int64_t i) { return load_bf16x4(static_cast<const uint16_t*>(p) + i); }
    static LP_INLINE float scalar(const void* p, int64_t i) { return bf16_to_fp32(static_cast<const uint16_t*>(p)[i]); }
};

template <class L>
void vec_dot_float_neon(int64_t n, float* out, const void* w, const void* a) {
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = vfmaq_f32(acc0, L::load4(w, i), L::load4(a, i));
        acc1 = vfmaq_f32(acc1, L::load4(w, i + 4), L::load4(a, i + 4));
        acc2 = vfmaq_f32(acc2, L::load4(w, i + 8), L::load4(a, i + 8));
        acc3 = vfmaq_f32(acc3, L::load4(w, i + 12), L::load4(a, i + 12));
    }
    for (; i + 4 <= n; i += 4) acc0 = vfmaq_f32(acc0, L::load4(w, i), L::load4(a, i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
    for (; i < n; ++i) sum += L::scalar(w, i) * L::scalar(a, i);
    *out = sum;
}

// Tiled products (gemm_tile_fn): NR weight rows × NC activation rows with one
// 4-lane accumulator per pair, so each widened vector feeds NR or NC FMAs
// instead of one. Per pair the order of the sums differs from vec_dot's (one
// accumulator, not four): the same float budget against the reference.
template <class L, int NR, int NC>
void float_tile_neon(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t os) {
    float32x4_t acc[NR][NC];
    for (int r = 0; r < NR; ++r)
        for (int c = 0; c < NC; ++c) acc[r][c] = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t wv[NR];
        for (int r = 0; r < NR; ++r) wv[r] = L::load4(w + r * ws, i);
        for (int c = 0; c < NC; ++c) {
            const float32x4_t av = L::load4(a + c * as, i);
            for (int r = 0; r < NR; ++r) acc[r][c] = vfmaq_f32(acc[r][c], wv[r], av);
        }
    }
    for (int c = 0; c < NC; ++c)
        for (int r = 0; r < NR; ++r) {
            float sum = vaddvq_f32(acc[r][c]);
            for (int64_t k = i; k < n; ++k) sum += L::scalar(w + r * ws, k) * L::scalar(a + c * as, k);
            out[(size_t)c * os + r] = sum;
        }
}

template <class L>
void gemm_tile_float_neon(int64_t n, const void* w, size_t ws, const void* a, size_t as, float* out, size_t os, int nr,
                          int nc) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(a);
#define LP_FLOAT_TILE(R, C) \
    case R * 8 + C: float_tile_neon<L, R, C>(n, wb, ws, ab, as, out, os); return;
    switch (nr * 8 + nc) {
        LP_FLOAT_TILE(4, 4) LP_FLOAT_TILE(4, 3) LP_FLOAT_TILE(4, 2) LP_FLOAT_TILE(4, 1)
        LP_FLOAT_TILE(3, 4) LP_FLOAT_TILE(3, 3) LP_FLOAT_TILE(3, 2) LP_FLOAT_TILE(3, 1)
        LP_FLOAT_TILE(2, 4) LP_FLOAT_TILE(2, 3) LP_FLOAT_TILE(2, 2) LP_FLOAT_TILE(2, 1)
        LP_FLOAT_TILE(1, 4) LP_FLOAT_TILE(1, 3) LP_FLOAT_TILE(1, 2) LP_FLOAT_TILE(1, 1)
        default: return;
    }
#undef LP_FLOAT_TILE
}

}  // namespace

void register_float_neon(type_traits* table, isa level) {
    if (!isa_is_arm(level)) return;
    type_traits& f32 = table[(int)ggml_type::F32];
    type_traits& f16 = table[(int)ggml_type::F16];
    type_traits& bf16 = table[(int)ggml_type::BF16];
    f32.vec_dot = vec_dot_float_neon<f32_elems>;
    f16.vec_dot = vec_dot_float_neon<f16_elems>;
    bf16.vec_dot = vec_dot_float_neon<bf16_elems>;
    f32.gemm_tile = gemm_tile_float_neon<f32_elems>;
    f16.gemm_tile = gemm_tile_float_neon<f16_elems>;
    bf16.gemm_tile = gemm_tile_float_neon<bf16_elems>;
    f16.to_float = f16_to_float_neon;
    f16.from_float = f16_from_float_neon;
    bf16.from_float = bf16_from_float_neon;
    f32.vec_dot_isa = f16.vec_dot_isa = bf16.vec_dot_isa = level;
}

}  // namespace lp

#endif  // LP_HAVE_NEON
