// kquants_neon.cpp — the aarch64 NEON kernels of the k-quant family
// (formats, references and registration: kquants.cpp): the Q8_K activation
// quantizer (the reference's bytes) and the Q2_K..Q6_K dot products (the
// reference's bits; kquants_neon.inc) with their 4×4 mat-mat tiles (the
// same bits; neon_tile.inc), at the neon level (smull/sadalp) and the
// neon_dot level (SDOT). Compiles to nothing where the build has no NEON.
#include "neon_kernels.h"

#if defined(LP_HAVE_NEON)

#include <cmath>
#include <cstring>

#include "../common.h"
#include "blocks.h"
#include "simd_neon.h"

namespace lp {

namespace {

// The scale unpacking of kquants.cpp (k4_unpack_scales, q3k_unpack_scales),
// kept beside the kernels that read them: a few scalar steps per 256 weights.
LP_INLINE void unpack_k4_scales(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

LP_INLINE void unpack_q3k_scales(const uint8_t* s, int8_t out[16]) {
    for (int j = 0; j < 16; ++j) {
        const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
        const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

// Σ_g mins[g]·bsums[g] over 16 groups of 16 (Q2_K); products and sums fit
// int32 with room (mins <= 15, |bsums| <= 16·128).
LP_INLINE int32_t mins_dot16(uint8x16_t mins, const int16_t* bsums) {
    const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
    const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
    const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    int32x4_t s = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
    s = vmlal_high_s16(s, m0, b0);
    s = vmlal_s16(s, vget_low_s16(m1), vget_low_s16(b1));
    s = vmlal_high_s16(s, m1, b1);
    return vaddvq_s32(s);
}

// Σ_g mn[g]·(bsums[2g] + bsums[2g+1]) over 8 groups of 32 (Q4_K, Q5_K); the
// pair sums fit int16 (|.| <= 32·128).
LP_INLINE int32_t mins_dot8(const uint8_t mn[8], const int16_t* bsums) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    const int16x8_t m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
    int32x4_t s = vmull_s16(vget_low_s16(m), vget_low_s16(pairs));
    s = vmlal_high_s16(s, m, pairs);
    return vaddvq_s32(s);
}

// Q8_K, as quantize_q8_k_ref: d = −max/127 with max the first value of
// largest magnitude. FCVTNS rounds to nearest even, which is nearest_int for
// the |v| <= 127 seen here; vmaxnm skips NaN as the reference's `>` does.
// Finite inputs give the reference's bytes (a NaN lane is unspecified).
void quantize_q8_k_neon(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float32x4_t am = vdupq_n_f32(0);
        for (int k = 0; k < QK_K; k += 4) am = vmaxnmq_f32(am, vabsq_f32(vld1q_f32(x + k)));
        const float amax = vmaxnmvq_f32(am);
        if (!amax) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        int first = 0;
        while (std::fabs(x[first]) != amax) ++first;
        const float iscale = -127.f / x[first];
        const int32x4_t top = vdupq_n_s32(127);
        for (int g = 0; g < 16; ++g) {
            int32x4_t q[4];
            for (int k = 0; k < 4; ++k)
                q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * g + 4 * k), iscale)), top);
            const int16x8_t q01 = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
            const int16x8_t q23 = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
            vst1q_s8(y[i].qs + 16 * g, vcombine_s8(vmovn_s16(q01), vmovn_s16(q23)));
            y[i].bsums[g] = (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
        }
        y[i].d = 1 / iscale;
    }
}

namespace plain {
#define LP_NEON_FN
static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) { return neon::dot16_plain(acc, w, a); }
#include "kquants_neon.inc"
#undef LP_NEON_FN
}  // namespace plain

namespace sdot {
#define LP_NEON_FN LP_TARGET_DOTPROD
LP_NEON_FN static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
    return neon::dot16_sdot(acc, w, a);
}
#include "kquants_neon.inc"
#undef LP_NEON_FN
}  // namespace sdot

}  // namespace

void register_kquant_neon(type_traits* table, isa level) {
    if (!isa_is_arm(level)) return;
    struct entry { ggml_type type; vec_dot_fn dot; gemm_tile_fn tile; };
#define LP_K_ENTRY(NS, T, F) {ggml_type::T, NS::vec_dot_neon<NS::F>, NS::gemm_tile_neon<NS::F>}
#define LP_K_ENTRIES(NS) \
    LP_K_ENTRY(NS, Q2_K, q2_k_fmt), LP_K_ENTRY(NS, Q3_K, q3_k_fmt), LP_K_ENTRY(NS, Q4_K, q4_k_fmt), \
        LP_K_ENTRY(NS, Q5_K, q5_k_fmt), LP_K_ENTRY(NS, Q6_K, q6_k_fmt)
    const entry plain_set[] = {LP_K_ENTRIES(plain)}, sdot_set[] = {LP_K_ENTRIES(sdot)};
#undef LP_K_ENTRIES
#undef LP_K_ENTRY
    const entry* set = level == isa::neon_dot ? sdot_set : plain_set;
    for (size_t k = 0; k < sizeof plain_set / sizeof *plain_set; ++k) {
        const entry& e = set[k];
        type_traits& t = table[(int)e.type];
        t.vec_dot = e.dot;
        t.gemm_tile = e.tile;
        t.vec_dot_isa = level;
    }
    table[(int)ggml_type::Q8_K].from_float = quantize_q8_k_neon;
}

}  // namespace lp

#endif  // LP_HAVE_NEON
