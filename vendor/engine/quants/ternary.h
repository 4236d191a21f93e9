// ternary.h — what the ternary files share (ternary.cpp: reference code and
// registration; ternary_x86.cpp, ternary_neon.cpp: the SIMD kernels): the
// block layouts, the trit decoding, and the SIMD registrations.
//
// TQ1_0 and TQ2_0 (BitNet b1.58-style weights, llama-quantize's TQ1_0 / TQ2_0
// file types) store each weight as a trit t in {0, 1, 2}, the weight being
// d * (t - 1), one fp16 scale d per super-block of 256 weights.
//
// TQ2_0 (66 bytes): qs[64] then d. Byte j + m of each 32-byte half j (0, 32)
//   holds four trits in its 2-bit fields l = 0..3 (bits 2l, 2l+1): element
//   4j + 32l + m.
// TQ1_0 (54 bytes): qs[48], qh[4], then d. Five trits per byte, packed as a
//   base-3 fraction: a byte holding trits t0..t4 (t0 the most significant
//   digit) is ceil(256 * (t0 t1 t2 t3 t4)_3 / 243). Trit n comes back as the
//   top digit of the byte times 3^n (mod 256): (uint8(q * 3^n) * 3) >> 8.
//     qs[0..31]   trit n of byte m: element 32n + m          (160 elements)
//     qs[32..47]  trit n of byte 32 + m: element 160 + 16n + m (80)
//     qh[0..3]    four trits (the fifth digit is 0), trit n of byte j:
//                 element 240 + 4n + j                        (16)
// Activations are Q8_K (kquants.cpp), as llama.cpp pairs them.
#pragma once

#include <cstdint>

#include "../common.h"
#include "../ggml_type.h"
#include "blocks.h"

namespace lp {

struct block_tq1_0 {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];  // 5 trits a byte
    uint8_t qh[QK_K / 64];                   // 4 trits a byte
    uint16_t d;
};
struct block_tq2_0 {
    uint8_t qs[QK_K / 4];  // 4 trits a byte, 2 bits each
    uint16_t d;
};
static_assert(sizeof(block_tq1_0) == 54, "tq1_0 layout");
static_assert(sizeof(block_tq2_0) == 66, "tq2_0 layout");

// The trit in digit position n (0 = most significant) of a TQ1_0 byte.
static inline int tq1_trit(uint8_t q, int n) {
    static constexpr uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t shifted = (uint8_t)(q * pow3[n]);  // drops the digits above n (mod 256)
    return (shifted * 3) >> 8;
}

// The SIMD kernels, set into a table by register_ternary_types for `level`
// where the build has them (each compiles to nothing otherwise).
void register_ternary_x86(type_traits* table, isa level);   // ternary_x86.cpp: AVX2, AVX-512
void register_ternary_neon(type_traits* table, isa level);  // ternary_neon.cpp: neon, neon_dot

}  // namespace lp
