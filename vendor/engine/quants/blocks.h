// blocks.h — the on-disk block layouts of the quantized GGUF types (bit for
// bit those of llama.cpp's files), plus the activation formats Q8_0/Q8_1/Q8_K
// that the dot-product kernels take. Half-precision fields are raw IEEE
// binary16 bits (see common.h for conversions).
#pragma once

#include <cstdint>

namespace lp {

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
constexpr int QK_K = 256;      // super-block size of the k-quants
constexpr int K_SCALE_SIZE = 12;
constexpr int QK4_NL = 32;

// --- legacy 4/5/8-bit: 32 weights per block --------------------------------
struct block_q4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };                 // w = d * (q - 8)
struct block_q4_1 { uint16_t d, m; uint8_t qs[QK4_1 / 2]; };              // w = d * q + m
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };  // w = d * (q - 16), 5th bit in qh
struct block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { uint16_t d; int8_t qs[QK8_0]; };                      // w = d * q
struct block_q8_1 { uint16_t d, s; int8_t qs[QK8_1]; };                   // s = d * sum(qs) (activations only)
static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
static_assert(sizeof(block_q4_1) == 20, "q4_1 layout");
static_assert(sizeof(block_q5_0) == 22, "q5_0 layout");
static_assert(sizeof(block_q5_1) == 24, "q5_1 layout");
static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
static_assert(sizeof(block_q8_1) == 36, "q8_1 layout");

// --- k-quants: 256 weights per super-block ---------------------------------
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
struct block_q4_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };  // activations; bsums: sums of 16
static_assert(sizeof(block_q2_K) == 84, "q2_K layout");
static_assert(sizeof(block_q3_K) == 110, "q3_K layout");
static_assert(sizeof(block_q4_K) == 144, "q4_K layout");
static_assert(sizeof(block_q5_K) == 176, "q5_K layout");
static_assert(sizeof(block_q6_K) == 210, "q6_K layout");
static_assert(sizeof(block_q8_K) == 292, "q8_K layout");

// --- non-linear 4-bit ------------------------------------------------------
struct block_iq4_nl { uint16_t d; uint8_t qs[QK4_NL / 2]; };
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl layout");
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs layout");

}  // namespace lp
