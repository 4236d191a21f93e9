// simd_neon.h — aarch64 NEON building blocks shared by the quantization
// families' NEON kernels (float_neon.cpp, legacy_neon.cpp, kquants_neon.cpp,
// iquants_neon.cpp): horizontal sums, fp16 fields, and the int8 dot product
// in its two forms.
//
// The two levels. isa::neon is armv8-a Advanced SIMD, which every aarch64
// CPU has: int8 products widen with smull (exact: |w·a| <= 2^14 fits int16)
// and pairs of them are added into int32 lanes with sadalp. isa::neon_dot
// adds SDOT (armv8.2 dotprod, HWCAP_ASIMDDP), four products summed into each
// int32 lane in one instruction. The two put different partial sums in their
// four lanes, so callers only ever use the total of the lanes (or a multiple
// of it): both give the same integer, and all kernels built on them give the
// same bits at both levels.
//
// Each integer kernel body is compiled twice (the *_neon.inc files, included
// once inside namespace `plain` and once inside `sdot`), because the SDOT
// variant must carry the dotprod target attribute on every function that
// inlines vdotq_s32, and GCC gives a template no per-instantiation attribute.
// The .inc files see `LP_NEON_FN` (the attribute, or nothing) and `dot16`;
// each describes its formats as decode + step and includes neon_tile.inc,
// the row and 4×4 tile drivers they share.
#pragma once

#include <cstdint>
#include <cstring>

#include "../common.h"

#if defined(LP_HAVE_NEON)
#include <arm_neon.h>

namespace lp {
namespace neon {

// An fp16 field as float (exact, like fp16_to_fp32; FCVT is armv8-a).
static LP_INLINE float half_to_float(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

// 16 unaligned bytes of a block field (blocks are 2-byte aligned at best).
static LP_INLINE uint8x16_t load_u8x16(const uint8_t* p) { return vld1q_u8(p); }
static LP_INLINE int8x16_t load_s8x16(const int8_t* p) { return vld1q_s8(p); }

// The low and high nibbles of 16 bytes, as 16 values 0..15 each.
static LP_INLINE int8x16_t low_nibbles(uint8x16_t v) { return vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f))); }
static LP_INLINE int8x16_t high_nibbles(uint8x16_t v) { return vreinterpretq_s8_u8(vshrq_n_u8(v, 4)); }

// 16 lanes each 0x10 where bit i of the 16-bit word `bits` is set (i the
// lane), else 0: the fifth bit of the Q5 formats, spread out.
static LP_INLINE uint8x16_t bits_to_0x10(uint32_t bits) {
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bytes = vcombine_u8(vdup_n_u8((uint8_t)(bits & 0xff)), vdup_n_u8((uint8_t)((bits >> 8) & 0xff)));
    return vandq_u8(vtstq_u8(bytes, vld1q_u8(sel)), vdupq_n_u8(0x10));
}

// Plain NEON: sum of the 16 products w·a, spread over 4 int32 lanes.
static LP_INLINE int32x4_t dot16_plain(int32x4_t acc, int8x16_t w, int8x16_t a) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
    return vpadalq_s16(acc, vmull_high_s8(w, a));
}

#if defined(LP_TARGET_DOTPROD)
// SDOT: the same total, 4 products per lane.
LP_TARGET_DOTPROD static LP_INLINE int32x4_t dot16_sdot(int32x4_t acc, int8x16_t w, int8x16_t a) {
    return vdotq_s32(acc, w, a);
}
#endif

}  // namespace neon
}  // namespace lp

#endif  // LP_HAVE_NEON
