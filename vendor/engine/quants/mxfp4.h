// mxfp4.h — what the MXFP4 files share (mxfp4.cpp: reference code and
// registration; mxfp4_x86.cpp, mxfp4_neon.cpp: the SIMD kernels): the block
// layout, the code table, the scale conversion, and the SIMD registrations.
//
// MXFP4 (OCP microscaling, gpt-oss's expert weights): blocks of 32 weights,
//   byte 0      e, an E8M0 exponent: the block scale is 2^(e - 127)
//   bytes 1-16  32 4-bit E2M1 codes, weight j in the low nibble of byte j,
//               weight 16 + j in its high nibble
// An E2M1 code is a sign bit and the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
// As ggml does, the table holds them doubled (integers) and the scale is
// halved: w = kvalues_mxfp4[code] * 2^(e - 128), both factors exact.
#pragma once

#include <cstdint>

#include "../common.h"
#include "../ggml_type.h"

namespace lp {

constexpr int QK_MXFP4 = 32;

struct block_mxfp4 {
    uint8_t e;                  // E8M0 exponent
    uint8_t qs[QK_MXFP4 / 2];   // codes: low nibble j, high nibble 16 + j
};
static_assert(sizeof(block_mxfp4) == 17, "mxfp4 layout");

// The E2M1 values times 2, indexed by code (a fact of the format).
alignas(16) inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128), the scale of the doubled codes, built from its bits as ggml
// does: e >= 2 is the normal float with biased exponent e - 1; e = 1 and
// e = 0 are the subnormals 2^-127 and 2^-128. (e = 255 gives 2^127; ggml
// refuses such blocks when validating, a reader still decodes them.)
static inline float e8m0_half(uint8_t e) {
    return fp32_from_bits(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

// The SIMD kernels, set into a table by register_mxfp4_types for `level`
// where the build has them (each compiles to nothing otherwise).
void register_mxfp4_x86(type_traits* table, isa level);   // mxfp4_x86.cpp: AVX2, AVX-512
void register_mxfp4_neon(type_traits* table, isa level);  // mxfp4_neon.cpp: neon, neon_dot

}  // namespace lp
