// legacy_neon.cpp — the aarch64 NEON kernels of the legacy block formats
// (formats, references and registration: legacy.cpp): the Q8_0 / Q8_1
// activation quantizers (the reference's bytes) and the Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0 dot products (the reference's bits; legacy_neon.inc) with their
// 4×4 mat-mat tiles (the same bits; neon_tile.inc), at the neon level
// (smull/sadalp) and the neon_dot level (SDOT). Compiles to
// nothing where the build has no NEON (x86, or an aarch64 scalar build).
#include "neon_kernels.h"

#if defined(LP_HAVE_NEON)

#include <cmath>
#include <cstring>

#include "../common.h"
#include "blocks.h"
#include "simd_neon.h"

namespace lp {

namespace {

// One Q8 block, as quantize_block_q8 (legacy.cpp): d = amax / 127, q =
// roundf(x / d). FCVTAS rounds to nearest with ties away from zero, which is
// roundf; the division and the reciprocal are IEEE, as in the reference.
// Returns d before fp16 rounding and sets the sum of the quants.
float quantize_block_q8_neon(const float* x, int8_t* q, int* sum) {
    float32x4_t v[8];
    float32x4_t amax = vdupq_n_f32(0);
    for (int k = 0; k < 8; ++k) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float d = vmaxvq_f32(amax) / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    int32x4_t s = vdupq_n_s32(0);
    for (int k = 0; k < 8; k += 2) {
        const int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
        const int32x4_t b = vcvtaq_s32_f32(vmulq_n_f32(v[k + 1], id));
        s = vaddq_s32(s, vaddq_s32(a, b));
        const int16x8_t ab = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
        vst1_s8(q + 4 * k, vmovn_s16(ab));
    }
    *sum = vaddvq_s32(s);
    return d;
}

void quantize_row_q8_0_neon(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t ib = 0; ib < n / QK8_0; ++ib, x += QK8_0) {
        int sum;
        y[ib].d = fp32_to_fp16(quantize_block_q8_neon(x, y[ib].qs, &sum));
    }
}

void quantize_row_q8_1_neon(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<block_q8_1*>(dst);
    for (int64_t ib = 0; ib < n / QK8_1; ++ib, x += QK8_1) {
        int sum;
        const float d = quantize_block_q8_neon(x, y[ib].qs, &sum);
        y[ib].d = fp32_to_fp16(d);
        y[ib].s = fp32_to_fp16((float)sum * d);
    }
}

namespace plain {
#define LP_NEON_FN
static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) { return neon::dot16_plain(acc, w, a); }
#include "legacy_neon.inc"
#undef LP_NEON_FN
}  // namespace plain

namespace sdot {
#define LP_NEON_FN LP_TARGET_DOTPROD
LP_NEON_FN static LP_INLINE int32x4_t dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
    return neon::dot16_sdot(acc, w, a);
}
#include "legacy_neon.inc"
#undef LP_NEON_FN
}  // namespace sdot

}  // namespace

void register_legacy_neon(type_traits* table, isa level) {
    if (!isa_is_arm(level)) return;
    type_traits& q4_0 = table[(int)ggml_type::Q4_0];
    type_traits& q4_1 = table[(int)ggml_type::Q4_1];
    type_traits& q5_0 = table[(int)ggml_type::Q5_0];
    type_traits& q5_1 = table[(int)ggml_type::Q5_1];
    type_traits& q8_0 = table[(int)ggml_type::Q8_0];
    table[(int)ggml_type::Q8_1].from_float = quantize_row_q8_1_neon;
    q8_0.from_float = quantize_row_q8_0_neon;
#define LP_LEGACY_SET(NS)                                                                       \
    do {                                                                                         \
        q4_0.vec_dot = NS::vec_dot_neon<NS::q4_0_fmt>, q4_0.gemm_tile = NS::gemm_tile_neon<NS::q4_0_fmt>; \
        q4_1.vec_dot = NS::vec_dot_neon<NS::q4_1_fmt>, q4_1.gemm_tile = NS::gemm_tile_neon<NS::q4_1_fmt>; \
        q5_0.vec_dot = NS::vec_dot_neon<NS::q5_0_fmt>, q5_0.gemm_tile = NS::gemm_tile_neon<NS::q5_0_fmt>; \
        q5_1.vec_dot = NS::vec_dot_neon<NS::q5_1_fmt>, q5_1.gemm_tile = NS::gemm_tile_neon<NS::q5_1_fmt>; \
        q8_0.vec_dot = NS::vec_dot_neon<NS::q8_0_fmt>, q8_0.gemm_tile = NS::gemm_tile_neon<NS::q8_0_fmt>; \
    } while (0)
    if (level == isa::neon_dot) {
        LP_LEGACY_SET(sdot);
    } else {
        LP_LEGACY_SET(plain);
    }
#undef LP_LEGACY_SET
    for (type_traits* t : {&q4_0, &q4_1, &q5_0, &q5_1, &q8_0}) t->vec_dot_isa = level;
}

}  // namespace lp

#endif  // LP_HAVE_NEON
